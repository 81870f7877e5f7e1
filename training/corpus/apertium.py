"""Apertium, the rule-based translator Debian ships (`apertium-en-es`), as a tool.

It translates English into Spanish for the back-translated and lexicon corpora
(`training.corpus.backtranslation`, `training.corpus.lexicon`), and Spanish into English as
the peer the everyday benchmark compares with (`benchmarks.bench_everyday`). Apertium marks
a word it does not know with `*`, one it cannot inflect with `#` and one its bilingual
dictionary lacks with `@`: `has_unknown_marks` finds them, so a caller can drop such output.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from training.corpus.debian import package_licence
from training.corpus.tsv import CorpusError

logger = logging.getLogger(__name__)

APERTIUM_PACKAGE = "apertium-en-es"
SPANISH_TO_ENGLISH = "spa-eng"
ENGLISH_TO_SPANISH = "eng-spa"

# A mark at the start of a word: `*unknown`, `#uninflected`, `@untranslated`.
_UNKNOWN_MARK = re.compile(r"(?:^|(?<=[\s¿¡(\"'«]))[*#@][^\W\d_]")
# Apertium keeps a blank line as a paragraph break, which no rule reorders words across: the
# one separator that keeps a batch of segments aligned one to one.
_SEGMENT_SEPARATOR = "\n\n"
_SEGMENT_SPLIT = re.compile(r"\n[ \t]*\n")
# Segments per apertium process: a few seconds of work each, for progress.
_BATCH = 2000


def run_direction(reverse):
    """Apertium's direction of a run's translations: the corpora's pairs are Spanish→English,
    and a reversed run (`training.config.TrainConfig.reverse`) translates English."""
    return ENGLISH_TO_SPANISH if reverse else SPANISH_TO_ENGLISH


def has_unknown_marks(text: str) -> bool:
    """Whether Apertium marked a word of `text` as unknown (`*`), uninflectable (`#`) or
    missing from its bilingual dictionary (`@`)."""
    return bool(_UNKNOWN_MARK.search(text))


def apertium_version() -> str:
    """The installed version of the language pair package, e.g. `0.8.1-2`, or "" if none."""
    try:
        result = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}", APERTIUM_PACKAGE],
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""


def apertium_manifest() -> dict:
    """The installed language pair's package, version and licence, for a corpus's stats."""
    copyright_file = Path("/usr/share/doc") / APERTIUM_PACKAGE / "copyright"
    licence = (
        package_licence(copyright_file.read_text(errors="replace"))
        if copyright_file.is_file()
        else "unknown"
    )
    return {"package": APERTIUM_PACKAGE, "version": apertium_version(), "licence": licence}


def _pair_installed() -> bool:
    if shutil.which("apertium") is None:
        return False
    result = subprocess.run(["apertium", "-l"], capture_output=True, text=True)
    return SPANISH_TO_ENGLISH in result.stdout.split()


def ensure_apertium(install: bool = True) -> None:
    """Makes sure `apertium spa-eng` and `eng-spa` run, installing Debian's package if needed.

    Args:
      install: run `apt-get install apertium-en-es` when it is missing (needs root).

    Raises:
      CorpusError: Apertium is missing and cannot be installed here; the message says how.
    """
    if _pair_installed():
        return
    how = f"install it with `apt-get install {APERTIUM_PACKAGE}` (Debian's package, as root)"
    if not install or not hasattr(os, "geteuid") or os.geteuid() != 0:
        raise CorpusError(f"Apertium's English-Spanish pair is not installed: {how}")
    logger.info("installing %s (Apertium) with apt-get", APERTIUM_PACKAGE)
    command = ["apt-get", "install", "-y", "-q", APERTIUM_PACKAGE]
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        result = subprocess.run(command, capture_output=True, text=True, env=environment)
        if result.returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=environment)
            result = subprocess.run(command, capture_output=True, text=True, env=environment)
    except FileNotFoundError as exc:
        raise CorpusError(f"apt-get not found: {how}") from exc
    if result.returncode != 0 or not _pair_installed():
        raise CorpusError(
            f"apt-get install {APERTIUM_PACKAGE} failed ({result.stderr.strip()[-300:]}); {how}"
        )


def _translate_batch(segments: Sequence[str], direction: str, mark_unknown: bool) -> list[str]:
    text = _SEGMENT_SEPARATOR.join(segments) + "\n"
    command = ["apertium", *([] if mark_unknown else ["-u"]), direction]
    result = subprocess.run(command, input=text, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise CorpusError(f"apertium {direction} failed: {result.stderr.strip()[-300:]}")
    outputs = [" ".join(part.split()) for part in _SEGMENT_SPLIT.split(result.stdout.strip("\n"))]
    if len(outputs) != len(segments):
        raise CorpusError(
            f"apertium {direction} returned {len(outputs)} segments for {len(segments)}"
        )
    return outputs


def translate(
    lines: Sequence[str],
    direction: str,
    progress: Callable[[int], object] | None = None,
    mark_unknown: bool = True,
) -> list[str]:
    """Each line translated by `apertium DIRECTION`.

    Args:
      lines: one segment each; whitespace inside a line (a newline too) becomes one space, and
        an empty line stays empty.
      direction: `SPANISH_TO_ENGLISH` or `ENGLISH_TO_SPANISH`.
      mark_unknown: keep Apertium's marks of unknown words (`has_unknown_marks`); off, as a
        user reads it (`apertium -u`).
      progress: called with the number of lines done after each batch (e.g. a tqdm's update).

    Returns:
      The translations, one per line, in order.

    Raises:
      CorpusError: Apertium is not installed (`ensure_apertium`) or failed.
    """
    if shutil.which("apertium") is None:
        raise CorpusError(
            f"apertium not found: install it with `apt-get install {APERTIUM_PACKAGE}`"
        )
    cleaned = [" ".join(line.split()) for line in lines]
    translations = [""] * len(cleaned)
    indices = [i for i, line in enumerate(cleaned) if line]
    for start in range(0, len(indices), _BATCH):
        batch = indices[start : start + _BATCH]
        for index, output in zip(
            batch,
            _translate_batch([cleaned[i] for i in batch], direction, mark_unknown),
            strict=True,
        ):
            translations[index] = output
        if progress is not None:
            progress(len(batch))
    return translations
