"""Token embeddings scaled by √d_model plus the sinusoidal positional encoding (§3.4, §3.5), and
the pre-softmax linear transformation that shares the embedding matrix (§3.4)."""

import keras
import tensorflow as tf

from model.dense import matmul_bias_add
from model.positional_encoding import positional_encoding
from model.precision import float32_weights_policy


def make_token_embedding(vocab_size, d_model, dtype=None, name="embedding"):
    """A `keras.layers.ReversibleEmbedding` `(vocab_size, d_model)`: embeds token ids and, called
    with `reverse=True`, projects `(..., d_model)` back to float32 logits `(..., vocab_size)`.

    Initialized N(0, 1/d_model), as tensor2tensor and fairseq do for the paper's model: the
    embeddings times √d_model then have unit variance, like the positional encodings they are
    added to, and the logits of the tied projection start with unit variance too.
    """
    return keras.layers.ReversibleEmbedding(
        vocab_size,
        d_model,
        tie_weights=True,
        embeddings_initializer=keras.initializers.RandomNormal(stddev=d_model**-0.5),
        reverse_dtype="float32",
        name=name,
        dtype=float32_weights_policy(dtype),
    )


@keras.saving.register_keras_serializable(package="transformer")
class PositionalEmbedding(keras.layers.Layer):
    """`Embedding(tokens)·√d_model + PE[positions]`.

    Args:
        vocab_size: number of token ids.
        d_model: model width.
        maximum_position_encoding: longest sequence supported (`pe_input` / `pe_target`).
        token_embedding: a `make_token_embedding(vocab_size, d_model)` layer to share with the
            other users of the same matrix (weight tying); by default the layer makes its own.
            Not part of the config: the model that shares it passes it again when rebuilt.

    Call arguments:
        tokens: integer ids `(batch, seq_len)`.
        start_position: position of the first token (scalar; > 0 when decoding step by step).

    Returns:
        `(batch, seq_len, d_model)` in the layer's compute dtype.
    """

    def __init__(
        self, vocab_size, d_model, maximum_position_encoding, token_embedding=None, **kwargs
    ):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.maximum_position_encoding = maximum_position_encoding
        if token_embedding is None:
            token_embedding = make_token_embedding(vocab_size, d_model, self.dtype_policy)
        elif (token_embedding.input_dim, token_embedding.output_dim) != (vocab_size, d_model):
            raise ValueError(
                f"the shared token embedding is ({token_embedding.input_dim}, "
                f"{token_embedding.output_dim}); this layer needs ({vocab_size}, {d_model})"
            )
        self.embedding = token_embedding
        self.pos_encoding = positional_encoding(maximum_position_encoding, d_model)

    def build(self, input_shape):
        # A shared embedding is built by its first user only.
        if not self.embedding.built:
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


def project_to_logits(x, pre_softmax_linear, fused=False):
    """The pre-softmax linear transformation's arithmetic, the same in the forward pass and at
    every decoding step: `x·W` in W's dtype, then `+ b` in float32.

    Args:
        x: `(..., d_model)`, any float dtype.
        pre_softmax_linear: `{"W": (d_model, vocab_size) float32 or bfloat16, "b":
            (vocab_size,) float32}`, an output layer's `pre_softmax_linear()`.
        fused: as the decoding step computes it: the product and the bias as one
            `model.dense.matmul_bias_add`. A bfloat16 product takes b rounded to bfloat16, and
            the rest of b (b minus its rounding) is added to the float32 result: the logits
            round once to bfloat16 where unfused they round before the bias is added.

    Returns:
        float32 logits `(..., vocab_size)`.
    """
    weight = pre_softmax_linear["W"]
    if fused:
        weight = keras.ops.convert_to_tensor(weight)
        bias = keras.ops.convert_to_tensor(pre_softmax_linear["b"])
        rounded_bias = tf.cast(bias, weight.dtype)
        logits = tf.cast(matmul_bias_add(tf.cast(x, weight.dtype), weight, rounded_bias), "float32")
        if weight.dtype == bias.dtype:
            return logits
        return logits + (bias - tf.cast(rounded_bias, bias.dtype))
    # keras.ops.matmul (a 2-D product on the flattened rows), not tf.matmul (a broadcast batch
    # product): the same speed, and the float32 forward pass keeps the last bits it had, with
    # which the tiny runs of the CTranslate2 tests train as they did.
    product = keras.ops.matmul(keras.ops.cast(x, weight.dtype), weight)
    return keras.ops.cast(product, "float32") + pre_softmax_linear["b"]


class TiedOutputProjection(keras.layers.Layer):
    """The pre-softmax linear transformation sharing the embedding matrix E (§3.4): `x·Eᵀ + b`.

    The bias (one per token, zeros at first) is kept from the untied output layer: it costs
    `vocab_size` weights and models how frequent each token is, which E, shared with the input
    side, would otherwise have to encode. OpenNMT-tf and Sockeye keep it too; fairseq and
    tensor2tensor drop it.

    Args:
        token_embedding: the `make_token_embedding` layer whose matrix E `(vocab_size, d_model)`
            is shared (built by its embedding user). Being a constructor object, it makes the
            layer buildable only by the model that owns the embedding (no `from_config`).
        product_dtype: the dtype `x·Eᵀ` is computed in (`model.precision.logits_product_dtype`).

    Call arguments:
        x: `(..., d_model)`.

    Returns:
        float32 logits `(..., vocab_size)`, whatever the compute dtype (give the layer
        `dtype="float32"` so that E and b are read in float32).
    """

    def __init__(self, token_embedding, product_dtype="float32", **kwargs):
        super().__init__(**kwargs)
        self.token_embedding = token_embedding
        self.vocab_size = token_embedding.input_dim
        self.product_dtype = product_dtype

    def build(self, input_shape):
        self.bias = self.add_weight(shape=(self.vocab_size,), initializer="zeros", name="bias")
        self.built = True

    def pre_softmax_linear(self):
        """`{"W": Eᵀ (d_model, vocab_size) in product_dtype, "b": (vocab_size,)}`: W is a copy
        made by this call (see `Transformer.pre_softmax_linear`)."""
        # E is read here, not through the embedding layer's reverse call, so that product_dtype
        # alone decides the product's dtype: called outside any autocast scope (by a model
        # storing its weights in bfloat16, `model.precision`), Keras would round E there.
        matrix = tf.transpose(self.token_embedding.embeddings)
        return {"W": tf.cast(matrix, self.product_dtype), "b": self.bias}

    def call(self, x):
        return project_to_logits(x, self.pre_softmax_linear())


class OutputProjection(keras.layers.Dense):
    """The untied pre-softmax linear transformation `x·W + b`: a `Dense` layer (its variables,
    `kernel` and `bias`, as Keras saves them) whose product is computed in `product_dtype`.

    Args:
        units: the target vocabulary size.
        product_dtype: the dtype `x·W` is computed in (`model.precision.logits_product_dtype`).
        kwargs: `Dense`'s; give `dtype="float32"` (float32 variables and logits).
    """

    def __init__(self, units, product_dtype="float32", **kwargs):
        super().__init__(units, **kwargs)
        self.product_dtype = product_dtype

    def pre_softmax_linear(self):
        """`{"W": (d_model, units) in product_dtype, "b": (units,)}`: W is the kernel itself
        when product_dtype is its dtype, else a copy made by this call."""
        kernel = self.kernel
        if kernel.dtype != self.product_dtype:
            kernel = tf.cast(kernel, self.product_dtype)
        return {"W": kernel, "b": self.bias}

    def call(self, x):
        return project_to_logits(x, self.pre_softmax_linear())

    def get_config(self):
        return {**super().get_config(), "product_dtype": self.product_dtype}
