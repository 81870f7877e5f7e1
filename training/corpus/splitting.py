"""Deterministic train/dev/test splits by hash, and deduplication against leakage."""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Iterable, Sequence

from training.corpus.tsv import SPLITS, Pair

# Share of a single-file corpus held out for each of dev and test.
HELDOUT_FRACTION = 0.05


def stable_fraction(key: str) -> float:
    """Maps a string to a number in [0, 1), identically on every machine and run.

    Python's `hash()` is salted per process, so splits use SHA-256 instead.
    """
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def split_for_key(key: str, dev_fraction: float, test_fraction: float) -> str:
    """Assigns a key (a chapter, a sentence) to `train`, `dev` or `test` by its hash.

    Keys with `stable_fraction(key) < test_fraction` go to test, the next
    `dev_fraction` to dev, the rest to train.
    """
    if not (0 <= dev_fraction and 0 <= test_fraction and dev_fraction + test_fraction < 1):
        raise ValueError(f"bad held-out fractions dev={dev_fraction} test={test_fraction}")
    value = stable_fraction(key)
    if value < test_fraction:
        return "test"
    if value < test_fraction + dev_fraction:
        return "dev"
    return "train"


def normalize_for_dedup(text: str) -> str:
    """The key under which two sentences count as duplicates.

    NFC-normalized, case-folded, whitespace collapsed: 'Y dijo:' and ' y  dijo:'
    are the same sentence for leakage purposes, 'dijo' and 'dijó' are not.
    """
    return " ".join(unicodedata.normalize("NFC", text).casefold().split())


def dedup_against(pairs: Sequence[Pair], reference: Iterable[Pair]) -> tuple[list[Pair], int]:
    """Removes pairs whose source occurs in `reference` or earlier in `pairs`.

    Used to keep evaluation sets free of sentences the model trained on (and to
    score each distinct source once).

    Args:
      pairs: the evaluation pairs, in order.
      reference: the pairs they must not overlap with (e.g. train).

    Returns:
      `(kept_pairs, number_removed)`; kept pairs keep their order.
    """
    seen = {normalize_for_dedup(source) for source, _ in reference}
    kept = []
    for source, target in pairs:
        key = normalize_for_dedup(source)
        if key in seen:
            continue
        seen.add(key)
        kept.append((source, target))
    return kept, len(pairs) - len(kept)


def split_single_file(
    pairs: Sequence[Pair], heldout_fraction: float = HELDOUT_FRACTION
) -> dict[str, list[Pair]]:
    """Splits one corpus into train/dev/test by a hash of each normalized source.

    Identical sources hash alike, so a sentence never leaks from train into dev
    or test; dev and test are still deduplicated internally.

    Returns:
      `{"train": ..., "dev": ..., "test": ...}`, each in corpus order.
    """
    splits: dict[str, list[Pair]] = {split: [] for split in SPLITS}
    for pair in pairs:
        key = normalize_for_dedup(pair[0])
        splits[split_for_key(key, heldout_fraction, heldout_fraction)].append(pair)
    for split in ("dev", "test"):
        splits[split], _ = dedup_against(splits[split], ())
    return splits


def split_keyed_pairs(
    keyed_pairs: Iterable[tuple[str, Pair]], salt: str, dev_fraction: float, test_fraction: float
) -> tuple[dict[str, list[Pair]], int]:
    """Train/dev/test by a hash of each pair's key (`split_for_key` on `salt:key`), dev and
    test then without pairs whose source occurs in train (nor twice).

    Returns:
      `({"train": ..., "dev": ..., "test": ...}, pairs removed from dev and test)`, each split
      in input order.
    """
    splits: dict[str, list[Pair]] = {split: [] for split in SPLITS}
    for key, pair in keyed_pairs:
        splits[split_for_key(f"{salt}:{key}", dev_fraction, test_fraction)].append(pair)
    removed = 0
    for split in ("dev", "test"):
        splits[split], count = dedup_against(splits[split], splits["train"])
        removed += count
    return splits, removed


def describe_split(salt: str, key: str, dev_fraction: float, test_fraction: float) -> str:
    """How `split_keyed_pairs` split a corpus, for its stats.json ("split_rule")."""
    return (
        f"sha256('{salt}:' + {key}) as a fraction: test below {test_fraction}, dev below "
        f"{test_fraction + dev_fraction}, train otherwise"
    )
