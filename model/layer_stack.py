"""What the encoder and the decoder share: embedding + positional encoding, dropout, N layers."""

import keras
import tensorflow as tf

from model.embedding import PositionalEmbedding
from model.precision import float32_weights_policy
from model.sublayer import LAYER_NORM_EPSILON, STACK_ARGS, layer_norm_weights


class LayerStack(keras.layers.Layer):
    """Base of `Encoder` and `Decoder`: embedded tokens through `num_layers` layers.

    Every argument is keyword-only: eleven positional ones (`num_heads` next to `dff`, both
    ints) would let a swapped pair build a wrong model without an error.

    Args:
        layer_class: `EncoderLayer` or `DecoderLayer`.
        layer_prefix: layer names, `{prefix}{i}` from 1 (the keys of the attention weights).
        layers_attribute: the attribute holding the layer list, `enc_layers` or `dec_layers` as
            in the classic code; checkpoints address the layers by this name, so it is fixed.
        num_layers, d_model, num_heads, dff, rate, norm_first: as in the paper and the layers.
        vocab_size: number of token ids embedded.
        maximum_position_encoding: longest sequence.
        token_embedding: a shared `model.embedding.make_token_embedding` layer (weight tying);
            by default the stack's embedding makes its own.
    """

    def __init__(
        self,
        *,
        layer_class,
        layer_prefix,
        layers_attribute,
        num_layers,
        d_model,
        num_heads,
        dff,
        vocab_size,
        maximum_position_encoding,
        rate=0.1,
        norm_first=False,
        token_embedding=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_layers = num_layers
        self.d_model = d_model
        self.num_heads = num_heads
        self.dff = dff
        self.maximum_position_encoding = maximum_position_encoding
        self.rate = rate
        self.norm_first = norm_first
        policy = self.dtype_policy
        self.embedding = PositionalEmbedding(
            vocab_size,
            d_model,
            maximum_position_encoding,
            token_embedding=token_embedding,
            name="embedding",
            dtype=float32_weights_policy(policy),
        )
        self._layers_attribute = layers_attribute
        setattr(
            self,
            layers_attribute,
            [
                layer_class(
                    d_model=d_model,
                    num_heads=num_heads,
                    dff=dff,
                    rate=rate,
                    norm_first=norm_first,
                    name=f"{layer_prefix}{i + 1}",
                    dtype=policy,
                )
                for i in range(num_layers)
            ],
        )
        self.dropout = keras.layers.Dropout(rate, dtype=policy)
        # Pre-LN leaves the last residual sum unnormalized; the stack normalizes it once.
        self.final_layernorm = (
            keras.layers.LayerNormalization(
                epsilon=LAYER_NORM_EPSILON,
                name="final_layernorm",
                dtype=float32_weights_policy(policy),
            )
            if norm_first
            else None
        )

    @property
    def stack(self):
        """The layers, first to last."""
        return getattr(self, self._layers_attribute)

    def build_stack(self, tokens_shape, *layer_input_shapes):
        """Builds the embedding, each layer (given its extra input shapes) and the final norm."""
        self.embedding.build(tokens_shape)
        hidden_shape = tuple(tokens_shape) + (self.d_model,)
        for layer in self.stack:
            layer.build(hidden_shape, *layer_input_shapes)
        if self.final_layernorm is not None:
            self.final_layernorm.build(hidden_shape)
        self.built = True

    def named_weights(self):
        """The stack's weights in the paper's names (for converters).

        Returns:
            `{"embedding": (vocab_size, d_model) token embedding matrix (scaled by √d_model when
            read, §3.4), "positional_encoding": (maximum_position_encoding, d_model) sinusoids
            (§3.5), "layers": [each layer's named_weights()], first to last}`, plus with pre-LN
            `"final_layer_norm"`: `layer_norm_weights` of the norm after the last layer.
        """
        weights = {
            "embedding": self.embedding.embedding.embeddings,
            "positional_encoding": self.embedding.pos_encoding[0],
            "layers": [layer.named_weights() for layer in self.stack],
        }
        if self.final_layernorm is not None:
            weights["final_layer_norm"] = layer_norm_weights(self.final_layernorm)
        return weights

    def embed(self, tokens, training, start_position=0):
        """`(batch, len)` ids → dropout(embedding·√d_model + PE): `(batch, len, d_model)`."""
        return self.dropout(
            self.embedding(tokens, start_position=start_position), training=training
        )

    def normalize_output(self, x):
        return x if self.final_layernorm is None else self.final_layernorm(x)

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        # Keras 3 (TF backend) hands its tracked lists to TensorFlow only for SavedModel, so a
        # `tf.train.Checkpoint` of the model would silently skip every encoder/decoder layer.
        children = super()._trackable_children(save_type, **kwargs)
        if "_checkpointed_layers" not in self.__dict__:
            # One stable wrapper: TF identifies checkpoint nodes by object identity. Set through
            # object.__setattr__ so Keras does not track it as a second copy of the layers.
            object.__setattr__(
                self, "_checkpointed_layers", tf.__internal__.tracking.wrap(list(self.stack))
            )
        children[self._layers_attribute] = self._checkpointed_layers
        return children

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in STACK_ARGS})
        return config
