"""Fine-tuning from a trained run (`training.train --init_from RUN_DIR`): its weights, tokenizer
and vocabulary, a fresh optimizer and schedule, the refusals, resume, the BLEU it gains, and the
watch on what the run it starts from knew (`training.fine_tuning`)."""

import filecmp
import json
import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf

from run_directory import artifacts
from tests.training_cli import train_tiny
from training.config import resolve_config
from training.curves import read_scalars
from training.evaluate import evaluate
from training.fine_tuning import PEAK_FRACTION, base_end
from training.schedule import CustomSchedule
from training.toy_corpus import ES_EN_OFFICE, write_corpus
from training.train import TrainingError, inherited_settings, main, train

# The decoding settings the house run is given, as `training.bundle` gives a bundle its own.
HOUSE_DECODING = {"beam_width": 2, "alpha": 1.0, "no_repeat_ngram_size": 3}

# End to end over trained runs: `make test-large` (tests/collection.py).
pytestmark = pytest.mark.large


@pytest.fixture(scope="module")
def domains(tmp_path_factory):
    """`(house, office seed, office)`: the toy house corpus, 30 office sentences, and an office
    corpus of its own (toy_corpus.ES_EN_OFFICE: no word in common with the house's)."""
    base = tmp_path_factory.mktemp("domains")
    return (
        str(write_corpus(base / "house", dev=20, test=20)),
        str(write_corpus(base / "office_seed", train=30, dev=10, test=10, glossary=ES_EN_OFFICE)),
        str(write_corpus(base / "office", train=400, dev=25, test=25, glossary=ES_EN_OFFICE)),
    )


@pytest.fixture(scope="module")
def house_run(domains, tmp_path_factory):
    """A run trained mostly on the house domain: 1 office sentence in 21 drawn, so that its
    vocabulary holds the office words (as a large run's vocabulary holds a user's) but the model
    barely knows them. `dff` 96 is not the tiny preset's, so fine-tuning must take it from here."""
    house, office_seed, _ = domains
    run_dir = train_tiny(
        str(tmp_path_factory.mktemp("runs") / "house"),
        data=f"{house}:1,{office_seed}:0.05",
        train_steps=160,
        checkpoint_every=80,
        dff=96,
    )
    with open(os.path.join(run_dir, "decoding.json"), "w", encoding="utf-8") as handle:
        json.dump(HOUSE_DECODING, handle)
    return run_dir


def fine_tune_config(run_dir, **overrides):
    return resolve_config("tiny", overrides=overrides, inherited=inherited_settings(run_dir))


def test_fine_tuning_raises_dev_bleu_on_the_new_domain(house_run, domains, tmp_path):
    _, _, office = domains
    before = evaluate(house_run, "dev", data=office, output_dir=str(tmp_path / "before"))
    run_dir = str(tmp_path / "office")
    train(
        fine_tune_config(
            house_run, data=office, init_from=house_run, train_steps=120, checkpoint_every=120
        ),
        run_dir,
    )
    after = evaluate(run_dir, "dev", output_dir=str(tmp_path / "after"))
    assert before["sentences"] == after["sentences"] == 25
    assert after["bleu"] > before["bleu"] + 20, (before["bleu"], after["bleu"])
    # Its tokenizer and vocabulary are the run's it started from, byte for byte.
    for name in ("spm.shared.model", "tokenizer_config.json"):
        assert filecmp.cmp(
            os.path.join(house_run, "tokenizer", name),
            os.path.join(run_dir, "tokenizer", name),
            shallow=False,
        ), name
    assert artifacts.read_config(run_dir)["init_from"] == house_run


def test_fine_tuning_starts_from_the_runs_weights_with_a_fresh_optimizer(
    house_run, domains, tmp_path
):
    """One step at a learning rate of ~0 keeps the weights it started from: those `load_trained`
    reads from the run (its best, else model.keras), not fresh ones; the optimizer counts from
    zero, with the schedule's first rate."""
    _, _, office = domains
    run_dir = str(tmp_path / "one_step")
    train(
        fine_tune_config(
            house_run,
            data=office,
            init_from=house_run,
            train_steps=1,
            checkpoint_every=1,
            lr_scale=1e-9,
        ),
        run_dir,
    )
    started, *_ = artifacts.load_trained(house_run)
    tuned, *_ = artifacts.load_trained(run_dir)
    for expected, actual in zip(started.weights, tuned.weights, strict=True):
        np.testing.assert_allclose(actual.numpy(), expected.numpy(), atol=1e-6)
    latest = tf.train.latest_checkpoint(os.path.join(run_dir, "checkpoints"))
    assert artifacts.checkpoint_step(latest) == 1


def test_resume_continues_the_fine_tuning_run_itself(house_run, domains, tmp_path):
    _, _, office = domains
    run_dir = str(tmp_path / "resumed")
    args = ["--preset", "tiny", "--data", office, "--init_from", house_run, "--run_dir", run_dir]
    assert main([*args, "--train_steps", "10", "--checkpoint_every", "10"]) == 0
    before = json.load(open(os.path.join(run_dir, "base_dev.json")))["before"]
    first = os.path.join(run_dir, "checkpoints", "ckpt-10.index")
    written = os.stat(first).st_mtime_ns
    assert main([*args, "--train_steps", "20", "--checkpoint_every", "10", "--resume"]) == 0
    # Continued from its own step 10, not started again from the run it fine-tunes.
    assert os.stat(first).st_mtime_ns == written
    state = tf.train.get_checkpoint_state(os.path.join(run_dir, "checkpoints"))
    assert [artifacts.checkpoint_step(p) for p in state.all_model_checkpoint_paths] == [10, 20]
    # What the run it started from knew was measured once, on its weights, and kept.
    watched = json.load(open(os.path.join(run_dir, "base_dev.json")))
    assert watched["before"] == before
    assert list(watched["checkpoints"]) == ["10", "20"]
    assert read_scalars(os.path.join(run_dir, "logs", "dev"))["base_bleu/house"][0] == (0, 10, 20)
    # The dff of the run it started from (96), not the tiny preset's (64).
    assert json.load(open(os.path.join(run_dir, "config.json")))["dff"] == 96


def test_a_fine_tuning_run_resumes_after_its_base_has_gone(house_run, domains, tmp_path, capsys):
    """A bundle replaced by a newer one (as `git pull` does) must not strand the runs fine-tuned
    from it: the run keeps the base's settings (base_config.json), and resumed after the base was
    moved away it goes on with its schedule, the base's corpora mixed in and its dev sets
    watched; without that copy, what needs the base says so."""
    _, _, office = domains
    base, run_dir = str(tmp_path / "base"), str(tmp_path / "tuned")
    shutil.copytree(house_run, base)
    args = ["--preset", "tiny", "--data", office, "--init_from", base, "--run_dir", run_dir]
    args += ["--mix_base", "0.5", "--checkpoint_every", "10"]
    assert main([*args, "--train_steps", "10"]) == 0
    started = artifacts.read_config(run_dir)
    os.rename(base, str(tmp_path / "moved"))
    assert main([*args, "--train_steps", "20", "--resume"]) == 0
    state = tf.train.get_checkpoint_state(os.path.join(run_dir, "checkpoints"))
    assert [artifacts.checkpoint_step(p) for p in state.all_model_checkpoint_paths] == [10, 20]
    assert artifacts.read_config(run_dir) == {**started, "train_steps": 20}
    watched = json.load(open(os.path.join(run_dir, "base_dev.json")))
    assert list(watched["checkpoints"]) == ["10", "20"]

    os.remove(os.path.join(run_dir, "base_config.json"))
    capsys.readouterr()
    assert main([*args, "--train_steps", "30", "--resume"]) == 1
    error = capsys.readouterr().err
    assert f"--mix_base: {base}/config.json not found" in error
    assert f"Nor does {run_dir} keep a copy of its settings (base_config.json)" in error


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--d_model", "64"], "this run changes d_model: 32 -> 64"),
        (["--vocab_size", "500"], "this run changes vocab_size: 400 -> 500"),
        (["--tie_embeddings", "false"], "tie_embeddings: True -> False"),
        (["--placeholders", "true"], "placeholders: False -> True"),
    ],
)
def test_a_config_that_changes_the_model_or_vocabulary_is_refused(
    house_run, domains, extra, message, tmp_path, capsys
):
    _, _, office = domains
    run_dir = tmp_path / "refused"
    status = main(
        ["--preset", "tiny", "--data", office, "--init_from", house_run]
        + ["--run_dir", str(run_dir), *extra]
    )
    assert status == 1
    error = capsys.readouterr().err
    assert f"cannot fine-tune from {house_run}" in error and message in error
    assert not run_dir.exists()


def test_init_from_must_be_a_trained_run_other_than_this_one(house_run, domains, tmp_path, capsys):
    _, _, office = domains
    missing = str(tmp_path / "nothing")
    assert main(["--preset", "tiny", "--data", office, "--init_from", missing]) == 1
    assert f"--init_from: {missing}/config.json not found" in capsys.readouterr().err
    with pytest.raises(TrainingError, match="is the run directory itself"):
        train(fine_tune_config(house_run, data=office, init_from=house_run), house_run)


def test_resuming_a_fine_tuning_run_without_init_from_is_refused(house_run, domains, tmp_path):
    _, _, office = domains
    run_dir = str(tmp_path / "run")
    train(fine_tune_config(house_run, data=office, init_from=house_run, train_steps=2), run_dir)
    with pytest.raises(TrainingError, match=re.escape(f"init_from: '{house_run}' -> ''")):
        train(fine_tune_config(house_run, data=office, train_steps=4), run_dir, resume=True)


def test_fine_tuning_keeps_the_bases_schedule_and_decoding_and_watches_its_dev_sets(
    house_run, domains, tmp_path, capsys, caplog
):
    """By default: a peak rate where the run it starts from ended, its decoding.json, and its
    corpora's dev BLEU before and at each checkpoint, printed, in TensorBoard and in
    base_dev.json, with a warning when one falls (a new domain with no word in common makes the
    house's fall)."""
    house, _, office = domains
    run_dir = str(tmp_path / "watched")
    args = ["--preset", "tiny", "--data", office, "--init_from", house_run, "--run_dir", run_dir]
    assert main([*args, "--train_steps", "40", "--checkpoint_every", "20"]) == 0
    printed = capsys.readouterr().out

    config = artifacts.read_config(run_dir)
    schedule = CustomSchedule(config["d_model"], config["warmup_steps"], config["lr_scale"])
    _, ended = base_end(artifacts.read_config(house_run), house_run)
    assert float(schedule(config["warmup_steps"] - 1)) == pytest.approx(
        PEAK_FRACTION * ended, rel=1e-5
    )
    assert json.load(open(os.path.join(run_dir, "decoding.json"))) == HOUSE_DECODING

    watched = json.load(open(os.path.join(run_dir, "base_dev.json")))
    assert watched["decoding"] == "greedy, no_repeat_ngram_size 3"
    assert set(watched["before"]) == {"house", "office_seed"}
    # "Before" is the house run's own greedy dev BLEU, as training.evaluate reports it.
    reported = evaluate(house_run, "dev", data=house, output_dir=str(tmp_path / "eval"))
    assert watched["before"]["house"]["bleu"] == pytest.approx(reported["bleu"], abs=0.01)
    assert watched["sentences"]["house"] == reported["sentences"] == 20
    fell = watched["before"]["house"]["bleu"] - watched["checkpoints"]["40"]["house"]["bleu"]
    assert fell > 2
    assert any("house dev BLEU fell" in warning for warning in watched["warnings"])
    assert "the base's house dev BLEU fell" in caplog.text
    assert f"house {watched['before']['house']['bleu']:.2f} (20 sentences)" in printed
    assert f"house {watched['checkpoints']['40']['house']['bleu']:.2f} (-{fell:.2f})" in printed
    # The tiny preset keeps no best dev BLEU: the weights kept are the last checkpoint's.
    assert watched["kept"] == {"step": 40, "corpora": watched["checkpoints"]["40"]}
    assert (
        f"weights kept (step 40): house {watched['checkpoints']['40']['house']['bleu']:.2f}"
        in printed
    )
    logged = read_scalars(os.path.join(run_dir, "logs", "dev"))
    assert logged["base_bleu/house"][0] == (0, 20, 40)
    assert logged["base_bleu/house"][1][0] == pytest.approx(watched["before"]["house"]["bleu"])


def test_mix_base_keeps_what_the_base_knew(house_run, domains, tmp_path):
    """The same fine-tuning with a half of its examples drawn from the house run's corpora ends
    far nearer the house dev BLEU it started from."""
    _, _, office = domains
    kept = {}
    for name, extra in (("alone", []), ("mixed", ["--mix_base", "0.5"])):
        run_dir = str(tmp_path / name)
        args = ["--preset", "tiny", "--data", office, "--init_from", house_run]
        args += ["--run_dir", run_dir, "--train_steps", "40", "--dev_bleu_sentences", "20"]
        assert main([*args, *extra]) == 0
        watched = json.load(open(os.path.join(run_dir, "base_dev.json")))
        # The weights kept are those of the best dev BLEU (step 0 the house run's own).
        best = json.load(open(os.path.join(run_dir, "best", "best.json")))
        assert watched["kept"]["step"] == best["step"]
        kept[name] = (
            watched["checkpoints"]["40"]["house"]["bleu"] - watched["before"]["house"]["bleu"]
        )
    assert kept["mixed"] > kept["alone"] + 20, kept
    assert artifacts.read_config(str(tmp_path / "mixed"))["mix_base"] == 0.5
