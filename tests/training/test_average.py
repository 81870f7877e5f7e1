"""Checkpoint averaging on a real tiny run: the NumPy mean, who uses it, and bad requests."""

import collections
import hashlib
import logging
import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from model.tokenizer import load_tokenizers
from run_directory import artifacts
from training.average import AveragingError, average_run, main
from training.config import resolve_config
from training.train import train

# End to end over trained runs: `make test-large` (tests/collection.py).
pytestmark = pytest.mark.large

STEPS = (10, 20, 30)


@pytest.fixture(scope="module")
def trained_run(tiny_corpus, tmp_path_factory):
    """A tiny run checkpointed at STEPS (and its model.keras at the last)."""
    run_dir = str(tmp_path_factory.mktemp("average") / "run")
    config = resolve_config(
        "tiny",
        overrides={
            "data": tiny_corpus,
            "train_steps": STEPS[-1],
            "checkpoint_every": STEPS[0],
            "keep_checkpoints": len(STEPS),
        },
    )
    train(config, run_dir, preset="tiny")
    return run_dir, config


@pytest.fixture
def run_dir(trained_run, tmp_path):
    copy = str(tmp_path / "run")
    shutil.copytree(trained_run[0], copy)
    return copy


def checkpoint_weights(run_dir, checkpoint_path):
    """The model weights (arrays, in `model.weights` order) TensorFlow restores from a checkpoint
    into a fresh model of the run."""
    config = artifacts.read_config(run_dir)
    source_tokenizer, target_tokenizer = load_tokenizers(
        os.path.join(run_dir, artifacts.TOKENIZER_DIR)
    )
    model = artifacts.build_model(config, source_tokenizer.vocab_size, target_tokenizer.vocab_size)
    model.build(((None, None), (None, None)))
    tf.train.Checkpoint(model=model).restore(checkpoint_path).expect_partial()
    return [weight.numpy() for weight in model.weights]


def value_digests(arrays):
    return collections.Counter(
        hashlib.sha256(np.ascontiguousarray(array)).hexdigest() for array in arrays
    )


def checkpoint_path(run_dir, step):
    return os.path.join(run_dir, artifacts.CHECKPOINT_DIR, f"ckpt-{step}")


def file_contents(directory):
    """`{path relative to directory: bytes}` of every file below `directory`."""
    contents = {}
    for root, _, files in os.walk(directory):
        for name in files:
            with open(os.path.join(root, name), "rb") as handle:
                contents[os.path.relpath(os.path.join(root, name), directory)] = handle.read()
    return contents


@pytest.mark.parametrize("last", [1, 2, 3])
def test_average_is_the_numpy_mean_of_the_last_checkpoints(run_dir, last):
    averaged_path = average_run(run_dir, last)
    assert averaged_path == os.path.join(run_dir, artifacts.AVERAGED_DIR, f"ckpt-{STEPS[-1]}")
    # Model weights only: no optimizer slots, step counter or data iterator.
    keys = tf.train.load_checkpoint(averaged_path).get_variable_to_shape_map()
    assert not [
        key
        for key in keys
        if not key.startswith(("model/", "save_counter", "_CHECKPOINTABLE_OBJECT_GRAPH"))
    ]
    averaged = checkpoint_weights(run_dir, averaged_path)
    sources = [
        checkpoint_weights(run_dir, checkpoint_path(run_dir, step)) for step in STEPS[-last:]
    ]
    assert len(averaged) > 20
    for index, value in enumerate(averaged):
        assert value.dtype == np.float32
        expected = np.mean([source[index] for source in sources], axis=0)
        np.testing.assert_allclose(value, expected, rtol=1e-6, atol=1e-7)
    if last > 1:  # the checkpoints differ, so the mean is none of them
        assert any(
            not np.array_equal(value, sources[-1][index]) for index, value in enumerate(averaged)
        )


def test_evaluate_and_export_load_the_averaged_weights(run_dir, tmp_path, caplog):
    from inference.export import export_run

    averaged = checkpoint_weights(run_dir, average_run(run_dir, 2))
    with caplog.at_level(logging.INFO, logger="run_directory.artifacts"):
        model, *_ = artifacts.load_trained(run_dir)  # what training.evaluate translates with
    assert "average of the checkpoints of steps 20, 30" in caplog.text
    for weight, value in zip(model.weights, averaged, strict=True):
        np.testing.assert_array_equal(weight.numpy(), value, err_msg=weight.path)

    version_dir = export_run(run_dir, str(tmp_path / "exports"))
    # Names differ between model instances (transformer_<n>, dense_<n>): compare the values.
    exported = tf.saved_model.load(version_dir).variables
    assert value_digests(variable.numpy() for variable in exported) == value_digests(averaged)
    # ... which are not model.keras's, what they would load without the average.
    final = keras.models.load_model(os.path.join(run_dir, artifacts.MODEL_FILE), compile=False)
    assert value_digests(weight.numpy() for weight in final.weights) != value_digests(averaged)


def test_training_past_the_average_makes_it_stale(trained_run, run_dir, caplog):
    average_run(run_dir, 2)
    config = resolve_config("tiny", overrides={**vars(trained_run[1]), "train_steps": 40})
    train(config, run_dir, resume=True)
    with caplog.at_level(logging.INFO, logger="run_directory.artifacts"):
        artifacts.load_trained(run_dir)
    assert "training went on to step 40" in caplog.text
    assert "using the weights of model.keras" in caplog.text


@pytest.mark.parametrize(
    "last, message",
    [
        (0, "--last must be at least 1, got 0"),
        (4, r"has 3 checkpoint\(s\) \(steps: 10, 20, 30\); averaging the last 4 needs 4"),
    ],
)
def test_bad_requests_are_clear_errors_and_lose_nothing(run_dir, last, message, capsys):
    average_run(run_dir, 2)
    before = file_contents(run_dir)
    with pytest.raises(AveragingError, match=message):
        average_run(run_dir, last)
    assert file_contents(run_dir) == before
    assert main(["--run_dir", run_dir, "--last", str(last)]) == 1
    assert "error: " in capsys.readouterr().err
    assert file_contents(run_dir) == before


def test_missing_run_directory_is_a_clear_error(tmp_path, capsys):
    missing = str(tmp_path / "nope")
    assert main(["--run_dir", missing, "--last", "2"]) == 1
    assert f"error: {missing} does not exist" in capsys.readouterr().err
    assert not os.path.exists(missing)


def test_averaging_again_replaces_the_average_and_leaves_nothing_behind(run_dir, capsys):
    average_run(run_dir, 3)
    assert main(["--run_dir", run_dir, "--last", "2"]) == 0
    assert "averaged" in capsys.readouterr().out
    averaged_dir = os.path.join(run_dir, artifacts.AVERAGED_DIR)
    assert sorted(os.listdir(averaged_dir)) == sorted(
        ["checkpoint", "average.json", "ckpt-30.index", "ckpt-30.data-00000-of-00001"]
    )
    assert [name for name in os.listdir(run_dir) if "averaged" in name] == ["averaged"]
    _, info = artifacts.current_averaged_checkpoint(run_dir)
    assert info["steps"] == [20, 30]
