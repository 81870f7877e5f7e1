"""The encoder: embedding + positional encoding, dropout, N encoder layers."""

import keras

from model.encoder_layer import EncoderLayer
from model.layer_stack import LayerStack
from model.masks import AttentionMaskArgument


@keras.saving.register_keras_serializable(package="transformer")
class Encoder(AttentionMaskArgument, LayerStack):
    """A stack of `num_layers` encoder layers over embedded source tokens.

    Args:
        num_layers, d_model, num_heads, dff: as in the paper (N, d_model, h, d_ff).
        input_vocab_size: source vocabulary size.
        maximum_position_encoding: longest source sequence.
        rate: dropout rate.
        norm_first: pre-LN layers, with a final LayerNorm after the stack.
        token_embedding: a shared token embedding (weight tying; see `LayerStack`), not part of
            the config.

    Call arguments:
        x: source token ids `(batch, inp_len)`.
        training: dropout on/off.
        mask: padding mask `(batch, 1, 1, inp_len)`, 1 = pad.
        return_attention_weights: also return each layer's self-attention weights.

    Returns:
        `(batch, inp_len, d_model)`, and with `return_attention_weights` a dict
        `{"encoder_layer{i}": (batch, num_heads, inp_len, inp_len)}` as a second element.
    """

    def __init__(
        self,
        num_layers,
        d_model,
        num_heads,
        dff,
        input_vocab_size,
        maximum_position_encoding,
        rate=0.1,
        norm_first=False,
        token_embedding=None,
        **kwargs,
    ):
        super().__init__(
            layer_class=EncoderLayer,
            layer_prefix="encoder_layer",
            layers_attribute="enc_layers",
            num_layers=num_layers,
            d_model=d_model,
            num_heads=num_heads,
            dff=dff,
            vocab_size=input_vocab_size,
            maximum_position_encoding=maximum_position_encoding,
            rate=rate,
            norm_first=norm_first,
            token_embedding=token_embedding,
            **kwargs,
        )
        self.input_vocab_size = input_vocab_size

    def build(self, input_shape):
        self.build_stack(input_shape)

    def call(self, x, training=None, mask=None, return_attention_weights=False):
        x = self.embed(x, training)
        attention_weights = {}
        for layer in self.stack:
            x, attention_weights[layer.name] = layer(
                x, training=training, mask=mask, return_attention_weights=True
            )
        x = self.normalize_output(x)
        if return_attention_weights:
            return x, attention_weights
        return x

    def get_config(self):
        return {**super().get_config(), "input_vocab_size": self.input_vocab_size}
