"""Toy translator SavedModels and helpers for the serving tests.

The toy model is a Keras layer exported with `keras.export.ExportArchive` (the
exporter of the real translator) in TF Serving's layout `<base>/<name>/<N>/`,
with the three signatures the project's translator has:

    serving_default  text -> translation, score     (words reversed and upper-cased,
                                                     then a "<vN>" version token;
                                                     score = number of characters)
    beam_search      text -> translation, score     (words reversed, case kept, "<vN>";
                                                     score = number of words)
    alignments       text -> translation, score, source_tokens [B, S],
                             target_tokens [B, T], alignment [B, T, S]

Target word t of a sentence with n words comes from source word n-1-t; its
alignment row puts 0.7 on that word and spreads 0.3 over the others (1.0 when
n == 1). The score decodes the text as strict UTF-8, so invalid UTF-8 makes the
model raise INVALID_ARGUMENT: the tests use it as "an input the model fails on".
The `expected_*` functions compute every output in plain Python.

`ServerProcess` runs `python -m serving.server` on ports it picks itself and reads
them from its log; `reserved_port` holds a port for a server that starts later.
"""

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import keras
import numpy as np
import psutil
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

from common.serving_contract import (
    ALIGNMENTS_SIGNATURE,
    BEAM_SIGNATURE,
    GREEDY_SIGNATURE,
    SCORE_OUTPUT,
    TEXT_INPUT,
    TRANSLATION_OUTPUT,
)
from serving.model_server.server import GRPC_PORT_LOG_LINE, REST_PORT_LOG_LINE

MODEL_NAME = "translator"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WARMUP_TEXTS = ("warm up the model", "a second sentence")


# ------------------------------------------------------------------ expected outputs


def expected_greedy(text: str, version: int) -> str:
    return " ".join([word.upper() for word in reversed(text.split())] + [f"<v{version}>"])


def expected_beam(text: str, version: int) -> str:
    return " ".join(list(reversed(text.split())) + [f"<v{version}>"])


def expected_greedy_score(text: str) -> float:
    return float(len(text))


def expected_beam_score(text: str) -> float:
    return float(len(text.split()))


def expected_alignment(text: str) -> np.ndarray:
    """[T, S] alignment of one sentence (T == S == number of words)."""
    n = len(text.split())
    matrix = np.zeros((n, n), np.float32)
    for t in range(n):
        if n == 1:
            matrix[t, 0] = 1.0
        else:
            matrix[t, :] = 0.3 / (n - 1)
            matrix[t, n - 1 - t] = 0.7
    return matrix


# ----------------------------------------------------------------------- the model


class ToyTranslator(keras.layers.Layer):
    """Deterministic string "translator" whose version is a (non-trainable) weight."""

    def __init__(self, version: int, **kwargs):
        super().__init__(**kwargs)
        self.version_number = version

    def build(self, input_shape=None):
        self.version = self.add_weight(
            shape=(),
            dtype="int32",
            trainable=False,
            name="version",
            initializer=keras.initializers.Constant(self.version_number),
        )

    @staticmethod
    def _reverse_rows(ragged: tf.RaggedTensor) -> tf.RaggedTensor:
        row_ids = ragged.value_rowids()
        starts = tf.gather(ragged.row_starts(), row_ids)
        lengths = tf.gather(ragged.row_lengths(), row_ids)
        position = tf.range(tf.shape(ragged.flat_values, out_type=tf.int64)[0]) - starts
        reversed_values = tf.gather(ragged.flat_values, starts + lengths - 1 - position)
        return tf.RaggedTensor.from_row_lengths(reversed_values, ragged.row_lengths())

    def _join_with_version(self, words: tf.RaggedTensor) -> tf.Tensor:
        version_token = tf.strings.join(["<v", tf.strings.as_string(self.version), ">"])
        tokens = tf.concat([words, tf.fill([words.nrows(), 1], version_token)], axis=1)
        return tf.strings.reduce_join(tokens, axis=1, separator=" ")

    def greedy(self, text):
        words = tf.strings.split(text)
        characters = tf.strings.unicode_decode(text, "UTF-8", errors="strict")
        return {
            TRANSLATION_OUTPUT: self._join_with_version(
                self._reverse_rows(tf.strings.upper(words, encoding="utf-8"))
            ),
            SCORE_OUTPUT: tf.cast(characters.row_lengths(), tf.float32),
        }

    def beam_search(self, text):
        words = tf.strings.split(text)
        return {
            TRANSLATION_OUTPUT: self._join_with_version(self._reverse_rows(words)),
            SCORE_OUTPUT: tf.cast(words.row_lengths(), tf.float32),
        }

    def alignments(self, text):
        outputs = self.greedy(text)
        words = tf.strings.split(text)
        targets = self._reverse_rows(tf.strings.upper(words, encoding="utf-8"))
        source_tokens = words.to_tensor("")
        target_tokens = targets.to_tensor("")
        n = tf.cast(words.row_lengths(), tf.float32)[:, None, None]
        t = tf.cast(tf.range(tf.shape(target_tokens)[1]), tf.float32)[None, :, None]
        s = tf.cast(tf.range(tf.shape(source_tokens)[1]), tf.float32)[None, None, :]
        aligned = tf.where(n > 1, 0.7, 1.0)
        spread = tf.where(n > 1, 0.3 / tf.maximum(n - 1, 1), 0.0)
        inside = (t < n) & (s < n)
        alignment = tf.where(inside, tf.where(tf.equal(s, n - 1 - t), aligned, spread), 0.0)
        outputs.update(
            source_tokens=source_tokens, target_tokens=target_tokens, alignment=alignment
        )
        return outputs


def write_warmup_file(
    export_dir: str,
    texts: Sequence[str] = WARMUP_TEXTS,
    signature_names: Sequence[str] = (GREEDY_SIGNATURE, GREEDY_SIGNATURE),
) -> str:
    """Writes assets.extra/tf_serving_warmup_requests (TFRecord of PredictionLog).

    One record per entry of `signature_names`, each a batch of `texts`. The default
    warms only `serving_default` (twice), as each first call of a signature costs
    about half a second of graph optimization and the tests load many versions.
    """
    directory = os.path.join(export_dir, "assets.extra")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "tf_serving_warmup_requests")
    with tf.io.TFRecordWriter(path) as writer:
        for signature_name in signature_names:
            request = predict_pb2.PredictRequest()
            request.model_spec.name = MODEL_NAME
            request.model_spec.signature_name = signature_name
            request.inputs[TEXT_INPUT].CopyFrom(tf.make_tensor_proto(list(texts), dtype=tf.string))
            log = prediction_log_pb2.PredictionLog()
            log.predict_log.request.CopyFrom(request)
            writer.write(log.SerializeToString())
    return path


def export_toy_translator(export_dir: str, version: int, with_warmup: bool = True) -> str:
    """Exports ToyTranslator(version) to `export_dir` (a version directory)."""
    layer = ToyTranslator(version)
    layer.build()
    archive = keras.export.ExportArchive()
    archive.track(layer)
    text_spec = [tf.TensorSpec([None], tf.string, name=TEXT_INPUT)]
    archive.add_endpoint(GREEDY_SIGNATURE, layer.greedy, input_signature=text_spec)
    archive.add_endpoint(BEAM_SIGNATURE, layer.beam_search, input_signature=text_spec)
    archive.add_endpoint(ALIGNMENTS_SIGNATURE, layer.alignments, input_signature=text_spec)
    archive.write_out(export_dir, verbose=False)
    if with_warmup:
        write_warmup_file(export_dir)
    return export_dir


def toy_exports(tmp_path_factory) -> dict[int, str]:
    """Exports of versions 1 and 2 (exports take seconds: use the session fixture `exports`)."""
    root = tmp_path_factory.mktemp("toy_exports")
    return {version: export_toy_translator(str(root / str(version)), version) for version in (1, 2)}


def install_version(
    exports: dict[int, str], base_path: str, version: int, as_version: int = None
) -> str:
    """Copies an export into `<base_path>/<as_version>` atomically (copy aside, then rename).

    The rename makes the version appear complete in one step, as a deployment
    script should do it.
    """
    as_version = version if as_version is None else as_version
    os.makedirs(base_path, exist_ok=True)
    staging = os.path.join(base_path, f".staging-{as_version}")
    shutil.copytree(exports[version], staging)
    target = os.path.join(base_path, str(as_version))
    os.rename(staging, target)
    return target


def make_model_base(
    exports: dict[int, str], root: str, versions: Sequence[int] = (1,), model_name: str = MODEL_NAME
) -> str:
    """Creates `<root>/<model_name>/` holding the given versions; returns the base path."""
    base_path = os.path.join(root, model_name)
    for version in versions:
        install_version(exports, base_path, version)
    return base_path


@contextlib.contextmanager
def reserved_port() -> Iterator[int]:
    """A 127.0.0.1 port held, without listening, for the duration of the block.

    Connections to it are refused until a server binds it too: the socket is bound
    with SO_REUSEPORT, so a server started on this port inside the block with
    `--grpc_channel_arguments=grpc.so_reuseport=1` gets it (the model server turns gRPC's
    default SO_REUSEPORT off). No other process can take it in between, unlike a port
    found free and then released.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        holder.bind(("127.0.0.1", 0))
        yield holder.getsockname()[1]


def wait_for(
    condition: Callable[[], bool], what: str, timeout: float = 60.0, interval: float = 0.05
) -> None:
    """Polls `condition` until it holds; fails the test naming `what` after `timeout`.

    For state only visible from outside (a server's version status); the timeout is
    a bound on a hang, not a measurement.
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


# The server gets SIGKILL when the test process dies (a pytest killed by a timeout or by hand
# left servers holding a gigabyte each); the death signal survives the exec into Python.
DIES_WITH_THE_TESTS = ("setpriv", "--pdeathsig", "KILL") if shutil.which("setpriv") else ()


class ServerProcess:
    """`python -m serving.server` in a subprocess, on ports the server picked itself.

    The server starts with `--port=0` (plus `--rest_api_free_port` when `rest`) and
    the test reads the bound ports from its log lines "Running gRPC ModelServer at
    HOST:PORT ..." and "Exporting HTTP/REST API at:HOST:PORT ...", the last one logged
    before it serves. A thread keeps reading the log, so the server never blocks on
    a full pipe; `output()` returns it.

    Args:
        flags: further server flags (model, batching, ...).
        rest: also serve REST.
        startup_timeout: seconds to wait for the ports before failing.
        environment: further environment variables of the server process.
        launcher: a command the server runs under (e.g. one dropping privileges).
    """

    def __init__(
        self,
        flags: Sequence[str],
        rest: bool = False,
        startup_timeout: float = 180.0,
        environment: Mapping[str, str] | None = None,
        launcher: Sequence[str] = (),
    ):
        environment = dict(
            os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO_ROOT, **(environment or {})
        )
        command = [
            *DIES_WITH_THE_TESTS,
            *launcher,
            sys.executable,
            "-m",
            "serving.server",
            "--port=0",
            *flags,
        ]
        if rest:
            command.append("--rest_api_free_port")
        self.process = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.grpc_port: int | None = None
        self.rest_port: int | None = None
        self._lines: list[str] = []
        self._wants_rest = rest
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()
        if (
            not self._ready.wait(startup_timeout)
            or self.grpc_port is None
            or (rest and self.rest_port is None)
        ):
            self.kill()
            raise RuntimeError(f"the server did not start:\n{self.output()[-5000:]}")

    def _read_log(self) -> None:
        for line in self.process.stdout:
            self._lines.append(line)
            grpc_match, rest_match = (
                GRPC_PORT_LOG_LINE.search(line),
                REST_PORT_LOG_LINE.search(line),
            )
            if grpc_match:
                self.grpc_port = int(grpc_match.group(1))
            if rest_match:
                self.rest_port = int(rest_match.group(1))
            if self.grpc_port and (self.rest_port or not self._wants_rest):
                self._ready.set()
        self._ready.set()  # The process ended (maybe before it was ready).

    def output(self) -> str:
        """Everything the server logged so far (all of it once the process has ended)."""
        if self.process.poll() is not None:
            self._reader.join(timeout=30)
        return "".join(self._lines)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._reader.join(timeout=30)

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc_info) -> None:
        self.kill()


@contextlib.contextmanager
def memory_cgroup(limit_bytes: int) -> Iterator[tuple[str, ...]]:
    """A launcher (for `ServerProcess`) that runs its command in a new memory cgroup of
    `limit_bytes`, a child of this process's own (`benchmarks.bench_memory_limit.MemoryCgroup`),
    removed after the block. The kernel OOM-kills what outgrows it there, as a container's limit
    does, without touching the rest of the machine. Skips the test where no such cgroup can be
    made (not root, a read-only /sys/fs/cgroup, v2 without delegation).
    """
    from benchmarks.bench_memory_limit import MemoryCgroup

    try:
        cgroup = MemoryCgroup.create(limit_bytes)
    except OSError as error:
        pytest.skip(f"no memory cgroup can be made here: {error}")
    try:
        yield cgroup.launcher
    finally:
        # The processes of the block have been killed and waited for.
        cgroup.remove()


def texts_request(
    texts: list[str], signature_name: str = "", model_name: str = MODEL_NAME, version: int = None
) -> predict_pb2.PredictRequest:
    """A PredictRequest with a `text` string input, built with the official protos."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    if signature_name:
        request.model_spec.signature_name = signature_name
    if version is not None:
        request.model_spec.version.value = version
    request.inputs[TEXT_INPUT].CopyFrom(
        tf.make_tensor_proto(
            [t.encode("utf-8") if isinstance(t, str) else t for t in texts], dtype=tf.string
        )
    )
    return request


# ----------------------------------------------------------------- long model runs


class LoopModel(tf.Module):
    """A model that works for as many small steps as its inputs add up to (as a decoder loop
    does: many ops, each one quick), so a run can be as long as a test needs."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int64, name="steps")])
    def loop(self, steps):
        weights = tf.eye(8) * 0.5

        def step(index, state):
            return index + 1, tf.tanh(tf.matmul(state, weights) + 0.1)

        _, state = tf.while_loop(
            lambda index, _: index < tf.reduce_sum(steps),
            step,
            [tf.constant(0, tf.int64), tf.ones([1, 8])],
        )
        return {"y": tf.fill(tf.shape(steps), tf.reduce_sum(state))}


ENDLESS_STEPS = 10**15  # Years of work: a run that is not aborted never ends.


def loop_model_base(tmp_path) -> str:
    module = LoopModel()
    tf.saved_model.save(
        module, str(tmp_path / "loop" / "1"), signatures={"serving_default": module.loop}
    )
    return str(tmp_path / "loop")


def loop_request(steps: int) -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "loop"
    request.inputs["steps"].CopyFrom(tf.make_tensor_proto([steps], dtype=tf.int64))
    return request


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used."""
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def cpu_seconds_during(pid: int, window_seconds: float) -> float:
    """CPU time a process uses during a window of wall time (a measurement, not a wait)."""
    start = cpu_seconds(pid)
    threading.Event().wait(window_seconds)
    return cpu_seconds(pid) - start
