"""Scaled dot-product attention, the core formula of "Attention Is All You Need" (§3.2.1).

Attention(Q, K, V) = softmax(Q·Kᵀ / √d_k) · V
"""

import tensorflow as tf

# What a masked logit is pushed to. It is added in float32 (see below), where -1e9 is exact
# enough and far below any real logit, while exp(-1e9 - max) underflows cleanly to 0.
MASKED_LOGIT = -1e9


def scaled_dot_product_attention(q, k, v, mask=None):
    """Computes the attention weights and the weighted sum of the values.

    q, k, v must have matching leading dimensions, and k, v must have the same sequence length
    (seq_len_k == seq_len_v). The mask has different shapes depending on its type (padding or
    look-ahead) but must be broadcastable to `(..., seq_len_q, seq_len_k)`.

    Args:
        q: query, shape `(..., seq_len_q, depth)`.
        k: key, shape `(..., seq_len_k, depth)`.
        v: value, shape `(..., seq_len_k, depth_v)`.
        mask: optional float tensor broadcastable to `(..., seq_len_q, seq_len_k)` where
            **1 marks a position that may NOT be attended**. Defaults to None (attend everywhere).

    Returns:
        `(output, attention_weights)`: output of shape `(..., seq_len_q, depth_v)` in the dtype of
        `v`, and the weights of shape `(..., seq_len_q, seq_len_k)` in the dtype of `q`.

    Half precision: q is scaled by 1/√d_k *before* the product so q·kᵀ stays inside float16's
    range (max 65504), and the masking and softmax run in float32, so a large negative never
    overflows to -inf and a row whose every key is masked gives uniform weights instead of NaN.
    """
    compute_dtype = q.dtype
    depth = tf.cast(tf.shape(k)[-1], compute_dtype)
    scaled_q = q * tf.math.rsqrt(depth)
    logits = tf.cast(tf.matmul(scaled_q, k, transpose_b=True), tf.float32)
    if mask is not None:
        logits += tf.cast(mask, tf.float32) * MASKED_LOGIT
    attention_weights = tf.nn.softmax(logits, axis=-1)
    output = tf.matmul(tf.cast(attention_weights, v.dtype), v)
    return output, tf.cast(attention_weights, compute_dtype)
