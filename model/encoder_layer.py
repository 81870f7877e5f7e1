"""One encoder layer (§3.1): self-attention, then a position-wise feed-forward network."""

import keras

from model.feed_forward import feed_forward_weights, point_wise_feed_forward_network
from model.masks import AttentionMaskArgument
from model.multi_head_attention import MultiHeadAttention
from model.sublayer import LAYER_ARGS, ResidualNorm


@keras.saving.register_keras_serializable(package="transformer")
class EncoderLayer(AttentionMaskArgument, keras.layers.Layer):
    """Encoder layer: each sub-layer wrapped in dropout, residual and LayerNorm.

    Args:
        d_model: model width.
        num_heads: attention heads.
        dff: feed-forward inner width.
        rate: dropout rate.
        norm_first: pre-LN instead of the paper's post-LN.

    Call arguments:
        x: `(batch, seq_len, d_model)`.
        training: dropout on/off.
        mask: padding mask broadcastable to `(batch, num_heads, seq_len, seq_len)`, 1 = pad.
        return_attention_weights: also return the self-attention weights.

    Returns:
        `(batch, seq_len, d_model)`, and with `return_attention_weights` the weights
        `(batch, num_heads, seq_len, seq_len)` as a second element.
    """

    def __init__(self, d_model, num_heads, dff, rate=0.1, norm_first=False, **kwargs):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.num_heads = num_heads
        self.dff = dff
        self.rate = rate
        self.norm_first = norm_first
        policy = self.dtype_policy
        self.mha = MultiHeadAttention(d_model, num_heads, name="mha", dtype=policy)
        self.ffn = point_wise_feed_forward_network(d_model, dff, dtype=policy, name="ffn")
        self.attention_block = ResidualNorm(rate, norm_first, name="attention_block", dtype=policy)
        self.ffn_block = ResidualNorm(rate, norm_first, name="ffn_block", dtype=policy)

    def build(self, input_shape):
        self.mha.build(input_shape, input_shape, input_shape)
        self.ffn.build(input_shape)
        self.attention_block.build(input_shape)
        self.ffn_block.build(input_shape)
        self.built = True

    def named_weights(self):
        """The variables of the layer, by sub-layer, in the paper's names (for converters).

        Returns:
            `{"self_attention": MultiHeadAttention.named_weights(), "feed_forward":
            feed_forward_weights(...)}`, each with `"layer_norm"`: the LayerNorm of its residual
            block (`layer_norm_weights`; applied after the sum, or before the sub-layer in pre-LN).
        """
        return {
            "self_attention": self.attention_block.with_layer_norm_weights(
                self.mha.named_weights()
            ),
            "feed_forward": self.ffn_block.with_layer_norm_weights(feed_forward_weights(self.ffn)),
        }

    def call(self, x, training=None, mask=None, return_attention_weights=False):
        normed = self.attention_block.normalize_input(x)
        attention_output, attention_weights = self.mha(normed, normed, normed, mask)
        x = self.attention_block(x, attention_output, training=training)

        ffn_output = self.ffn(self.ffn_block.normalize_input(x))
        x = self.ffn_block(x, ffn_output, training=training)
        if return_attention_weights:
            return x, attention_weights
        return x

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in LAYER_ARGS})
        return config
