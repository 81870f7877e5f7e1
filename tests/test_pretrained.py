"""The bundled pretrained model (`artifacts.PRETRAINED_RUN`): its size, and that its reported
evaluation is what its committed weights translate and what sacreBLEU scores, for each corpus it
was trained on."""

import json
import os

import pytest
import sacrebleu

from model.tokenizer import read_tokenizer_config
from run_directory import artifacts
from run_directory.traced_cache import TRACED_DIR
from training.bundle import UNQUOTED_CORPORA, directory_bytes
from training.corpus import load_run_pairs
from training.evaluate import BATCH_SIZE, output_stem, run_translate_function, translate
from training.mixture import parse_data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRETRAINED = os.path.join(ROOT, artifacts.PRETRAINED_RUN)
SIZE_BUDGET_BYTES = 25 * 2**20  # at most 25 MB in the repository
STEMS = [output_stem("test", width) for width in (1, 4)]


def bundle_corpora():
    """The corpora the bundle was trained on (its config's data spec), in the order written."""
    with open(os.path.join(PRETRAINED, artifacts.CONFIG_FILE), encoding="utf-8") as handle:
        return parse_data(json.load(handle)["data"])


def eval_dir(corpus):
    """Where the bundle keeps `corpus`'s test-split outputs: `eval/<corpus>/` for a mixed run."""
    mixed = len(bundle_corpora()) > 1
    return os.path.join(PRETRAINED, "eval", corpus.name if mixed else "")


def bundle_test_pairs(corpus):
    """`corpus`'s test split as the bundle sees it (`load_run_pairs`: the spelling it learned)."""
    config = read_tokenizer_config(os.path.join(PRETRAINED, artifacts.TOKENIZER_DIR))
    return load_run_pairs(corpus.spec, "test", config.get("source_spelling"))


def read_lines(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read().splitlines()


def read_report(corpus, stem):
    with open(os.path.join(eval_dir(corpus), f"{stem}.report.json"), encoding="utf-8") as handle:
        return json.load(handle)


def quoted_corpora():
    """The corpora whose test translations the bundle commits (not `UNQUOTED_CORPORA`)."""
    return [corpus for corpus in bundle_corpora() if corpus.name not in UNQUOTED_CORPORA]


def test_the_bundle_is_complete_and_within_its_size_budget():
    for name in ("config.json", "model.keras", "tokenizer", "README.md", "training_curves.png"):
        assert os.path.exists(os.path.join(PRETRAINED, name)), name
    for corpus in bundle_corpora():
        for stem in STEMS:
            assert os.path.exists(os.path.join(eval_dir(corpus), f"{stem}.report.json"))
            has_translations = os.path.exists(os.path.join(eval_dir(corpus), f"{stem}.hyp.txt"))
            assert has_translations == (corpus.name not in UNQUOTED_CORPORA), (corpus, stem)
    # What translate-text keeps of its traced translation is local, not committed (.gitignore).
    kept = os.path.join(PRETRAINED, TRACED_DIR)
    local = directory_bytes(kept) if os.path.isdir(kept) else 0
    assert directory_bytes(PRETRAINED) - local <= SIZE_BUDGET_BYTES


def test_the_card_reports_each_corpus_and_decoding_as_its_reports_do():
    card = "\n".join(read_lines(os.path.join(PRETRAINED, "README.md")))
    mixed = len(bundle_corpora()) > 1
    for corpus in bundle_corpora():
        for stem in STEMS:
            report = read_report(corpus, stem)
            assert report.get("corpus", corpus.name) == corpus.name
            row = f"| {report['decoding']} | {report['bleu']:.2f} | {report['chrf']:.2f} |"
            assert ((f"| {corpus.name} " if mixed else "") + row) in card, (corpus, stem)


@pytest.mark.parametrize("corpus", quoted_corpora(), ids=lambda corpus: corpus.name)
def test_reported_scores_are_sacrebleu_on_the_written_hypotheses(corpus):
    references = [target for _, target in bundle_test_pairs(corpus)]
    for stem in STEMS:
        report = read_report(corpus, stem)
        hypotheses = read_lines(os.path.join(eval_dir(corpus), f"{stem}.hyp.txt"))
        assert len(hypotheses) == len(references) == report["sentences"]
        assert report["bleu"] == round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2)
        assert report["chrf"] == round(sacrebleu.corpus_chrf(hypotheses, [references]).score, 2)


@pytest.fixture(scope="module")
def translate_batch():
    """The bundle's greedy translation function (traced once for the module)."""
    return run_translate_function(PRETRAINED)[0]


@pytest.mark.parametrize("corpus", quoted_corpora(), ids=lambda corpus: corpus.name)
def test_the_committed_weights_translate_as_reported(corpus, translate_batch):
    """The first batch of the test split, greedy, as `training.evaluate` batches it."""
    sources = [source for source, _ in bundle_test_pairs(corpus)[:BATCH_SIZE]]
    reported = read_lines(os.path.join(eval_dir(corpus), "test.greedy.hyp.txt"))[:BATCH_SIZE]
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
