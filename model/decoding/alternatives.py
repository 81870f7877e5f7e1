"""Alternatives after a target prefix, with CTranslate2's `return_alternatives`
(`src/decoding.cc`, `decode_alternatives`): the most probable next tokens after each
sentence's prefix, each continued by its own search, for interactive translation ("what could
come next here?").

Per sentence:
- Its prefix is cut to `max_decoding_length` tokens; the token after it is scored with [END]
  left out of the softmax (CTranslate2 expands with a minimum length of 1), and its
  `num_alternatives` most probable tokens are the alternatives, best first; those of probability
  below `min_alternative_expansion_prob` are dropped.
- Each alternative is continued by greedy search (`beam_width` 1) or beam search, with the
  prefix and the alternative as the decoder's context (`TargetPrefix.as_context`): the
  repetition rules read only the continuation, and the length bounds count the whole output.
- An alternative's score is its token's log-probability plus its continuation's score; the
  alternatives keep their order (they are not sorted again). A prefix of `max_decoding_length`
  tokens or more has no room for an alternative: each of the `num_alternatives` is the prefix
  itself, scored 0.

With a length penalty, beam search's continuation is normalized by the length of the whole
output (GNMT's penalty, `model.decoding.beam`), CTranslate2's by the continuation's.
"""

import dataclasses
from typing import NamedTuple

import tensorflow as tf

from model.decoding.beam import BeamSearch
from model.decoding.common import NEG_INF, max_decoding_length_for, output_log_probs
from model.decoding.greedy import GreedySearch
from model.decoding.penalties import NextTokenRules
from model.decoding.prefix import TargetPrefix
from model.decoding.scoring import teacher_forced_logits
from model.decoding.step import SearchOptions, decode_transformer
from model.decoding.strategy import DecodingStrategy
from model.masks import PAD_ID


def first_alternatives(model, inp, prefix, start_id, end_id, num_alternatives):
    """The `num_alternatives` most probable tokens after each prefix, [END] left out of the
    softmax: `(ids, log_probs)`, both `(batch, num_alternatives)`, best first.

    Args:
        prefix: `(batch, P)` int32, each row's prefix then padding.
    """
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(prefix, PAD_ID), tf.int32), axis=1)
    logits = teacher_forced_logits(model, inp, tf.pad(prefix, [[0, 0], [0, 1]]), start_id)
    logits = tf.gather(tf.cast(logits, tf.float32), lengths, axis=1, batch_dims=1)
    no_end = tf.one_hot(end_id, tf.shape(logits)[-1], on_value=NEG_INF, off_value=0.0)
    log_probs, ids = tf.math.top_k(output_log_probs(logits + no_end), k=num_alternatives)
    return ids, log_probs


def continuation(beam_width, alpha):
    """How each alternative is continued: greedy search for a `beam_width` of 1, else beam
    search (`alpha` its length-penalty exponent)."""
    return GreedySearch() if beam_width == 1 else BeamSearch(beam_width, alpha)


@dataclasses.dataclass(frozen=True)
class Alternatives:
    """CTranslate2's `return_alternatives` over a `Transformer` (the module docstring): not a
    strategy over a step function, since the first alternatives are scored by one
    teacher-forced pass of the whole prefix, but a prefix continued by one
    (`model.decoding.prefix`'s `TargetPrefix.as_context`).

    Attributes:
        continuation: the `DecodingStrategy` continuing each alternative (`continuation`).
        num_alternatives: Python int ≥ 1, alternatives per sentence (CTranslate2's
            `num_hypotheses`).
        min_alternative_expansion_prob: alternatives of a lower probability are dropped.

    Raises:
        ValueError: settings out of those ranges.
    """

    continuation: DecodingStrategy
    num_alternatives: int
    min_alternative_expansion_prob: float = 0.0

    def __post_init__(self):
        if not isinstance(self.num_alternatives, int) or self.num_alternatives < 1:
            raise ValueError(
                f"num_alternatives must be an int >= 1, got {self.num_alternatives!r}."
            )
        if not 0 <= self.min_alternative_expansion_prob <= 1:
            raise ValueError(
                "min_alternative_expansion_prob must be in [0, 1], "
                f"got {self.min_alternative_expansion_prob!r}."
            )

    def decode(self, model, inp, start_id, options):
        """The alternatives after each sentence's prefix.

        Args:
            model, inp, start_id: as `decode_transformer`.
            options: `SearchOptions` whose `prefix` is `(batch, P)` int32, each sentence's
                prefix then padding (a row of padding: none); their rules apply to each
                continuation (the placeholder rule over its prefix and alternative too).

        Returns:
            dict: `tokens` `(batch, num_alternatives, out_len)` (the prefix, the alternative,
            its continuation), `scores` `(batch, num_alternatives)`, `alignment`
            `(batch, num_alternatives, out_len, inp_len)`, and `count` `(batch,)` int32, the
            alternatives kept: the slots after them hold 0s.
        """
        max_decoding_length = options.max_decoding_length
        if max_decoding_length is None:
            max_decoding_length = max_decoding_length_for(inp, limit=model.pe_target - 1)
        prefix = tf.cast(options.prefix, tf.int32)[:, :max_decoding_length]
        lengths = tf.reduce_sum(tf.cast(tf.not_equal(prefix, PAD_ID), tf.int32), axis=1)
        first_ids, first_log_probs = first_alternatives(
            model, inp, prefix, start_id, options.rules.end_id, self.num_alternatives
        )
        no_room = (lengths >= max_decoding_length)[:, tf.newaxis]
        kept = no_room | (tf.exp(first_log_probs) >= self.min_alternative_expansion_prob)
        first_log_probs = tf.where(no_room, 0.0, first_log_probs)
        # Each kept alternative: a row of its own, its prefix then the alternative.
        rows = tf.cast(tf.where(tf.reshape(kept, [-1]))[:, 0], tf.int32)
        extended = tf.gather(_extended_prefixes(prefix, lengths, first_ids), rows)
        continued = decode_transformer(
            self.continuation,
            model,
            tf.gather(inp, rows // self.num_alternatives),
            start_id,
            dataclasses.replace(
                options,
                max_decoding_length=max_decoding_length,
                prefix=TargetPrefix(extended, as_context=True),
            ),
        )
        continued["scores"] += tf.gather(tf.reshape(first_log_probs, [-1]), rows)
        spread = _Spread(rows, tf.shape(inp)[0], self.num_alternatives)
        return {
            **{name: spread(continued[name]) for name in ("tokens", "scores", "alignment")},
            "count": tf.reduce_sum(tf.cast(kept, tf.int32), axis=1),
        }


def _extended_prefixes(prefix, lengths, first_ids):
    """`(batch * num_alternatives, P + 1)` int32: each sentence's prefix `(batch, P)` (of
    `lengths` tokens) then each of its alternatives `first_ids` `(batch, num_alternatives)`."""
    padded = tf.pad(prefix, [[0, 0], [0, 1]])
    at_the_end = tf.equal(tf.range(tf.shape(padded)[1]), lengths[:, tf.newaxis])
    extended = tf.where(
        at_the_end[:, tf.newaxis], first_ids[:, :, tf.newaxis], padded[:, tf.newaxis]
    )
    return tf.reshape(extended, [-1, tf.shape(padded)[1]])


class _Spread(NamedTuple):
    """The outputs of the kept alternatives `rows` (indices among the batch's
    `batch_size * num_alternatives`) spread back, 0s elsewhere."""

    rows: tf.Tensor
    batch_size: tf.Tensor
    num_alternatives: int

    def __call__(self, tensor):
        """`tensor` `(kept, ...)` as `(batch, num_alternatives, ...)`."""
        inner = tf.shape(tensor)[1:]
        shape = tf.concat([[self.batch_size * self.num_alternatives], inner], axis=0)
        spread = tf.scatter_nd(self.rows[:, tf.newaxis], tensor, shape)
        return tf.reshape(
            spread, tf.concat([[self.batch_size, self.num_alternatives], inner], axis=0)
        )


def alternatives_decode(
    model,
    inp,
    start_id,
    end_id,
    prefix,
    num_alternatives,
    min_alternative_expansion_prob=0.0,
    beam_width=1,
    alpha=0.0,
    max_decoding_length=None,
    min_length=0,
    repetition_penalty=1.0,
    no_repeat_ngram_size=0,
    placeholder_ids=(),
):
    """`Alternatives(continuation(beam_width, alpha), ...).decode` as keyword arguments.

    Args:
        model, inp, start_id, end_id, max_decoding_length, min_length, repetition_penalty,
            no_repeat_ngram_size, placeholder_ids: as in `greedy_decode`.
        prefix: `(batch, P)` int32, each sentence's prefix then padding (a row of padding: none).
        num_alternatives, min_alternative_expansion_prob: as `Alternatives`.
        beam_width, alpha: 1 continues each alternative greedily; more, by beam search.

    Returns:
        as `Alternatives.decode`.
    """
    alternatives = Alternatives(
        continuation(beam_width, alpha), num_alternatives, min_alternative_expansion_prob
    )
    rules = NextTokenRules(
        end_id, min_length, repetition_penalty, no_repeat_ngram_size, tuple(placeholder_ids)
    )
    options = SearchOptions(rules, max_decoding_length, prefix)
    return alternatives.decode(model, inp, start_id, options)
