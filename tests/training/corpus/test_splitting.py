"""training/corpus/splitting.py: stable hash splits, deduplication, a single file split with
duplicate sources kept together."""

import hashlib

import pytest

from training.corpus import splitting, tsv

# ----------------------------------------------------------------- split and dedup


def test_stable_fraction_is_the_sha256_prefix():
    key = "Gen.1"
    expected = int(hashlib.sha256(key.encode()).hexdigest()[:16], 16) / 2**64
    assert splitting.stable_fraction(key) == expected
    assert 0 <= splitting.stable_fraction("") < 1


def test_split_for_key_fractions_match_within_binomial_noise():
    n = 20_000
    counts = {split: 0 for split in tsv.SPLITS}
    for i in range(n):
        counts[splitting.split_for_key(f"key-{i}", 0.02, 0.03)] += 1
    for split, share in (("dev", 0.02), ("test", 0.03)):
        sigma = (n * share * (1 - share)) ** 0.5
        assert abs(counts[split] - n * share) < 5 * sigma, counts
    with pytest.raises(ValueError):
        splitting.split_for_key("x", 0.6, 0.5)


def test_dedup_against_removes_case_and_space_variants_and_keeps_order():
    train = [("Y dijo Dios:", "And God said:"), ("Amén.", "Amen.")]
    evaluation = [
        ("Nueva frase.", "New sentence."),
        ("y  dijo DIOS:", "God said:"),  # in train up to case/whitespace
        ("Otra frase.", "Another one."),
        ("nueva frase.", "New sentence again."),  # repeats an earlier eval source
        ("Amén!", "Amen!"),  # different punctuation: kept
    ]
    kept, removed = splitting.dedup_against(evaluation, train)
    assert kept == [evaluation[0], evaluation[2], evaluation[4]]
    assert removed == 2


def test_split_single_file_keeps_duplicate_sources_together():
    pairs = [(f"frase número {i % 500}", f"sentence {i}") for i in range(3000)]
    splits = splitting.split_single_file(pairs, heldout_fraction=0.1)
    sources = {
        split: {splitting.normalize_for_dedup(s) for s, _ in items}
        for split, items in splits.items()
    }
    assert not sources["train"] & sources["dev"]
    assert not sources["train"] & sources["test"]
    assert not sources["dev"] & sources["test"]
    assert len(splits["dev"]) == len(sources["dev"])  # dev/test deduplicated
    assert splits == splitting.split_single_file(pairs, heldout_fraction=0.1)
