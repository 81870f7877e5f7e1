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
        x: target token ids `(batch, tar_len)` (with a `cache`: only the new tokens).
        enc_output: `(batch, inp_len, d_model)`; unused with a `cache`.
        training: dropout on/off.
        look_ahead_mask: `(batch, 1, tar_len, tar_len)`; during cached decoding, broadcastable to
            `(batch, 1, 1, cache_slots)` with 1 on the slots not written yet.
        padding_mask: source padding mask `(batch, 1, 1, inp_len)`.
        cache: from `init_cache`, to decode one position at a time.
        cache_update_index: with a `cache`, the position of the new token (int32 scalar).

    Returns:
        `(x, attention_weights)`: x `(batch, tar_len, d_model)`, weights
        `{"decoder_layer{i}_block1": self-attention, "decoder_layer{i}_block2": cross-attention}`;
        with a `cache`, the updated cache as a third element.
    """

    def __init__(self, num_layers, d_model, num_heads, dff, target_vocab_size,
                 maximum_position_encoding, rate=0.1, norm_first=False, token_embedding=None,
                 **kwargs):
        super().__init__(DecoderLayer, "decoder_layer", "dec_layers", num_layers, d_model, num_heads, dff,
                         target_vocab_size, maximum_position_encoding, rate, norm_first,
                         token_embedding=token_embedding, **kwargs)
        self.target_vocab_size = target_vocab_size

    def build(self, x_shape, enc_output_shape=None):
        self.build_stack(x_shape, enc_output_shape)

    def init_cache(self, enc_output, max_length):
        """Per-layer caches before the first target token: `{layer_name: DecoderLayer cache}`."""
        return {layer.name: layer.init_cache(enc_output, max_length) for layer in self.dec_layers}

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
        x = self.embed(x, training, 0 if cache is None else cache_update_index)

        attention_weights = {}
        new_cache = {}
        for layer in self.dec_layers:
            outputs = layer(
                x,
                enc_output,
                training=training,
                look_ahead_mask=look_ahead_mask,
                padding_mask=padding_mask,
                cache=None if cache is None else cache[layer.name],
                cache_update_index=cache_update_index,
            )
            x, block1, block2 = outputs[:3]
            attention_weights[f"{layer.name}_block1"] = block1
            attention_weights[f"{layer.name}_block2"] = block2
            if cache is not None:
                new_cache[layer.name] = outputs[3]
        x = self.normalize_output(x)
        if cache is None:
            return x, attention_weights
        return x, attention_weights, new_cache

    def get_config(self):
        return {**super().get_config(), "target_vocab_size": self.target_vocab_size}
