"""What a fine-tuning run takes by default from the run it starts from (`training.fine_tuning`):
its schedule's peak, its decoding settings, its corpora to mix in. Fast: no training here
(tests/training/test_fine_tuning.py fine-tunes)."""

import json
import math

import pytest

from run_directory import artifacts
from training.config import lr_scale_for_peak, resolve_config
from training.fine_tuning import (
    FineTuningError,
    base_dev_splits,
    base_end,
    inherit_decoding,
    make_target,
    mixed_corpora,
)
from training.mixture import Corpus, parse_data
from training.schedule import CustomSchedule
from training.train import fine_tuning_defaults

BUNDLE = artifacts.PRETRAINED_RUN


def peak(config):
    """The peak rate of a config's schedule (at the end of its warmup)."""
    schedule = CustomSchedule(config.d_model, config.warmup_steps, config.lr_scale)
    return float(schedule(config.warmup_steps - 1))


def test_the_bundles_fine_tuning_schedule_peaks_below_where_the_bundle_ended():
    with open(f"{BUNDLE}/config.json", encoding="utf-8") as handle:
        bundle = json.load(handle)
    inherited, peak_rate = fine_tuning_defaults(BUNDLE)

    def resolved(**overrides):
        return resolve_config("small", None, overrides, inherited, peak_rate)

    # The bundle keeps no checkpoints: its end is taken as its train_steps (its config's 12,000;
    # the run stopped at 11,000), on the paper's curve.
    ended = bundle["lr_scale"] * (bundle["d_model"] * bundle["train_steps"]) ** -0.5
    assert base_end(bundle, BUNDLE) == (bundle["train_steps"], pytest.approx(ended, rel=1e-5))
    # On the new corpus alone a fifth of that rate; with the bundle's corpora mixed in, that rate.
    assert peak(resolved(init_from=BUNDLE)) == pytest.approx(0.2 * ended, rel=1e-5)
    assert peak(resolved(init_from=BUNDLE, mix_base=0.5)) == pytest.approx(ended, rel=1e-5)
    # The paper's schedule started afresh, as the preset has it, peaks nearly three times higher.
    assert peak(resolve_config("small", inherited=inherited)) > 2.5 * ended
    # The model settings come along (the preset's would not load the weights).
    config = resolved(init_from=BUNDLE)
    assert config.dff == bundle["dff"] and config.vocab_size == bundle["vocab_size"]
    assert config.warmup_steps == 50


def test_an_explicit_lr_scale_wins_and_a_warmup_alone_keeps_the_peak(tmp_path):
    inherited, peak_rate = fine_tuning_defaults(BUNDLE)

    def resolved(config_file=None, **overrides):
        return resolve_config("small", config_file, overrides, inherited, peak_rate)

    assert resolved(lr_scale=0.3).lr_scale == 0.3
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"lr_scale": 0.2}), encoding="utf-8")
    assert resolved(str(settings)).lr_scale == 0.2
    longer = resolved(warmup_steps=400)
    assert longer.warmup_steps == 400
    assert peak(longer) == pytest.approx(peak(resolved()), rel=1e-5)
    # From scratch nothing changes: the preset's own schedule.
    assert resolve_config("small").lr_scale == 0.7


def test_lr_scale_for_peak_inverts_the_schedules_peak():
    scale = lr_scale_for_peak(3e-4, d_model=192, warmup_steps=50)
    assert float(CustomSchedule(192, 50, scale)(49)) == pytest.approx(3e-4, rel=1e-6)
    assert scale == pytest.approx(3e-4 * math.sqrt(192 * 50))


def test_the_base_decoding_is_inherited_unless_the_run_has_its_own(tmp_path):
    base, run = tmp_path / "base", tmp_path / "run"
    base.mkdir(), run.mkdir()
    settings = {"beam_width": 4, "alpha": 1.0, "no_repeat_ngram_size": 3}
    (base / "decoding.json").write_text(json.dumps(settings), encoding="utf-8")
    assert inherit_decoding(str(base), str(run))
    assert json.loads((run / "decoding.json").read_text(encoding="utf-8")) == settings
    # A run's own (the user's, or a resumed run's) is kept.
    (run / "decoding.json").write_text(json.dumps({"beam_width": 2}), encoding="utf-8")
    assert not inherit_decoding(str(base), str(run))
    assert json.loads((run / "decoding.json").read_text(encoding="utf-8")) == {"beam_width": 2}
    # A base without one leaves the defaults.
    assert not inherit_decoding(str(tmp_path / "run"), str(tmp_path / "base"))


def corpus_dir(path):
    path.mkdir()
    for split in ("train", "dev", "test"):
        (path / f"{split}.tsv").write_text("hola\thello\n", encoding="utf-8")
    return str(path)


def test_mix_base_draws_its_share_from_the_bases_corpora_in_their_proportions(tmp_path):
    first, second, mine = (corpus_dir(tmp_path / name) for name in ("first", "second", "mine"))
    base = {"data": f"{first}:1,{second}:3"}
    shares = {
        corpus.name: corpus.share
        for corpus in mixed_corpora(parse_data(f"{mine}"), base, share=0.4)
    }
    assert shares == pytest.approx({"mine": 0.6, "first": 0.1, "second": 0.3})
    assert mixed_corpora(parse_data(mine), base, share=0.0) == parse_data(mine)


def test_mix_base_names_what_builds_a_missing_corpus_and_refuses_a_corpus_twice(tmp_path):
    mine, missing = corpus_dir(tmp_path / "mine"), str(tmp_path / "gone")
    with pytest.raises(FineTuningError, match=f"{missing} is not built: {missing} is not found"):
        mixed_corpora(parse_data(mine), {"data": missing}, share=0.5)
    assert make_target(Corpus("wordnet-bt", 1.0, "wordnet-bt")) == (
        "make data-wordnet-bt builds it"
    )
    with pytest.raises(FineTuningError, match="mine, which --data names already"):
        mixed_corpora(parse_data(mine), {"data": f"{mine}"}, share=0.5)


def test_the_watch_scores_the_corpora_the_base_trained_on_and_was_scored_on(tmp_path, caplog):
    first, second, everyday = (corpus_dir(tmp_path / n) for n in ("first", "second", "everyday"))
    missing = str(tmp_path / "gone")
    base = {"data": f"{first}:1,{second}:3", "dev_data": f"{everyday},{missing}"}
    splits = base_dev_splits(base)
    assert list(splits) == ["first", "second", "everyday"]
    assert splits["everyday"] == [("hola", "hello")]
    assert f"{missing} is not built" in caplog.text
    assert list(base_dev_splits({"data": first})) == ["first"]
    # A reversed base (`reverse`) is watched on its dev sets as it reads them: swapped.
    reversed_base = {**base, "reverse": True}
    assert base_dev_splits(reversed_base)["everyday"] == [("hello", "hola")]


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"mix_base": 0.5}, "needs init_from"),
        ({"mix_base": 1.0, "init_from": BUNDLE}, r"within \[0, 1\)"),
        ({"base_dev_sentences": -1}, "base_dev_sentences must be 0"),
    ],
)
def test_bad_fine_tuning_settings_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        resolve_config("small", overrides=overrides)
