"""What every search shares: output-length bounds, the length penalty, the log-probabilities a
decoder may choose from, and the helpers over the nests of tensors a search carries.

`model.decoding`'s docstring states the conventions (ids, returned tokens, alignments).
"""

import tensorflow as tf

from model.masks import PAD_ID

NEG_INF = -1e9


def max_decoding_length_for(inp, max_length_ratio=1.5, max_length_offset=10, limit=None):
    """The decoders' `max_decoding_length` (output tokens at most) for the batch `inp`, relative
    to its longest source: `max_decoding_length_for_source(longest_source_length(inp), ...)`.

    Args:
        inp: `(batch, inp_len)` source ids.
        limit: optional hard cap (e.g. the model's `pe_target - 1`).

    Returns:
        int32 scalar.
    """
    return max_decoding_length_for_source(
        longest_source_length(inp), max_length_ratio, max_length_offset, limit
    )


def longest_source_length(inp):
    """Tokens of the longest source of `inp` `(batch, inp_len)` (padding not counted): float32
    scalar, -inf for an empty batch."""
    return tf.reduce_max(tf.reduce_sum(tf.cast(tf.not_equal(inp, PAD_ID), tf.float32), axis=1))


def max_decoding_length_for_source(
    source_length, max_length_ratio=1.5, max_length_offset=10, limit=None
):
    """Output tokens at most for a batch whose longest source has `source_length` tokens (int or
    scalar tensor): ceil(ratio · source_length) + offset, at least 1, at most `limit` (optional
    hard cap, e.g. the model's `pe_target - 1`).

    Returns:
        int32 scalar.
    """
    source_length = tf.cast(source_length, tf.float32)
    bound = tf.cast(tf.math.ceil(source_length * max_length_ratio), tf.int32)
    bound = tf.maximum(bound + max_length_offset, 1)
    if limit is not None:
        bound = tf.minimum(bound, limit)
    return bound


def length_penalty(length, alpha):
    """GNMT length penalty (Wu et al., 2016): ((5 + length) / 6)^alpha; alpha = 0 disables it."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def output_log_probs(logits):
    """Log-probabilities over the tokens a decoder may output: the softmax of `logits`
    `(..., vocab)` without the pad id.

    The pad id is never a real output (labels never contain it, so its logit is untrained), and
    emitting it would corrupt the prefix: the decoder's self-attention masks pad positions out.
    It is left out of the softmax, not just forbidden after it, so the scores are those of a
    distribution over real tokens (as CTranslate2 computes them with [PAD] suppressed).
    """
    logits = tf.cast(logits, tf.float32)
    no_pad = tf.one_hot(PAD_ID, tf.shape(logits)[-1], on_value=NEG_INF, off_value=0.0)
    return tf.nn.log_softmax(logits + no_pad, axis=-1)


def next_token_log_probs(logits, step, min_length, end_id):
    """`output_log_probs` of the token at `step`, with [END] forbidden before `min_length`
    tokens (forced lengths, benchmarks)."""
    log_probs = output_log_probs(logits)
    end_forbidden = tf.one_hot(end_id, tf.shape(log_probs)[-1], on_value=NEG_INF, off_value=0.0)
    return log_probs + tf.where(
        tf.less(step + 1, min_length), end_forbidden, tf.zeros_like(end_forbidden)
    )


def unknown_shapes(structure):
    """`tf.while_loop` shape invariants that only fix the rank (batch and lengths vary by call)."""
    return tf.nest.map_structure(
        lambda tensor: tf.TensorShape([None] * tensor.shape.rank), structure
    )


def take_rows(structure, rows):
    """Every tensor of `structure` (a nest of tensors whose first dimension is the row) at `rows`."""
    return tf.nest.map_structure(lambda tensor: tf.gather(tensor, rows), structure)


def empty_outputs(batch_size, slots, alignment_width, hypotheses=None):
    """The decoders' output buffers: nothing written yet; per sentence one output, or
    `hypotheses` of them (`(batch, hypotheses, ...)`)."""
    rows = [batch_size] if hypotheses is None else [batch_size, hypotheses]
    return {
        "tokens": tf.zeros(rows + [slots], tf.int32),
        "alignment": tf.zeros(rows + [slots, alignment_width], tf.float32),
        "scores": tf.zeros(rows, tf.float32),
    }


def trim(outputs):
    """Search outputs cut to the positions the loop ran (`length`)."""
    length = outputs["length"]
    return {
        "tokens": outputs["tokens"][..., :length],
        "scores": outputs["scores"],
        "alignment": outputs["alignment"][..., :length, :],
    }


def mask_after_end(tokens, end_id):
    """Replaces every token after the first [END] of each row with padding."""
    is_end = tf.cast(tf.equal(tokens, end_id), tf.int32)
    ends_before = tf.cumsum(is_end, axis=1, exclusive=True)
    return tf.where(ends_before > 0, tf.zeros_like(tokens), tokens)
