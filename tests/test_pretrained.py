"""The bundled pretrained model (pretrained/bible-es-en): its size, and that its reported
evaluation is what its committed weights translate and what sacreBLEU scores."""

import json
import os

import pytest
import sacrebleu

from model.tokenizer import read_tokenizer_config
from training import artifacts
from training.bundle import directory_bytes
from training.corpus import load_run_pairs
from training.evaluate import BATCH_SIZE, run_translate_function, translate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRETRAINED = os.path.join(ROOT, artifacts.PRETRAINED_RUN)
SIZE_BUDGET_BYTES = 25 * 2**20  # issue #15: at most 25 MB in the repository


def bundle_test_pairs():
    """The test split as the bundle sees it (`load_run_pairs`): it was trained and evaluated on
    the 1909 spelling, which a modern-spelled corpus gives back through `old_spelling`."""
    config = read_tokenizer_config(os.path.join(PRETRAINED, artifacts.TOKENIZER_DIR))
    return load_run_pairs("bible", "test", config.get("source_spelling"))


def read_lines(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read().splitlines()


def test_the_bundle_is_complete_and_within_its_size_budget():
    for name in (
        "config.json",
        "model.keras",
        "tokenizer",
        "README.md",
        "training_curves.png",
        "eval/test.greedy.report.json",
        "eval/test.beam4.report.json",
    ):
        assert os.path.exists(os.path.join(PRETRAINED, name)), name
    assert directory_bytes(PRETRAINED) <= SIZE_BUDGET_BYTES


def test_reported_scores_are_sacrebleu_on_the_written_hypotheses_and_in_the_card():
    references = [target for _, target in bundle_test_pairs()]
    card = "\n".join(read_lines(os.path.join(PRETRAINED, "README.md")))
    for stem in ("test.greedy", "test.beam4"):
        with open(os.path.join(PRETRAINED, "eval", f"{stem}.report.json"), encoding="utf-8") as f:
            report = json.load(f)
        hypotheses = read_lines(os.path.join(PRETRAINED, "eval", f"{stem}.hyp.txt"))
        assert len(hypotheses) == len(references) == report["sentences"]
        assert report["bleu"] == round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2)
        assert report["chrf"] == round(sacrebleu.corpus_chrf(hypotheses, [references]).score, 2)
        assert f"| {report['decoding']} | {report['bleu']:.2f} | {report['chrf']:.2f} |" in card


@pytest.fixture(scope="module")
def translate_batch():
    """The bundle's greedy translation function (traced once for the module)."""
    return run_translate_function(PRETRAINED)[0]


def test_the_committed_weights_translate_as_reported(translate_batch):
    """The first batch of the test split, greedy, as `training.evaluate` batches it."""
    sources = [source for source, _ in bundle_test_pairs()[:BATCH_SIZE]]
    reported = read_lines(os.path.join(PRETRAINED, "eval", "test.greedy.hyp.txt"))[:BATCH_SIZE]
    assert translate(sources, translate_batch, show_progress=False) == reported


def test_the_bundle_reads_names_typed_in_todays_spelling(translate_batch):
    """Typed "Belén" is read as the 1909 text's "Bethlehem" before the placeholders, which would
    carry it through as an unknown name (`model.restoration`, `Translator`)."""
    typed = ["Jesús nació en Belén.", "SUBIERON A JERUSALÉN.", "jesus nacio en belen"]
    translations = translate(typed, translate_batch, show_progress=False)
    assert all(
        name in translation
        for name, translation in zip(["Bethlehem", "Jerusalem", "Bethlehem"], translations)
    ), translations
