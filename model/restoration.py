"""Accents and capitals put back on sources typed without them.

People type Spanish without its accents ("amaras a tu projimo") and in lowercase ("jesus fue a
galilea"), and the model learned from a text that writes every accent and capital. Most words
leave no doubt about what was meant, so two tables learned from the training sources put them
back before the subword model:

- `accent_table`: each bare form ("projimo") that is not itself a word of the sources, with the
  word that loses its accents to it ("prójimo"; the most frequent one where several do). A form
  that is a word ("esta": this; "está": is) is left as typed. Accents here are the acute accent
  and the diaeresis (á é í ó ú ü), typed with a dead key and left out; ñ is a letter of its own
  (`training.noise` strips the same marks in its `strip_accents` perturbation). The typed word's
  case is kept ("PROJIMO" → "PRÓJIMO").
- `case_table`: each lowercase word that the sources write mostly capitalized where a sentence
  does not start ("jesús" → "Jesús", "dios" → "Dios"), as Moses's truecaser learns it. It is
  applied only to a source with no capital letter at all, whose first letter is then capitalized
  too: a source with any capital was cased by its writer, and is left alone.

Text written correctly is unchanged by both. What they gain on the bundled model is in
docs/benchmark-log.md, "Accents and capitals restored".

A third table, `names` (`model.spelling.name_table`), maps the forms in which people write names
today to the forms of the training sources ("Belén" → "Bethlehem", "Betania" → "Bethania" for
the 1909 Bible), so the model reads a name it learned instead of copying an unknown one. Its keys
are never words of the sources, so it changes nothing the model was trained on. It is applied to
a word typed capitalized or in capitals, and to a lowercase word only in a source with no capital
at all ("set" in a cased sentence is not the name Set). Unlike the other two it must run before
the placeholders (`model.placeholders`), which would otherwise protect "Belén" as an unknown
name: the Translator applies it first (`Restoration.rename`), the source tokenizer does not.

A run's tokenizer directory holds its tables (`ACCENTS_FILE`, `CASES_FILE`, `NAMES_FILE`,
written by `training.vocabulary`), and its source tokenizer applies the first two
(`Tokenizer.restoration`) after modernizing the spelling and normalizing the case: in training,
evaluation and the exported SavedModel alike.
"""

import collections
import os
import re
import unicodedata

import tensorflow as tf

from model.placeholders import join_words, split_words

ACCENTS_FILE = "accents.tsv"
CASES_FILE = "cases.tsv"
NAMES_FILE = "names.tsv"
# The combining acute accent and diaeresis (NFD): the marks a bare form leaves out.
ACCENT_MARKS = "[\u0301\u0308]"
# A word of a table: a run of letters (no digits, no "_").
WORD = re.compile(r"[^\W\d_]+")
# Where a sentence starts, so its first word's capital says nothing of the word.
_SENTENCE_START = re.compile(r"(^|[.!?:;¿¡\"«“‘(—]\s*)$")


def strip_accents(text):
    """`text` (str) without acute accents and diaereses (NFC)."""
    decomposed = unicodedata.normalize("NFD", text)
    return unicodedata.normalize("NFC", re.sub(ACCENT_MARKS, "", decomposed))


def accent_table(texts):
    """`{bare form: accented word}` of the words of `texts` (iterable of str), in lowercase:
    each bare form that is not itself a word of `texts`, with the most frequent word that
    `strip_accents` turns into it (ties: the first in sorted order)."""
    counts = collections.Counter(
        word.lower() for text in texts for word in WORD.findall(unicodedata.normalize("NFC", text))
    )
    candidates = collections.defaultdict(list)
    for word, count in counts.items():
        bare = strip_accents(word)
        if bare != word and bare not in counts:
            candidates[bare].append((-count, word))
    return {bare: min(words)[1] for bare, words in sorted(candidates.items())}


def case_table(texts):
    """`{lowercase word: cased word}` of the words of `texts` (iterable of str) that do not start
    a sentence and are not all capitals: each word whose most frequent form there is not its
    lowercase one (ties: the first in sorted order)."""
    forms = collections.defaultdict(collections.Counter)
    for text in texts:
        text = unicodedata.normalize("NFC", text)
        for match in WORD.finditer(text):
            word = match.group()
            # Capitals of a whole word ("JESUS" in an inscription) emphasize; they do not case it.
            shouting = len(word) > 1 and word.isupper()
            if not shouting and not _SENTENCE_START.search(text[: match.start()]):
                forms[word.lower()][word] += 1
    table = {}
    for lower, counts in sorted(forms.items()):
        best = min(counts.items(), key=lambda item: (-item[1], item[0]))[0]
        if best != lower:
            table[lower] = best
    return table


def write_table(path, table):
    """Writes `table` to `path`: `key<TAB>value` lines."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(f"{key}\t{value}\n" for key, value in table.items())


def read_table(path):
    with open(path, encoding="utf-8") as handle:
        return dict(line.rstrip("\n").split("\t") for line in handle if line.strip())


def capitalized(words):
    """`words` (`tf.string`, non-empty) with their first character uppercased."""
    length = tf.strings.length(words, unit="UTF8_CHAR")
    first = tf.strings.substr(words, tf.zeros_like(length), tf.ones_like(length), "UTF8_CHAR")
    rest = tf.strings.substr(words, tf.ones_like(length), length, "UTF8_CHAR")
    return tf.strings.join([tf.strings.upper(first, encoding="utf-8"), rest])


def _has_capital(texts):
    return tf.strings.regex_full_match(texts, r"(?s).*\p{Lu}.*")


def _replace_words(texts, table, lowercase_in_uncased_rows_only=False):
    """`texts` `[batch]` with each word whose lowercase form is a key of `table` (a `_WordTable`
    of lowercase words) replaced by its value in the word's case: lowercase, all capitals, or
    else capitalized. With `lowercase_in_uncased_rows_only`, a word typed in lowercase is
    replaced only in a text without any capital letter."""
    pieces = split_words(texts)
    typed = pieces.flat_values
    lowered = tf.strings.lower(typed, encoding="utf-8")
    found, value = table.lookup(lowered)
    in_lowercase = tf.equal(typed, lowered)
    if lowercase_in_uncased_rows_only:
        uncased_row = tf.gather(tf.logical_not(_has_capital(texts)), pieces.value_rowids())
        found &= tf.logical_not(in_lowercase) | uncased_row
    all_capitals = tf.equal(tf.strings.upper(typed, encoding="utf-8"), typed) & (
        tf.strings.length(typed, unit="UTF8_CHAR") > 1
    )
    recased = tf.where(
        in_lowercase,
        value,
        tf.where(all_capitals, tf.strings.upper(value, encoding="utf-8"), capitalized(value)),
    )
    return join_words(pieces.with_flat_values(tf.where(found, recased, typed)))


class _WordTable(tf.Module):
    """A constant `{word: word}` lookup (nothing to initialize where the SavedModel is served)."""

    def __init__(self, table, name=None):
        super().__init__(name=name)
        self.size = len(table)
        # A hash table cannot be empty; "" is never a word, and maps to "not found".
        table = table or {"": ""}
        self._table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(list(table), tf.string), tf.constant(list(table.values()), tf.string)
            ),
            default_value="",
        )

    def lookup(self, words):
        """`(found, values)`: where `words` are keys, and their values (the word itself where
        not, so that string ops on them never meet an empty word)."""
        values = self._table.lookup(words)
        found = tf.not_equal(values, "")
        return found, tf.where(found, values, words)


class Restoration(tf.Module):
    """Puts accents, then capitals, back on sources, and renames names (the module docstring),
    in the graph.

    Args:
        accents: `accent_table`'s dict, or None: accents left as typed.
        cases: `case_table`'s dict, or None: capitals left as typed.
        names: `model.spelling.name_table`'s dict, or None: names left as typed.
    """

    def __init__(self, accents=None, cases=None, names=None, name=None):
        super().__init__(name=name)
        self.accents = None if accents is None else _WordTable(accents)
        self.cases = None if cases is None else _WordTable(cases)
        self.names = None if names is None else _WordTable(names)

    @classmethod
    def from_directory(cls, directory, accents=True, cases=True, names=False):
        """The tables a tokenizer directory holds (`ACCENTS_FILE`, `CASES_FILE`, `NAMES_FILE`),
        those asked."""
        return cls(
            read_table(os.path.join(directory, ACCENTS_FILE)) if accents else None,
            read_table(os.path.join(directory, CASES_FILE)) if cases else None,
            read_table(os.path.join(directory, NAMES_FILE)) if names else None,
        )

    def __call__(self, texts):
        """`texts` `[batch]` with accents and capitals restored, as the tables say."""
        texts = tf.convert_to_tensor(texts, tf.string)
        if self.accents is not None:
            texts = _replace_words(texts, self.accents)
        if self.cases is not None:
            texts = self._restore_case(texts)
        return texts

    def rename(self, texts):
        """`texts` `[batch]` with names written as the training sources write them (the module
        docstring); unchanged without a names table."""
        texts = tf.convert_to_tensor(texts, tf.string)
        if self.names is None:
            return texts
        return _replace_words(texts, self.names, lowercase_in_uncased_rows_only=True)

    def _restore_case(self, texts):
        pieces = split_words(texts)
        words = pieces.flat_values
        _, cased = self.cases.lookup(words)
        # The first piece of a row that starts with a letter starts the sentence.
        is_word = tf.strings.regex_full_match(words, r"(?s)\pL.*")
        words_before = tf.cumsum(
            pieces.with_flat_values(tf.cast(is_word, tf.int32)), axis=1, exclusive=True
        ).flat_values
        first = is_word & tf.equal(words_before, 0)
        cased = tf.where(first, capitalized(tf.where(first, cased, "x")), cased)
        restored = join_words(pieces.with_flat_values(cased))
        lowercase_only = tf.logical_not(_has_capital(texts))
        return tf.where(lowercase_only, restored, texts)
