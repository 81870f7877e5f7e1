"""benchmarks.bench_everyday: the everyday dev and test sets, the vocabulary coverage it reports,
and Apertium beside the model on the same sentences."""

import unicodedata

import sacrebleu

from benchmarks.bench_everyday import MIN_COUNT, markdown, vocabulary_coverage
from tests.apertium_fixtures import require_apertium
from training.corpus import load_pairs
from training.corpus.loading import EVERYDAY_DIR
from training.corpus.tsv import read_tsv
from training.evaluate import apertium_report
from training.made_up_words import MadeUpWords


def _key(text):
    """A sentence with case, accents and punctuation aside."""
    decomposed = unicodedata.normalize("NFD", text.casefold())
    return " ".join("".join(c for c in decomposed if c.isalnum() or c.isspace()).split())


def test_everyday_dev_and_test_sets_are_apart_and_typed_as_people_type():
    test = read_tsv(EVERYDAY_DIR / "test.tsv", strict=True)
    dev = read_tsv(EVERYDAY_DIR / "dev.tsv", strict=True)
    assert len(test) >= 340 and len(dev) >= 200
    assert load_pairs(str(EVERYDAY_DIR), "test") == test
    for pairs in (test, dev):
        keys = [_key(source) for source, _ in pairs]
        assert len(set(keys)) == len(keys)
        sources = [source for source, _ in pairs]
        assert sum(source == source.lower() for source in sources) >= len(pairs) // 20
        assert sum(source == source.upper() for source in sources) >= len(pairs) // 50
        assert any(any(character.isdigit() for character in source) for source in sources)
        assert sum(source.startswith("¿") for source in sources) >= len(pairs) // 10
    # Not one sentence in both, whatever its case, accents or punctuation.
    assert not {_key(s) for s, _ in dev} & {_key(s) for s, _ in test}
    # Nor in the Bible's training split.
    bible = {_key(source) for source, _ in load_pairs("bible", "train")}
    assert not bible & {_key(s) for s, _ in test + dev}


def test_vocabulary_coverage_counts_occurrences_seen_at_least_min_count_times():
    assert MIN_COUNT == 3
    training = ["La casa, la casa.", "LA mesa", "casa 2024"]
    # Words of the sentences: la (3 in training), casa (3), mesa (1), roja (0); "7" is no word.
    assert vocabulary_coverage(["la casa roja 7", "La mesa"], training) == 3 / 5
    assert vocabulary_coverage(["casa"], training, min_count=4) == 0


def test_apertium_is_scored_beside_the_model_on_the_same_sentences():
    require_apertium()
    pairs = read_tsv(EVERYDAY_DIR / "dev.tsv")[:12]
    known = MadeUpWords(["the", "a"]), "two words"
    report, hypotheses = apertium_report(pairs, known)
    references = [target for _, target in pairs]
    assert len(hypotheses) == 12 and not any("*" in h for h in hypotheses)
    assert report["bleu"] == round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2)
    assert report["chrf"] == round(sacrebleu.corpus_chrf(hypotheses, [references]).score, 2)
    # Two known words: everything else Apertium wrote that the source lacks is "made up".
    assert report["made_up_words"] == sum(
        len(known[0].made_up(h, s)) for h, (s, _) in zip(hypotheses, pairs)
    )
    assert report["made_up_words"] > 12 and report["decoding"].startswith("Apertium ")
    model_report = {
        **report,
        "run_dir": "a-run",
        "decoding": "greedy",
        "made_up_known_words": "two words",
    }
    text = markdown(pairs, "dev", [model_report, report], [hypotheses, hypotheses], [], "cmd", 3)
    assert (
        f"| Apertium: {report['decoding']} | {report['bleu']:.2f} | {report['chrf']:.2f} | "
        f"{100 * report['made_up_rate']:.1f}% ({report['made_up_words']}) |"
    ) in text
    assert "the 12 sentences of `training/everyday/dev.tsv`" in text
    assert text.count(f"| {pairs[0][0]} |") == 1 and pairs[3][0] not in text
