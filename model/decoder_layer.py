"""One decoder layer (§3.1): masked self-attention, cross-attention over the encoder output, FFN."""

import keras

from model.feed_forward import point_wise_feed_forward_network
from model.multi_head_attention import MultiHeadAttention
from model.sublayer import LAYER_ARGS, ResidualNorm


@keras.saving.register_keras_serializable(package="transformer")
class DecoderLayer(keras.layers.Layer):
    """Decoder layer: three sub-layers, each wrapped in dropout, residual and LayerNorm.

    Args:
        d_model: model width.
        num_heads: attention heads.
        dff: feed-forward inner width.
        rate: dropout rate.
        norm_first: pre-LN instead of the paper's post-LN.

    Call arguments:
        x: target representations `(batch, tar_len, d_model)`.
        enc_output: `(batch, inp_len, d_model)`; may be None when `cache` holds the projected
            cross-attention keys/values.
        training: dropout on/off.
        look_ahead_mask: broadcastable to `(batch, num_heads, tar_len, tar_len)`; during cached
            decoding, to `(batch, num_heads, 1, cache_slots)`, hiding the slots not yet written.
        padding_mask: source padding mask broadcastable to `(batch, num_heads, tar_len, inp_len)`.
        cache: optional `{"self": {"key", "value"}, "cross": {"key", "value"}}` (see
            `init_cache`) to decode one position at a time (`tar_len` = 1).
        cache_update_index: with a `cache`, the position of `x` (the self-attention slot it fills).

    Returns:
        `(out, self_attention_weights, cross_attention_weights)`: out `(batch, tar_len, d_model)`,
        weights `(batch, num_heads, tar_len, tar_len)` (cached: the cache slots under XLA, the
        written ones otherwise) and `(batch, num_heads, tar_len, inp_len)`; with a `cache`, the
        updated cache as a fourth element.
    """

    def __init__(self, d_model, num_heads, dff, rate=0.1, norm_first=False, **kwargs):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.num_heads = num_heads
        self.dff = dff
        self.rate = rate
        self.norm_first = norm_first
        policy = self.dtype_policy
        self.mha1 = MultiHeadAttention(d_model, num_heads, name="mha1", dtype=policy)
        self.mha2 = MultiHeadAttention(d_model, num_heads, name="mha2", dtype=policy)
        self.ffn = point_wise_feed_forward_network(d_model, dff, dtype=policy, name="ffn")
        self.self_attention_block = ResidualNorm(
            rate, norm_first, name="self_attention_block", dtype=policy
        )
        self.cross_attention_block = ResidualNorm(
            rate, norm_first, name="cross_attention_block", dtype=policy
        )
        self.ffn_block = ResidualNorm(rate, norm_first, name="ffn_block", dtype=policy)

    def build(self, x_shape, enc_output_shape=None):
        enc_output_shape = enc_output_shape or (None, None, self.d_model)
        self.mha1.build(x_shape, x_shape, x_shape)
        self.mha2.build(enc_output_shape, enc_output_shape, x_shape)
        self.ffn.build(x_shape)
        for block in (self.self_attention_block, self.cross_attention_block, self.ffn_block):
            block.build(x_shape)
        self.built = True

    def init_cache(self, enc_output, max_length):
        """The decoding cache before the first target token.

        Args:
            enc_output: `(batch, inp_len, d_model)`.
            max_length: target positions the cache has room for.

        Returns:
            `{"self": empty keys/values, "cross": keys/values projected from enc_output}`.
        """
        batch_size = keras.ops.shape(enc_output)[0]
        return {
            "self": self.mha1.empty_cache(batch_size, max_length),
            "cross": self.mha2.compute_key_value(enc_output, enc_output),
        }

    def call(
        self,
        x,
        enc_output,
        training=None,
        look_ahead_mask=None,
        padding_mask=None,
        cache=None,
        cache_update_index=None,
    ):
        normed = self.self_attention_block.normalize_input(x)
        if cache is None:
            attn1, self_weights = self.mha1(normed, normed, normed, look_ahead_mask)
        else:
            attn1, self_weights, self_cache = self.mha1(
                normed, normed, normed, look_ahead_mask, cache=cache["self"],
                cache_update_index=cache_update_index,
            )
        x = self.self_attention_block(x, attn1, training=training)

        normed = self.cross_attention_block.normalize_input(x)
        if cache is None:
            attn2, cross_weights = self.mha2(enc_output, enc_output, normed, padding_mask)
        else:
            attn2, cross_weights, _ = self.mha2(None, None, normed, padding_mask, cache=cache["cross"])
        x = self.cross_attention_block(x, attn2, training=training)

        ffn_output = self.ffn(self.ffn_block.normalize_input(x))
        x = self.ffn_block(x, ffn_output, training=training)
        if cache is None:
            return x, self_weights, cross_weights
        return x, self_weights, cross_weights, {"self": self_cache, "cross": cache["cross"]}

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in LAYER_ARGS})
        return config
