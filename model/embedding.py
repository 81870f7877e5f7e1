"""Token embedding scaled by √d_model plus the sinusoidal positional encoding (§3.4, §3.5)."""

import keras
import tensorflow as tf

from model.positional_encoding import positional_encoding


@keras.saving.register_keras_serializable(package="transformer")
class PositionalEmbedding(keras.layers.Layer):
    """`Embedding(tokens)·√d_model + PE[positions]`.

    Args:
        vocab_size: number of token ids.
        d_model: model width.
        maximum_position_encoding: longest sequence supported (`pe_input` / `pe_target`).

    Call arguments:
        tokens: integer ids `(batch, seq_len)`.
        start_position: position of the first token (scalar; > 0 when decoding step by step).

    Returns:
        `(batch, seq_len, d_model)` in the layer's compute dtype.
    """

    def __init__(self, vocab_size, d_model, maximum_position_encoding, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.maximum_position_encoding = maximum_position_encoding
        self.embedding = keras.layers.Embedding(
            vocab_size, d_model, name="embedding", dtype=self.dtype_policy
        )
        self.pos_encoding = positional_encoding(maximum_position_encoding, d_model)

    def build(self, input_shape):
        self.embedding.build(input_shape)
        self.built = True

    def call(self, tokens, start_position=0):
        # The static length where known: XLA needs the slice size below as a constant.
        seq_len = keras.ops.shape(tokens)[1]
        end_position = start_position + seq_len
        # Without this check a too-long sequence fails deep inside with a slicing error.
        within_encodings = tf.debugging.assert_less_equal(
            end_position,
            self.maximum_position_encoding,
            message=(
                f"sequence longer than maximum_position_encoding={self.maximum_position_encoding}"
            ),
        )
        x = self.embedding(tokens)
        x *= tf.math.sqrt(tf.cast(self.d_model, x.dtype))
        with tf.control_dependencies([within_encodings]):
            positions = tf.slice(
                self.pos_encoding, [0, start_position, 0], [1, seq_len, self.d_model]
            )
        return x + tf.cast(positions, x.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocab_size": self.vocab_size,
                "d_model": self.d_model,
                "maximum_position_encoding": self.maximum_position_encoding,
            }
        )
        return config
