"""benchmarks.bench_everyday: the everyday sentences file and the vocabulary coverage it reports."""

from benchmarks.bench_everyday import MIN_COUNT, vocabulary_coverage
from training.corpus import load_pairs
from training.corpus.loading import EVERYDAY_DIR
from training.corpus.tsv import read_tsv


def test_everyday_sentences_are_forty_clean_pairs_that_load_as_a_corpus():
    pairs = read_tsv(EVERYDAY_DIR / "test.tsv", strict=True)
    assert len(pairs) == 40 and len({source for source, _ in pairs}) == 40
    assert load_pairs(str(EVERYDAY_DIR), "test") == pairs
    sources = [source for source, _ in pairs]
    assert any(source == source.lower() for source in sources)
    assert any(source == source.upper() for source in sources)
    assert any(any(character.isdigit() for character in source) for source in sources)


def test_vocabulary_coverage_counts_occurrences_seen_at_least_min_count_times():
    assert MIN_COUNT == 3
    training = ["La casa, la casa.", "LA mesa", "casa 2024"]
    # Words of the sentences: la (3 in training), casa (3), mesa (1), roja (0); "7" is no word.
    assert vocabulary_coverage(["la casa roja 7", "La mesa"], training) == 3 / 5
    assert vocabulary_coverage(["casa"], training, min_count=4) == 0
