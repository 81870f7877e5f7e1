"""Made-up words repaired from a lexicon, in the graph.

A small model spells a word it never learned from pieces it knows, and invents a word that is
no word ("supermercated" for "supermercado", "sopher" for "sofá"). `WordRepair` replaces each
such word of a translation after decoding. This is the unknown-word replacement of Luong et al.
(2015), "Addressing the Rare Word Problem in Neural Machine Translation", with the attention as
the alignment:

1. A word of a translation is *made up* when it is made of letters (an apostrophe allowed
   inside), is not an English word (`ENGLISH_WORDS_FILE`: Debian's English word lists and the
   words of the training targets, keyed as `model.placeholders.word_key_graph` keys them, a
   possessive ending aside), and is not a word of its source. This is
   `training.made_up_words`'s definition, which the evaluation reports measure.
2. Its source word is the one its pieces attend to most (the last decoder layer's
   cross-attention summed over the word's pieces: the `alignment` the decoders return), of
   the source's words: the attention a piece gives [START] or [END] does not count, nor, while
   another attended word is left, the attention on a source word whose English (step 3) the
   translation already holds as a word, as many times as the source holds the word: that word
   is said.
3. It is replaced by the English of that source word in the lexicon (`LEXICON_FILE`: a
   source word key, as `word_key_graph` keys it, to its translation), or by the source word
   itself where the lexicon lacks it or the source word is a name (capitalized where its
   source does not start): an untranslated word, as a rule-based translator passes an unknown
   word through, rather than an invented one. Its punctuation and initial capital stay.

A translation without a made-up word is returned as the detokenizer wrote it, byte for byte.
A run's tokenizer directory holds the two tables (`training.word_repair_tables` writes them)
and records `"repair_words": true`; `model.tokenizer.load_tokenizers` then gives the target
tokenizer its `WordRepair`, and the `model.translator.Translator` applies it to the
`greedy`, `beam_search` and `alignments` signatures unless `DecodingOptions.repair_words` is
off. What it gains is in BENCHMARKS.md ("Everyday sentences").
"""

import os

import tensorflow as tf

from model.placeholders import word_key_graph
from model.restoration import capitalized, read_table

LEXICON_FILE = "repair_lexicon.tsv"
ENGLISH_WORDS_FILE = "english_words.txt"
# The tokenizer config's key of a run whose target tokenizer repairs made-up words.
REPAIR_WORDS_KEY = "repair_words"
# SentencePiece's word-start marker: a piece that starts with it starts a word.
WORD_START = "▁"
# A candidate word (RE2): letters, an apostrophe (straight or typographic) allowed inside.
_CANDIDATE = r"\pL+(?:['’]\pL+)*"
_POSSESSIVE = r"'s?$"
# A word as three parts: what precedes its letters, its letters, what follows them.
_AROUND_LETTERS = r"^([^\pL]*)([\s\S]*?)([^\pL]*)$"


def word_ids(pieces):
    """`pieces` `[batch, n]` (`tf.string`, "" where no piece: padding, reserved tokens) →
    int32 `[batch, n]`: the index in its row of the word each piece belongs to (a piece
    starting with `WORD_START`, or a row's first piece, starts one), -1 where no piece; and
    int32 `[batch]`, the words of each row."""
    is_piece = tf.not_equal(pieces, "")
    before = tf.cumsum(tf.cast(is_piece, tf.int32), axis=1, exclusive=True)
    starts = is_piece & (tf.strings.regex_full_match(pieces, WORD_START + ".*") | (before == 0))
    ids = tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1
    return tf.where(is_piece, ids, -1), tf.reduce_sum(tf.cast(starts, tf.int32), axis=1)


def _join_words(pieces, ids):
    """The words of `pieces` `[batch, n]` as `word_ids` numbers them: string `[batch, n]`,
    word `i` of a row at column `i`, "" past its last word."""
    batch, width = tf.shape(pieces)[0], tf.shape(pieces)[1]
    rows = tf.repeat(tf.range(batch), width)
    flat_ids = tf.reshape(ids, [-1])
    # A non-piece is "" and joins its row's first word, where it adds nothing.
    segments = rows * width + tf.maximum(flat_ids, 0)
    joined = tf.strings.unsorted_segment_join(
        tf.reshape(pieces, [-1]), segments, num_segments=batch * width
    )
    return tf.strings.regex_replace(tf.reshape(joined, [batch, width]), WORD_START, "")


def _parts(words):
    """`words` → (before, letters, after): the word around its letters."""
    return tuple(
        tf.strings.regex_replace(words, _AROUND_LETTERS, rewrite)
        for rewrite in (r"\1", r"\2", r"\3")
    )


class WordRepair(tf.Module):
    """Replaces the made-up words of translations (see the module docstring).

    Args:
        lexicon: dict, source word key (`word_key_graph`) → its English (non-empty).
        english_words: iterable of str, the words that count as English (any case, accents).
    """

    def __init__(self, lexicon, english_words, name=None):
        super().__init__(name=name)
        keys = sorted({key for key in english_words if key})
        self.english_words = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                word_key_graph(tf.constant(keys, tf.string)), tf.ones([len(keys)], tf.int32)
            ),
            default_value=0,
        )
        self.lexicon = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(list(lexicon), tf.string), tf.constant(list(lexicon.values()))
            ),
            default_value="",
        )

    @classmethod
    def from_directory(cls, directory):
        """The `WordRepair` of a tokenizer directory's `LEXICON_FILE` and `ENGLISH_WORDS_FILE`."""
        with open(os.path.join(directory, ENGLISH_WORDS_FILE), encoding="utf-8") as handle:
            english = [line.rstrip("\n") for line in handle]
        return cls(read_table(os.path.join(directory, LEXICON_FILE)), english)

    def is_english(self, words):
        """bool, the shape of `words`: a known word, or one with a possessive ending."""
        keys = word_key_graph(tf.strings.regex_replace(words, "’", "'"))
        bare = tf.strings.regex_replace(keys, _POSSESSIVE, "")
        return (self.english_words.lookup(keys) > 0) | (self.english_words.lookup(bare) > 0)

    def made_up(self, words, source_words):
        """bool `[batch, n]`: which of `words` `[batch, n]` are made up, given each row's
        `source_words` `[batch, m]` (their letters, "" where none)."""
        _, letters, _ = _parts(words)
        candidate = tf.strings.regex_full_match(letters, _CANDIDATE)
        copied = tf.reduce_any(
            tf.equal(word_key_graph(letters)[:, :, None], word_key_graph(source_words)[:, None]),
            axis=2,
        )
        return candidate & ~copied & ~self.is_english(letters)

    def replacements(self, source_words, is_first):
        """The English of each of `source_words` (any shape, letters only): the lexicon's, or
        the word itself where the lexicon lacks it or it is a name (capitalized, `is_first` false)."""
        translated = self.lexicon.lookup(word_key_graph(source_words))
        name = tf.strings.regex_full_match(source_words, r"\p{Lu}.*") & ~is_first
        return tf.where(name | tf.equal(translated, ""), source_words, translated)

    def said(self, source_words, words):
        """bool `[batch, m]`: which of each row's `source_words` `[batch, m]` (letters, ""
        where none) the row's `words` `[batch, n]` already translate: the English
        `replacements` gives a source word is among `words` as many times as the source holds
        the word ("el décimo ... en el décimo" is said once "tenth" is there twice)."""
        english = self.replacements(
            source_words, tf.equal(tf.range(tf.shape(source_words)[1]), 0)[None]
        )
        source_keys = word_key_graph(source_words)
        in_source = tf.reduce_sum(
            tf.cast(tf.equal(source_keys[:, :, None], source_keys[:, None, :]), tf.int32), axis=2
        )
        in_translation = tf.reduce_sum(
            tf.cast(
                tf.equal(word_key_graph(english)[:, :, None], word_key_graph(words)[:, None, :]),
                tf.int32,
            ),
            axis=2,
        )
        return (in_translation >= in_source) & tf.not_equal(english, "")

    def __call__(self, translations, source_pieces, target_pieces, alignment):
        """Repairs `translations`.

        Args:
            translations: `tf.string` `[batch]`, the detokenized `target_pieces`.
            source_pieces, target_pieces: `tf.string` `[batch, S]`, `[batch, T]`: the pieces
                decoded from and to, "" where none (padding, reserved tokens).
            alignment: float `[batch, T, S]`, each target piece's attention over the source
                positions.

        Returns:
            `tf.string` `[batch]`: each translation with its made-up words replaced; a row
            without one, or whose words do not match its pieces, unchanged.
        """
        source_word_of, _ = word_ids(source_pieces)
        source_words = _join_words(source_pieces, source_word_of)
        _, source_letters, _ = _parts(source_words)
        target_word_of, target_count = word_ids(target_pieces)
        words = tf.strings.split(translations, " ")
        # The words as the pieces number them; a row whose count differs is left alone.
        fits = tf.equal(tf.cast(words.row_lengths(), tf.int32), target_count)
        width = tf.shape(target_pieces)[1]
        dense = words.to_tensor("")[:, :width]
        dense = tf.pad(dense, [[0, 0], [0, width - tf.shape(dense)[1]]], constant_values="")

        # Each target word's attention: its pieces' rows summed, over the source positions that
        # hold a piece ([START] and [END] draw attention too, and are no word); then its
        # strongest source word.
        membership = tf.one_hot(target_word_of, width, dtype=alignment.dtype)
        on_pieces = tf.cast(source_word_of >= 0, alignment.dtype)[:, None, :]
        word_alignment = tf.einsum("btw,bts->bws", membership, alignment) * on_pieces
        before, letters, after = _parts(dense)
        # Attention often points a made-up word at its neighbour's source ("Maintern goes" for
        # "Mañana va"), whose English again would say it twice: the strongest of the source
        # words not yet said is taken, or the strongest of all where every attended one is said.
        said = self.said(source_letters, letters)
        said_at = tf.gather(said, tf.maximum(source_word_of, 0), batch_dims=1)
        unsaid_alignment = word_alignment * tf.cast(~said_at, alignment.dtype)[:, None, :]
        word_alignment = tf.where(
            tf.reduce_any(unsaid_alignment > 0, axis=2, keepdims=True),
            unsaid_alignment,
            word_alignment,
        )
        strongest = tf.argmax(word_alignment, axis=2, output_type=tf.int32)
        aligned = tf.gather(source_word_of, strongest, batch_dims=1)
        aligned_word = tf.gather(source_letters, tf.maximum(aligned, 0), batch_dims=1)
        replacement = self.replacements(aligned_word, tf.equal(aligned, 0))

        starts_upper = tf.strings.regex_full_match(letters, r"\p{Lu}.*")
        nonempty = tf.not_equal(replacement, "")
        replacement = tf.where(
            starts_upper & nonempty, capitalized(tf.where(nonempty, replacement, "x")), replacement
        )
        repair = (
            self.made_up(dense, source_letters)
            & (aligned >= 0)
            & tf.strings.regex_full_match(replacement, r"[^<>]*\pL[^<>]*")
            & fits[:, None]
        )
        repaired = tf.where(repair, tf.strings.join([before, replacement, after]), dense)
        joined = tf.strings.reduce_join(
            tf.RaggedTensor.from_tensor(
                repaired, lengths=tf.minimum(words.row_lengths(), tf.cast(width, tf.int64))
            ),
            axis=1,
            separator=" ",
        )
        return tf.where(tf.reduce_any(repair, axis=1), joined, translations)
