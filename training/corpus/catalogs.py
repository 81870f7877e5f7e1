"""Builds the Spanish->English corpus of Debian's translated message catalogs.

Programs translated with gettext ship `LC_MESSAGES/*.mo` catalogs: each message's msgid in
English and its msgstr in the locale's language. Game dialogue (Wesnoth's campaigns,
FreedroidRPG, Cataclysm, Widelands, Freeciv) gives conversational sentences, applications
(GNOME, KDE, LibreOffice, ...) the general modern vocabulary of a formal register. Which
packages, why, and the counts are in training/CORPUS.md.

Pipeline:
  1. `download_deb` (training/corpus/debian.py) each package of `CATALOG_PACKAGES` into a cache
     directory, and unpack only its Spanish catalogs and its copyright file; a package that
     cannot be downloaded is reported and skipped.
  2. `read_catalog`: the catalog's messages with polib; `package_licence` from the copyright.
  3. `clean_message` (training/corpus/catalog_cleaning.py): each rule drops or cleans a pair; a
     message with placeholders is dropped (the corpus `catalog-fills` holds them filled:
     training/corpus/catalog_fills_corpus.py).
  4. `choose_locale_variants`: one Spanish per English in a package, the first locale of
     `LOCALE_PREFERENCE` (es, es_ES, es_419, es_MX, ... es_AR's voseo last).
  5. Duplicates removed across packages by `near_duplicate_key` (first package wins).
  6. `split_for_key` on the near-duplicate key: all near-duplicates of a test sentence are
     in test, none in train; dev and test also lose Spanish sentences seen in train.

Command line: `python -m training.prepare_data --corpus catalogs --out data/catalogs`.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import polib
from tqdm import tqdm

from training.corpus.catalog_cleaning import clean_message, near_duplicate_key
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
    read_corpus_stats,
    write_corpus_stats,
    write_splits,
)
from training.corpus.splitting import describe_split, split_keyed_pairs
from training.corpus.tsv import SPLITS, CorpusError, Pair, read_tsv

logger = logging.getLogger(__name__)

# Chosen by what they yield (training/CORPUS.md has each one's count): game dialogue first,
# since the first package holding a sentence keeps it, then applications.
GAME_PACKAGES = (
    "wesnoth-1.16-data",
    *(
        f"wesnoth-1.16-{campaign}"
        for campaign in "did dm dw ei httt l low nr sof sota sotbe thot trow tsg ttb utbs".split()
    ),
    "freedroidrpg-data",
    "cataclysm-dda-data",
    "widelands-data",
    "freeciv-data",
    "minetest-data",
    "tuxpaint-data",
)
# Packages whose catalogs the survey found empty of Spanish (kate, calibre, ...) are left out.
APPLICATION_PACKAGES = tuple(
    """libreoffice-l10n-es gimp-data inkscape evolution-common evolution-data-server-common
    gnucash-common pidgin-data hexchat-common nautilus-data gedit-common libgtk-3-common
    gnome-control-center-data vlc-l10n audacity-data coreutils apt dpkg gnome-weather
    gnome-calendar gnome-clocks gnome-maps rhythmbox-data shotwell-common totem-common
    evince-common gnome-software-common dolphin okular konsole kdeconnect kmail korganizer
    marble-data plasma-desktop-data gwenview kdenlive-data digikam-data akregator kpat
    kmahjongg knights gnome-chess gnome-sudoku aisleriot gnome-mines mutt neomutt
    gnumeric-common claws-mail-i18n geany-common mousepad thunar-data cheese-common
    gnome-contacts gnome-music gnome-photos brasero-common simple-scan baobab seahorse
    file-roller gnome-disk-utility geary polari gnome-boxes gnome-shell-common iso-codes""".split()
)
CATALOG_PACKAGES = GAME_PACKAGES + APPLICATION_PACKAGES
# `catalogs-more`: what a second survey found beyond those 90 (training/CORPUS.md): story
# dialogue (Dink Smallwood, Adonthell), games, learning programs, and applications of daily life
# (money, family history, notes, diaries, reminders, chat, mail, podcasts, weather).
MORE_CATALOG_PACKAGES = tuple(
    """freedink-data adonthell-data warzone2100-data ufoai-misc tuxmath-data kgoldrunner xmoto
    gbrainy knavalbattle manaplus-data pioneers-console-data kajongg gnubg-data pychess
    parley-data kwordquiz kbruch kturtle ktouch-data workrave-data gramps homebank-data
    kmymoney-common skrooge-common grisbi-common osmo kalarm gnote rednotebook zim cherrytree
    gajim konversation-data balsa-data liferea-data gpodder lollypop gthumb-data foliate
    epiphany-browser-data xfce4-weather-plugin cinnamon-l10n caja-common orca""".split()
)
# A few MB of real catalogs for the tests (`make data-test`): GNU hello (printf placeholders),
# a Wesnoth campaign (dialogue, es and es_419, context keys, `$name|`), Pidgin (es and es_AR,
# markup, GTK's `_` accelerators), konsole (Qt's `&` accelerators), gnome-mines.
TEST_PACKAGES = ("hello", "wesnoth-1.16-dw", "pidgin-data", "konsole", "gnome-mines")

# Which Spanish wins when a package has several for one English: Spain's and the neutral
# Latin American ones first; Argentina's voseo ("podés", "tenés") last.
LOCALE_PREFERENCE = ("es", "es_ES", "es_419", "es_MX", "es_US", "es_CO", "es_CL")
LOCALE_LAST = "es_AR"
CATALOG_MEMBERS = (
    "*/es/LC_MESSAGES/*.mo",
    "*/es_*/LC_MESSAGES/*.mo",
    "usr/share/doc/*/copyright",
)
DEV_FRACTION = TEST_FRACTION = 0.02
SPLIT_SALT = "catalogs-es-en-v1"
# Recorded in stats.json; a corpus built with another version is rebuilt.
CORPUS_FORMAT_VERSION = 1
DUPLICATE = "duplicate"
OTHER_LOCALE_VARIANT = "other_locale_variant"


@dataclasses.dataclass(frozen=True)
class CatalogMessage:
    """One message of a Spanish catalog.

    Attributes:
      english: the msgid (a plural message's singular).
      spanish: the msgstr (a plural message's first form).
      locale: the catalog's locale directory, e.g. `es_419`.
      english_plural: a plural message's msgid_plural ("" for other messages).
      spanish_plural: its second msgstr form, the one Spanish uses for every count but one
        ("" for other messages).
    """

    english: str
    spanish: str
    locale: str
    english_plural: str = ""
    spanish_plural: str = ""


def locale_rank(locale: str) -> tuple[int, str]:
    """Sort key of a locale: `LOCALE_PREFERENCE` order, then the others alphabetically,
    `LOCALE_LAST` last."""
    if locale in LOCALE_PREFERENCE:
        return LOCALE_PREFERENCE.index(locale), ""
    return len(LOCALE_PREFERENCE) + (locale == LOCALE_LAST), locale


def read_catalog(path: Path) -> list[CatalogMessage]:
    """The translated messages of one `.mo` file (polib), its header and empty msgstrs left out.

    Raises:
      CorpusError: the file is not a readable catalog (the message names it).
    """
    try:
        catalog = polib.mofile(str(path))
    except (OSError, ValueError) as exc:
        raise CorpusError(f"{path}: not a readable .mo catalog ({exc})") from exc
    locale = path.parent.parent.name
    messages = []
    for entry in catalog:
        forms = entry.msgstr_plural or {}
        spanish = entry.msgstr or forms.get(0, "")
        if entry.msgid and spanish:
            plural = (entry.msgid_plural, forms.get(1, "")) if entry.msgid_plural else ("", "")
            messages.append(CatalogMessage(entry.msgid, spanish, locale, *plural))
    return messages


def choose_locale_variants(messages: Iterable[CatalogMessage]) -> tuple[list[CatalogMessage], int]:
    """One message per English msgid: the Spanish of the best-ranked locale (`locale_rank`).

    Returns:
      `(messages, dropped)`: the chosen ones in first-seen order, and how many other-locale
      variants were dropped.
    """
    chosen: dict[str, CatalogMessage] = {}
    dropped = 0
    for message in messages:
        current = chosen.get(message.english)
        if current is None:
            chosen[message.english] = message
            continue
        dropped += 1
        if locale_rank(message.locale) < locale_rank(current.locale):
            chosen[message.english] = message
    return list(chosen.values()), dropped


@dataclasses.dataclass
class PackageYield:
    """What one package gave: its manifest entry, its kept pairs, and the message each pair
    was made of (`sources[i]` gave `pairs[i]`)."""

    manifest: dict
    pairs: list[Pair]
    sources: list[CatalogMessage] = dataclasses.field(default_factory=list)


# What a corpus makes of one message: `(pair, None)`, `(None, reason)` counted in the manifest,
# or `(None, None)` for a message that is not this corpus's to count.
MessageCleaner = Callable[[CatalogMessage], tuple[Pair | None, str | None]]


def clean_catalog_message(message: CatalogMessage) -> tuple[Pair | None, str | None]:
    """The catalogs corpus's `MessageCleaner`: `clean_message` on the singular (a message with
    placeholders is dropped)."""
    return clean_message(message.english, message.spanish)


def _package_licence(root: Path, package: str) -> str:
    """The licence of `package`'s copyright file in its unpacked tree `root`."""
    copyrights = sorted(root.glob(f"usr/share/doc/{package}/copyright"))
    if not copyrights:
        return "no copyright file (its doc directory links to another package's)"
    return package_licence(copyrights[0].read_text(encoding="utf-8", errors="replace"))


def read_package(
    package: str, cache_dir: Path, clean: MessageCleaner = clean_catalog_message
) -> PackageYield:
    """Downloads (or finds cached), unpacks and cleans one package's Spanish catalogs: `clean`
    makes each message of the chosen locale (`choose_locale_variants`) a pair or a drop.

    A package that cannot be downloaded or read yields no pair; its manifest entry says why.
    """
    try:
        deb = download_deb(cache_dir, package)
        root = unpack_cached(deb, cache_dir / "unpacked" / package, CATALOG_MEMBERS)
        catalogs = sorted(root.rglob("*.mo"))
        messages = [message for path in catalogs for message in read_catalog(path)]
    except CorpusError as exc:
        logger.warning("skipping %s: %s", package, exc)
        return PackageYield({"package": package, "error": str(exc)}, [])
    chosen, variants = choose_locale_variants(messages)
    dropped: collections.Counter = collections.Counter()
    dropped[OTHER_LOCALE_VARIANT] = variants
    package_yield = PackageYield({}, [])
    for message in chosen:
        pair, reason = clean(message)
        if pair is not None:
            package_yield.pairs.append(pair)
            package_yield.sources.append(message)
        elif reason is not None:
            dropped[reason] += 1
    package_yield.manifest = {
        "package": package,
        "version": deb_version(deb),
        "licence": _package_licence(root, package),
        "deb_megabytes": round(deb.stat().st_size / 1e6, 1),
        "catalogs": [str(path.relative_to(root)) for path in catalogs],
        "messages": len(messages),
        "cleaned": len(package_yield.pairs),
        "dropped": dict(sorted((reason, count) for reason, count in dropped.items() if count)),
    }
    return package_yield


def read_packages(
    packages: Sequence[str], cache_dir: Path, what: str, clean: MessageCleaner
) -> list[PackageYield]:
    """`read_package` of each package, in order, after saying what will be downloaded
    (`announce_downloads`); `what` names the corpus in the log and the progress bar."""
    announce_downloads(cache_dir, packages, what)
    return [
        read_package(package, cache_dir, clean)
        for package in tqdm(packages, desc=what, unit="package")
    ]


def remove_duplicates(
    yields: Sequence[PackageYield], seen: Iterable[str] = ()
) -> list[tuple[str, Pair]]:
    """The pairs of all packages, each near-duplicate English kept once (the first package's),
    none whose key is in `seen` (another corpus's).

    Counts each package's duplicates and kept pairs into its manifest (`dropped.duplicate`,
    `kept`).

    Returns:
      `[(near_duplicate_key, pair), ...]` in package order.
    """
    seen = set(seen)
    kept = []
    for package_yield in yields:
        duplicates = 0
        for pair in package_yield.pairs:
            key = near_duplicate_key(pair[1])
            if key in seen:
                duplicates += 1
                continue
            seen.add(key)
            kept.append((key, pair))
        package_yield.manifest["kept"] = len(package_yield.pairs) - duplicates
        if duplicates:
            package_yield.manifest.setdefault("dropped", {})[DUPLICATE] = duplicates
    return kept


def require_pairs(
    keyed_pairs: Sequence, yields: Sequence[PackageYield], what: str = "sentence pair"
) -> None:
    """Raises `CorpusError` when no pair is left, naming the packages that failed.

    Args:
      keyed_pairs: the pairs left after duplicates were removed.
      yields: every package's `PackageYield`.
      what: what the corpus's pairs are, for the message ("filled pair").
    """
    if keyed_pairs:
        return
    failed = [y.manifest["package"] for y in yields if "error" in y.manifest]
    raise CorpusError(
        f"no {what} left from the catalogs of {len(yields)} packages "
        f"({len(failed)} could not be downloaded or read: {', '.join(failed) or 'none'}); "
        f"see the log for each package's drops"
    )


def split_pairs(keyed_pairs: Iterable[tuple[str, Pair]]) -> tuple[dict[str, list[Pair]], int]:
    """Train/dev/test by a hash of each pair's near-duplicate key; dev and test then lose
    pairs whose Spanish occurs in train.

    Returns:
      `(pairs per split, pairs removed from dev and test)`.
    """
    return split_keyed_pairs(keyed_pairs, SPLIT_SALT, DEV_FRACTION, TEST_FRACTION)


def packages_digest(packages: Sequence[str]) -> str:
    """What identifies a package list in stats.json (`packages_digest`)."""
    return hashlib.sha256("\n".join(packages).encode("utf-8")).hexdigest()[:16]


def corpus_record_digest(directory: Path | str) -> str:
    """A digest of a built corpus's whole stats.json: a corpus built apart from it records
    it, so a rebuild of that corpus (newer packages) rebuilds this one."""
    record = json.dumps(read_corpus_stats(directory) or {}, sort_keys=True)
    return hashlib.sha256(record.encode("utf-8")).hexdigest()[:16]


def english_keys(directory: Path | str, splits: Sequence[str] = SPLITS) -> set[str]:
    """The `near_duplicate_key`s of the English of a built corpus's `splits`."""
    return {
        near_duplicate_key(english)
        for split in splits
        for _, english in read_tsv(Path(directory) / f"{split}.tsv")
    }


def corpus_stats(
    manifests: list[dict],
    splits: dict[str, list[Pair]],
    removed: int,
    digest: str,
    started: float,
    format_version: int = CORPUS_FORMAT_VERSION,
    split_rule: str | None = None,
) -> dict:
    """What stats.json records: the totals, the split, and each package's manifest.

    Args:
      format_version, split_rule: the corpus's own (default: the catalogs corpus's).
    """
    dropped: collections.Counter = collections.Counter()
    for manifest in manifests:
        dropped.update(manifest.get("dropped", {}))
    dropped["in_train_spanish_removed_from_dev_test"] = removed
    return {
        "format_version": format_version,
        "packages_digest": digest,
        "source": {"language": "es", "field": "msgstr"},
        "target": {"language": "en", "field": "msgid"},
        "packages_downloaded": sum("error" not in m for m in manifests),
        "packages_unavailable": {m["package"]: m["error"] for m in manifests if "error" in m},
        "download_megabytes": round(sum(m.get("deb_megabytes", 0) for m in manifests), 1),
        "messages_read": sum(m.get("messages", 0) for m in manifests),
        "dropped": dict(dropped.most_common()),
        "split_pairs": {split: len(splits[split]) for split in SPLITS},
        "split_rule": split_rule
        or describe_split(
            SPLIT_SALT, "near-duplicate key of the English", DEV_FRACTION, TEST_FRACTION
        ),
        "build_seconds": round(time.monotonic() - started, 1),
        "packages": manifests,
    }


def stale_reason(stats: dict, out_dir: Path, digest: str, format_version: int) -> str | None:
    """Why a complete corpus with these statistics must be rebuilt (another format version,
    another package list, another build of a corpus it is apart from), or None."""
    version = stats.get("format_version")
    if version != format_version:
        return (
            f"{out_dir} is of format version {version}, this build writes version "
            f"{format_version}: rebuilding it"
        )
    if stats.get("packages_digest") != digest:
        return (
            f"{out_dir} was built from another package list, or apart from another "
            "build of another corpus: rebuilding it"
        )
    return None


def build_catalogs_corpus(
    out_dir: Path | str,
    cache_dir: Path | str = DEFAULT_CACHE_DIR / "catalogs",
    packages: Sequence[str] = CATALOG_PACKAGES,
    force: bool = False,
    apart_from: Path | str | None = None,
) -> dict:
    """Builds train/dev/test.tsv and stats.json (with the package manifest) in `out_dir`.

    Args:
      out_dir: output directory (created).
      cache_dir: where the .deb files are downloaded and their catalogs unpacked; a cached
        package is not downloaded again.
      packages: Debian package names, in priority order for duplicates.
      force: rebuild even if all outputs exist. A corpus built from another package list or
        format version is always rebuilt.
      apart_from: a built catalogs corpus (its directory) whose English near-duplicates this one
        leaves out, so that a sentence of its dev or test split is no training pair here
        (`catalogs-more` apart from `catalogs`); rebuilt when that corpus is.

    Returns:
      The statistics written to stats.json (empty if the corpus was already there).

    Raises:
      CorpusError: no pair is left (every package failed or was cleaned away).
      FileExistsError: some, but not all, outputs exist and `force` is off.
    """
    out_dir, cache_dir = Path(out_dir), Path(cache_dir)
    digest = packages_digest(packages)
    seen = set()
    if apart_from is not None:
        digest += ":" + corpus_record_digest(apart_from)
        seen = english_keys(apart_from)
    current = functools.partial(
        stale_reason, out_dir=out_dir, digest=digest, format_version=CORPUS_FORMAT_VERSION
    )
    if not needs_build(out_dir, force, current):
        return {}
    started = time.monotonic()
    yields = read_packages(packages, cache_dir, "catalogs corpus", clean_catalog_message)
    keyed_pairs = remove_duplicates(yields, seen)
    require_pairs(keyed_pairs, yields)
    splits, removed = split_pairs(keyed_pairs)
    write_splits(out_dir, splits)
    stats = corpus_stats([y.manifest for y in yields], splits, removed, digest, started)
    write_corpus_stats(out_dir, stats)
    logger.info(
        "catalogs corpus: %d pairs from %d packages (%s), built in %.0f s",
        len(keyed_pairs),
        stats["packages_downloaded"],
        stats["split_pairs"],
        stats["build_seconds"],
    )
    return stats
