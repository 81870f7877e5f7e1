"""Packaging a trained run as a pretrained model directory (`training.bundle`), on a real tiny run."""

import json
import os
import shutil

import numpy as np
import pytest

from run_directory import artifacts
from run_directory.traced_cache import TRACED_DIR
from tests.paths import REPO_ROOT
from training.average import average_run
from training.bundle import EVERYDAY_EXAMPLES, bundle, main
from training.corpus.loading import EVERYDAY_DIR
from training.corpus.tsv import read_tsv
from training.evaluate import apertium_report, evaluate, made_up_words_for

# End to end over trained runs: `make test-large` (tests/collection.py).
pytestmark = pytest.mark.large

REPRODUCE = "make pretrained PRETRAINED_STEPS=60"


@pytest.fixture(scope="module")
def bundled(tiny_run, tmp_path_factory):
    """`(run_dir, bundle_dir, reports)`: a copy of the tiny run, averaged over its last two
    checkpoints, and its bundle."""
    work = tmp_path_factory.mktemp("bundle")
    run_dir = str(work / "run")
    shutil.copytree(tiny_run["run_dir"], run_dir)
    average_run(run_dir, 2)
    bundle_dir = str(work / "pretrained" / "tiny-es-en")
    reports = bundle(run_dir, bundle_dir, REPRODUCE, beam_width=2, alpha=1.0)
    return run_dir, bundle_dir, reports


def weights_of(run_dir):
    model, *_ = artifacts.load_trained(run_dir)
    return [weight.numpy() for weight in model.weights]


def test_the_bundle_is_a_run_directory_without_checkpoints(bundled):
    _, bundle_dir, _ = bundled
    for name in (
        "config.json",
        "model.keras",
        "tokenizer/tokenizer_config.json",
        "logs/train",
        "logs/dev",
        "training_curves.png",
        "README.md",
        "eval/test.greedy.hyp.txt",
        "eval/test.beam2.report.json",
    ):
        assert os.path.exists(os.path.join(bundle_dir, name)), name
    assert not os.path.exists(os.path.join(bundle_dir, artifacts.CHECKPOINT_DIR))
    # Its reports name the bundle, not the directory it was staged in.
    with open(os.path.join(bundle_dir, "eval", "test.greedy.report.json"), encoding="utf-8") as f:
        assert json.load(f)["run_dir"] == os.path.basename(bundle_dir)
    # Its evaluation kept no traced translation: the bundle's size counts its files alone.
    assert not os.path.exists(os.path.join(bundle_dir, TRACED_DIR))
    assert artifacts.select_weights(bundle_dir) == (None, artifacts.MODEL_FILE)
    assert not [name for name in os.listdir(os.path.dirname(bundle_dir)) if name.startswith(".")]


def test_the_bundle_holds_the_weights_the_run_would_use(bundled):
    """The averaged checkpoint, not model.keras (the last step): the run's own choice."""
    run_dir, bundle_dir, _ = bundled
    assert artifacts.select_weights(run_dir)[1].startswith("average of the checkpoints of steps")
    for from_run, from_bundle in zip(weights_of(run_dir), weights_of(bundle_dir), strict=True):
        np.testing.assert_array_equal(from_bundle, from_run)


def test_the_bundle_translates_as_the_run_does_and_its_card_reports_it(bundled, tmp_path):
    run_dir, bundle_dir, reports = bundled
    from_run = evaluate(run_dir, "test", output_dir=str(tmp_path))
    with open(os.path.join(tmp_path, "test.greedy.hyp.txt"), encoding="utf-8") as handle:
        run_hypotheses = handle.read()
    with open(os.path.join(bundle_dir, "eval", "test.greedy.hyp.txt"), encoding="utf-8") as handle:
        assert handle.read() == run_hypotheses
    greedy, beam = reports
    assert greedy["bleu"] == from_run["bleu"] and beam["decoding"] == "beam 2, alpha 1.0"
    with open(os.path.join(bundle_dir, "README.md"), encoding="utf-8") as handle:
        card = handle.read()
    for report in reports:
        assert f"| {report['decoding']} | {report['bleu']:.2f} | {report['chrf']:.2f} |" in card
    assert REPRODUCE in card and "average of the checkpoints of steps 40, 60" in card
    # The everyday test set, greedy and beam, beside Apertium on the same sentences.
    pairs = read_tsv(EVERYDAY_DIR / "test.tsv")
    for stem in ("test.greedy", "test.beam2"):
        with open(os.path.join(bundle_dir, "eval", "everyday", f"{stem}.report.json")) as handle:
            everyday = json.load(handle)
        assert everyday["sentences"] == len(pairs)
        assert (
            f"| {everyday['decoding']} | {everyday['bleu']:.2f} | {everyday['chrf']:.2f} | "
            f"{100 * everyday['made_up_rate']:.1f}% ({everyday['made_up_words']}) |"
        ) in card
    peer, peer_hypotheses = apertium_report(pairs, made_up_words_for(None))
    assert f"| {peer['decoding']} | {peer['bleu']:.2f} | {peer['chrf']:.2f} |" in card
    assert "## Training data" in card and card.count("| Mi casa tiene") == 1
    # At most EVERYDAY_EXAMPLES examples spread over the set, each with Apertium's translation
    # beside the model's.
    step = -(-len(pairs) // EVERYDAY_EXAMPLES)
    shown = [source for source, _ in pairs if f"| {source} |" in card]
    assert shown == [source for source, _ in pairs[::step]] and len(shown) <= EVERYDAY_EXAMPLES
    assert card.count(f" | {peer_hypotheses[step]} |") >= 1


def test_a_failed_bundle_leaves_the_previous_one_as_it_was(bundled, tmp_path):
    run_dir, bundle_dir, _ = bundled
    broken = str(tmp_path / "broken")
    shutil.copytree(run_dir, broken)
    config_path = os.path.join(broken, artifacts.CONFIG_FILE)
    with open(config_path, encoding="utf-8") as handle:
        config = json.load(handle)
    config["data"] = str(tmp_path / "no-such-corpus")
    with open(config_path, "w", encoding="utf-8") as handle:
        json.dump(config, handle)
    before = {
        name: os.path.getmtime(os.path.join(bundle_dir, name)) for name in os.listdir(bundle_dir)
    }
    assert main(["--run_dir", broken, "--output_dir", bundle_dir, "--reproduce", "x"]) == 1
    after = {
        name: os.path.getmtime(os.path.join(bundle_dir, name)) for name in os.listdir(bundle_dir)
    }
    assert after == before
    assert not [name for name in os.listdir(os.path.dirname(bundle_dir)) if name.startswith(".")]


def test_the_notebooks_fall_back_on_the_pretrained_model_last():
    import importlib.util

    root = str(REPO_ROOT)
    spec = importlib.util.spec_from_file_location(
        "notebook_support", os.path.join(root, "notebooks", "_support.py")
    )
    support = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(support)
    assert support.TRAINED_RUN_DIRS[-1] == support.REPO_ROOT / artifacts.PRETRAINED_RUN


def test_exports_and_evaluations_of_the_bundle_use_its_decoding_options(bundled, tmp_path):
    from common.serving_contract import EXPORT_INFO_PATH
    from inference.export import export_run

    _, bundle_dir, reports = bundled
    assert artifacts.decoding_options(bundle_dir).alpha == 1.0
    version_dir = export_run(bundle_dir, export_base=str(tmp_path / "exports"))
    with open(os.path.join(version_dir, EXPORT_INFO_PATH), encoding="utf-8") as handle:
        assert json.load(handle)["decoding"]["beam_width"] == 2
    report = evaluate(bundle_dir, "test", beam_width=2, output_dir=str(tmp_path / "eval"))
    assert report["decoding"] == "beam 2, alpha 1.0" and report["bleu"] == reports[1]["bleu"]
    assert evaluate(export_dir=version_dir, split="test", beam_width=2)["bleu"] == report["bleu"]


def test_a_corpus_whose_text_is_not_committed_is_shown_by_sentences_of_its_kind(tmp_path):
    """The catalogs' licences ask for their sources beside their text: the card translates
    sentences written for it, and the bundle keeps the scores of its test split, not its
    translations; a corpus that may be quoted shows its first test pairs."""
    from training.bundle import UNQUOTED_CORPORA, drop_unquoted_translations, known_examples

    for corpus in ("bible", "catalogs"):
        (tmp_path / corpus).mkdir()
        (tmp_path / corpus / "test.beam4.hyp.txt").write_text(f"{corpus} one\n{corpus} two\n")
        (tmp_path / corpus / "test.beam4.report.json").write_text("{}")
    pairs = {"bible": [("uno", "one"), ("dos", "two")], "catalogs": [("GPL", "text")]}
    examples = known_examples(
        str(tmp_path),
        [{"corpus": "bible"}, {"corpus": "catalogs"}],
        pairs,
        "test.beam4",
        lambda texts: [text.upper() for text in texts],
        count=2,
    )
    assert examples["bible"] == [("uno", "one", "bible one"), ("dos", "two", "bible two")]
    sentences = UNQUOTED_CORPORA["catalogs"]["Spanish"]
    assert examples["catalogs"] == [(text, "", text.upper()) for text in sentences]
    drop_unquoted_translations(str(tmp_path))
    assert sorted(os.listdir(tmp_path / "catalogs")) == ["test.beam4.report.json"]
    assert len(os.listdir(tmp_path / "bible")) == 2
