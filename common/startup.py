"""TensorFlow imported without its C++ start-up notices (called first by `model` and `serving`).

While it loads, TensorFlow's C++ runtime prints notices to the process's stderr before its
logging is set up, so `TF_CPP_MIN_LOG_LEVEL` does not reach them: "All log messages before
absl::InitializeLog()", "oneDNN custom operations are on", "Could not find cuda drivers", the
CPU-instructions notice, and on a machine without a GPU driver "failed call to cuInit: ...
UNKNOWN ERROR (303)", which reads as an error to a new user. Every CLI and notebook imports
`model` or `serving` (directly or through `training`/`benchmarks`), whose `__init__` calls
`import_tensorflow_quietly` first, so the import and the device set-up run here once, with file
descriptor 2 captured; every captured line that is not one of those notices is written back to
stderr afterwards, so real warnings and errors still show.
`TF_CPP_MIN_LOG_LEVEL=0` asks for everything: nothing is filtered then.

One more notice comes later, at the first graph holding an int64 `Transpose` (the tokenizer's
ragged `tf.concat` along axis 1 transposes int64 row indices): oneDNN's graph rewrite finds no
oneDNN kernel for that dtype and logs, once per process (`DataTypeUnsupportedWarning`,
tensorflow/core/util/util.cc), "E... oneDNN supports DT_INT64 only on platforms with AVX-512.
Falling back to the default Eigen-based implementation", on every CPU, AVX-512 or not. It is
triggered here while stderr is captured, in a graph of its own run by a `tf.compat.v1.Session`
(which leaves the eager runtime uninitialized, so thread and device settings can still be made),
and so never prints again. That Session must leave no thread pool behind: TensorFlow sizes its
process-wide intra-op pool (and DirectSession its inter-op pool) from the first session or
context that asks, so a default-configured Session here silently overrode every later
`tf.config.threading` setting and Session `ConfigProto`, the server's
`--tensorflow_intra_op_parallelism` and the benchmarks' `--threads` included. It therefore runs
with its own inter-op threads (`use_per_session_threads`) and with `TF_OVERRIDE_GLOBAL_THREADPOOL`
set, which gives each device set (the eager context, each Session) an intra-op pool of the size
its own options ask for, as they would have without this start-up; a value already in the
environment is kept. The same once-only message would have reported a bfloat16 or float16
fallback; `--mixed_precision mixed_bfloat16` on a CPU without AVX-512 runs in Eigen silently.
"""

import logging
import os
import re
import sys
import tempfile

START_UP_NOTICES = re.compile(
    rb"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    rb"|[IW]\d{4} [\d:. ]+\d+ (port|cudart_stub|cpu_feature_guard|mlir_graph_optimization_pass)\.cc:\d+\] "
    rb"|E\d{4} [\d:. ]+\d+ cuda_platform\.cc:\d+\] failed call to cuInit: .*"
    rb"(UNKNOWN ERROR \(303\)|CUDA_ERROR_NO_DEVICE)"
    rb"|E\d{4} [\d:. ]+\d+ util\.cc:\d+\] oneDNN supports DT_INT64 only on platforms with AVX-512"
    rb"|To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler)"
)


def filter_start_up_notices(captured):
    """`captured` (bytes) without the lines that are start-up notices."""
    return b"".join(
        line for line in captured.splitlines(keepends=True) if not START_UP_NOTICES.match(line)
    )


def _log_the_once_only_onednn_notice(tf):
    """Runs an int64 `Transpose`, which makes oneDNN's graph rewrite log its once-only notice."""
    graph = tf.Graph()
    with graph.as_default():
        transposed = tf.transpose(tf.constant([[0]], tf.int64))
    config = tf.compat.v1.ConfigProto(use_per_session_threads=True)
    with tf.compat.v1.Session(graph=graph, config=config) as session:
        session.run(transposed)


def import_tensorflow_quietly():
    """Imports TensorFlow and sets up its devices, with the start-up notices filtered out.

    Also raises Python's `absl` and `tensorflow` loggers to WARNING: their INFO records are
    TensorFlow internals (tf.data's "Sharding callback duration: ...", SavedModel's "Assets
    written to: ..."), printed by every CLI that logs at INFO.
    """
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL") != "0":
        for name in ("absl", "tensorflow"):
            logging.getLogger(name).setLevel(logging.WARNING)
    if "tensorflow" in sys.modules or os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0":
        import tensorflow  # noqa: F401

        return
    os.environ.setdefault("TF_OVERRIDE_GLOBAL_THREADPOOL", "1")  # read once, at the first device
    sys.stderr.flush()
    saved_stderr = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            import tensorflow as tf

            tf.config.list_physical_devices()  # the cuInit notice comes from here
            _log_the_once_only_onednn_notice(tf)
        finally:
            os.dup2(saved_stderr, 2)
            os.close(saved_stderr)
            capture.seek(0)
            kept = filter_start_up_notices(capture.read())
            if kept:
                os.write(2, kept)
