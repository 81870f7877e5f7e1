"""The decoder: embedding + positional encoding, dropout, N decoder layers."""

import keras

from model.decoder_layer import DecoderLayer
from model.layer_stack import LayerStack


@keras.saving.register_keras_serializable(package="transformer")
class Decoder(LayerStack):
    """A stack of `num_layers` decoder layers over embedded target tokens.

    Args:
        num_layers, d_model, num_heads, dff: as in the paper (N, d_model, h, d_ff).
        target_vocab_size: target vocabulary size.
        maximum_position_encoding: longest target sequence.
        rate: dropout rate.
        norm_first: pre-LN layers, with a final LayerNorm after the stack.
        token_embedding: a shared token embedding (weight tying; see `LayerStack`), not part of
            the config.

    Call arguments:
        x: target token ids `(batch, tar_len)`.
        enc_output: `(batch, inp_len, d_model)`.
        training: dropout on/off.
        look_ahead_mask: `(batch, 1, tar_len, tar_len)`.
        padding_mask: source padding mask `(batch, 1, 1, inp_len)`.

    Returns:
        `(x, attention_weights)`: x `(batch, tar_len, d_model)`, weights
        `{"decoder_layer{i}_block1": self-attention, "decoder_layer{i}_block2": cross-attention}`.

    Incremental decoding: `init_cache`, then `decode_step`; `reorder_cache` for beam search.
    """

    def __init__(
        self,
        num_layers,
        d_model,
        num_heads,
        dff,
        target_vocab_size,
        maximum_position_encoding,
        rate=0.1,
        norm_first=False,
        token_embedding=None,
        **kwargs,
    ):
        super().__init__(
            layer_class=DecoderLayer,
            layer_prefix="decoder_layer",
            layers_attribute="dec_layers",
            num_layers=num_layers,
            d_model=d_model,
            num_heads=num_heads,
            dff=dff,
            vocab_size=target_vocab_size,
            maximum_position_encoding=maximum_position_encoding,
            rate=rate,
            norm_first=norm_first,
            token_embedding=token_embedding,
            **kwargs,
        )
        self.target_vocab_size = target_vocab_size

    def build(self, x_shape, enc_output_shape=None):
        self.build_stack(x_shape, enc_output_shape)

    def init_cache(self, enc_output, cache_slots, compiled=False):
        """Per-layer caches before the first target token (`DecoderLayer.init_cache`):
        `{layer_name: DecoderLayer cache}`."""
        return {
            layer.name: layer.init_cache(enc_output, cache_slots, compiled)
            for layer in self.dec_layers
        }

    def reorder_cache(self, cache, indices):
        """Each layer's cache at the rows `indices` (see `DecoderLayer.reorder_cache`)."""
        return {
            layer.name: layer.reorder_cache(cache[layer.name], indices) for layer in self.dec_layers
        }

    def call(self, x, enc_output, training=None, look_ahead_mask=None, padding_mask=None):
        x = self.embed(x, training)
        attention_weights = {}
        for layer in self.dec_layers:
            x, block1, block2 = layer(
                x,
                enc_output,
                training=training,
                look_ahead_mask=look_ahead_mask,
                padding_mask=padding_mask,
            )
            attention_weights[f"{layer.name}_block1"] = block1
            attention_weights[f"{layer.name}_block2"] = block2
        return self.normalize_output(x), attention_weights

    def decode_step(self, x, cache, cache_update_index, padding_mask=None, compiled=False):
        """`call` for the new tokens `x` `(batch, n)` at positions `cache_update_index`.. (n = 1
        when decoding), through the cache from `init_cache` (inference: no dropout); `compiled`:
        whether XLA compiles the caller (`DecoderLayer.decode_step`).

        Returns:
            `(x, cross_attention_weights, cache)`: x `(batch, n, d_model)`, the last layer's
            cross-attention weights `(batch, num_heads, n, inp_len)`, the updated cache.
        """
        x = self.embed(x, False, cache_update_index)
        new_cache = {}
        for layer in self.dec_layers:
            x, cross_weights, new_cache[layer.name] = layer.decode_step(
                x, cache[layer.name], cache_update_index, padding_mask, compiled=compiled
            )
        return self.normalize_output(x), cross_weights, new_cache

    def get_config(self):
        return {**super().get_config(), "target_vocab_size": self.target_vocab_size}
