"""Placeholder limits: an output holds each placeholder at most as often as its source does.

A run trained with placeholders (`model.placeholders`) learns to copy each marker piece to where
its word belongs, but a small model sometimes writes a marker its source does not hold, which
restores to nothing ("the children of , and passed over"), or writes one twice, which repeats
its word. The searches rule both out: a placeholder the output already holds as often as the
source (or that the source does not hold) is forbidden at every step. Where a placeholder goes,
and whether it is written at all, stays the model's choice.

The stronger rule of constrained decoding (Hokamp and Liu 2017; Post and Vilar 2018), [END]
forbidden while a source's placeholder is missing, was measured on the bundled model's dev split
and is not used: where the model would end without a placeholder, it went on past its natural
end, with run-on text ("…by the seas.’”.’s camp.’t go up to the sea.’.’ and to…"), in greedy
search and in beam search alike (docs/benchmark-log.md, "Placeholder limits").

Like `min_length`, the rule acts on a step's log-probabilities after the softmax: a forbidden
token's gets NEG_INF added, the others keep the model's, so a translation's score is still the
model's log-probability of its tokens (what the `score` signature gives for it). It reads the
whole output, a target prefix included.
"""

from typing import NamedTuple

import tensorflow as tf

from model.decoding.common import NEG_INF


class PlaceholderLimits(NamedTuple):
    """How often each sentence's output may hold each placeholder.

    Attributes:
        target_ids: tuple of Python ints, the placeholder pieces' ids among the outputs.
        counts: `(batch, len(target_ids))` int32: how often each occurs in a sentence's source.
    """

    target_ids: tuple
    counts: tf.Tensor

    @classmethod
    def of_sources(cls, inp, placeholder_ids):
        """The `PlaceholderLimits` of the sources `inp` `(batch, inp_len)`.

        Args:
            placeholder_ids: sequence of `(source_id, target_id)` Python int pairs, each
                placeholder piece's id in the source and in the target vocabulary.
        """
        source_ids = tf.constant([source for source, _ in placeholder_ids], tf.int32)
        counts = tf.reduce_sum(
            tf.cast(tf.equal(tf.cast(inp, tf.int32)[:, :, tf.newaxis], source_ids), tf.int32),
            axis=1,
        )
        return cls(tuple(int(target) for _, target in placeholder_ids), counts)

    def apply(self, log_probs, output, rows):
        """`log_probs` `(n, vocab)` with each placeholder forbidden (NEG_INF added) for the rows
        whose output already holds it as often as their source.

        Args:
            output: `(n, width)` int32, each row's output so far (prefix included), pad after it.
            rows: `(n,)` int32, each row's sentence (the row of `counts`).
        """
        ids = tf.constant(self.target_ids, tf.int32)
        written = tf.reduce_sum(tf.cast(tf.equal(output[:, :, tf.newaxis], ids), tf.int32), axis=1)
        used_up = tf.cast(written >= tf.gather(self.counts, rows), tf.float32)
        # (n, placeholders) → (n, vocab): each used-up placeholder's column.
        forbidden = tf.matmul(used_up, tf.one_hot(ids, tf.shape(log_probs)[-1]))
        return log_probs + forbidden * NEG_INF
