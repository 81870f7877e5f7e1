"""One decoder layer (§3.1): masked self-attention, cross-attention over the encoder output, FFN."""

import keras
import tensorflow as tf

from model.feed_forward import (
    feed_forward,
    feed_forward_weights,
    point_wise_feed_forward_network,
)
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
        enc_output: `(batch, inp_len, d_model)`.
        training: dropout on/off.
        look_ahead_mask: broadcastable to `(batch, num_heads, tar_len, tar_len)`.
        padding_mask: source padding mask broadcastable to `(batch, num_heads, tar_len, inp_len)`.

    Returns:
        `(out, self_attention_weights, cross_attention_weights)`: out `(batch, tar_len, d_model)`,
        weights `(batch, num_heads, tar_len, tar_len)` and `(batch, num_heads, tar_len, inp_len)`.

    Incremental decoding: `init_cache`, then `decode_step` one position at a time; beam search
    moves the cache between hypotheses with `reorder_cache`.
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

    def named_weights(self):
        """The variables of the layer, by sub-layer, in the paper's names (for converters).

        Returns:
            `{"self_attention", "encoder_decoder_attention": MultiHeadAttention.named_weights(),
            "feed_forward": feed_forward_weights(...)}`, each with `"layer_norm"` as in
            `EncoderLayer.named_weights`. The encoder-decoder attention's `W_K`, `W_V` read the
            encoder output, its `W_Q` the decoder.
        """
        return {
            "self_attention": self.self_attention_block.with_layer_norm_weights(
                self.mha1.named_weights()
            ),
            "encoder_decoder_attention": self.cross_attention_block.with_layer_norm_weights(
                self.mha2.named_weights()
            ),
            "feed_forward": self.ffn_block.with_layer_norm_weights(feed_forward_weights(self.ffn)),
        }

    def init_cache(self, enc_output, cache_slots, compiled=False):
        """The decoding cache before the first target token, for `decode_step` with the same
        `compiled`.

        Args:
            enc_output: `(batch, inp_len, d_model)`.
            cache_slots: target positions the self-attention cache has room for under XLA
                (`MultiHeadAttention.empty_cache`: a plain graph's grows instead).
            compiled: whether XLA compiles the decoding loop.

        Returns:
            `{"self": empty keys/values, "cross": keys/values projected from enc_output}`; every
            tensor's first dimension is the batch.
        """
        batch_size = keras.ops.shape(enc_output)[0]
        return {
            "self": self.mha1.empty_cache(batch_size, cache_slots, compiled),
            "cross": self.mha2.compute_key_value(enc_output, enc_output),
        }

    @staticmethod
    def reorder_cache(cache, indices):
        """The cache of the rows `indices` `(batch,)` (beam search: each hypothesis takes its
        parent's history). Only the self-attention keys/values move: `indices` stay within the
        rows of one source sentence, whose cross-attention keys/values are the same."""
        return {
            **cache,
            "self": {name: tf.gather(tensor, indices) for name, tensor in cache["self"].items()},
        }

    def call(self, x, enc_output, training=None, look_ahead_mask=None, padding_mask=None):
        normed = self.self_attention_block.normalize_input(x)
        attn1, self_weights = self.mha1(normed, normed, normed, look_ahead_mask)
        x, cross_weights = self._cross_attention_and_ffn(
            x,
            attn1,
            lambda q: self.mha2(enc_output, enc_output, q, padding_mask),
            training,
            fused=False,
        )
        return x, self_weights, cross_weights

    def decode_step(self, x, cache, cache_update_index, padding_mask=None, compiled=False):
        """`call` for new positions written into the cache (inference: no dropout).

        Args:
            x: `(batch, n, d_model)`, the positions from `cache_update_index` on (decoding: n = 1).
            cache: from `init_cache` or a previous step.
            cache_update_index: int32 scalar, the position of `x`'s first row.
            padding_mask: as in `call`.
            compiled: whether XLA compiles the caller (`MultiHeadAttention.write_cache_and_attend`).

        Returns:
            `(out, cross_attention_weights, cache)`: as `call` (the self-attention weights are
            not returned: see `write_cache_and_attend`), and the updated cache.
        """
        normed = self.self_attention_block.normalize_input(x)
        attn1, self_cache = self.mha1.write_cache_and_attend(
            normed, normed, normed, cache["self"], cache_update_index, compiled=compiled
        )
        x, cross_weights = self._cross_attention_and_ffn(
            x,
            attn1,
            lambda q: self.mha2.attend_to_cache(q, cache["cross"], padding_mask),
            training=False,
            fused=True,
        )
        return x, cross_weights, {**cache, "self": self_cache}

    def _cross_attention_and_ffn(self, x, self_attention_output, cross_attention, training, fused):
        """The sub-layers after self-attention; `cross_attention(queries)` → `(output, weights)`;
        `fused`: the decoding step's projections (`model.dense.apply_dense`).

        Returns `(out, cross_attention_weights)`."""
        x = self.self_attention_block(x, self_attention_output, training=training)
        attn2, cross_weights = cross_attention(self.cross_attention_block.normalize_input(x))
        x = self.cross_attention_block(x, attn2, training=training)
        ffn_output = feed_forward(self.ffn, self.ffn_block.normalize_input(x), fused)
        return self.ffn_block(x, ffn_output, training=training), cross_weights

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in LAYER_ARGS})
        return config
