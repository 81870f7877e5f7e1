"""Names and numbers the model never saw, carried through translation as placeholders.

A subword model copies a name it never saw piece by piece, and a small one does it badly: it
stutters ("Padada" for "Pada"), drops a syllable ("Tuzan" for "Tudozan") or adds a digit ("477"
for "47"). This is the placeholder ("tag and copy") remedy of production NMT systems (Crego et
al. 2016, SYSTRAN's pure neural MT; OpenNMT's ⦅…⦆ placeholders): before the subword model, each
distinct *protected* word of a source becomes one of `MARKERS`, a character the subword
vocabulary holds as a piece of its own (`training.vocabulary` declares them as SentencePiece user
symbols); the model learns to copy a marker, one token, to where the word belongs; after
detokenizing, each marker is put back as the word it stands for.

A protected word is a run of letters, digits and combining marks (what `NOT_WORD` does not
match) that is

- a number: digits only ("47", "1985"), or
- an unknown name: it starts with a capital letter, and its key (`word_key_graph`: lowercased and
  accents stripped) is not a key of the training sources' words (`Placeholders.known_words`), so
  "Jehová", "JEHOVA" and "jehova" are all known, and "Kalomir" or "Berlín" is not.

Words in lowercase are never protected: a user who types "kalomir" gets the model's own copy.
The same word twice in a source gets the same marker. Past `len(MARKERS)` distinct protected
words, the rest are left to the model.

The training pipeline protects its sources the same way (`training.pipeline`), after fresh names
and figures were put in copy slots (`training.copying`): those are exactly the unknown words, so
the model sees markers where the Translator will put them, and learns each marker, since training
numbers a source's markers from a random first one (`first_slot`).
"""

import os

import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.python.ops.regex_split_ops import gen_regex_split_ops

from model.casing import normalize_casing

# Unicode "private use" characters: no text holds them, NFKC keeps them, and SentencePiece keeps
# a user symbol as one piece.
MARKERS = tuple(chr(0xE000 + index) for index in range(8))
KNOWN_WORDS_FILE = "known_words.txt"
# What a word is (RE2, TensorFlow's regexes): letters, digits and combining marks; anything else
# separates words, markers included.
NOT_WORD = r"[^\pL\pN\pM]+"
_NUMBER = r"\pN+"
_ANY_MARKER = f"[{''.join(MARKERS)}]"
CAPITALIZED = r"\p{Lu}[\pL\pM]*"


def word_key_graph(words):
    """`words` (`tf.string`, any shape) lowercased with accents and other marks stripped: the
    key under which a word is known, whatever its case and accents."""
    decomposed = tf_text.normalize_utf8(words, "NFD")
    return tf.strings.lower(tf.strings.regex_replace(decomposed, r"\pM", ""), encoding="utf-8")


def corpus_word_keys(texts):
    """Sorted distinct `word_key_graph` keys of the words of `texts` (iterable of str)."""
    keys = set()
    texts = list(texts)
    for start in range(0, len(texts), 4096):
        words = tf_text.regex_split(tf.constant(texts[start : start + 4096]), NOT_WORD)
        keys.update(word_key_graph(words.flat_values).numpy().tolist())
    return sorted(key.decode("utf-8") for key in keys if key)


def write_known_words(directory, texts):
    """Writes the keys of the words of `texts` (the training sources) to
    `directory/KNOWN_WORDS_FILE`, one a line."""
    with open(os.path.join(directory, KNOWN_WORDS_FILE), "w", encoding="utf-8") as handle:
        handle.writelines(key + "\n" for key in corpus_word_keys(texts))


def _without_markers(texts):
    """`texts` without marker characters: a marker a user typed stands for nothing."""
    return tf.strings.regex_replace(
        tf.convert_to_tensor(texts, tf.string), f"[{''.join(MARKERS)}]", ""
    )


def regex_split_with_offsets(texts, delimiter, kept_delimiter=""):
    """`tf_text.regex_split_with_offsets` of `texts` `[batch]`: ragged `[batch, (pieces)]`
    pieces, their begin and their end byte offsets.

    The same op, without the checks that tensorflow-text adds on the row splits the op itself
    returns: three assertions per output, each a condition and two functions of the graph,
    which were most of the translation graph's functions, and a cold start traced, loaded and
    optimized them all (BENCHMARKS.md, "First run: translate-text from a cold start").
    """
    pieces, begins, ends, row_splits = gen_regex_split_ops.regex_split_with_offsets(
        texts, f"({delimiter})", f"({kept_delimiter})"
    )
    return tuple(
        tf.RaggedTensor.from_row_splits(values, row_splits, validate=False)
        for values in (pieces, begins, ends)
    )


def split_words(texts):
    """`texts` `[batch]` as ragged `[batch, (pieces)]`: words and the text between
    them, in order, so that joining a row gives its text back."""
    return regex_split_with_offsets(texts, NOT_WORD, NOT_WORD)[0]


def join_words(pieces):
    """Ragged `[batch, (pieces)]` (as `split_words` returns them) joined back into `[batch]`."""
    return tf.strings.reduce_join(pieces, axis=1)


def restore(texts, values):
    """Each marker of `texts` replaced by the word it stands for.

    Args:
        texts: `tf.string` `[batch]` or `[batch, n]` (n translations of each source).
        values: `tf.string` `[batch, len(MARKERS)]`, from `Placeholders.protect`: column k is
            what `MARKERS[k]` stands for in that row ("" for none: a marker the model made up
            is dropped).
    """
    texts = tf.convert_to_tensor(texts, tf.string)
    if texts.shape.rank == 2:
        flat = tf.reshape(texts, [-1])
        repeated = tf.repeat(values, tf.shape(texts)[1], axis=0)
        return tf.reshape(restore(flat, repeated), tf.shape(texts))
    # One split at every marker, each marker a piece of its own, rather than a `replace_all` per
    # marker: the same texts (a value holds no marker: `protect` takes them from texts without
    # any) from a tenth of the ops, in a graph every signature holds and a cold start traces,
    # loads and optimizes.
    pieces = regex_split_with_offsets(texts, _ANY_MARKER, _ANY_MARKER)[0]
    rows = pieces.value_rowids()
    is_marker = tf.equal(pieces.flat_values[:, None], tf.constant(MARKERS))
    words = tf.strings.reduce_join(tf.where(is_marker, tf.gather(values, rows), ""), axis=1)
    restored = tf.where(tf.reduce_any(is_marker, axis=1), words, pieces.flat_values)
    return tf.strings.unsorted_segment_join(restored, rows, num_segments=pieces.nrows())


def replace_all(texts, marker, replacements):
    """Each occurrence of `marker` in `texts[i]` (`[batch]` tf.string) replaced by
    `replacements[i]` (`training.copying` fills its copy slots with it too)."""
    pieces = tf.strings.split(texts, marker)
    row_values = tf.gather(replacements, pieces.value_rowids())
    # Every piece is followed by the value, except each row's last: join, then cut that one off.
    joined = join_words(pieces.with_flat_values(tf.strings.join([pieces.flat_values, row_values])))
    lengths = tf.strings.length(joined) - tf.strings.length(replacements)
    return tf.strings.substr(joined, tf.zeros_like(lengths), lengths)


def protect_target(targets, values):
    """`targets` `[batch]` with each word that a marker of its row stands for (`values`, as
    `Placeholders.protect` returns them) replaced by that marker: a reference translation or a
    target prefix, protected as its source was."""
    pieces = split_words(_without_markers(targets))
    row_values = tf.gather(values, pieces.value_rowids())
    flat = pieces.flat_values
    matches = tf.equal(flat[:, None], row_values) & tf.not_equal(row_values, "")
    markers = tf.gather(tf.constant(MARKERS), tf.argmax(tf.cast(matches, tf.int32), axis=1))
    flat = tf.where(tf.reduce_any(matches, axis=1), markers, flat)
    return join_words(pieces.with_flat_values(flat))


def _distinct_ranks(hashes, protected):
    """Which protected pieces are their row's first of their hash, and each protected piece's
    rank among its row's distinct protected hashes (0, 1, ... in order of first occurrence), in
    time and memory linear in the pieces: comparing every piece of a row with every other
    (`[batch, pieces, pieces]`) took 1.25 GB and 4.9 s for one 16,382-byte row.

    Args:
        hashes: int64 `[batch, pieces]`.
        protected: bool `[batch, pieces]`.

    Returns:
        `(is_first, rank)`: bool and int32 `[batch, pieces]`; both False / 0 where not protected.
    """
    where = tf.where(protected)  # Row-major: each row's pieces in order, rows in order.
    rows = where[:, 0]
    distinct, group = tf.raw_ops.UniqueV2(
        x=tf.stack([rows, tf.gather_nd(hashes, where)], axis=1), axis=tf.constant([0], tf.int64)
    )
    order = tf.range(tf.shape(where)[0])
    first = tf.gather(
        tf.math.unsorted_segment_min(order, group, tf.shape(distinct)[0]),
        group,
    )
    is_first = tf.equal(first, order)
    firsts_before = tf.cumsum(tf.cast(is_first, tf.int32), exclusive=True)
    row_start = tf.math.unsorted_segment_min(order, rows, tf.shape(hashes, tf.int64)[0])
    rank_if_first = firsts_before - tf.gather(firsts_before, tf.gather(row_start, rows))
    shape = tf.shape(hashes, tf.int64)
    return (
        tf.scatter_nd(where, tf.cast(is_first, tf.int32), shape) > 0,
        tf.scatter_nd(where, tf.gather(rank_if_first, first), shape),
    )


class Placeholders(tf.Module):
    """Protects a run's sources (see the module docstring): a table of the words it knows.

    Args:
        known_words: list of str, the keys (`word_key_graph`) of the training sources' words.
        casing: the run's source casing (`model.casing.normalize_casing`), or None: `protect`
            normalizes the case first, so that it sees a source as the model does (a source in
            capitals, lowercased by "lower_all_caps", has no capitalized word to protect).
    """

    def __init__(self, known_words, casing=None, name=None):
        super().__init__(name=name)
        self.casing = casing
        self.known_words = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(list(known_words), tf.string),
                tf.ones([len(known_words)], tf.int32),
            ),
            default_value=0,
        )

    @classmethod
    def from_directory(cls, directory, casing=None):
        """The `Placeholders` of a tokenizer directory's `KNOWN_WORDS_FILE`."""
        with open(os.path.join(directory, KNOWN_WORDS_FILE), encoding="utf-8") as handle:
            return cls([line.rstrip("\n") for line in handle if line.strip()], casing)

    def protected(self, words):
        """bool, same shape as `words` (`tf.string`): numbers and unknown capitalized words."""
        number = tf.strings.regex_full_match(words, _NUMBER)
        capitalized = tf.strings.regex_full_match(words, CAPITALIZED)
        known = self.known_words.lookup(word_key_graph(words)) > 0
        return number | (capitalized & ~known)

    def protect(self, texts, first_slot=None, also=None):
        """Replaces the protected words of `texts` by markers.

        Args:
            texts: `tf.string` `[batch]`.
            first_slot: optional int `[batch]`: the marker of a row's first protected word
                (the next ones follow, modulo `len(MARKERS)`); default 0. Training draws it.
            also: optional function of the texts' pieces (ragged `[batch, (pieces)]`: words and
                what separates them) to a ragged bool mask of more words to protect (training's
                known names, `training.pipeline.protect_pairs`).

        Returns:
            `(protected_texts, values)`: `[batch]` texts, and `[batch, len(MARKERS)]` the word
            each marker stands for in its row, or "" (`restore`, `protect_target`).
        """
        texts = _without_markers(texts)
        if self.casing is not None:
            texts = normalize_casing(texts, self.casing)
        pieces = split_words(texts)
        protected = self.protected(pieces)
        if also is not None:
            protected = protected | also(pieces)
        # At least one column, or a batch of texts without a piece (all "") would take the
        # argmax below over an empty axis (INVALID_ARGUMENT).
        padding = [[0, 0], [0, 1 - tf.minimum(tf.shape(pieces.flat_values)[0], 1)]]
        padded = tf.pad(pieces.to_tensor(""), padding, constant_values="")
        protected = tf.pad(protected.to_tensor(False), padding, constant_values=False)
        # One marker per distinct word (compared by a 62-bit hash: integers, not strings).
        is_first, rank = _distinct_ranks(tf.strings.to_hash_bucket_fast(padded, 1 << 62), protected)
        protected &= rank < len(MARKERS)
        if first_slot is None:
            first_slot = tf.zeros(tf.shape(texts), tf.int32)
        slot = (rank + tf.cast(first_slot, tf.int32)[:, None]) % len(MARKERS)
        marked = tf.where(protected, tf.gather(tf.constant(MARKERS), slot), padded)
        values = tf.stack(
            [
                tf.strings.reduce_join(
                    tf.where(is_first & protected & tf.equal(slot, index), padded, ""), axis=1
                )
                for index in range(len(MARKERS))
            ],
            axis=1,
        )
        mask = tf.sequence_mask(pieces.row_lengths(), tf.shape(padded)[1])
        return join_words(tf.ragged.boolean_mask(marked, mask)), values
