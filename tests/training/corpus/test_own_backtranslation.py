"""training.corpus.own_backtranslation: WordNet's usage examples (the real `wordnet-base`
that `make data-test` caches) back-translated by a tiny English→Spanish run of the project's
own, trained here: the Spanish is the run's translation, the split is wordnet-bt's, a
Spanish→English run is refused, and the run's weights and decoding are recorded and rebuild the
corpus when they change."""

import dataclasses
import json
import logging
import os
import shutil

import pytest

from model.translator import DecodingOptions
from run_directory import artifacts, traced_cache
from tests.apertium_fixtures import require_apertium
from tests.training_cli import train_tiny
from training import average, prepare_data
from training.corpus import CorpusError, loading
from training.corpus import own_backtranslation as own
from training.corpus.backtranslation import wordnet_english
from training.corpus.debian import DEFAULT_CACHE_DIR
from training.corpus.tsv import SPLITS, read_tsv
from training.evaluate import is_looping
from training.fine_tuning import make_target
from training.mixture import Corpus
from training.toy_corpus import write_corpus

CACHE_DIR = DEFAULT_CACHE_DIR / "wordnet"
# Enough examples for a few in the dev and test splits (1% each) of both corpora, whatever each
# drops, translated in seconds by the tiny run.
LIMIT = 2000
# The run's decoding.json (as `training.bundle` writes one): its own decoding, which the build
# uses; no 3-gram twice keeps most of the tiny run's translations of unseen words from looping.
RUN_DECODING = {"beam_width": 4, "no_repeat_ngram_size": 3}


def build(out, run_dir, *flags):
    """`prepare_data`'s exit code building wordnet-bt-own of the first `LIMIT` examples."""
    arguments = ["--corpus", "wordnet-bt-own", "--out", str(out), "--limit", str(LIMIT)]
    return prepare_data.main([*arguments, "--backtranslator", str(run_dir), *flags])


def corpus_pairs(out):
    """`{split: pairs}` of a corpus directory."""
    return {split: read_tsv(out / f"{split}.tsv") for split in SPLITS}


def read_stats(out):
    return json.loads((out / "stats.json").read_text(encoding="utf-8"))


# ----------------------------------------------------------------- no run needed


def test_only_translations_fit_to_train_on_are_kept():
    english = ["The dog eats", "The cat sleeps", "Very very very very good", "The boy reads"]
    spanish = [
        "el perro come",
        "  ",
        "muy muy muy muy bueno",
        "el niño lee el niño lee el niño lee",
    ]
    pairs, dropped = own.keep_translated(english, spanish)
    # A loop its English has too is the translation, not a runaway decoder.
    assert pairs == [("el perro come", "The dog eats"), ("muy muy muy muy bueno", english[2])]
    assert dropped == {"empty_translation": 1, "looping_translation": 1}
    assert is_looping(spanish[3], english[3])


def test_the_backtranslator_and_its_decoding_are_for_wordnet_bt_own_only(capsys):
    with pytest.raises(SystemExit):
        prepare_data.main(["--corpus", "wordnet-bt-own", "--out", "unused"])
    assert "needs --backtranslator RUN_DIR" in capsys.readouterr().err
    for flags in (["--backtranslator", "x"], ["--limit_placeholders", "false"], ["--no_cache"]):
        with pytest.raises(SystemExit):
            prepare_data.main(["--corpus", "wordnet-bt", *flags])
        assert "for --corpus wordnet-bt-own only" in capsys.readouterr().err


def test_a_missing_corpus_names_what_builds_it_instead_of_building(tmp_path, monkeypatch):
    monkeypatch.setattr(loading, "DEFAULT_OWN_BACKTRANSLATION_DIR", tmp_path / "absent")
    command = "make data-wordnet-bt-own BACKTRANSLATOR=RUN_DIR"
    with pytest.raises(CorpusError, match=command):
        loading.load_pairs("wordnet-bt-own", "train")
    assert not (tmp_path / "absent").exists()
    assert make_target(Corpus("wordnet-bt-own", 1.0, "wordnet-bt-own")).startswith(command)


def test_what_is_no_reversed_run_is_refused_saying_what_to_pass(tiny_run, tmp_path, caplog):
    """A Spanish→English run (a real one: `tiny_run`) and a directory that is no run."""
    for run_dir, said in (
        (tiny_run["run_dir"], ("translates Spanish into English", "--reverse true")),
        (tmp_path, ("is not a training run directory",)),
    ):
        caplog.clear()
        with caplog.at_level(logging.ERROR):
            assert build(tmp_path / "out", run_dir) == 1
        assert all(text in caplog.text for text in (*said, "--backtranslator")), caplog.text
        assert not (tmp_path / "out").exists()


# --------------------------------------------------------- a tiny reversed run


@pytest.fixture(scope="module")
def reversed_run(tmp_path_factory):
    """A tiny English→Spanish run: the toy corpus read the other way round, 80 steps, with a
    decoding.json (`RUN_DECODING`)."""
    work = tmp_path_factory.mktemp("reversed")
    corpus = str(write_corpus(work / "corpus"))
    run_dir = train_tiny(str(work / "run"), data=corpus, reverse=True, train_steps=80)
    (work / "run" / artifacts.DECODING_FILE).write_text(json.dumps(RUN_DECODING), "utf-8")
    return run_dir


@pytest.fixture(scope="module")
def built(reversed_run, tmp_path_factory):
    """`(out, stats, english)`: wordnet-bt-own of the first `LIMIT` examples back-translated by
    `reversed_run` with its own decoding (`RUN_DECODING`), and the English it translated."""
    if not (CACHE_DIR / "unpacked" / "wordnet-base" / ".unpacked").is_file():
        pytest.fail(f"wordnet-base is not in {CACHE_DIR}: run `make data-test` first")
    out = tmp_path_factory.mktemp("own") / "wordnet-bt-own"
    assert build(out, reversed_run) == 0
    return out, read_stats(out), wordnet_english(CACHE_DIR, LIMIT)["english"]


@pytest.mark.large
def test_the_spanish_is_the_runs_translation_of_each_english_sentence(
    reversed_run, built, tmp_path
):
    """translate-text, given the run, its beam width (its decoding.json's other settings are
    its own) and the same English, writes each kept pair's Spanish; each English left out has
    an empty or looping Spanish, or a Spanish of train in dev or test."""
    from inference.translate_text import main as translate_text

    out, stats, english = built
    (tmp_path / "en.txt").write_text("\n".join(english) + "\n", encoding="utf-8")
    arguments = ["--model", reversed_run, "--input_file", str(tmp_path / "en.txt")]
    flags = ["--output_file", str(tmp_path / "es.txt"), "--beam_width", "4", "--no_cache"]
    assert translate_text([*arguments, *flags, "--no_progress"]) == 0
    by_run = dict(zip(english, (tmp_path / "es.txt").read_text("utf-8").splitlines(), strict=True))
    pairs = [pair for split in SPLITS for pair in corpus_pairs(out)[split]]
    assert pairs and all(spanish == by_run[target] for spanish, target in pairs)
    left_out = set(english) - {target for _, target in pairs}
    empty = [target for target in left_out if not by_run[target].strip()]
    assert len(empty) == stats["dropped"]["empty_translation"]
    looping = [target for target in left_out if is_looping(by_run[target], target)]
    assert len(looping) == stats["dropped"]["looping_translation"]
    trained = {spanish for spanish, _ in corpus_pairs(out)["train"]}
    in_train = [target for target in left_out if by_run[target] in trained]
    assert len(in_train) == stats["dropped"]["in_train_spanish_removed_from_dev_test"]
    assert len(left_out) == len(empty) + len(looping) + len(in_train)
    assert len(pairs) == sum(stats["split_pairs"].values()) == LIMIT - len(left_out)


@pytest.mark.large
def test_its_split_is_wordnet_bts_for_the_same_english(built, tmp_path):
    """The same English is in the same split of both corpora, dev and test included, and no
    English held out of one is trained on in the other."""
    require_apertium()
    apertium_out = tmp_path / "wordnet-bt"
    arguments = ["--corpus", "wordnet-bt", "--out", str(apertium_out), "--limit", str(LIMIT)]
    assert prepare_data.main(arguments) == 0
    by_split = [
        {split: {target for _, target in pairs} for split, pairs in corpus_pairs(out).items()}
        for out in (built[0], apertium_out)
    ]
    mine, apertiums = by_split
    # Some held-out English is in both (about ten; what each drops differs by machine).
    assert (mine["dev"] & apertiums["dev"]) | (mine["test"] & apertiums["test"])
    for split in SPLITS:
        others = set().union(*(apertiums[other] for other in SPLITS if other != split))
        assert not mine[split] & others, split


@pytest.mark.large
def test_the_run_its_weights_and_the_decoding_are_recorded(reversed_run, built, caplog):
    _, stats, _ = built
    run = stats["backtranslator"]
    assert run["run_dir"] == os.path.abspath(reversed_run) and run["weights"] == "model.keras"
    assert run["weights_file"] == "model.keras" and run["step"] == 80
    assert stats["backtranslator_sha256"] == traced_cache.run_files_digest(reversed_run)
    assert stats["decoding_options"] == dataclasses.asdict(DecodingOptions(**RUN_DECODING))
    assert run["decoding"] == "beam 4, alpha 0.6, no_repeat_ngram_size 3"
    assert run["decoding"] in stats["source"]["origin"]
    assert [package["package"] for package in stats["packages"]] == ["wordnet-base"]
    # Built again from the same run: current, nothing to do.
    with caplog.at_level(logging.INFO):
        assert build(built[0], reversed_run) == 0
    assert "nothing to do" in caplog.text and read_stats(built[0]) == stats


@pytest.mark.large
def test_new_weights_or_another_decoding_rebuild_it(reversed_run, built, tmp_path, caplog):
    """The run averaged (`training.average`: averaged weights, which every tool then uses),
    then translated greedily."""
    _, before, _ = built
    run_copy = shutil.copytree(reversed_run, tmp_path / "run")
    out = shutil.copytree(built[0], tmp_path / "corpus")
    assert average.main(["--run_dir", str(run_copy), "--last", "2"]) == 0
    with caplog.at_level(logging.INFO):
        assert build(out, run_copy) == 0
    assert "was built by another" in caplog.text
    averaged = read_stats(out)
    assert averaged["backtranslator"]["weights"] == "average of the checkpoints of steps 60, 80"
    assert averaged["backtranslator"]["weights_file"].startswith("averaged/")
    assert averaged["backtranslator_sha256"] != before["backtranslator_sha256"]
    assert build(out, run_copy, "--beam_width", "1") == 0
    greedy = read_stats(out)
    assert greedy["decoding_options"]["beam_width"] == 1
    assert greedy["backtranslator"]["decoding"] == "greedy, no_repeat_ngram_size 3"


@pytest.mark.large
def test_weights_replaced_while_it_translates_leave_no_corpus(
    reversed_run, built, tmp_path, monkeypatch
):
    """As a run still training replaces its weights: the Spanish would not be theirs."""
    run_copy = shutil.copytree(reversed_run, tmp_path / "run")
    translate = own.translate_examples

    def translate_while_training(english, signature):
        spanish = translate(english, signature)
        with open(run_copy / "model.keras", "ab") as weights:
            weights.write(b"\0")
        return spanish

    monkeypatch.setattr(own, "translate_examples", translate_while_training)
    with pytest.raises(CorpusError, match="changed while it translated"):
        own.build_own_backtranslation_corpus(tmp_path / "out", str(run_copy), limit=LIMIT)
    assert not (tmp_path / "out").exists()
