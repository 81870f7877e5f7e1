"""Target prefixes: the searches force each row's first tokens, then decode on from them
(interactive translation, autocompletion, a forced term), with CTranslate2's `target_prefix`
semantics (`src/decoding.cc`, `update_sample_with_prefix`):

- The returned output holds the prefix, and the length bounds count it: `max_decoding_length` and
  `min_length` bound the whole output (CTranslate2's default `return_prefix`).
- A forced token is not scored: the score covers the tokens after the prefix only.
- A forced [END] does not end the output; decoding goes on after the prefix.
- The repetition rules read the prefix as tokens generated (CTranslate2's `alive_seq` holds it).
- In beam search, at a row's first free step, an [END] candidate ranked below the best one is
  dead (CTranslate2's fix of its issue #277: short hypotheses that a wider beam than the prefix
  allowed would otherwise win). It keeps its place among the candidates, so the beam continues
  with one hypothesis fewer. CTranslate2 does so for every sentence of a batch in which some
  sentence has a prefix; here for every row of a call given a prefix, so that a row's outputs
  never depend on the other rows.

`return_alternatives` (`model.decoding.alternatives`) continues each alternative with the
prefix as the decoder's context rather than as a part of the search: a `TargetPrefix` with
`as_context` (the repetition rules do not read it, and no [END] candidate is barred).
"""

from typing import NamedTuple

import tensorflow as tf

from model.masks import PAD_ID


class TargetPrefix(NamedTuple):
    """Tokens every row's output starts with.

    Attributes:
        ids: `(batch, P)` int32, each row's prefix then padding (0: never an output, so never
            in a prefix); a row of padding has no prefix.
        as_context: the prefix is the decoder's context of a continuation
            (`model.decoding.alternatives`): the repetition rules do not read it, and beam
            search bars no [END] at the first free step.
    """

    ids: tf.Tensor
    as_context: bool = False


class ForcedTokens(NamedTuple):
    """A `TargetPrefix` as the searches read it, step by step.

    Attributes:
        ids: `(batch, P + 1)` int32, the prefixes with a column of padding after them (so that a
            step past every prefix still reads a column).
        lengths: `(batch,)` int32, each row's prefix length.
        as_context: as `TargetPrefix`.
    """

    ids: tf.Tensor
    lengths: tf.Tensor
    as_context: bool

    def at(self, step, rows):
        """`(forced, ids)` of the rows `rows` `(n,)` (batch indices) at `step`: `(n,)` bool,
        whether the row's token is forced there, and `(n,)` int32 the forced token."""
        forced = step < tf.gather(self.lengths, rows)
        column = tf.minimum(step, tf.shape(self.ids)[1] - 1)
        return forced, tf.gather(tf.gather(self.ids, column, axis=1), rows)

    def first_free(self, step, rows):
        """`(n,)` bool: `step` is the first one after the prefix of each of the rows `rows`."""
        return tf.equal(step, tf.gather(self.lengths, rows))

    def rules_view(self, generated, rows):
        """The tokens generated so far `(n, width)` of the rows `rows` as the repetition rules
        read them: all of them, or with the prefix replaced by padding (which the rules ignore)
        when it is the decoder's context."""
        if not self.as_context:
            return generated
        in_prefix = (
            tf.range(tf.shape(generated)[1])[tf.newaxis]
            < tf.gather(self.lengths, rows)[:, tf.newaxis]
        )
        return tf.where(in_prefix, PAD_ID, generated)


def forced_tokens(prefix):
    """The `ForcedTokens` of `prefix`: None (no prefix), `(batch, P)` int32 ids padded with 0,
    or a `TargetPrefix`."""
    if prefix is None:
        return None
    if not isinstance(prefix, TargetPrefix):
        prefix = TargetPrefix(prefix)
    ids = tf.cast(prefix.ids, tf.int32)
    return ForcedTokens(
        ids=tf.pad(ids, [[0, 0], [0, 1]], constant_values=PAD_ID),
        lengths=tf.reduce_sum(tf.cast(tf.not_equal(ids, PAD_ID), tf.int32), axis=1),
        as_context=prefix.as_context,
    )
