"""Shared test set-up: quiet TensorFlow logs, deterministic seeds, and the trained models that
several test files share (session fixtures, built once per test process)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Under `make test` two pytest-xdist workers share the cores: one intra-op thread each (and in
# the CLIs and servers they start, which inherit it) was 3-9% faster than a thread per core
# each. Inter-op threads stay TensorFlow's choice: collective ops need more than one.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")

import model  # noqa: E402, F401  (the first TensorFlow import: no start-up notices)

# isort: split
import keras  # noqa: E402
import pytest  # noqa: E402

from tests.collection import pytest_collection_modifyitems  # noqa: E402, F401


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(1234)
    yield


@pytest.fixture(scope="session")
def trained_reverse_model():
    """`(model, initial_held_out_loss)`: trained once per session, shared by learning and decoding tests."""
    from tests.reverse_task import train_reverse_model

    keras.utils.set_random_seed(0)
    return train_reverse_model()


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory):
    """A word-for-word Spanish→English corpus directory (train/dev/test.tsv)."""
    from training.toy_corpus import write_corpus

    return str(write_corpus(tmp_path_factory.mktemp("corpus")))


@pytest.fixture(scope="session")
def tiny_run(tiny_corpus, tmp_path_factory):
    """A run directory trained by the training code (tiny preset, 60 steps) on `tiny_corpus`."""
    from training.config import resolve_config
    from training.train import train

    run_dir = str(tmp_path_factory.mktemp("runs") / "tiny")
    config = resolve_config("tiny", overrides={"data": tiny_corpus, "train_steps": 60})
    dev_loss, dev_accuracy = train(config, run_dir, preset="tiny")
    return {"run_dir": run_dir, "dev_loss": dev_loss, "dev_accuracy": dev_accuracy}


@pytest.fixture(scope="session")
def tiny_export_run(tmp_path_factory):
    """A tiny Spanish→English run directory that translates its 40 training pairs
    (tests/export_fixtures.py), built once per session for the export tests; read-only."""
    from tests.export_fixtures import build_tiny_run

    run_dir = tmp_path_factory.mktemp("tiny_export_run")
    build_tiny_run(run_dir)
    return run_dir


@pytest.fixture(scope="session")
def exports(tmp_path_factory):
    """`{version: export dir}`: the toy translator exported as versions 1 and 2, once per session
    (tests/serving_fixtures.py; the server and client tests install them into model bases)."""
    from tests.serving_fixtures import toy_exports

    return toy_exports(tmp_path_factory)


@pytest.fixture(scope="module")
def main_server(exports, tmp_path_factory):
    """The model server of serving/models.config, with a second model (tests/model_server_fixtures.py)."""
    from tests.model_server_fixtures import start_main_server

    connection = start_main_server(exports, tmp_path_factory.mktemp("main"))
    yield connection
    connection.server.stop()


@pytest.fixture(scope="module")
def rest_server(exports, tmp_path_factory):
    """A model server whose REST reads time out after 1 s and take at most 64 KiB."""
    from tests.model_server_fixtures import start_rest_server

    connection = start_rest_server(exports, tmp_path_factory.mktemp("rest"))
    yield connection
    connection.server.stop()
