"""Builds the back-translated corpus of WordNet's English usage examples (`wordnet-bt`).

Back-translation (Sennrich et al., 2016): real English on the target side, a machine's Spanish
on the source side, so the model learns to *write* everyday English words it never saw in the
Bible or the catalogs ("taxi", "fever", "supermarket"), whatever the Spanish side's clumsiness.
WordNet 3.0 (Debian `wordnet-base`, Princeton's permissive WordNet licence) holds about 48,000
short examples of everyday usage in its glosses ("we sat up all night", "the dog barked at the
mailman"); Apertium's `eng-spa` (`training.corpus.apertium`, GPL; its output is data, not a
derived program) translates them. A pair whose Spanish holds a word Apertium did not know is
dropped: its `*word` would teach the model to copy English into the source.

Pipeline:
  1. `download_deb` `wordnet-base` into the cache and unpack its `data.*` files and copyright.
  2. `read_usage_examples`: the quoted examples of every synset's gloss.
  3. `clean_example`: 3 to 40 words, no markup, first letter capitalized; duplicates dropped.
  4. Apertium `eng-spa` on each; pairs with unknown-word marks dropped.
  5. A hash of the English splits train/dev/test (1% each).

Command line: `python -m training.prepare_data --corpus wordnet-bt --out data/wordnet-bt`.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable
from pathlib import Path

from tqdm import tqdm

from training.corpus import apertium
from training.corpus.debian import (
    DEFAULT_CACHE_DIR,
    announce_downloads,
    deb_version,
    download_deb,
    package_licence,
    unpack_cached,
)
from training.corpus.outputs import (
    needs_build,
    stale_unless,
    write_corpus_stats,
    write_splits,
)
from training.corpus.splitting import describe_split, normalize_for_dedup, split_keyed_pairs
from training.corpus.tsv import SPLITS, CorpusError, Pair

logger = logging.getLogger(__name__)

WORDNET_PACKAGE = "wordnet-base"
WORDNET_MEMBERS = (
    "usr/share/wordnet/data.*",
    "usr/share/wordnet/cntlist.rev",
    f"usr/share/doc/{WORDNET_PACKAGE}/copyright",
)
WORDNET_DATA_FILES = ("data.noun", "data.verb", "data.adj", "data.adv")
DEV_FRACTION = TEST_FRACTION = 0.01
SPLIT_SALT = "wordnet-bt-es-en-v1"
CORPUS_FORMAT_VERSION = 1
MIN_WORDS, MAX_WORDS = 3, 40
WORDNET_ORIGIN = "WordNet 3.0 usage examples"
_QUOTED = re.compile(r'"([^"]+)"')
# Markup and lexicographers' conventions that are not running text.
_NOT_TEXT = re.compile(r"[`_\[\]{}<>|=+*#@~^\\]|\.\.\.|--")


def unpack_wordnet(cache_dir: Path) -> Path:
    """The directory `wordnet-base`'s database is unpacked in (downloaded once into the cache).

    Raises:
      CorpusError: the package cannot be downloaded or unpacked.
    """
    announce_downloads(cache_dir, [WORDNET_PACKAGE], "WordNet (for wordnet-bt and lexicon)")
    deb = download_deb(cache_dir, WORDNET_PACKAGE)
    return unpack_cached(deb, Path(cache_dir) / "unpacked" / WORDNET_PACKAGE, WORDNET_MEMBERS)


def read_usage_examples(wordnet_dir: Path) -> list[str]:
    """The quoted usage examples of every synset's gloss, in file order (duplicates kept).

    Args:
      wordnet_dir: holds `data.noun`, `data.verb`, `data.adj`, `data.adv`.

    Raises:
      CorpusError: a data file is missing.
    """
    examples = []
    for name in WORDNET_DATA_FILES:
        path = Path(wordnet_dir) / name
        if not path.is_file():
            raise CorpusError(f"{path}: WordNet data file missing")
        with path.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                # The licence header's lines start with two spaces; a synset's gloss follows "| ".
                if line.startswith("  ") or " | " not in line:
                    continue
                examples.extend(_QUOTED.findall(line.split(" | ", 1)[1]))
    return examples


def clean_example(example: str) -> str | None:
    """The example as a training target (first letter capitalized, spaces collapsed), or None
    when it is too short or long (`MIN_WORDS`, `MAX_WORDS`) or holds markup."""
    text = " ".join(example.split())
    if not MIN_WORDS <= len(text.split()) <= MAX_WORDS or _NOT_TEXT.search(text):
        return None
    return text[0].upper() + text[1:]


def unique_examples(examples: Iterable[str]) -> tuple[list[str], dict[str, int]]:
    """The cleaned examples, each near-duplicate (`normalize_for_dedup`) once.

    Returns:
      `(examples, dropped counts by reason)`.
    """
    kept, seen = [], set()
    dropped = {"not_clean": 0, "duplicate": 0}
    for example in examples:
        cleaned = clean_example(example)
        if cleaned is None:
            dropped["not_clean"] += 1
            continue
        key = normalize_for_dedup(cleaned)
        if key in seen:
            dropped["duplicate"] += 1
            continue
        seen.add(key)
        kept.append(cleaned)
    return kept, dropped


def back_translate(english: list[str]) -> tuple[list[Pair], int]:
    """`(Spanish, English)` pairs, the Spanish by Apertium `eng-spa`; pairs whose Spanish holds
    an unknown-word mark (or is empty) are dropped.

    Returns:
      `(pairs, number dropped)`.
    """
    with tqdm(total=len(english), desc="Apertium eng-spa", unit="sentence") as progress:
        spanish = apertium.translate(english, apertium.ENGLISH_TO_SPANISH, progress.update)
    pairs = [
        (source, target)
        for source, target in zip(spanish, english, strict=True)
        if source and not apertium.has_unknown_marks(source)
    ]
    return pairs, len(english) - len(pairs)


def wordnet_manifest(cache_dir: Path, wordnet_dir: Path) -> dict:
    """`wordnet-base`'s manifest for stats.json: package, version and licence (from its
    copyright file, unpacked under `wordnet_dir` by `unpack_wordnet`)."""
    copyright_file = wordnet_dir / f"usr/share/doc/{WORDNET_PACKAGE}/copyright"
    return {
        "package": WORDNET_PACKAGE,
        "version": deb_version(download_deb(cache_dir, WORDNET_PACKAGE)),
        "licence": package_licence(copyright_file.read_text(errors="replace")),
    }


def _provenance(cache_dir: Path, wordnet_dir: Path) -> dict:
    """What stats.json records of where the pairs come from: both sides, packages, licences."""
    return {
        "source": {"language": "es", "origin": "Apertium eng-spa (machine translation)"},
        "target": {"language": "en", "origin": WORDNET_ORIGIN},
        "packages": [wordnet_manifest(cache_dir, wordnet_dir), apertium.apertium_manifest()],
    }


def wordnet_english(cache_dir: Path, limit: int | None = None) -> dict:
    """The English side of a WordNet back-translated corpus: every usage example of
    `wordnet-base` (downloaded into `cache_dir` and unpacked once), cleaned and each
    near-duplicate once (`unique_examples`), in file order, the first `limit` of them (None:
    all).

    Returns:
      `{"english": [...], "examples_read": int, "dropped": {reason: count},
      "wordnet_dir": the unpacked package (for `wordnet_manifest`)}`.

    Raises:
      CorpusError: the package cannot be downloaded or unpacked.
    """
    wordnet_dir = unpack_wordnet(cache_dir)
    examples = read_usage_examples(wordnet_dir / "usr/share/wordnet")
    english, dropped = unique_examples(examples)
    return {
        "english": english[:limit] if limit is not None else english,
        "examples_read": len(examples),
        "dropped": dropped,
        "wordnet_dir": wordnet_dir,
    }


def write_backtranslated_corpus(
    out_dir: Path, pairs: list[Pair], stats: dict, started: float, name: str
) -> dict:
    """Splits `(Spanish, English)` pairs by a hash of the normalized English (`SPLIT_SALT`:
    every WordNet back-translated corpus puts the same English in the same split, whoever
    wrote its Spanish) and writes train/dev/test.tsv and stats.json (`stats` with the split's
    counts and rule, the build time from `started`, a `time.monotonic()`, and under
    `dropped` the dev and test pairs whose Spanish train holds) in `out_dir`.

    Returns:
      The statistics written.

    Raises:
      CorpusError: `pairs` is empty.
    """
    if not pairs:
        raise CorpusError("no back-translated pair left (see the drop counts in the log)")
    splits, removed = split_keyed_pairs(
        ((normalize_for_dedup(target), (source, target)) for source, target in pairs),
        SPLIT_SALT,
        DEV_FRACTION,
        TEST_FRACTION,
    )
    write_splits(out_dir, splits)
    stats = {
        **stats,
        "dropped": {**stats.get("dropped", {}), "in_train_spanish_removed_from_dev_test": removed},
        "split_pairs": {split: len(splits[split]) for split in SPLITS},
        "split_rule": describe_split(SPLIT_SALT, "normalized English", DEV_FRACTION, TEST_FRACTION),
        "build_seconds": round(time.monotonic() - started, 1),
    }
    write_corpus_stats(out_dir, stats)
    logger.info(
        "%s corpus: %d pairs (%s), built in %.0f s",
        name,
        len(pairs),
        stats["split_pairs"],
        stats["build_seconds"],
    )
    return stats


def build_backtranslation_corpus(
    out_dir: Path | str,
    cache_dir: Path | str = DEFAULT_CACHE_DIR / "wordnet",
    force: bool = False,
    limit: int | None = None,
) -> dict:
    """Builds train/dev/test.tsv and stats.json (sources, licences, counts) in `out_dir`.

    Args:
      out_dir: output directory (created).
      cache_dir: where `wordnet-base` is downloaded and unpacked once.
      force: rebuild even if all outputs exist; a corpus of another format version or
        Apertium version is always rebuilt.
      limit: back-translate only the first `limit` examples (a quick build for the tests).

    Returns:
      The statistics written (empty if the corpus was already there).

    Raises:
      CorpusError: WordNet or Apertium cannot be had, or no pair is left.
      FileExistsError: some, but not all, outputs exist and `force` is off.
    """
    out_dir, cache_dir = Path(out_dir), Path(cache_dir)
    identity = {
        "format_version": CORPUS_FORMAT_VERSION,
        "limit": limit,
    }

    # A built corpus stays current where Apertium is not installed (nothing to compare with,
    # and no rebuild to make without it).
    installed = apertium.apertium_version()
    if installed:
        identity["apertium_en_es"] = installed
    stale_reason = stale_unless(out_dir, identity, "format or Apertium version")
    if not needs_build(out_dir, force, stale_reason):
        return {}
    apertium.ensure_apertium()
    identity["apertium_en_es"] = apertium.apertium_version()
    started = time.monotonic()
    wordnet = wordnet_english(cache_dir, limit)
    pairs, wordnet["dropped"]["apertium_unknown_word"] = back_translate(wordnet["english"])
    stats = {
        **identity,
        **_provenance(cache_dir, wordnet["wordnet_dir"]),
        "examples_read": wordnet["examples_read"],
        "dropped": wordnet["dropped"],
    }
    return write_backtranslated_corpus(out_dir, pairs, stats, started, "wordnet-bt")
