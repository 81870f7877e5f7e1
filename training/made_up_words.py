"""How often a translation makes words up: "supermercated", "censumber".

A word of a translation is *made up* when it is neither a word of the target language nor
copied from its source. English words are those of Debian's word lists (`wamerican`,
`wbritish`: about 100,000 words each, with inflections, possessives and contractions; downloaded
once into the package cache and unpacked, never installed) together with every word of the
target side of the training data (a corpus's names and jargon are words the model was taught).
A reversed run's translations are Spanish (`training.config.TrainConfig.reverse`): its words
are those of Debian's Spanish word list (`wspanish`, `spanish_words`) and of its training
targets, the corpora's Spanish side. Copied means the
source holds the word too, letter case and accents aside: a name carried through, or an
untranslated word, is an error of another kind, which BLEU and chrF already see.

Words are runs of letters, with an apostrophe inside ("don't", "dog's"); digits and
punctuation are not words. The rate is made-up words over all words of the translations.
`training.evaluate` writes it into every report, and the benchmarks print it
(`benchmarks.bench_everyday`, `benchmarks.bench_robustness`).
"""

from __future__ import annotations

import collections
import functools
import re
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path

from training.corpus.debian import (
    DEFAULT_CACHE_DIR,
    announce_downloads,
    download_deb,
    unpack_cached,
)

WORDLIST_PACKAGES = ("wamerican", "wbritish")
SPANISH_WORDLIST_PACKAGE = "wspanish"
WORDLIST_CACHE_DIR = DEFAULT_CACHE_DIR / "wordlists"
_WORDLIST_MEMBERS = ("usr/share/dict/*",)
_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")
_POSSESSIVE = re.compile(r"['’]s?$")
# Made-up words a report lists, most frequent first.
REPORTED_EXAMPLES = 20


def words(text: str) -> list[str]:
    """The words of `text`, in order: runs of letters, an apostrophe allowed inside."""
    return _WORD.findall(text)


def _fold(word: str) -> str:
    """A word's comparison key: case-folded, accents removed, typographic apostrophe as '."""
    decomposed = unicodedata.normalize("NFD", word.casefold().replace("’", "'"))
    return "".join(c for c in decomposed if not unicodedata.combining(c))


@functools.lru_cache(maxsize=4)
def english_word_list(cache_dir: Path = WORDLIST_CACHE_DIR) -> tuple[str, ...]:
    """The words of Debian's American and British English word lists as they write them (a
    name capitalized: "Sunday", "sunday" absent), sorted.

    The packages are downloaded into `cache_dir` once (`training.corpus.debian`).

    Raises:
      CorpusError: a package cannot be downloaded or unpacked.
    """
    listed = set()
    announce_downloads(Path(cache_dir), WORDLIST_PACKAGES, "English word lists")
    for package in WORDLIST_PACKAGES:
        deb = download_deb(cache_dir, package)
        unpacked = unpack_cached(deb, Path(cache_dir) / "unpacked" / package, _WORDLIST_MEMBERS)
        for path in sorted((unpacked / "usr/share/dict").glob("*-english")):
            listed.update(path.read_text(errors="replace").split())
    return tuple(sorted(listed))


@functools.lru_cache(maxsize=4)
def english_words(cache_dir: Path = WORDLIST_CACHE_DIR) -> frozenset[str]:
    """The words of `english_word_list`, folded (`_fold`).

    Raises:
      CorpusError: a package cannot be downloaded or unpacked.
    """
    return frozenset(word for word in map(_fold, english_word_list(cache_dir)) if word)


@functools.lru_cache(maxsize=4)
def spanish_word_list(cache_dir: Path = WORDLIST_CACHE_DIR) -> tuple[str, ...]:
    """The words of Debian's Spanish word list (`wspanish`, 86,000 words, as written),
    downloaded into `cache_dir` once.

    Raises:
      CorpusError: the package cannot be downloaded or unpacked.
    """
    announce_downloads(Path(cache_dir), [SPANISH_WORDLIST_PACKAGE], "the Spanish word list")
    deb = download_deb(cache_dir, SPANISH_WORDLIST_PACKAGE)
    unpacked = unpack_cached(
        deb, Path(cache_dir) / "unpacked" / SPANISH_WORDLIST_PACKAGE, _WORDLIST_MEMBERS
    )
    text = (unpacked / "usr/share/dict/spanish").read_text(encoding="utf-8", errors="replace")
    return tuple(text.split())


@functools.lru_cache(maxsize=4)
def spanish_words(cache_dir: Path = WORDLIST_CACHE_DIR) -> frozenset[str]:
    """The words of `spanish_word_list`, folded (`_fold`).

    Raises:
      CorpusError: the package cannot be downloaded or unpacked.
    """
    return frozenset(word for word in map(_fold, spanish_word_list(cache_dir)) if word)


class MadeUpWords:
    """Finds the made-up words of translations (see the module's docstring).

    Args:
      known_words: the words that count as words of the target language, any case.
    """

    def __init__(self, known_words: Iterable[str]):
        self._known = frozenset(_fold(word) for word in known_words)

    @classmethod
    def for_training_targets(
        cls, targets: Iterable[str], cache_dir: Path = WORDLIST_CACHE_DIR
    ) -> MadeUpWords:
        """English words: Debian's word lists and every word of `targets` (the training
        data's target side)."""
        return cls(english_words(cache_dir) | {word for text in targets for word in words(text)})

    def is_known(self, word: str) -> bool:
        """Whether `word` is a known word, or one with a possessive ending ("Carlos'",
        "taxi's") or whose apostrophe-joined parts are each known."""
        folded = _fold(word)
        if folded in self._known or _POSSESSIVE.sub("", folded) in self._known:
            return True
        parts = folded.split("'")
        return len(parts) > 1 and all(part in self._known for part in parts if part)

    def made_up(self, translation: str, source: str) -> list[str]:
        """The made-up words of `translation`, in order: not known, not in `source`."""
        copied = {_fold(word) for word in words(source)}
        return [
            word
            for word in words(translation)
            if _fold(word) not in copied and not self.is_known(word)
        ]

    def report(self, translations: Sequence[str], sources: Sequence[str]) -> dict:
        """The rate over a set: `made_up_rate` (made-up words / words of the translations),
        `made_up_words`, `output_words`, and the most frequent made-up words with their
        counts (`made_up_examples`)."""
        found = collections.Counter()
        total = 0
        for translation, source in zip(translations, sources, strict=True):
            total += len(words(translation))
            found.update(self.made_up(translation, source))
        count = sum(found.values())
        return {
            "made_up_rate": round(count / total, 4) if total else 0.0,
            "made_up_words": count,
            "output_words": total,
            "made_up_examples": dict(found.most_common(REPORTED_EXAMPLES)),
        }


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m training.made_up_words [--translations FILE --sources FILE]`: the rate of a
    translated file (one sentence a line, its sources line by line), known words the word
    lists and the targets of `--targets` (a TSV corpus's train split, optional); without files,
    fetches the word lists, English and Spanish (a reversed run's), into the package cache
    (`make data-test`) and says how many words they hold."""
    import argparse
    import json
    import sys

    from training.corpus import CorpusError, load_pairs

    parser = argparse.ArgumentParser(prog="python -m training.made_up_words", description=__doc__)
    parser.add_argument("--translations", type=Path, help="translated file, a sentence a line")
    parser.add_argument("--sources", type=Path, help="its source file, line by line")
    parser.add_argument("--targets", help="a corpus whose train targets count as English")
    args = parser.parse_args(argv)
    if (args.translations is None) != (args.sources is None):
        parser.error("--translations and --sources go together")
    try:
        if args.translations is None:
            print(
                f"{len(english_words()):,} English words and {len(spanish_words()):,} Spanish "
                f"words in {WORDLIST_CACHE_DIR}"
            )
            return 0
        targets = [t for _, t in load_pairs(args.targets, "train")] if args.targets else []
        translations = args.translations.read_text(encoding="utf-8").splitlines()
        sources = args.sources.read_text(encoding="utf-8").splitlines()
        if len(translations) != len(sources):
            parser.error(
                f"{args.translations} has {len(translations)} lines, {args.sources} "
                f"{len(sources)}: one translation a source line"
            )
        report = MadeUpWords.for_training_targets(targets).report(translations, sources)
    except (CorpusError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
