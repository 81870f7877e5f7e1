"""MultiWorkerMirroredStrategy from TF_CONFIG: two worker processes on 127.0.0.1."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from run_directory import artifacts
from tests.paths import REPO_ROOT
from tests.training_cli import run_training_cli

ROOT = str(REPO_ROOT)


def model_weights(path):
    import keras

    return [w.numpy() for w in keras.models.load_model(path).weights]


def free_ports(count):
    """Ports free at the time of the call. TF_CONFIG must name every worker's port before the
    workers start, and TensorFlow's gRPC server binds it on 0.0.0.0 with SO_REUSEPORT off, so
    neither `--port=0` nor holding the port (tests/serving_fixtures.reserved_port) works here."""
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def run_workers(corpus, run_dir, ports):
    """Starts one `training.train` worker per port under TF_CONFIG; returns their outputs."""
    workers = [f"127.0.0.1:{port}" for port in ports]
    processes = []
    for index in range(len(workers)):
        env = {
            **os.environ,
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "TF_CONFIG": json.dumps(
                {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
            ),
        }
        processes.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "training.train",
                    "--preset",
                    "tiny",
                    "--data",
                    corpus,
                    "--run_dir",
                    run_dir,
                    "--distribution",
                    "multi_worker",
                    "--train_steps",
                    "12",
                    "--checkpoint_every",
                    "6",
                ],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = []
    for process in processes:
        try:
            outputs.append(process.communicate(timeout=240)[0])
        finally:
            process.kill()
    return outputs, processes


@pytest.mark.large
def test_two_workers_train_in_lockstep_and_end_with_identical_weights(tiny_corpus, tmp_path):
    run_dir = str(tmp_path / "run")
    outputs, processes = run_workers(tiny_corpus, run_dir, free_ports(2))
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output[-3000:]

    chief_model = os.path.join(run_dir, artifacts.MODEL_FILE)
    worker_model = os.path.join(run_dir, "workers", "worker-1", artifacts.MODEL_FILE)
    chief, worker = model_weights(chief_model), model_weights(worker_model)
    assert len(chief) == len(worker) > 0
    for a, b in zip(chief, worker):
        np.testing.assert_array_equal(a, b)
    config = artifacts.read_config(run_dir)
    assert config["distribution"] == "multi_worker"
    assert os.path.exists(os.path.join(run_dir, "checkpoints", "ckpt-12.index"))


def test_multi_worker_without_tf_config_fails_naming_it(tiny_corpus, tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "TF_CONFIG"}
    result = run_training_cli(
        "--preset", "tiny", "--data", tiny_corpus, "--run_dir", str(tmp_path / "run"),
        "--distribution", "multi_worker", env=env, timeout=240,
    )  # fmt: skip
    assert result.returncode != 0
    assert "--distribution multi_worker needs the TF_CONFIG environment variable" in result.stderr
    assert not os.path.exists(tmp_path / "run" / artifacts.MODEL_FILE)
