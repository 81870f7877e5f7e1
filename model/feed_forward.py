"""Position-wise feed-forward network (§3.3): FFN(x) = max(0, x·W1 + b1)·W2 + b2."""

import keras

from model.dense import apply_dense


def point_wise_feed_forward_network(d_model, dff, dtype=None, name=None):
    """Two Dense layers applied to each position separately and identically.

    Args:
        d_model: output width.
        dff: inner width (2048 in the base model).
        dtype: optional Keras dtype policy (e.g. "mixed_float16").
        name: optional layer name.

    Returns:
        `keras.Sequential` mapping `(batch, seq_len, d_in)` → `(batch, seq_len, d_model)`.
    """
    return keras.Sequential(
        [
            keras.layers.Dense(dff, activation="relu", dtype=dtype),
            keras.layers.Dense(d_model, dtype=dtype),
        ],
        name=name,
    )


def feed_forward_weights(ffn):
    """The variables of a `point_wise_feed_forward_network` in the paper's names (eq. 2):
    `{"W_1": (d_in, dff), "b_1": (dff,), "W_2": (dff, d_model), "b_2": (d_model,)}`."""
    inner, outer = ffn.layers
    return {"W_1": inner.kernel, "b_1": inner.bias, "W_2": outer.kernel, "b_2": outer.bias}


def feed_forward(ffn, x, fused):
    """`ffn(x)` for a built `point_wise_feed_forward_network`; `fused`: each Dense layer as the
    decoding step computes it (`model.dense.apply_dense`)."""
    if not fused:
        return ffn(x)
    for layer in ffn.layers:
        x = apply_dense(layer, x, fused=True)
    return x
