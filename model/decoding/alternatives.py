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

import tensorflow as tf

from model.decoding.beam import beam_search_decode
from model.decoding.common import NEG_INF, max_decoding_length_for, output_log_probs
from model.decoding.greedy import greedy_decode
from model.decoding.prefix import TargetPrefix
from model.decoding.scoring import teacher_forced_logits
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
    """CTranslate2's `return_alternatives` over a `Transformer` (the module docstring).

    Args:
        model, inp, start_id, end_id, max_decoding_length, min_length, repetition_penalty,
            no_repeat_ngram_size, placeholder_ids: as in `greedy_decode` (the placeholder rule
            over each continuation, its prefix and alternative included).
        prefix: `(batch, P)` int32, each sentence's prefix then padding (a row of padding: none).
        num_alternatives: Python int ≥ 1, alternatives per sentence (CTranslate2's
            `num_hypotheses`).
        min_alternative_expansion_prob: alternatives of a lower probability are dropped.
        beam_width, alpha: 1 continues each alternative greedily; more, by beam search.

    Returns:
        dict: `tokens` `(batch, num_alternatives, out_len)` (the prefix, the alternative, its
        continuation), `scores` `(batch, num_alternatives)`, `alignment`
        `(batch, num_alternatives, out_len, inp_len)`, and `count` `(batch,)` int32, the
        alternatives kept: the slots after them hold 0s.
    """
    if not isinstance(num_alternatives, int) or num_alternatives < 1:
        raise ValueError(f"num_alternatives must be an int >= 1, got {num_alternatives!r}.")
    if not 0 <= min_alternative_expansion_prob <= 1:
        raise ValueError(
            "min_alternative_expansion_prob must be in [0, 1], "
            f"got {min_alternative_expansion_prob!r}."
        )
    if max_decoding_length is None:
        max_decoding_length = max_decoding_length_for(inp, limit=model.pe_target - 1)
    prefix = tf.cast(prefix, tf.int32)[:, :max_decoding_length]
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(prefix, PAD_ID), tf.int32), axis=1)
    first_ids, first_log_probs = first_alternatives(
        model, inp, prefix, start_id, end_id, num_alternatives
    )
    no_room = (lengths >= max_decoding_length)[:, tf.newaxis]
    kept = no_room | (tf.exp(first_log_probs) >= min_alternative_expansion_prob)
    first_log_probs = tf.where(no_room, 0.0, first_log_probs)

    # Each kept alternative: a row of its own, its prefix then the alternative.
    padded = tf.pad(prefix, [[0, 0], [0, 1]])
    at_the_end = tf.equal(tf.range(tf.shape(padded)[1]), lengths[:, tf.newaxis])
    extended = tf.where(
        at_the_end[:, tf.newaxis], first_ids[:, :, tf.newaxis], padded[:, tf.newaxis]
    )
    rows = tf.cast(tf.where(tf.reshape(kept, [-1]))[:, 0], tf.int32)
    options = {
        "max_decoding_length": max_decoding_length,
        "min_length": min_length,
        "repetition_penalty": repetition_penalty,
        "no_repeat_ngram_size": no_repeat_ngram_size,
        "placeholder_ids": placeholder_ids,
        "prefix": TargetPrefix(
            tf.gather(tf.reshape(extended, [-1, tf.shape(padded)[1]]), rows), as_context=True
        ),
    }
    sources = tf.gather(inp, rows // num_alternatives)
    if beam_width == 1:
        continued = greedy_decode(model, sources, start_id, end_id, **options)
    else:
        continued = beam_search_decode(
            model, sources, start_id, end_id, beam_width, alpha, **options
        )
    continued["scores"] += tf.gather(tf.reshape(first_log_probs, [-1]), rows)

    batch_size = tf.shape(inp)[0]

    def per_alternative(tensor):
        """`tensor` of the kept rows, as `(batch, num_alternatives, ...)` with 0s elsewhere."""
        shape = tf.concat([[batch_size * num_alternatives], tf.shape(tensor)[1:]], axis=0)
        spread = tf.scatter_nd(rows[:, tf.newaxis], tensor, shape)
        return tf.reshape(
            spread, tf.concat([[batch_size, num_alternatives], tf.shape(tensor)[1:]], axis=0)
        )

    return {
        **{name: per_alternative(continued[name]) for name in ("tokens", "scores", "alignment")},
        "count": tf.reduce_sum(tf.cast(kept, tf.int32), axis=1),
    }
