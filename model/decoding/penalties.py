"""Repetition controls, with CTranslate2's semantics (its `repetition_penalty` and
`no_repeat_ngram_size` options, `src/decoding_utils.cc`), applied to a step's logits before the
softmax, so that the scores the searches return are those of the distribution they chose from.

Both read the tokens a row has generated so far: `(rows, width)` int32, the first `length`
positions written and pad (0) after them. [START] is not among them (CTranslate2's sequences
hold only the generated tokens). The pad id is never an output (`output_log_probs`), so penalizing
or banning it changes nothing: the functions can read whole fixed-size buffers, as XLA needs.
"""

import dataclasses

import tensorflow as tf

from model.decoding.common import NEG_INF, next_token_log_probs
from model.decoding.copies import PlaceholderLimits


def penalize_repetitions(logits, generated, repetition_penalty):
    """CTRL's repetition penalty (Keskar et al., 2019), as CTranslate2 applies it: the logit of
    every token already generated is divided by `repetition_penalty` where it is positive and
    multiplied by it where it is negative (> 1 penalizes), once whatever the token's count.

    Args:
        logits: `(rows, vocab)` float32.
        generated: `(rows, width)` int32 tokens generated so far, pad after them.
        repetition_penalty: Python float > 0; 1 leaves `logits` unchanged.
    """
    rows, width = tf.shape(generated)[0], tf.shape(generated)[1]
    row_ids = tf.repeat(tf.range(rows), width)
    seen = tf.scatter_nd(
        tf.stack([row_ids, tf.reshape(generated, [-1])], axis=1),
        tf.ones([rows * width], tf.int32),
        tf.shape(logits),
    )
    penalized = tf.where(logits < 0, logits * repetition_penalty, logits / repetition_penalty)
    return tf.where(seen > 0, penalized, logits)


def ban_repeated_ngrams(logits, generated, length, ngram_size):
    """Forbids every token that would complete an n-gram of `ngram_size` tokens the row has
    already generated: where the last `ngram_size - 1` tokens occurred before, the token that
    followed them then gets NEG_INF. Nothing is banned before `ngram_size` tokens exist.

    Args:
        logits: `(rows, vocab)` float32.
        generated: `(rows, width)` int32 tokens generated so far, pad after them.
        length: int32 scalar, the positions of `generated` written (the same for every row).
        ngram_size: Python int >= 1.
    """
    context = ngram_size - 1
    # Room for the context's positions even before `context` tokens exist (pad, never matched).
    generated = tf.pad(generated, [[0, 0], [0, ngram_size]])
    # Every n-gram of the buffer; those past `length` hold pad and match no context of real tokens.
    windows = tf.signal.frame(generated, ngram_size, 1, axis=1)  # (rows, n-grams, ngram_size)
    last = tf.gather(generated, tf.maximum(length - context + tf.range(context), 0), axis=1)
    follows_the_context = tf.reduce_all(
        tf.equal(windows[:, :, :context], last[:, tf.newaxis, :]), axis=2
    ) & (length >= ngram_size)
    banned_tokens = tf.where(follows_the_context, windows[:, :, context], 0)
    rows, ngrams = tf.shape(banned_tokens)[0], tf.shape(banned_tokens)[1]
    banned = tf.scatter_nd(
        tf.stack([tf.repeat(tf.range(rows), ngrams), tf.reshape(banned_tokens, [-1])], axis=1),
        tf.ones([rows * ngrams], tf.int32),
        tf.shape(logits),
    )
    return tf.where(banned > 0, NEG_INF, logits)


def apply_repetition_controls(logits, generated, length, repetition_penalty, no_repeat_ngram_size):
    """`penalize_repetitions` then `ban_repeated_ngrams` (CTranslate2's order), each only when
    set: with `repetition_penalty` 1 and `no_repeat_ngram_size` 0 the graph holds neither."""
    if repetition_penalty != 1:
        logits = penalize_repetitions(logits, generated, repetition_penalty)
    if no_repeat_ngram_size > 0:
        logits = ban_repeated_ngrams(logits, generated, length, no_repeat_ngram_size)
    return logits


def validate_repetition_controls(repetition_penalty, no_repeat_ngram_size):
    """Raises ValueError, saying what is allowed, for settings the searches cannot use."""
    if not repetition_penalty > 0:
        raise ValueError(
            f"repetition_penalty must be > 0 (1 disables it), got {repetition_penalty!r}."
        )
    if not isinstance(no_repeat_ngram_size, int) or no_repeat_ngram_size < 0:
        raise ValueError(
            f"no_repeat_ngram_size must be an int >= 0 (0 disables it), got {no_repeat_ngram_size!r}."
        )


@dataclasses.dataclass(frozen=True)
class NextTokenRules:
    """What a search may choose at a step besides the model's distribution: [END] is forbidden
    before `min_length` tokens, the repetition controls above apply when set, and so do the
    placeholder limits (`model.decoding.copies`). Built once, from the settings, and carried
    whole through the decoders into the searches; a decoder binds it to its sources
    (`for_sources`).

    Attributes:
        end_id: the [END] id.
        min_length: int or int32 scalar.
        repetition_penalty: Python float, 1 = off.
        no_repeat_ngram_size: Python int, 0 = off.
        placeholder_ids: `(source_id, target_id)` Python int pairs of the placeholder pieces no
            output may hold more often than its source; () for none.
        placeholders: the `PlaceholderLimits` of the sources being decoded (`for_sources`), or
            None (off).

    Raises:
        ValueError: repetition controls the searches cannot use.
    """

    end_id: int
    min_length: object = 0
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    placeholder_ids: tuple = ()
    placeholders: object = None

    def __post_init__(self):
        validate_repetition_controls(self.repetition_penalty, self.no_repeat_ngram_size)

    def for_sources(self, inp):
        """These rules for the sources `inp` `(batch, inp_len)`: with the `PlaceholderLimits`
        of `placeholder_ids` in them, when there are any."""
        if not self.placeholder_ids:
            return self
        return dataclasses.replace(
            self, placeholders=PlaceholderLimits.of_sources(inp, self.placeholder_ids)
        )

    @property
    def reads_generated(self):
        """Whether `log_probs` reads the tokens generated so far (the searches skip gathering
        them otherwise)."""
        return self.controls_repetition or self.placeholders is not None

    @property
    def controls_repetition(self):
        """Whether a repetition control is set."""
        return self.repetition_penalty != 1 or self.no_repeat_ngram_size > 0

    def log_probs(self, logits, step, generated=None, rows=None, prefix=None):
        """`(rows, vocab)` log-probabilities of the token at `step`: `output_log_probs` after the
        repetition controls, then [END] forbidden before `min_length` and the placeholder
        rule's tokens forbidden (both NEG_INF added, the rest left as the model's).

        Args:
            generated: `(rows, width)` int32, the rows' outputs so far as above, needed only
                when `reads_generated`.
            rows: `(rows,)` int32, each row's sentence, needed only with `placeholders`.
            prefix: the search's `ForcedTokens`, or None: the repetition controls read
                `generated` through its `rules_view`, the placeholder rule reads it whole.
        """
        logits = tf.cast(logits, tf.float32)
        if self.controls_repetition:
            view = generated if prefix is None else prefix.rules_view(generated, rows)
            logits = apply_repetition_controls(
                logits, view, step, self.repetition_penalty, self.no_repeat_ngram_size
            )
        log_probs = next_token_log_probs(logits, step, self.min_length, self.end_id)
        if self.placeholders is not None:
            log_probs = self.placeholders.apply(log_probs, generated, rows)
        return log_probs
