"""The residual wrapper every encoder and decoder sub-layer shares (§5.4)."""

import keras

from model.precision import float32_weights_policy

# Constructor arguments shared by EncoderLayer, DecoderLayer, Encoder and Decoder (their configs).
LAYER_ARGS = ("d_model", "num_heads", "dff", "rate", "norm_first")
STACK_ARGS = LAYER_ARGS + ("num_layers", "maximum_position_encoding")
# Every LayerNorm of the model (the sub-layers' and the pre-LN stacks' final one).
LAYER_NORM_EPSILON = 1e-6


def layer_norm_weights(layer_norm):
    """`{"gamma", "beta": (d_model,)}`: LayerNorm(x) = gamma · (x - mean) / sqrt(var + eps) + beta."""
    return {"gamma": layer_norm.gamma, "beta": layer_norm.beta}


class ResidualNorm(keras.layers.Layer):
    """Dropout on the sub-layer output, residual connection, and layer normalization.

    Post-LN (the paper): `LayerNorm(x + Dropout(Sublayer(x)))`.
    Pre-LN (`norm_first=True`, more stable for deep stacks): `x + Dropout(Sublayer(LayerNorm(x)))`.

    The owning layer calls `normalize_input` before the sub-layer and `add` after it, so the
    sub-layer itself (attention with its several inputs and extra outputs) stays a plain call.

    Args:
        rate: dropout rate on the sub-layer output.
        norm_first: pre-LN instead of post-LN.
    """

    def __init__(self, rate=0.1, norm_first=False, **kwargs):
        super().__init__(**kwargs)
        self.rate = rate
        self.norm_first = norm_first
        self.layernorm = keras.layers.LayerNormalization(
            epsilon=LAYER_NORM_EPSILON,
            name="layernorm",
            dtype=float32_weights_policy(self.dtype_policy),
        )
        self.dropout = keras.layers.Dropout(rate, dtype=self.dtype_policy)

    def build(self, input_shape):
        self.layernorm.build(input_shape)
        self.built = True

    def normalize_input(self, x):
        """`(batch, seq_len, d_model)` → what the sub-layer reads: LayerNorm(x) in pre-LN, else x."""
        return self.layernorm(x) if self.norm_first else x

    def with_layer_norm_weights(self, sublayer_weights):
        """`sublayer_weights` plus `"layer_norm"`: this wrapper's `layer_norm_weights`."""
        return {**sublayer_weights, "layer_norm": layer_norm_weights(self.layernorm)}

    def call(self, x, sublayer_output, training=None):
        """`x` and `sublayer_output`: `(batch, seq_len, d_model)` → same shape."""
        residual = x + self.dropout(sublayer_output, training=training)
        return residual if self.norm_first else self.layernorm(residual)

    def get_config(self):
        config = super().get_config()
        config.update({"rate": self.rate, "norm_first": self.norm_first})
        return config
