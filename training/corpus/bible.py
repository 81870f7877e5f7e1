"""Builds the embedded Spanish->English Bible corpus from Debian's SWORD packages.

Source: Reina-Valera 1909 (`sword-text-sparv`, SWORD module `spaRV1909eb`).
Target: World English Bible (`sword-text-web`, SWORD module `engWEB2015eb`).
Both are public domain; see training/CORPUS.md for provenance and the numbers.

Pipeline (each step is a small function below):
  1. `fetch_sword_packages`: `apt-get download` the two .deb files into a cache
     dir and unpack them with `dpkg-deb -x` (nothing is installed).
  2. `read_sword_module`: every verse's raw OSIS markup, via pysword.
  3. `strip_markup` (training/corpus/osis.py) for both texts, then the RV1909's own quirks:
     `fix_caps_opening` (drop-cap chapter openings) and `strip_subscription`
     (colophons after the epistles).
  4. `pair_verses`: pair verses by (book, chapter, verse).
  5. `detect_misaligned_chapters` (length-based verse alignment per chapter,
     training/corpus/alignment.py)
     and `length_ratio_outliers`: drop verses whose Spanish is numbered
     differently from what the module claims, or that do not translate each other.
  6. `modernize_sources`: the Spanish side in today's spelling (`model.spelling`: "á" -> "a",
     "fué" -> "fue", "crió" -> "creó"...).
  7. `split_by_chapter` + `dedup_against`: train/dev/test by a hash of
     book+chapter; dev and test lose sources that occur in train.

Command line: `python -m training.prepare_data --out data/bible [--cache .debs] [--force]`
(training/prepare_data.py).
"""

from __future__ import annotations

import collections
import functools
import logging
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from tqdm import tqdm

from model.spelling import MODERN, modernize_counting, old_spelling
from training.corpus.alignment import (
    LengthRatioModel,
    VerseRef,
    VerseTexts,
    detect_misaligned_chapters,
    length_ratio_outliers,
)
from training.corpus.debian import (
    DEFAULT_CACHE_DIR,
    announce_downloads,
    cached_deb,
    deb_version,
    download_deb,
    unpack_deb,
)
from training.corpus.osis import (
    build_casing_table,
    fix_caps_opening,
    strip_markup,
    strip_subscription,
)
from training.corpus.outputs import needs_build, write_corpus_stats
from training.corpus.splitting import dedup_against, split_for_key
from training.corpus.tsv import SPLITS, CorpusError, write_tsv

logger = logging.getLogger(__name__)

SOURCE_PACKAGE, SOURCE_MODULE = "sword-text-sparv", "spaRV1909eb"
TARGET_PACKAGE, TARGET_MODULE = "sword-text-web", "engWEB2015eb"
DEV_FRACTION = TEST_FRACTION = 0.02
# Salt of the chapter hash: changing it reshuffles which chapters are held out.
SPLIT_SALT = "bible-es-en-v1"
# Recorded in stats.json; a corpus built with another version is rebuilt. 1 (no
# "format_version"): the RV1909 in its 1909 spelling; 2: the Spanish side in modern spelling.
CORPUS_FORMAT_VERSION = 2
NOT_RESTORED_KEY = "verses old_spelling does not restore"


# ------------------------------------------------------------------ 1. packages


def fetch_sword_packages(
    cache_dir: Path, packages: Iterable[str] = (SOURCE_PACKAGE, TARGET_PACKAGE)
) -> Path:
    """Downloads (`training.corpus.debian.download_deb`) and unpacks the SWORD module
    packages; reuses what is cached.

    Args:
      cache_dir: where the .deb files and their unpacked tree are kept.
      packages: Debian package names.

    Returns:
      The SWORD data root inside the unpacked tree (holds `mods.d/`).

    Raises:
      CorpusError: a package cannot be downloaded or unpacked.
    """
    unpacked = Path(cache_dir) / "root"
    packages = tuple(packages)
    announce_downloads(cache_dir, packages, "bible corpus")
    for package in packages:
        unpack_deb(download_deb(cache_dir, package), unpacked)
    return unpacked / "usr" / "share" / "sword"


def package_versions(
    cache_dir: Path, packages: Iterable[str] = (SOURCE_PACKAGE, TARGET_PACKAGE)
) -> dict[str, str]:
    """Debian versions of the cached packages, read from the .deb file names."""
    debs = {package: cached_deb(cache_dir, package) for package in packages}
    return {package: deb_version(deb) for package, deb in debs.items() if deb is not None}


# -------------------------------------------------------------------- 2. read


def read_sword_module(
    sword_root: Path, module: str, books: Iterable[str] | None = None
) -> VerseTexts:
    """Reads every verse slot of a SWORD Bible module as raw OSIS markup.

    Args:
      sword_root: directory holding `mods.d/` and `modules/`.
      module: module name, e.g. `spaRV1909eb`.
      books: OSIS book names to read (e.g. `Jonah`); None reads them all.

    Returns:
      `{(book, chapter, verse): osis_text}` over all slots of the module's
      versification, in canonical order; empty slots map to ''.
    """
    from pysword.modules import SwordModules

    modules = SwordModules(str(sword_root))
    found = modules.parse_modules()
    if module not in found:
        raise CorpusError(
            f"SWORD module {module} not found in {sword_root} (found: {sorted(found)})"
        )
    bible = modules.get_bible_from_module(module)
    # pysword decompresses the whole book block again for every verse; with
    # BlockType=BOOK that makes a full read take minutes instead of a second.
    # Remember the last blocks (reads are sequential).
    bible._decompressed_text = functools.lru_cache(maxsize=2)(bible._decompressed_text)

    verses: VerseTexts = {}
    wanted = None if books is None else set(books)
    all_books = [
        book for testament in bible.get_structure().get_books().values() for book in testament
    ]
    chosen = [book for book in all_books if wanted is None or book.osis_name in wanted]
    if wanted is not None and len(chosen) != len(wanted):
        unknown = sorted(wanted - {book.osis_name for book in chosen})
        raise CorpusError(f"{module} has no book(s) {', '.join(unknown)} (OSIS names, e.g. Gen)")
    for book in tqdm(chosen, desc=f"read {module}", unit="book", leave=False):
        texts = list(bible.get_iter(books=[book.name], clean=False))
        refs = [
            (book.osis_name, chapter, verse)
            for chapter, n_verses in enumerate(book.chapter_lengths, start=1)
            for verse in range(1, n_verses + 1)
        ]
        if len(texts) != len(refs):
            raise CorpusError(
                f"{module} {book.osis_name}: {len(texts)} texts for {len(refs)} verse slots"
            )
        verses.update(zip(refs, texts))
    return verses


def _last_verse_of_each_book(verses: VerseTexts) -> set[VerseRef]:
    last: dict[str, VerseRef] = {}
    for ref, text in verses.items():
        if text:
            last[ref[0]] = ref
    return set(last.values())


def clean_source_verses(raw: VerseTexts) -> VerseTexts:
    """Plain text of the RV1909: `strip_markup`, then its own quirks.

    Verse 1 of every chapter gets `fix_caps_opening` (casing learned from the
    other verses) and the last verse of every book `strip_subscription`.
    """
    plain = {ref: strip_markup(text) for ref, text in raw.items()}
    casing = build_casing_table(text for (_, _, verse), text in plain.items() if verse != 1)
    book_ends = _last_verse_of_each_book(plain)
    for ref, text in plain.items():
        if ref[2] == 1:
            text = fix_caps_opening(text, casing)
        if ref in book_ends:
            text = strip_subscription(text)
        plain[ref] = text
    return plain


def clean_target_verses(raw: VerseTexts) -> VerseTexts:
    """Plain text of the WEB (`strip_markup` covers all its quirks)."""
    return {ref: strip_markup(text) for ref, text in raw.items()}


# --------------------------------------------------------------------- 4. pair


def pair_verses(
    source: VerseTexts, target: VerseTexts
) -> tuple[dict[VerseRef, tuple[str, str]], collections.Counter]:
    """Pairs verses that both modules have, by reference.

    Books only one module has (the WEB's deuterocanon) are not paired and not
    counted as drops. Inside shared books, a verse slot empty on one side is
    dropped: the RV1909 leaves slots empty where its text sits under another
    number (Jonah 1:17 is its Jonah 2:1), and the WEB leaves Rom 16:25-27 empty.

    Returns:
      `(pairs, drops)`: `{ref: (source_text, target_text)}` in source order, and
      a Counter of dropped verses by reason (`empty_source`, `empty_target`,
      `source_only_slot`, `target_only_slot`).
    """
    shared_books = {book for book, _, _ in source} & {book for book, _, _ in target}
    pairs: dict[VerseRef, tuple[str, str]] = {}
    drops: collections.Counter = collections.Counter()
    for ref, source_text in source.items():
        if ref[0] not in shared_books:
            continue
        if ref not in target:
            drops["source_only_slot"] += bool(source_text)
            continue
        target_text = target[ref]
        if not source_text and not target_text:
            continue
        if not source_text:
            drops["empty_source"] += 1
        elif not target_text:
            drops["empty_target"] += 1
        else:
            pairs[ref] = (source_text, target_text)
    drops["target_only_slot"] = sum(
        1 for ref, text in target.items() if ref[0] in shared_books and ref not in source and text
    )
    return pairs, drops


# ------------------------------------------------------------------- 6. spelling


def modernize_sources(
    pairs: Mapping[VerseRef, tuple[str, str]],
) -> tuple[dict[VerseRef, tuple[str, str]], collections.Counter]:
    """The pairs with their Spanish side in modern spelling (`model.spelling.modernize`).

    Returns:
      `(pairs, counts)`: counts maps each spelling rule ("fué→fue") to the words it rewrote,
      and `NOT_RESTORED_KEY` to the verses that `old_spelling` does not turn back into their
      1909 text (the 1909 text's own irregularities, training/CORPUS.md).
    """
    counts: collections.Counter = collections.Counter()
    modern = {}
    for ref, (source, target) in pairs.items():
        modern_source, applied = modernize_counting(source)
        counts.update(applied)
        counts[NOT_RESTORED_KEY] += old_spelling(modern_source) != source
        modern[ref] = (modern_source, target)
    return modern, counts


# --------------------------------------------------------------------- 7. split


def split_by_chapter(
    pairs: Mapping[VerseRef, tuple[str, str]],
    dev_fraction: float = DEV_FRACTION,
    test_fraction: float = TEST_FRACTION,
    salt: str = SPLIT_SALT,
) -> dict[str, list[tuple[VerseRef, tuple[str, str]]]]:
    """Assigns whole chapters to train/dev/test by a hash of book and chapter.

    Splitting by chapter keeps neighbouring verses, which share names and
    phrasing, out of the training data of a held-out verse. The hash makes the
    split the same on every machine and independent of which other chapters
    were dropped.

    Returns:
      `{split: [(ref, (source, target)), ...]}` in canonical order.
    """
    splits: dict[str, list] = {split: [] for split in SPLITS}
    for ref, pair in pairs.items():
        book, chapter, _ = ref
        splits[split_for_key(f"{salt}:{book}.{chapter}", dev_fraction, test_fraction)].append(
            (ref, pair)
        )
    return splits


# --------------------------------------------------------------------- build


def _stale_reason(stats: dict) -> str | None:
    """Why a complete Bible corpus with these statistics must be rebuilt, or None."""
    version = stats.get("format_version", 1)
    if version == CORPUS_FORMAT_VERSION:
        return None
    return (
        f"the corpus is of format version {version}, this build writes version "
        f"{CORPUS_FORMAT_VERSION} (the Spanish side in modern spelling): rebuilding it"
    )


def build_bible_corpus(
    out_dir: Path | str,
    cache_dir: Path | str = DEFAULT_CACHE_DIR,
    force: bool = False,
    books: Iterable[str] | None = None,
) -> dict:
    """Builds train/dev/test.tsv and stats.json of the Bible corpus in `out_dir`.

    Args:
      out_dir: output directory (created).
      cache_dir: where the .deb packages are downloaded and unpacked.
      force: rebuild even if all outputs exist (they are then replaced). A corpus that an
        older version of this build wrote (see `CORPUS_FORMAT_VERSION`) is always rebuilt.
      books: only these OSIS books (a quick build, e.g. for tests); None: the whole Bible.

    Returns:
      The statistics also written to stats.json (empty dict if nothing was done).

    Raises:
      CorpusError: packages cannot be fetched or read.
      FileExistsError: some, but not all, outputs exist and `force` is off.
    """
    out_dir, cache_dir = Path(out_dir), Path(cache_dir)
    if not needs_build(out_dir, force, _stale_reason):
        return {}

    started = time.monotonic()
    with tqdm(total=5, desc="bible corpus", unit="step") as steps:
        steps.set_postfix_str("fetch packages")
        sword_root = fetch_sword_packages(cache_dir)
        steps.update()
        steps.set_postfix_str("read modules")
        raw_source = read_sword_module(sword_root, SOURCE_MODULE, books)
        raw_target = read_sword_module(sword_root, TARGET_MODULE, books)
        steps.update()
        steps.set_postfix_str("clean markup")
        source = clean_source_verses(raw_source)
        target = clean_target_verses(raw_target)
        steps.update()
        steps.set_postfix_str("pair and align")
        pairs, drops = pair_verses(source, target)
        paired = len(pairs)
        model, misaligned = _drop_misaligned(pairs, source, target, drops)
        # After the alignment, which therefore sees the 1909 text (the rules keep lengths).
        pairs, spelling_counts = modernize_sources(pairs)
        steps.update()
        steps.set_postfix_str("split and write")
        split_pairs, split_chapters = _split_and_dedup(pairs, drops)
        out_dir.mkdir(parents=True, exist_ok=True)
        for split in SPLITS:
            write_tsv(out_dir / f"{split}.tsv", split_pairs[split], overwrite=True)
        steps.update()

    stats = {
        "format_version": CORPUS_FORMAT_VERSION,
        "source_spelling": MODERN,
        "source": {"package": SOURCE_PACKAGE, "module": SOURCE_MODULE, "language": "es"},
        "target": {"package": TARGET_PACKAGE, "module": TARGET_MODULE, "language": "en"},
        "package_versions": package_versions(cache_dir),
        **_verses_read(source, target),
        "paired_by_reference": paired,
        "dropped": {reason: count for reason, count in sorted(drops.items()) if count},
        "misaligned_chapters": _describe_misaligned(misaligned),
        "length_ratio_model": {"ratio": round(model.ratio, 4), "scale": round(model.scale, 4)},
        "spelling_rules_applied": {
            rule: count for rule, count in spelling_counts.most_common() if rule != NOT_RESTORED_KEY
        },
        "spelling_not_restored": spelling_counts[NOT_RESTORED_KEY],
        "split_pairs": {split: len(split_pairs[split]) for split in SPLITS},
        "split_chapters": split_chapters,
        "split_rule": (
            f"sha256('{SPLIT_SALT}:BOOK.CHAPTER') as a fraction: test below {TEST_FRACTION}, "
            f"dev below {TEST_FRACTION + DEV_FRACTION}, train otherwise"
        ),
        "build_seconds": round(time.monotonic() - started, 1),
    }
    write_corpus_stats(out_dir, stats)
    _log_summary(stats)
    return stats


def _verses_read(source: dict, target: dict) -> dict:
    """stats.json's counts of the verses each module holds, and of the target's verses in books
    the source does not hold."""
    shared_books = {book for book, _, _ in source} & {book for book, _, _ in target}
    return {
        "verses_read": {
            SOURCE_MODULE: sum(1 for text in source.values() if text),
            TARGET_MODULE: sum(1 for text in target.values() if text),
        },
        "target_verses_in_books_without_source": sum(
            1 for (book, _, _), text in target.items() if text and book not in shared_books
        ),
    }


def _drop_misaligned(pairs: dict, source: dict, target: dict, drops: collections.Counter):
    """Drops from `pairs` the verses of chapters whose numbering the two texts do not share and
    the pairs whose length ratio is an outlier, counting them in `drops`.

    Returns:
      `(length-ratio model, {(book, chapter): misalignment})`.
    """
    model = LengthRatioModel.fit(pairs.values())
    misaligned = detect_misaligned_chapters(source, target, model)
    _drop(
        pairs,
        [ref for ref in pairs if ref[:2] in misaligned and misaligned[ref[:2]].covers(ref[2])],
        "misaligned_verse_numbering",
        drops,
    )
    _drop(pairs, length_ratio_outliers(pairs, model), "length_ratio_outlier", drops)
    return model, misaligned


def _describe_misaligned(misaligned: dict) -> dict:
    """stats.json's view of the misaligned chapters: their verse spans and the gain in nats."""
    return {
        f"{book} {chapter}": {
            "verses": ", ".join(
                f"{first}-{last}" if first != last else str(first) for first, last in m.spans
            ),
            "gain_nats": round(m.gain, 1),
        }
        for (book, chapter), m in misaligned.items()
    }


def _drop(pairs: dict, refs: Iterable[VerseRef], reason: str, drops: collections.Counter) -> None:
    """Removes `refs` from `pairs`, counting them under `reason`."""
    for ref in list(refs):
        del pairs[ref]
        drops[reason] += 1


def _split_and_dedup(
    pairs: Mapping[VerseRef, tuple[str, str]], drops: collections.Counter
) -> tuple[dict[str, list[tuple[str, str]]], dict[str, int]]:
    """Chapter split, then dev and test lose sources seen in train (counted in `drops`).

    Returns:
      `(pairs per split, chapters per split)`.
    """
    by_split = split_by_chapter(pairs)
    split_pairs = {split: [pair for _, pair in items] for split, items in by_split.items()}
    for split in ("dev", "test"):
        split_pairs[split], removed = dedup_against(split_pairs[split], split_pairs["train"])
        drops[f"duplicate_source_in_{split}"] += removed
    chapters = {split: len({ref[:2] for ref, _ in by_split[split]}) for split in SPLITS}
    return split_pairs, chapters


def _log_summary(stats: dict) -> None:
    for module, count in stats["verses_read"].items():
        logger.info("verses read from %s: %d", module, count)
    logger.info(
        "WEB verses in books the RV1909 lacks (deuterocanon, not paired): %d",
        stats["target_verses_in_books_without_source"],
    )
    logger.info("pairs by reference: %d", stats["paired_by_reference"])
    logger.info(
        "modern spelling: %d words rewritten (%s)",
        sum(stats["spelling_rules_applied"].values()),
        ", ".join(f"{rule} {count}" for rule, count in stats["spelling_rules_applied"].items()),
    )
    for reason, count in stats["dropped"].items():
        logger.info("dropped %6d  %s", count, reason)
    logger.info("misaligned verse numbering in %d chapters:", len(stats["misaligned_chapters"]))
    for chapter, info in stats["misaligned_chapters"].items():
        logger.info(
            "  %-10s verses %-12s (evidence %.1f nats)", chapter, info["verses"], info["gain_nats"]
        )
    logger.info(
        "pairs per split: %s; chapters per split: %s", stats["split_pairs"], stats["split_chapters"]
    )
    logger.info("built in %.1f s", stats["build_seconds"])
