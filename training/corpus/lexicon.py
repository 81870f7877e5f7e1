"""Builds the lexicon corpus: Spanish->English word and short-phrase pairs (`lexicon`).

Two bilingual word lists from Debian (their licences, recorded per package in stats.json,
are the GPL's, with CC-BY-SA, GFDL and public-domain parts in FreeDict's):
  * FreeDict's Spanish-English and English-Spanish dictionaries (`dict-freedict-spa-eng`,
    `dict-freedict-eng-spa`, dictd format): each headword with its translations, the
    English-Spanish one read backwards.
  * Apertium's bilingual dictionary (`apertium-en-es`, compiled, so read through Apertium
    itself): the everyday English of WordNet 3.0, the lemmas its SemCor sense counts
    (`cntlist.rev`) show in use, translated by `apertium eng-spa` one at a time (verbs as
    "to X", the Spanish infinitive's "para"/"a" removed). Lemmas Apertium does not know are
    dropped.
Trained at a small weight, the pairs teach the model the content words of everyday talk.

Command line: `python -m training.prepare_data --corpus lexicon --out data/lexicon`.
"""

from __future__ import annotations

import gzip
import logging
import re
import time
from pathlib import Path

from tqdm import tqdm

from training.corpus import apertium
from training.corpus.backtranslation import unpack_wordnet
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

FREEDICT_SPANISH_ENGLISH = "dict-freedict-spa-eng"
FREEDICT_ENGLISH_SPANISH = "dict-freedict-eng-spa"
FREEDICT_PACKAGES = (FREEDICT_SPANISH_ENGLISH, FREEDICT_ENGLISH_SPANISH)
DEV_FRACTION = TEST_FRACTION = 0.01
SPLIT_SALT = "lexicon-es-en-v1"
CORPUS_FORMAT_VERSION = 1
# A lexicon entry is a word or a short phrase on each side.
MAX_WORDS = 3
# WordNet's synset type of a verb: the digit after '%' of a sense key.
_VERB = "2"
_SPANISH_INFINITIVE_MARK = re.compile(r"^(?:para|a)\s+", re.IGNORECASE)
# FreeDict's headword line ("perro /pˈero/") and numbered senses ("1. dog, hound").
_PRONUNCIATION = re.compile(r"\s*/[^/]*/\s*$")
_SENSE_NUMBER = re.compile(r"^\d+\.\s*")
# Glued words ("AscensionDay"), bracketed notes, and anything but letters, spaces, ' and -.
_NOT_A_PHRASE = re.compile(r"[a-z][A-Z]|[^\w\s'\-]|\d|_")


def read_dictd(index_path: Path, dict_path: Path) -> list[tuple[str, list[str]]]:
    """The entries of a dictd dictionary: `(headword, translations)`, in index order.

    The index's lines are `headword<TAB>offset<TAB>length` (base64 numbers) into the
    gzip-compressed body; an entry's first line repeats the headword (with its pronunciation),
    the others list the translations, comma or semicolon separated, senses numbered "1.".
    The dictionary's own `00-database-*` entries are left out.

    Raises:
      CorpusError: a file is missing or unreadable.
    """
    try:
        body = gzip.decompress(Path(dict_path).read_bytes())
        index_lines = Path(index_path).read_text(encoding="utf-8").splitlines()
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise CorpusError(f"{dict_path}: not a readable dictd dictionary ({exc})") from exc
    entries = []
    for line_number, line in enumerate(index_lines, 1):
        fields = line.split("\t")
        if len(fields) != 3:
            raise CorpusError(f"{index_path}:{line_number}: not a dictd index line")
        headword, offset, length = fields
        if headword.startswith("00-database") or headword.startswith("00database"):
            continue
        start, size = _b64_number(offset), _b64_number(length)
        lines = body[start : start + size].decode("utf-8", "replace").splitlines()
        translations = []
        for sense in lines[1:]:
            sense = _SENSE_NUMBER.sub("", sense.strip())
            translations.extend(part.strip() for part in re.split(r"[,;]", sense))
        entries.append((headword, [t for t in translations if t]))
    return entries


def _b64_number(text: str) -> int:
    """A dictd index number: base64 digits, most significant first."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    value = 0
    for character in text:
        value = value * 64 + alphabet.index(character)
    return value


def is_phrase(text: str) -> bool:
    """Whether `text` is a word or short phrase fit for the lexicon: 1 to `MAX_WORDS` words of
    letters (hyphens and apostrophes inside), nothing glued or bracketed."""
    return 0 < len(text.split()) <= MAX_WORDS and not _NOT_A_PHRASE.search(text)


def freedict_pairs(cache_dir: Path) -> tuple[list[Pair], list[dict]]:
    """`(Spanish, English)` pairs of both FreeDict dictionaries, and their package manifests."""
    pairs, manifests = [], []
    announce_downloads(cache_dir, FREEDICT_PACKAGES, "lexicon corpus")
    for package in FREEDICT_PACKAGES:
        deb = download_deb(cache_dir, package)
        unpacked = unpack_cached(
            deb,
            cache_dir / "unpacked" / package,
            ("usr/share/dictd/*", f"usr/share/doc/{package}/copyright"),
        )
        name = package.removeprefix("dict-")
        entries = read_dictd(
            unpacked / f"usr/share/dictd/{name}.index",
            unpacked / f"usr/share/dictd/{name}.dict.dz",
        )
        spanish_first = package == FREEDICT_SPANISH_ENGLISH
        count = 0
        for headword, translations in entries:
            headword = _PRONUNCIATION.sub("", headword)
            for translation in translations:
                pair = (headword, translation) if spanish_first else (translation, headword)
                if is_phrase(pair[0]) and is_phrase(pair[1]):
                    pairs.append(pair)
                    count += 1
        copyright_file = unpacked / f"usr/share/doc/{package}/copyright"
        manifests.append(
            {
                "package": package,
                "version": deb_version(deb),
                "licence": package_licence(copyright_file.read_text(errors="replace")),
                "pairs": count,
            }
        )
    return pairs, manifests


def wordnet_common_lemmas(wordnet_dir: Path) -> list[tuple[str, bool]]:
    """`(lemma, is_verb)` of the WordNet lemmas SemCor counts in use (`cntlist.rev`), most
    used first, multi-word lemmas with spaces; proper names (capitalized) left out."""
    counts: dict[tuple[str, bool], int] = {}
    path = Path(wordnet_dir) / "cntlist.rev"
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        fields = line.split()
        if len(fields) != 3 or "%" not in fields[0]:
            continue
        lemma, sense = fields[0].split("%", 1)
        key = (lemma.replace("_", " "), sense.startswith(_VERB))
        counts[key] = counts.get(key, 0) + int(fields[2])
    return [
        key
        for key, _ in sorted(counts.items(), key=lambda item: -item[1])
        if is_phrase(key[0]) and key[0].islower()
    ]


def apertium_pairs(lemmas: list[tuple[str, bool]]) -> tuple[list[Pair], int]:
    """`(Spanish, English)` pairs of the lemmas through `apertium eng-spa`; unknown ones dropped.

    Returns:
      `(pairs, number dropped)`.
    """
    english = [f"to {lemma}" if is_verb else lemma for lemma, is_verb in lemmas]
    with tqdm(total=len(english), desc="Apertium eng-spa (lexicon)", unit="word") as progress:
        spanish = apertium.translate(english, apertium.ENGLISH_TO_SPANISH, progress.update)
    pairs = []
    for (lemma, is_verb), translation in zip(lemmas, spanish, strict=True):
        translation = translation.rstrip(".")
        if is_verb:
            translation = _SPANISH_INFINITIVE_MARK.sub("", translation)
        translation = translation[:1].lower() + translation[1:]
        if (
            translation
            and not apertium.has_unknown_marks(translation)
            and is_phrase(translation)
            and translation.lower() != lemma.lower()
        ):
            pairs.append((translation, lemma))
    return pairs, len(lemmas) - len(pairs)


def build_lexicon_corpus(
    out_dir: Path | str, cache_dir: Path | str = DEFAULT_CACHE_DIR / "lexicon", force: bool = False
) -> dict:
    """Builds train/dev/test.tsv and stats.json (sources, licences, counts) in `out_dir`.

    Args:
      out_dir: output directory (created).
      cache_dir: where the FreeDict and WordNet packages are downloaded and unpacked once.
      force: rebuild even if all outputs exist; a corpus of another format version or Apertium
        version is always rebuilt.

    Returns:
      The statistics written (empty if the corpus was already there).

    Raises:
      CorpusError: a package or Apertium cannot be had, or no pair is left.
      FileExistsError: some, but not all, outputs exist and `force` is off.
    """
    out_dir, cache_dir = Path(out_dir), Path(cache_dir)
    identity = {
        "format_version": CORPUS_FORMAT_VERSION,
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
    dictionary_pairs, manifests = freedict_pairs(cache_dir)
    lemmas = wordnet_common_lemmas(unpack_wordnet(cache_dir) / "usr/share/wordnet")
    translated, unknown = apertium_pairs(lemmas)
    manifests.append(
        {
            **apertium.apertium_manifest(),
            "pairs": len(translated),
            "source": f"{len(lemmas)} WordNet lemmas in use (cntlist.rev), {unknown} unknown",
        }
    )
    seen, keyed = set(), []
    for source, target in dictionary_pairs + translated:
        key = normalize_for_dedup(f"{source}\t{target}")
        if key not in seen:
            seen.add(key)
            keyed.append((normalize_for_dedup(source), (source, target)))
    if not keyed:
        raise CorpusError("no lexicon pair left from FreeDict and Apertium")
    splits, removed = split_keyed_pairs(keyed, SPLIT_SALT, DEV_FRACTION, TEST_FRACTION)
    write_splits(out_dir, splits)
    stats = {
        **identity,
        "source": {"language": "es", "origin": "FreeDict headwords; Apertium eng-spa"},
        "target": {"language": "en", "origin": "FreeDict; WordNet 3.0 lemmas"},
        "packages": manifests,
        "dropped": {
            "apertium_unknown_or_unfit": unknown,
            "duplicate": len(dictionary_pairs) + len(translated) - len(keyed),
            "in_train_spanish_removed_from_dev_test": removed,
        },
        "split_pairs": {split: len(splits[split]) for split in SPLITS},
        "split_rule": describe_split(SPLIT_SALT, "normalized Spanish", DEV_FRACTION, TEST_FRACTION),
        "build_seconds": round(time.monotonic() - started, 1),
    }
    write_corpus_stats(out_dir, stats)
    logger.info(
        "lexicon corpus: %d pairs (%s), built in %.0f s",
        len(keyed),
        stats["split_pairs"],
        stats["build_seconds"],
    )
    return stats
