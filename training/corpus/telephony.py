"""Builds the telephony corpus: Asterisk's voice prompts, Spanish->English (`telephony`).

Asterisk, the telephone exchange, ships the text of every recorded prompt of its core sounds,
one `name: text` line each, for each language it is recorded in (Debian's
`asterisk-core-sounds-es` and `asterisk-core-sounds-en`, CC-BY-SA 3.0; the licence of each is
recorded in stats.json). The same prompt name in both is a translation pair: voicemail menus,
conference calls, call queues, numbers, dates, the spelling alphabet ("Por favor ingrese su
contrasena seguida por la tecla de numero" / "Please enter your password followed by the pound
key"). The Spanish is written without accents, as the prompts' file has it.

A few hundred pairs of a domain none of the other corpora covers: the corpus a fine-tuning run
adapts the bundled model to (docs/training.md, "Fine-tuning from a trained run"), not one the
bundle trains on.

Command line: `python -m training.prepare_data --corpus telephony --out data/telephony`.
"""

from __future__ import annotations

import gzip
import logging
import re
import time
from pathlib import Path

from training.corpus.debian import (
    DEFAULT_CACHE_DIR,
    announce_downloads,
    deb_version,
    download_deb,
    package_licence,
    unpack_cached,
)
from training.corpus.outputs import needs_build, stale_unless, write_corpus_stats, write_splits
from training.corpus.splitting import describe_split, normalize_for_dedup, split_keyed_pairs
from training.corpus.tsv import SPLITS, CorpusError, Pair

logger = logging.getLogger(__name__)

SPANISH_PACKAGE = "asterisk-core-sounds-es"
ENGLISH_PACKAGE = "asterisk-core-sounds-en"
PACKAGES = (SPANISH_PACKAGE, ENGLISH_PACKAGE)
# Held out from a few hundred pairs: enough of each for a dev and a test BLEU.
DEV_FRACTION = TEST_FRACTION = 0.15
SPLIT_SALT = "telephony-es-en-v1"
CORPUS_FORMAT_VERSION = 1
# "agent-pass: Por favor ingrese su contrasena ...": a prompt's name, then its text.
_PROMPT_LINE = re.compile(r"^([A-Za-z0-9][\w/.-]*):[ \t]*(.*?)\s*$")
# Brackets and parentheses hold what is not said ("[ascending tones]", "(10 seconds of
# silence)", "at [@]", "(note: does not say "2")"): a prompt with them is no clean pair.
_NOT_SAID = re.compile(r"[\[\]()]")


def prompts_file(unpacked: Path, package: str) -> Path:
    """Where an unpacked `asterisk-core-sounds-LL` package keeps its prompts' text."""
    language = package.rsplit("-", 1)[1]
    return Path(unpacked) / f"usr/share/doc/{package}/core-sounds-{language}.txt.gz"


def read_prompts(path: Path) -> dict[str, str]:
    """`{prompt name: text}` of a core-sounds text file (gzip, `;` comments): the prompts
    whose text is said as written (nothing in brackets or parentheses), the first of a name
    given twice.

    Raises:
      CorpusError: the file is missing or holds no prompt.
    """
    if not Path(path).is_file():
        raise CorpusError(f"{path} is missing: not an asterisk-core-sounds package")
    prompts: dict[str, str] = {}
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            match = _PROMPT_LINE.match(line)
            if match and match.group(2) and not _NOT_SAID.search(match.group(2)):
                prompts.setdefault(match.group(1), " ".join(match.group(2).split()))
    if not prompts:
        raise CorpusError(f"{path} holds no prompt ('name: text' lines)")
    return prompts


def prompt_pairs(spanish: dict[str, str], english: dict[str, str]) -> list[Pair]:
    """The (Spanish, English) texts of the prompts both languages have, by prompt name, in
    the Spanish file's order."""
    return [(text, english[name]) for name, text in spanish.items() if name in english]


def build_telephony_corpus(
    out_dir: Path | str, cache_dir: Path | str = DEFAULT_CACHE_DIR / "telephony", force=False
) -> dict:
    """Builds train/dev/test.tsv and stats.json (sources, licences, counts) in `out_dir`.

    Args:
      out_dir: output directory (created).
      cache_dir: where the two packages (about 45 kB) are downloaded and unpacked once.
      force: rebuild even if all outputs exist; a corpus of another format version is always
        rebuilt.

    Returns:
      The statistics written (empty if the corpus was already there).

    Raises:
      CorpusError: a package cannot be had, or no pair is left.
      FileExistsError: some, but not all, outputs exist and `force` is off.
    """
    out_dir, cache_dir = Path(out_dir), Path(cache_dir)
    identity = {"format_version": CORPUS_FORMAT_VERSION}
    if not needs_build(out_dir, force, stale_unless(out_dir, identity, "format version")):
        return {}
    started = time.monotonic()
    announce_downloads(cache_dir, PACKAGES, "telephony corpus")
    texts, manifests = {}, []
    for package in PACKAGES:
        deb = download_deb(cache_dir, package)
        unpacked = unpack_cached(
            deb, cache_dir / "unpacked" / package, [f"usr/share/doc/{package}/*"]
        )
        texts[package] = read_prompts(prompts_file(unpacked, package))
        copyright_file = unpacked / f"usr/share/doc/{package}/copyright"
        manifests.append(
            {
                "package": package,
                "version": deb_version(deb),
                "licence": package_licence(copyright_file.read_text(encoding="utf-8")),
                "prompts": len(texts[package]),
            }
        )
    pairs = prompt_pairs(texts[SPANISH_PACKAGE], texts[ENGLISH_PACKAGE])
    seen, keyed = set(), []
    for source, target in pairs:
        key = normalize_for_dedup(f"{source}\t{target}")
        if key not in seen:
            seen.add(key)
            keyed.append((normalize_for_dedup(source), (source, target)))
    if not keyed:
        raise CorpusError(f"no prompt is in both {SPANISH_PACKAGE} and {ENGLISH_PACKAGE}")
    splits, removed = split_keyed_pairs(keyed, SPLIT_SALT, DEV_FRACTION, TEST_FRACTION)
    write_splits(out_dir, splits)
    stats = {
        **identity,
        "source": {"language": "es", "origin": f"Asterisk's prompts ({SPANISH_PACKAGE})"},
        "target": {"language": "en", "origin": f"Asterisk's prompts ({ENGLISH_PACKAGE})"},
        "packages": manifests,
        "dropped": {
            "duplicate": len(pairs) - len(keyed),
            "in_train_spanish_removed_from_dev_test": removed,
        },
        "split_pairs": {split: len(splits[split]) for split in SPLITS},
        "split_rule": describe_split(SPLIT_SALT, "normalized Spanish", DEV_FRACTION, TEST_FRACTION),
        "build_seconds": round(time.monotonic() - started, 1),
    }
    write_corpus_stats(out_dir, stats)
    logger.info("telephony corpus: %d pairs (%s)", len(keyed), stats["split_pairs"])
    return stats
