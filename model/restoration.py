"""Accents and capitals put back on sources typed without them.

People type Spanish without its accents ("amaras a tu projimo") and in lowercase ("jesus fue a
galilea"), and the model learned from a text that writes every accent and capital. Most words
leave no doubt about what was meant, so tables learned from the training sources put them back
before the subword model:

- `accent_table`: each bare form ("projimo") that is not itself a word of the sources, with the
  word that loses its accents to it ("prójimo"; the most frequent one where several do). A form
  that is a word ("esta": this; "está": is) is left as typed by it. Accents here are the acute
  accent and the diaeresis (á é í ó ú ü), typed with a dead key and left out; ñ is a letter of
  its own (`training.noise` strips the same marks in its `strip_accents` perturbation). The
  typed word's case is kept ("PROJIMO" → "PRÓJIMO").
- `context_accent_table`: the forms left as typed by the first table, read by their neighbours
  ("no se donde esta" → "no sé dónde está"). For each context of a word with such a bare form,
  its previous and next words (bare, lowercase; the nearest punctuation character where
  punctuation separates them, `TEXT_START` and `TEXT_END` at the ends), the form the sources
  write there, where enough of its occurrences (`CONTEXT_MIN_COUNT`) clearly agree
  (`CONTEXT_MIN_SHARE`); a context backs off to one neighbour alone, the one whose form is the
  larger share of its occurrences where both decide (ties: the previous word; so "que hora es"
  is read by "que hora", not by the start of the text), then to the word alone, and a word no
  context decides is left as typed. It is applied only to a source typed without any accent
  (á é í ó ú ü, in either case): a writer who types accents meant "se" by "se". The typed
  word's case is kept ("NO SE" → "NO SÉ").
- `case_table`: each lowercase word that the sources write mostly capitalized where a sentence
  does not start ("jesús" → "Jesús", "dios" → "Dios"), as Moses's truecaser learns it. It is
  applied only to a source with no capital letter at all, whose first letter is then capitalized
  too: a source with any capital was cased by its writer, and is left alone.

Text written correctly is unchanged by the accent and case tables; the context table changes
only a source without any accent, where a word the sources write accented in that context is
most often an accent left out. What the accent and case tables gain on the bundled model is in
docs/benchmark-log.md, "Accents and capitals restored".

Another table, `names` (`model.spelling.name_table`), maps the forms in which people write names
today to the forms of the training sources ("Belén" → "Bethlehem", "Betania" → "Bethania" for
the 1909 Bible), so the model reads a name it learned instead of copying an unknown one. Its keys
are never words of the sources, so it changes nothing the model was trained on. It is applied to
a word typed capitalized or in capitals, and to a lowercase word only in a source with no capital
at all ("set" in a cased sentence is not the name Set). Unlike the others it must run before
the placeholders (`model.placeholders`), which would otherwise protect "Belén" as an unknown
name: the Translator applies it first (`Restoration.rename`), the source tokenizer does not.

A run's tokenizer directory holds its tables (`ACCENTS_FILE`, `ACCENT_CONTEXTS_FILE`,
`CASES_FILE`, `NAMES_FILE`, written by `training.vocabulary`), and its source tokenizer applies
the accents and capitals (`Tokenizer.restoration`) after modernizing the spelling and normalizing
the case: in training, evaluation and the exported SavedModel alike. A directory written before
`ACCENT_CONTEXTS_FILE` existed restores accents with the first table only, as it did.
"""

import collections
import fractions
import itertools
import os
import re
import unicodedata

import tensorflow as tf

from model.placeholders import join_words, split_words

ACCENTS_FILE = "accents.tsv"
ACCENT_CONTEXTS_FILE = "accent_contexts.tsv"
CASES_FILE = "cases.tsv"
NAMES_FILE = "names.tsv"
# The combining acute accent and diaeresis (NFD): the marks a bare form leaves out.
ACCENT_MARKS = "[\u0301\u0308]"
# A word of a table: a run of letters (no digits, no "_").
WORD = re.compile(r"[^\W\d_]+")
# Where a sentence starts, so its first word's capital says nothing of the word.
_SENTENCE_START = re.compile(r"(^|[.!?:;¿¡\"«“‘(—]\s*)$")
# The neighbour of a text's first word before it, and of its last word after it.
TEXT_START, TEXT_END = "^", "$"
# The evidence a context of `context_accent_table` needs: this many occurrences of the word
# there, this share of them in one form (chosen on the dev sets of the bundle's corpora).
CONTEXT_MIN_COUNT = 2
CONTEXT_MIN_SHARE = 0.7
# Accented letters, precomposed or as combining marks: a source with any was typed with accents.
_ANY_ACCENT = "áéíóúüÁÉÍÓÚÜ\u0301\u0308"
# What separates two words without punctuation (RE2's `\s` and the Unicode separators).
_SPACE = "\t\n\f\r\\p{Z}"


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


def _is_word_character(char):
    # As `model.placeholders.NOT_WORD` draws words: letters, digits and combining marks.
    return unicodedata.category(char)[0] in "LNM"


def _is_space(char):
    # As `_SPACE` (RE2) reads it.
    return char in "\t\n\f\r" or unicodedata.category(char)[0] == "Z"


def word_contexts(text):
    """`[(word, previous, next)]`: the words of `text` (str) as `split_words` cuts them (runs of
    letters, digits and combining marks), in order, each with its neighbours on either side:
    the word beside it, lowercase and without accents, where only spaces separate them; else
    the punctuation character nearest to it ("hola, que" → "," and "que"); `TEXT_START` or
    `TEXT_END` at the ends of `text`."""
    pieces = ["".join(run) for _, run in itertools.groupby(text, _is_word_character)]

    def neighbour(index, step, edge):
        between, beside = index + step, index + 2 * step
        if not 0 <= between < len(pieces):
            return edge
        punctuation = "".join(char for char in pieces[between] if not _is_space(char))
        if punctuation:
            return punctuation[-1] if step < 0 else punctuation[0]
        if not 0 <= beside < len(pieces):
            return edge
        return strip_accents(pieces[beside].lower())

    return [
        (piece, neighbour(index, -1, TEXT_START), neighbour(index, 1, TEXT_END))
        for index, piece in enumerate(pieces)
        if _is_word_character(piece[0])
    ]


def _majority(forms, min_count, min_share):
    """`(form, share)`: the form most of `forms` (a Counter) are, and the share of them it is (a
    `fractions.Fraction`), if they are at least `min_count` and it is at least `min_share` of
    them (ties: the first in sorted order); else None."""
    total = sum(forms.values())
    if total < min_count:
        return None
    form, count = min(forms.items(), key=lambda item: (-item[1], item[0]))
    return (form, fractions.Fraction(count, total)) if count >= min_share * total else None


def context_accent_table(texts, min_count=CONTEXT_MIN_COUNT, min_share=CONTEXT_MIN_SHARE):
    """`{(previous, bare form, next): (word, share)}` of the ambiguous bare forms of `texts`
    (iterable of str), in lowercase: a bare form is ambiguous where it is a word of `texts` and
    another word loses its accents to it ("esta": "está", "ésta").

    Each occurrence of a word with an ambiguous bare form counts the word (lowercase) in four
    contexts of its neighbours (`word_contexts`): both, the previous only (next ""), the next
    only (previous ""), none ("", form, ""). A context decides the form that is the majority
    there (`min_count` occurrences, `min_share` of them), with the share of them it is; one
    without it decides nothing. `Restoration` reads both neighbours' entry; else, of the two
    one-sided entries the table holds, the one of the larger share (ties: the previous word's);
    else the word alone's; else keeps the form as typed (`context_lookup`). An entry is kept only
    where leaving it out would change what that reading gives for some neighbours, which makes
    the table's reading that of every decided context. An entry whose word is the bare form
    itself ("", "esta", "es") stops a context after it from accenting it.
    """
    texts = [unicodedata.normalize("NFC", text) for text in texts]
    words = {word.lower() for text in texts for word, _, _ in word_contexts(text)}
    ambiguous = {strip_accents(word) for word in words if strip_accents(word) != word} & words
    counts = collections.defaultdict(collections.Counter)
    for text in texts:
        for word, previous, following in word_contexts(text):
            word = word.lower()
            bare = strip_accents(word)
            if bare in ambiguous:
                for context in ((previous, following), (previous, ""), ("", following), ("", "")):
                    counts[(context[0], bare, context[1])][word] += 1
    decided = {}
    for context, forms in sorted(counts.items()):
        majority = _majority(forms, min_count, min_share)
        if majority is not None:
            decided[context] = majority
    return _entries_that_decide(decided)


def context_lookup(table, previous, bare, following):
    """The word `table` (`context_accent_table`'s) reads for `bare` between `previous` and
    `following`, as `Restoration` does: both neighbours' entry; else the one-sided entry of the
    larger share (ties: the previous word's); else the word alone's; else `bare`."""
    if (previous, bare, following) in table:
        return table[(previous, bare, following)][0]
    before, after = table.get((previous, bare, "")), table.get(("", bare, following))
    if before and after:
        return (before if before[1] >= after[1] else after)[0]
    return (before or after or table.get(("", bare, ""), (bare,)))[0]


def _entries_that_decide(decided):
    """The entries of `decided` (`{(previous, bare, next): (form, share)}`) without which
    `context_lookup` would give another form for some neighbours."""

    def alone(bare):
        return decided.get(("", bare, ""), (bare,))[0]

    # Per bare form and side, the lowest share of a one-sided entry that accents otherwise than
    # the word alone: an entry of the word alone's form on the other side matters where it
    # would outweigh one of those.
    lowest = collections.defaultdict(lambda: float("inf"))
    for (previous, bare, following), (form, share) in decided.items():
        if bool(previous) != bool(following) and form != alone(bare):
            side = "previous" if previous else "next"
            lowest[(bare, side)] = min(lowest[(bare, side)], share)
    table = {}
    for (previous, bare, following), (form, share) in decided.items():
        if previous and following:
            keys = ((previous, bare, ""), ("", bare, following), ("", bare, ""))
            below = {key: decided[key] for key in keys if key in decided}
            keep = form != context_lookup(below, previous, bare, following)
        elif previous:
            keep = form != alone(bare) or share >= lowest[(bare, "next")]
        elif following:
            keep = form != alone(bare) or share > lowest[(bare, "previous")]
        else:
            keep = form != bare
        if keep:
            table[(previous, bare, following)] = (form, share)
    return table


def write_table(path, table):
    """Writes `table` to `path`: `key<TAB>value` lines."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(f"{key}\t{value}\n" for key, value in table.items())


def read_table(path):
    with open(path, encoding="utf-8") as handle:
        return dict(line.rstrip("\n").split("\t") for line in handle if line.strip())


def write_context_table(path, table):
    """Writes `table` (`context_accent_table`'s) to `path`:
    `previous<TAB>bare<TAB>next<TAB>word<TAB>share` lines, the share a fraction ("3/4", "1"; no
    neighbour is a space, so none holds a tab)."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(
            "\t".join((*context, word, str(share))) + "\n"
            for context, (word, share) in table.items()
        )


def read_context_table(path):
    with open(path, encoding="utf-8") as handle:
        rows = (line.rstrip("\n").split("\t") for line in handle if line.strip())
        return {tuple(row[:3]): (row[3], fractions.Fraction(row[4])) for row in rows}


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
    recased = _in_typed_case(typed, in_lowercase, value)
    return join_words(pieces.with_flat_values(tf.where(found, recased, typed)))


def _in_typed_case(typed, in_lowercase, values):
    """`values` (lowercase words, none empty) in the case of the words `typed`: lowercase where
    `in_lowercase`, all capitals where `typed` is (two letters or more), else capitalized."""
    all_capitals = tf.equal(tf.strings.upper(typed, encoding="utf-8"), typed) & (
        tf.strings.length(typed, unit="UTF8_CHAR") > 1
    )
    return tf.where(
        in_lowercase,
        values,
        tf.where(all_capitals, tf.strings.upper(values, encoding="utf-8"), capitalized(values)),
    )


def _restore_accents_in_context(texts, table):
    """`texts` `[batch]` with the ambiguous bare forms of a text typed without any accent given
    the word `table` (a `_ContextTable`) reads for their neighbours (`context_lookup`), in the
    typed word's case; texts with an accent unchanged."""
    pieces = split_words(texts)
    typed = pieces.flat_values
    lowered = tf.strings.lower(typed, encoding="utf-8")
    rows = pieces.value_rowids()
    index = tf.range(tf.size(typed, out_type=tf.int64))
    # How many pieces of its row each piece has before and after it.
    before = index - tf.gather(pieces.row_starts(), rows)
    after = tf.gather(pieces.row_limits(), rows) - index - 1
    # In a text without accents a lowercase word is its bare form.
    punctuation = tf.strings.regex_replace(typed, f"[{_SPACE}]+", "")
    previous = _neighbours(lowered, punctuation, before, -1, TEXT_START)
    following = _neighbours(lowered, punctuation, after, 1, TEXT_END)
    none = tf.fill(tf.shape(lowered), "")
    both, before, after, alone = (
        table.lookup(tf.strings.join([left, lowered, right], "\t"))
        for left, right in (
            (previous, following),
            (previous, none),
            (none, following),
            (none, none),
        )
    )
    # `(found, word, share)` each: of the one-sided entries, the larger share (ties: before).
    after_wins = after[0] & tf.logical_not(before[0] & (before[2] >= after[2]))
    one_sided = tf.where(after_wins, after[1], before[1])
    value = tf.where(
        both[0],
        both[1],
        tf.where(before[0] | after[0], one_sided, tf.where(alone[0], alone[1], lowered)),
    )
    found = both[0] | before[0] | after[0] | alone[0]
    unaccented = tf.strings.regex_full_match(texts, f"(?s)[^{_ANY_ACCENT}]*")
    is_word = tf.strings.regex_full_match(typed, r"(?s)[\pL\pN\pM].*")
    found &= is_word & tf.gather(unaccented, rows) & tf.not_equal(value, lowered)
    recased = _in_typed_case(typed, tf.equal(typed, lowered), value)
    return join_words(pieces.with_flat_values(tf.where(found, recased, typed)))


def _neighbours(lowered, punctuation, room, step, edge):
    """Each piece's neighbour on one side (`step` -1: before it, 1: after it), as
    `word_contexts` says, from the pieces of the flat `[pieces]` `lowered` and their
    `punctuation` (without spaces), with `room` pieces of its row on that side."""
    index = tf.range(tf.size(lowered, out_type=tf.int64))
    last = tf.maximum(tf.size(lowered, out_type=tf.int64) - 1, 0)
    between = tf.gather(punctuation, tf.clip_by_value(index + step, 0, last))
    beside = tf.gather(lowered, tf.clip_by_value(index + 2 * step, 0, last))
    nearest = r"^(?s:.*)(.)$" if step < 0 else r"^(.)(?s:.*)$"
    character = tf.strings.regex_replace(between, nearest, r"\1")
    return tf.where(
        room < 1,
        edge,
        tf.where(tf.not_equal(between, ""), character, tf.where(room < 2, edge, beside)),
    )


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


class _ContextTable(tf.Module):
    """`context_accent_table`'s entries, keys joined by tabs, in the graph: their words (a
    `_WordTable`) and their shares."""

    def __init__(self, table, name=None):
        super().__init__(name=name)
        keys = ["\t".join(key) for key in table]
        self.words = _WordTable(dict(zip(keys, (word for word, _ in table.values()))))
        self._shares = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(keys or [""], tf.string),
                # Shares of counts below 2**26 as doubles: equal where they are, in the same order.
                tf.constant([float(share) for _, share in table.values()] or [0.0], tf.float64),
            ),
            default_value=0.0,
        )

    def lookup(self, keys):
        """`(found, words, shares)`: where `keys` are keys, their words (the key itself where
        not, as `_WordTable.lookup`) and their shares (0 where not)."""
        found, words = self.words.lookup(keys)
        return found, words, self._shares.lookup(keys)


class Restoration(tf.Module):
    """Puts accents, then capitals, back on sources, and renames names (the module docstring),
    in the graph.

    Args:
        accents: `accent_table`'s dict, or None: accents left as typed.
        cases: `case_table`'s dict, or None: capitals left as typed.
        names: `model.spelling.name_table`'s dict, or None: names left as typed.
        accent_contexts: `context_accent_table`'s dict, or None: ambiguous bare forms left as
            typed.
    """

    def __init__(self, accents=None, cases=None, names=None, accent_contexts=None, name=None):
        super().__init__(name=name)
        self.accents = None if accents is None else _WordTable(accents)
        self.cases = None if cases is None else _WordTable(cases)
        self.names = None if names is None else _WordTable(names)
        self.accent_contexts = None if accent_contexts is None else _ContextTable(accent_contexts)

    @classmethod
    def from_directory(cls, directory, accents=True, cases=True, names=False):
        """The tables a tokenizer directory holds (`ACCENTS_FILE`, `CASES_FILE`, `NAMES_FILE`),
        those asked; with the accents, `ACCENT_CONTEXTS_FILE` where it is there (directories
        written before it restore only the forms that are not words)."""
        contexts = os.path.join(directory, ACCENT_CONTEXTS_FILE)
        return cls(
            read_table(os.path.join(directory, ACCENTS_FILE)) if accents else None,
            read_table(os.path.join(directory, CASES_FILE)) if cases else None,
            read_table(os.path.join(directory, NAMES_FILE)) if names else None,
            read_context_table(contexts) if accents and os.path.exists(contexts) else None,
        )

    def __call__(self, texts):
        """`texts` `[batch]` with accents and capitals restored, as the tables say."""
        texts = tf.convert_to_tensor(texts, tf.string)
        # First, while the text is as typed: which texts have no accent at all.
        if self.accent_contexts is not None:
            texts = _restore_accents_in_context(texts, self.accent_contexts)
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
