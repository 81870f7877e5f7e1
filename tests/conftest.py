"""Shared test set-up: quiet TensorFlow logs, deterministic seeds, and the trained models that
several test files share (session fixtures, built once per test process)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import model  # noqa: E402, F401  (the first TensorFlow import: no start-up notices)

# isort: split
import keras  # noqa: E402
import pytest  # noqa: E402

# Session fixtures that take long to build. Under pytest-xdist (`make test`: `--dist
# loadgroup`), every test file runs on one worker, and the files that use the same one of these
# run on the same worker, so each is built once per test run. `tiny_run` and `exports` build in
# seconds and are used by the heaviest files: grouping those put test_train.py, test_bundle.py,
# test_evaluate.py and test_dev_bleu.py on one worker and made the suite 37 s slower (477 s
# against 440 s, clean clone, 2 cores), so each worker builds its own.
SHARED_FIXTURES = ("trained_reverse_model", "tiny_export_run")


# First: pytest-xdist's own hook reads the markers (it suffixes each node id with its group), and
# pluggy calls later-registered plugins first, so without tryfirst the markers came too late and
# every file's tests were spread over both workers, each building the file's fixtures.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    files = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], []).append(item)
    for path, file_items in files.items():
        used = set().union(*(item.fixturenames for item in file_items))
        group = next((name for name in SHARED_FIXTURES if name in used), path)
        for item in file_items:
            item.add_marker(pytest.mark.xdist_group(group))


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
