"""Dev BLEU during training (training/dev_bleu.py): the score, the best checkpoint, patience."""

import json
import os

import keras
import numpy as np
import pytest

from run_directory import artifacts
from training.config import resolve_config
from training.corpus import load_pairs
from training.curves import read_scalars
from training.dev_bleu import BestCheckpoint, DevBleu, measures_bleu
from training.evaluate import evaluate
from training.train import train


def test_dev_bleu_is_the_bleu_that_evaluate_reports(tiny_run, tmp_path):
    """One translation path: the training-time score equals `training.evaluate` on the same
    sentences (which equals the export's, tests/training/test_evaluate.py)."""
    run_dir = tiny_run["run_dir"]
    model, source_tokenizer, target_tokenizer, config = artifacts.load_trained(run_dir)
    dev_bleu = DevBleu(
        model,
        source_tokenizer,
        target_tokenizer,
        load_pairs(config["data"], "dev"),
        max_sentences=25,
    )
    first, second = dev_bleu(), dev_bleu()  # the traced function is reused
    report = evaluate(run_dir, "dev", limit=25, output_dir=str(tmp_path))
    assert len(dev_bleu.sources) == 25
    assert first["bleu"] == second["bleu"] == report["bleu"] > 0
    assert first["chrf"] == report["chrf"]


def test_the_mean_bleu_leaves_out_a_corpus_of_words(tiny_run):
    """A lexicon's one-word references hold no 4-gram: its BLEU is chance, and would pick the
    best checkpoint of a mixed run; its chrF still counts."""
    model, source_tokenizer, target_tokenizer, config = artifacts.load_trained(tiny_run["run_dir"])
    sentences = load_pairs(config["data"], "dev")[:20]
    words = [(source, target.split()[0]) for source, target in sentences]
    assert measures_bleu(sentences) and not measures_bleu(words)
    # Digits and letters among sentences (a telephony corpus) leave BLEU meaningful.
    assert measures_bleu(words[:15] + sentences[:5])

    def dev_bleu(corpora):
        return DevBleu(model, source_tokenizer, target_tokenizer, corpora, max_sentences=20)

    mixed = dev_bleu({"sentences": sentences, "words": words})
    assert mixed.bleu_corpora == ["sentences"]
    result = mixed()
    scores = result["corpora"]
    assert result["bleu"] == scores["sentences"]["bleu"] > scores["words"]["bleu"]
    assert result["chrf"] == (scores["sentences"]["chrf"] + scores["words"]["chrf"]) / 2
    # Where no corpus measures BLEU, all of them count.
    assert dev_bleu({"a": words, "b": words[:10]}).bleu_corpora == ["a", "b"]


def test_a_corpus_scored_in_the_same_measurement_is_not_translated_again(tiny_run):
    """A fine-tuning run's dev BLEU and its watch of the base's dev sets hold the same corpora:
    what one scored of the current weights the other reads from `known`."""
    model, source_tokenizer, target_tokenizer, config = artifacts.load_trained(tiny_run["run_dir"])
    sentences = load_pairs(config["data"], "dev")[:20]
    words = [(source, target.split()[0]) for source, target in sentences]

    def dev_bleu(corpora):
        return DevBleu(model, source_tokenizer, target_tokenizer, corpora, max_sentences=20)

    known = {}
    watched = dev_bleu({"sentences": sentences})(known)
    assert list(known) == [tuple(sentences)]
    alone = dev_bleu({"sentences": sentences, "words": words})()
    assert alone["corpora"]["sentences"] == watched["corpora"]["sentences"]
    # A stand-in for the known score shows that it is read, not translated again; the corpus
    # not yet scored is translated, and added.
    known[tuple(sentences)] = {"bleu": -1.0, "chrf": -1.0}
    shared = dev_bleu({"sentences": sentences, "words": words})(known)
    assert shared["corpora"]["sentences"] == {"bleu": -1.0, "chrf": -1.0}
    assert shared["corpora"]["words"] == alone["corpora"]["words"]
    assert known[tuple(words)] == alone["corpora"]["words"]


def test_best_checkpoint_keeps_the_weights_of_the_best_bleu_and_counts_patience(tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    best = BestCheckpoint(model, str(tmp_path / "best"))
    kernels = {}
    for step, bleu in ((10, 5.0), (20, 7.5), (30, 7.5), (40, 6.0)):
        model.layers[0].kernel.assign(np.full((3, 2), float(step), np.float32))
        kernels[step] = model.layers[0].kernel.numpy()
        improved = best.update(step, {"bleu": bleu, "chrf": 2 * bleu})
        assert improved == (step in (10, 20))
    assert best.state["step"] == 20 and best.state["bleu"] == 7.5
    assert best.state["evaluations_without_improvement"] == 2
    assert best.should_stop(2) and not best.should_stop(3) and not best.should_stop(0)

    # A resumed run reads the state back; the checkpoint holds step 20's weights.
    again = BestCheckpoint(model, str(tmp_path / "best"))
    assert again.state == best.state
    fresh = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    artifacts.restore_model(fresh, os.path.join(str(tmp_path / "best"), again.state["checkpoint"]))
    np.testing.assert_array_equal(fresh.layers[0].kernel.numpy(), kernels[20])


@pytest.mark.large
def test_training_logs_dev_bleu_and_stops_early_without_progress(tiny_corpus, tmp_path):
    # A learning rate of ~0 keeps the weights, so the second evaluation cannot beat the first.
    config = resolve_config(
        "tiny",
        overrides={
            "data": tiny_corpus,
            "train_steps": 200,
            "checkpoint_every": 20,
            "lr_scale": 1e-12,
            "dev_bleu_sentences": 15,
            "early_stopping_patience": 1,
        },
    )
    run_dir = str(tmp_path / "run")
    train(config, run_dir, preset="tiny")
    steps, bleus = read_scalars(os.path.join(run_dir, "logs", "dev"))["bleu"]
    assert list(steps) == [20, 40]  # stopped after one evaluation without a new best
    best_info = json.loads(open(os.path.join(run_dir, "best", "best.json")).read())
    assert best_info["step"] == 20 and best_info["bleu"] == pytest.approx(bleus[0], abs=0.01)
    assert best_info["evaluations_without_improvement"] == 1


@pytest.mark.large
def test_a_learning_run_loads_its_best_weights(tiny_corpus, tmp_path):
    config = resolve_config(
        "tiny",
        overrides={
            "data": tiny_corpus,
            "train_steps": 60,
            "checkpoint_every": 20,
            "dev_bleu_sentences": 15,
        },
    )
    run_dir = str(tmp_path / "run")
    train(config, run_dir, preset="tiny")
    steps, bleus = read_scalars(os.path.join(run_dir, "logs", "dev"))["bleu"]
    assert list(steps) == [20, 40, 60] and max(bleus) > bleus[0]  # it learned
    best_path, best_info = artifacts.best_checkpoint(run_dir)
    assert best_info["step"] == steps[int(np.argmax(bleus))]
    model, *_ = artifacts.load_trained(run_dir)
    reference = artifacts.build_model(vars(config), model.input_vocab_size, model.target_vocab_size)
    reference.build(((None, None), (None, None)))
    artifacts.restore_model(reference, best_path)
    for loaded, expected in zip(model.weights, reference.weights):
        np.testing.assert_array_equal(loaded.numpy(), expected.numpy())


def test_patience_without_dev_bleu_is_refused(tiny_corpus):
    with pytest.raises(ValueError, match="early_stopping_patience needs dev BLEU"):
        resolve_config("tiny", overrides={"data": tiny_corpus, "early_stopping_patience": 2})
