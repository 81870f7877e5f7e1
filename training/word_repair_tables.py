"""The tables with which a run repairs its made-up words (`model.word_repair`).

`add_word_repair` writes them into a trained run's tokenizer directory, as `add_restoration`
writes the restoration tables (`training.vocabulary --add_word_repair`):

- `ENGLISH_WORDS_FILE`: the words that count as English, those of Debian's word lists
  (`training.made_up_words.english_word_list`) and of the run's training targets, as
  `training.made_up_words` counts them.
- `LEXICON_FILE`: a Spanish word's key (`model.placeholders.word_key_graph`: lowercased, accents
  stripped, so a word typed without its accents is found) → its English, as Apertium
  (`training.corpus.apertium`, `spa-eng`) translates the word alone. The words are those of the
  run's training sources and of Debian's Spanish word list (`wspanish`, 86,000 words, the
  everyday ones among them), where Apertium knows them. Apertium translates a lone word as a
  sentence: a verb gets its subject ("ladra" → "It barks"), which is dropped, and a first
  capital, which is kept only where the English word lists write the word so ("Sunday").
  Where two words share a key ("papa", "papá") the one the sources use most is kept.

The vocabularies are unchanged, so the run's weights still fit them, and a run resumed or
fine-tuned from the directory keeps them (`training.vocabulary.ADDED_AFTER_TRAINING`).
"""

from __future__ import annotations

import collections
import logging
import os
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path

from tqdm import tqdm

from model.restoration import write_table
from model.tokenizer import CONFIG_FILE, read_tokenizer_config, write_tokenizer_config
from model.word_repair import ENGLISH_WORDS_FILE, LEXICON_FILE, REPAIR_WORDS_KEY
from training.corpus.apertium import (
    SPANISH_TO_ENGLISH,
    ensure_apertium,
    has_unknown_marks,
    translate,
)
from training.made_up_words import (
    WORDLIST_CACHE_DIR,
    english_word_list,
    spanish_word_list,
    words,
)

logger = logging.getLogger(__name__)

# The subject Apertium gives a lone verb ("It barks"), dropped from the lexicon's English.
_SUBJECTS = frozenset({"i", "you", "he", "she", "it", "we", "they"})


def word_key(word: str) -> str:
    """`model.placeholders.word_key_graph` in Python: marks stripped (NFD), lowercased."""
    decomposed = unicodedata.normalize("NFD", word)
    return "".join(c for c in decomposed if not unicodedata.category(c).startswith("M")).lower()


def lexicon_english(translation: str, listed: frozenset[str]) -> str:
    """Apertium's translation of a lone word as the lexicon keeps it: its subject dropped, its
    first capital kept only where the word lists (`listed`, as written) lack the lowercase
    word."""
    parts = translation.split()
    if len(parts) > 1 and parts[0].lower() in _SUBJECTS:
        parts = parts[1:]
    if not parts:
        return ""
    first = parts[0]
    lowered = first[:1].lower() + first[1:]
    if lowered in listed or first not in listed:
        parts[0] = lowered
    return " ".join(parts)


def lexicon_table(
    source_words: collections.Counter, listed: frozenset[str], progress: bool = True
) -> dict[str, str]:
    """`word_key` → English of the words of `source_words` (word → uses) that Apertium
    translates without an unknown-word mark, the most used word of a key first."""
    ordered = [word for word, _ in source_words.most_common() if len(word) > 1]
    with tqdm(total=len(ordered), unit=" words", desc="Apertium", disable=not progress) as bar:
        english = translate(ordered, SPANISH_TO_ENGLISH, progress=bar.update)
    table = {}
    for word, translation in zip(ordered, english, strict=True):
        key = word_key(word)
        if key in table or not translation or has_unknown_marks(translation):
            continue
        kept = lexicon_english(translation, listed)
        if kept:
            table[key] = kept
    return table


def add_word_repair(
    tokenizer_dir: str,
    pairs: Sequence[tuple[str, str]],
    cache_dir: Path = WORDLIST_CACHE_DIR,
    spanish_words: Iterable[str] | None = None,
) -> dict[str, int]:
    """Gives the run whose tokenizer directory is `tokenizer_dir` the repair of made-up words
    (see the module docstring), from its training `pairs`; `spanish_words` in place of
    Debian's Spanish word list (None: download it). Installs Apertium where it can
    (`ensure_apertium`).

    Returns:
      `{"english_words": n, "lexicon": n}`, the tables' sizes.

    Raises:
      FileNotFoundError: no tokenizer config there.
      CorpusError: a word list cannot be had, or Apertium cannot run.
    """
    config = read_tokenizer_config(tokenizer_dir)
    if config is None:
        raise FileNotFoundError(f"{os.path.join(tokenizer_dir, CONFIG_FILE)} not found.")
    ensure_apertium()
    listed = frozenset(english_word_list(cache_dir))
    english = set(listed)
    source_words = collections.Counter()
    for source, target in pairs:
        english.update(words(target))
        source_words.update(words(source))
    if spanish_words is None:
        spanish_words = spanish_word_list(cache_dir)
    source_words.update(word for word in spanish_words if word not in source_words)
    lexicon = lexicon_table(source_words, listed)
    write_table(os.path.join(tokenizer_dir, LEXICON_FILE), lexicon)
    with open(os.path.join(tokenizer_dir, ENGLISH_WORDS_FILE), "w", encoding="utf-8") as handle:
        handle.writelines(f"{word}\n" for word in sorted(english))
    write_tokenizer_config(tokenizer_dir, {**config, REPAIR_WORDS_KEY: True})
    return {"english_words": len(english), "lexicon": len(lexicon)}
