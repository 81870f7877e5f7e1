"""Builds `catalog-fills`: the Spanish->English pairs of Debian's message catalogs that exist
because their placeholders were filled (`training.corpus.catalog_fills`), a corpus of its own.

The catalogs corpus drops every message with a placeholder. The bundled model was trained and
scored on that corpus as it is, so the filled messages are not added to it: they make a corpus
of their own, which a mixture weighs apart (`--data catalogs:1,catalog-fills:0.5`, chosen by
dev measurements), and which leaves the catalogs corpus and its test set unchanged.

Pipeline, on the packages of the corpus it completes and their download cache (a package
already there is not downloaded again; `read_packages` says first what it downloads):
  1. `fill_message`: each message the catalogs corpus drops for its placeholders, and only
     those, filled and cleaned (`catalog_cleaning.clean_filled_message`), a plural message in
     its plural forms (`message_forms`).
  2. Duplicates removed by the `near_duplicate_key` of the filled English, across packages and
     against every pair, of any split, of the corpora it is built apart from (`apart_from`:
     the catalogs corpus first): a pair those hold is no pair here.
  3. `split_filled_pairs`, by the message's key (its English without placeholders,
     `message_key`, so that the fills of one message share a split): a message whose key is a
     pair of a corpus it is apart from takes that pair's split, so nothing held out there is
     trained on here nor the other way round; the others by hash. Train then loses Spanish
     held out there, dev and test Spanish trained on here or there.

Command line: `python -m training.prepare_data --corpus catalog-fills --out data/catalog-fills`.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import logging
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from training.corpus.catalog_cleaning import (
    PLACEHOLDER,
    clean_filled_message,
    clean_message,
    near_duplicate_key,
    needs_filling,
    strip_context_key,
    without_placeholders,
)
from training.corpus.catalogs import (
    CATALOG_PACKAGES,
    DEFAULT_CACHE_DIR,
    CatalogMessage,
    PackageYield,
    corpus_record_digest,
    corpus_stats,
    packages_digest,
    read_packages,
    remove_duplicates,
    require_pairs,
    stale_reason,
)
from training.corpus.outputs import corpus_outputs, needs_build, write_corpus_stats, write_splits
from training.corpus.splitting import dedup_against, normalize_for_dedup, split_for_key
from training.corpus.tsv import SPLITS, CorpusError, Pair, read_tsv

logger = logging.getLogger(__name__)

# Twice the catalogs corpus's 2 %: about a seventh as many pairs, and each held-out split
# should still hold a dev measurement's worth of sentences.
DEV_FRACTION = TEST_FRACTION = 0.04
SPLIT_SALT = "catalog-fills-es-en-v1"
# Recorded in stats.json; a corpus built with another version is rebuilt.
CORPUS_FORMAT_VERSION = 1
HELD_OUT_SPANISH_REMOVED = "held_out_spanish_removed_from_train"


def message_forms(message: CatalogMessage) -> tuple[str, str]:
    """The `(english, spanish)` of `message` to fill: its singular, or, for a plural message
    whose singular holds placeholders, its plural forms, which every count filled in them but
    one reads right in both languages ("%d files" / "%d archivos": the count drawn is 2 or more
    where a noun follows; the singular "%d file" would read wrong with any count but 1)."""
    if message.english_plural and message.spanish_plural:
        if needs_filling(message.english, message.spanish):
            return message.english_plural, message.spanish_plural
    return message.english, message.spanish


def fill_message(message: CatalogMessage) -> tuple[Pair | None, str | None]:
    """The `catalogs.MessageCleaner` of this corpus: a message the catalogs corpus drops for its
    placeholders (`clean_message`'s `PLACEHOLDER`) filled and cleaned (`clean_filled_message`
    on `message_forms`), as `(pair, None)` or `(None, reason)`; `(None, None)` for any other
    message, which is the catalogs corpus's to keep or drop."""
    if clean_message(message.english, message.spanish)[1] != PLACEHOLDER:
        return None, None
    return clean_filled_message(*message_forms(message))


def message_key(message: CatalogMessage) -> str:
    """The `near_duplicate_key` of the English `message_forms` fills, its placeholders left
    out: the same for every value filled in, and for a message without them that says the
    rest ("%s has left the room." and "Has left the room.")."""
    english, _ = message_forms(message)
    return near_duplicate_key(without_placeholders(strip_context_key(english)))


@dataclasses.dataclass
class ApartFrom:
    """What the corpora a fills corpus is built apart from hold.

    Attributes:
      names: their directories' names, in order.
      splits: the split of each English `near_duplicate_key` of theirs; a key in several
        splits has the most held-out one (test, then dev).
      trained: their train pairs.
      held_out_spanish: the Spanish of their dev and test pairs, `normalize_for_dedup`ed.
      digest: of their stats.json files: a rebuild of any rebuilds the fills corpus.
    """

    names: list[str]
    splits: dict[str, str]
    trained: list[Pair]
    held_out_spanish: set[str]
    digest: str


def read_apart_from(directories: Sequence[Path | str], what: str) -> ApartFrom:
    """The `ApartFrom` of the built corpora in `directories` (`what`: the corpus built apart
    from them, for the error).

    Raises:
      CorpusError: a directory holds no complete corpus (train/dev/test.tsv and stats.json);
        the message names it and the command that builds it.
    """
    directories = [Path(directory) for directory in directories]
    for directory in directories:
        missing = [path.name for path in corpus_outputs(directory) if not path.is_file()]
        if missing:
            raise CorpusError(
                f"{directory} holds no built corpus (no {', '.join(missing)}): {what} is built "
                f"apart from it, so that none of its dev or test sentences is trained on "
                f"through {what}; build it first (`make data-{directory.name}` builds "
                f"data/{directory.name})"
            )
    pairs = {
        split: [pair for directory in directories for pair in read_tsv(directory / f"{split}.tsv")]
        for split in SPLITS
    }
    splits: dict[str, str] = {}
    for split in SPLITS:  # train, dev, test: a key's most held-out split is written last
        splits.update((near_duplicate_key(english), split) for _, english in pairs[split])
    digests = ":".join(corpus_record_digest(directory) for directory in directories)
    return ApartFrom(
        names=[directory.name for directory in directories],
        splits=splits,
        trained=pairs["train"],
        held_out_spanish={
            normalize_for_dedup(spanish) for split in ("dev", "test") for spanish, _ in pairs[split]
        },
        digest=hashlib.sha256(digests.encode("utf-8")).hexdigest()[:16],
    )


def split_filled_pairs(
    keyed_pairs: Iterable[tuple[str, Pair]], apart_from: ApartFrom
) -> tuple[dict[str, list[Pair]], dict]:
    """Train/dev/test of the filled pairs by their message's key (`message_key`).

    A key that is a pair of the corpora `apart_from` takes that pair's split there; any other
    goes by `split_for_key` on `SPLIT_SALT:key`. Then train loses pairs whose Spanish those
    corpora hold out, and dev and test lose pairs whose Spanish is trained on here or there (or
    occurs earlier in the same split).

    Returns:
      `(pairs per split, counts)`, each split in input order; `counts` has `split_as_apart_from`
      (pairs per split that took the split of the other corpora), `HELD_OUT_SPANISH_REMOVED`
      and `in_train_spanish_removed_from_dev_test`.
    """
    splits: dict[str, list[Pair]] = {split: [] for split in SPLITS}
    followed: collections.Counter = collections.Counter()
    for key, pair in keyed_pairs:
        split = apart_from.splits.get(key)
        if split is None:
            split = split_for_key(f"{SPLIT_SALT}:{key}", DEV_FRACTION, TEST_FRACTION)
        else:
            followed[split] += 1
        splits[split].append(pair)
    trained = splits["train"]
    splits["train"] = [
        pair for pair in trained if normalize_for_dedup(pair[0]) not in apart_from.held_out_spanish
    ]
    removed = 0
    for split in ("dev", "test"):
        splits[split], count = dedup_against(splits[split], [*splits["train"], *apart_from.trained])
        removed += count
    counts = {
        "split_as_apart_from": {split: followed[split] for split in SPLITS},
        HELD_OUT_SPANISH_REMOVED: len(trained) - len(splits["train"]),
        "in_train_spanish_removed_from_dev_test": removed,
    }
    return splits, counts


def _first_sources(yields: Sequence[PackageYield]) -> dict[Pair, CatalogMessage]:
    """The message each pair was first made of (the package `remove_duplicates` keeps)."""
    sources: dict[Pair, CatalogMessage] = {}
    for package_yield in yields:
        for pair, message in zip(package_yield.pairs, package_yield.sources):
            sources.setdefault(pair, message)
    return sources


def _fills_stats(
    yields: Sequence[PackageYield],
    splits: dict[str, list[Pair]],
    counts: dict,
    others: ApartFrom,
    digest: str,
    started: float,
) -> dict:
    """What stats.json records: the record of the catalogs corpus (`catalogs.corpus_stats`,
    with this corpus's format version and split rule), the Spanish the corpora `others` hold
    out removed from train among the drops, and under `apart_from` those corpora, how many
    filled pairs they hold (`pairs_in_them`, left out) and how many took their split
    (`counts` of `split_filled_pairs`)."""
    split_rule = (
        f"the split of the pair of {', '.join(others.names)} whose near-duplicate key is the "
        f"message's English without placeholders, else sha256('{SPLIT_SALT}:' + that key) as "
        f"a fraction: test below {TEST_FRACTION}, dev below {TEST_FRACTION + DEV_FRACTION}, "
        "train otherwise"
    )
    manifests = [package_yield.manifest for package_yield in yields]
    removed = counts["in_train_spanish_removed_from_dev_test"]
    stats = corpus_stats(
        manifests, splits, removed, digest, started, CORPUS_FORMAT_VERSION, split_rule
    )
    stats["dropped"][HELD_OUT_SPANISH_REMOVED] = counts[HELD_OUT_SPANISH_REMOVED]
    in_others = sum(
        near_duplicate_key(english) in others.splits for y in yields for _, english in y.pairs
    )
    stats["apart_from"] = {
        "corpora": others.names,
        "pairs_in_them": in_others,
        "split_as_apart_from": counts["split_as_apart_from"],
    }
    return stats


def build_fills_corpus(
    out_dir: Path | str,
    apart_from: Sequence[Path | str],
    cache_dir: Path | str = DEFAULT_CACHE_DIR / "catalogs",
    packages: Sequence[str] = CATALOG_PACKAGES,
    force: bool = False,
) -> dict:
    """Builds train/dev/test.tsv and stats.json (with the package manifest) of the filled
    messages of `packages` in `out_dir`, apart from the built corpora `apart_from`.

    Args:
      out_dir: output directory (created).
      apart_from: the directories of the built corpora this one is apart from (their pairs
        are not its pairs; its split follows theirs, `split_filled_pairs`): the catalogs corpus
        of the same packages first (`catalog-fills` is apart from `catalogs`).
      cache_dir: where the .deb files are downloaded and their catalogs unpacked: the cache of
        the catalogs corpus of the same packages, whose packages are not downloaded again.
      packages: Debian package names, in priority order for duplicates.
      force: rebuild even if all outputs exist. A corpus built from another package list,
        format version or build of a corpus of `apart_from` is always rebuilt.

    Returns:
      The statistics written to stats.json (empty if the corpus was already there).

    Raises:
      CorpusError: a corpus of `apart_from` is not built, or no filled pair is left.
      FileExistsError: some, but not all, outputs exist and `force` is off.
    """
    out_dir, cache_dir = Path(out_dir), Path(cache_dir)
    what = f"{out_dir.name} corpus"
    others = read_apart_from(apart_from, out_dir.name)
    digest = f"{packages_digest(packages)}:{others.digest}"
    current = functools.partial(
        stale_reason, out_dir=out_dir, digest=digest, format_version=CORPUS_FORMAT_VERSION
    )
    if not needs_build(out_dir, force, current):
        return {}
    started = time.monotonic()
    yields = read_packages(packages, cache_dir, what, fill_message)
    keyed_pairs = remove_duplicates(yields, others.splits)
    require_pairs(keyed_pairs, yields, "filled pair")
    sources = _first_sources(yields)
    keyed_by_message = [(message_key(sources[pair]), pair) for _, pair in keyed_pairs]
    splits, counts = split_filled_pairs(keyed_by_message, others)
    write_splits(out_dir, splits)
    stats = _fills_stats(yields, splits, counts, others, digest, started)
    write_corpus_stats(out_dir, stats)
    logger.info(
        "%s: %d filled pairs from %d packages (%s), apart from %s, built in %.0f s",
        what,
        sum(stats["split_pairs"].values()),
        stats["packages_downloaded"],
        stats["split_pairs"],
        ", ".join(others.names),
        stats["build_seconds"],
    )
    return stats
