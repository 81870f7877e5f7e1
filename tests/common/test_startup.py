"""Quiet start-up: TensorFlow's C++ notices are filtered from the CLIs' stderr, real messages stay."""

import os
import subprocess
import sys

import pytest

from common.startup import START_UP_NOTICES, filter_start_up_notices
from tests.paths import REPO_ROOT
from tests.training_cli import run_training_cli

ROOT = str(REPO_ROOT)
RAW_IMPORT = "import tensorflow as tf; tf.config.list_physical_devices()"


def stderr_of(*args, **env):
    result = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        capture_output=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **env},
        check=True,
    )
    return result.stderr


@pytest.mark.large
def test_tensorflow_prints_start_up_notices_that_the_cli_filters_out():
    raw = stderr_of("-c", RAW_IMPORT).splitlines(keepends=True)
    assert any(START_UP_NOTICES.match(line) for line in raw), "TensorFlow printed no notice here"
    for module in ("training.train", "training.evaluate", "serving.client"):
        assert stderr_of("-m", module, "--help") == b"", module


def test_verbose_log_level_shows_everything():
    shown = stderr_of("-c", "import model", TF_CPP_MIN_LOG_LEVEL="0")
    assert any(START_UP_NOTICES.match(line) for line in shown.splitlines(keepends=True))


def test_the_filter_keeps_real_warnings_and_errors():
    notices = (
        b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
        b"I0000 00:00:1795421525.186206   20892 port.cc:153] oneDNN custom operations are on.\n"
        b"I0000 00:00:1795421525.186206   20892 cudart_stub.cc:31] Could not find cuda drivers\n"
        b"I0000 00:00:1795576029.419183   12642 mlir_graph_optimization_pass.cc:437] MLIR V1 "
        b"optimization pass is not enabled\n"
        b"E0000 00:00:1795421525.186206   20892 cuda_platform.cc:52] failed call to cuInit: "
        b"INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n"
        b"E0000 00:00:1795575448.137811    4206 util.cc:131] oneDNN supports DT_INT64 only on "
        b"platforms with AVX-512. Falling back to the default Eigen-based implementation if present.\n"
    )
    real = (
        b"E0000 00:00:1795421525.186206   20892 cuda_platform.cc:52] failed call to cuInit: "
        b"INTERNAL: CUDA error: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (803)\n"
        b"W0000 00:00:1795421525.186206   20892 op_kernel.cc:1841] OP_REQUIRES failed\n"
        b"E0000 00:00:1795575448.137811    4206 util.cc:131] oneDNN supports DT_BFLOAT16 only on "
        b"platforms with AVX-512. Falling back to the default Eigen-based implementation.\n"
        b'Traceback (most recent call last):\n  File "x.py", line 1\n'
        b"ValueError: port.cc:153] is not a notice outside TensorFlow's format\n"
    )
    assert filter_start_up_notices(notices + real) == real
    assert filter_start_up_notices(notices) == b""


@pytest.mark.large
def test_a_training_run_logs_no_tensorflow_internals(tiny_corpus, tmp_path):
    result = run_training_cli(
        "--preset", "tiny", "--data", tiny_corpus, "--run_dir", str(tmp_path / "run"),
        "--train_steps", "4",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    log = result.stderr
    assert "training.train:" in log  # the run's own INFO lines stay
    # "E0000 ... oneDNN supports DT_INT64 only on platforms with AVX-512" came at tokenization.
    for noise in ("Sharding callback duration", "absl::InitializeLog", "cuInit", "oneDNN", "E0000"):
        assert noise not in log, noise


def test_the_once_only_onednn_notice_is_spent_at_start_up_without_initializing_the_runtime():
    # The tokenizer's graph transposes int64 row indices, which made oneDNN log an error line.
    script = (
        "import model, tensorflow as tf; "
        "tf.config.threading.set_intra_op_parallelism_threads(1); "
        "print(tf.concat([tf.ragged.constant([[1]], tf.int64)] * 2, axis=1).to_list())"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        check=True,
    )
    assert result.stdout == b"[[1, 1]]\n"
    assert result.stderr == b""


def thread_count_after_one_thread_matmul(first_import):
    script = (
        f"import os; {first_import}; import tensorflow as tf; "
        "tf.config.threading.set_intra_op_parallelism_threads(1); "
        "tf.config.threading.set_inter_op_parallelism_threads(1); "
        "a = tf.ones([256, 256]); tf.linalg.matmul(a, a).numpy(); "
        "print(len(os.listdir('/proc/self/task')))"
    )
    env = {
        key: value for key, value in os.environ.items() if key != "TF_OVERRIDE_GLOBAL_THREADPOOL"
    }
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        env={**env, "TF_CPP_MIN_LOG_LEVEL": "2"},
        check=True,
    )
    return int(result.stdout)


@pytest.mark.large
def test_the_start_up_session_leaves_thread_settings_to_the_process():
    # TensorFlow sizes its shared thread pools from the first session that asks; the start-up
    # Session once did, and `--threads 1` or `--tensorflow_intra_op_parallelism=1` then ran on
    # as many threads as cores.
    assert thread_count_after_one_thread_matmul("import model") == (
        thread_count_after_one_thread_matmul("pass")
    )
