"""keras-hub's Transformer layers as an outside oracle for EncoderLayer and DecoderLayer.

`keras_hub.layers.TransformerEncoder` / `TransformerDecoder` implement the same sub-layers (post-LN
by default, pre-LN with `normalize_first=True`) with Keras's own `MultiHeadAttention`. Given the
same weights (our Dense kernels `(d_model, d_model)` reshaped to keras's per-head EinsumDense
kernels, the same epsilon and activation), both must give the same outputs to 1e-5.
"""

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf

from model import DecoderLayer, EncoderLayer, create_look_ahead_mask, create_padding_mask

D_MODEL, NUM_HEADS, DFF = 16, 4, 32
DEPTH = D_MODEL // NUM_HEADS
EPSILON = 1e-6  # our LayerNormalization's


def copy_attention(ours, theirs):
    """Our MultiHeadAttention's wq/wk/wv/dense into keras's MultiHeadAttention (per-head kernels)."""
    for dense, einsum in (
        (ours.wq, theirs._query_dense),
        (ours.wk, theirs._key_dense),
        (ours.wv, theirs._value_dense),
    ):
        kernel, bias = (np.asarray(w) for w in dense.get_weights())
        einsum.set_weights(
            [kernel.reshape(D_MODEL, NUM_HEADS, DEPTH), bias.reshape(NUM_HEADS, DEPTH)]
        )
    kernel, bias = (np.asarray(w) for w in ours.dense.get_weights())
    theirs._output_dense.set_weights([kernel.reshape(NUM_HEADS, DEPTH, D_MODEL), bias])


def copy_feed_forward(ours, intermediate, output):
    intermediate.set_weights(ours.layers[0].get_weights())
    output.set_weights(ours.layers[1].get_weights())


def padded_inputs(seed, batch=3, length=7, lengths=(7, 4, 1)):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, length, D_MODEL)).astype(np.float32)
    ids = np.array([[5] * n + [0] * (length - n) for n in lengths], np.int32)
    return x, ids


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_encoder_layer_equals_keras_hub_transformer_encoder(norm_first):
    x, ids = padded_inputs(seed=0)
    ours = EncoderLayer(D_MODEL, NUM_HEADS, DFF, rate=0.0, norm_first=norm_first)
    ours.build((None, None, D_MODEL))
    for weight in ours.weights:  # non-trivial LayerNorm scales and biases too
        weight.assign(
            np.random.default_rng(1).normal(size=weight.shape, scale=0.3)
            + (1.0 if weight.path.endswith("gamma") else 0.0)
        )
    theirs = keras_hub.layers.TransformerEncoder(
        intermediate_dim=DFF,
        num_heads=NUM_HEADS,
        dropout=0.0,
        activation="relu",
        layer_norm_epsilon=EPSILON,
        normalize_first=norm_first,
    )
    theirs.build((None, None, D_MODEL))
    copy_attention(ours.mha, theirs._self_attention_layer)
    theirs._self_attention_layer_norm.set_weights(ours.attention_block.layernorm.get_weights())
    theirs._feedforward_layer_norm.set_weights(ours.ffn_block.layernorm.get_weights())
    copy_feed_forward(
        ours.ffn, theirs._feedforward_intermediate_dense, theirs._feedforward_output_dense
    )

    expected = theirs(x, padding_mask=ids != 0)
    actual = ours(x, training=False, mask=create_padding_mask(ids))
    np.testing.assert_allclose(actual, expected, atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_decoder_layer_equals_keras_hub_transformer_decoder(norm_first):
    x, target_ids = padded_inputs(seed=2, length=6, lengths=(6, 3, 2))
    encoder_output, source_ids = padded_inputs(seed=3, length=5, lengths=(5, 2, 4))
    ours = DecoderLayer(D_MODEL, NUM_HEADS, DFF, rate=0.0, norm_first=norm_first)
    ours.build((None, None, D_MODEL), (None, None, D_MODEL))
    for weight in ours.weights:
        weight.assign(
            np.random.default_rng(4).normal(size=weight.shape, scale=0.3)
            + (1.0 if weight.path.endswith("gamma") else 0.0)
        )
    theirs = keras_hub.layers.TransformerDecoder(
        intermediate_dim=DFF,
        num_heads=NUM_HEADS,
        dropout=0.0,
        activation="relu",
        layer_norm_epsilon=EPSILON,
        normalize_first=norm_first,
    )
    theirs.build((None, None, D_MODEL), (None, None, D_MODEL))
    copy_attention(ours.mha1, theirs._self_attention_layer)
    copy_attention(ours.mha2, theirs._cross_attention_layer)
    theirs._self_attention_layer_norm.set_weights(ours.self_attention_block.layernorm.get_weights())
    theirs._cross_attention_layer_norm.set_weights(
        ours.cross_attention_block.layernorm.get_weights()
    )
    theirs._feedforward_layer_norm.set_weights(ours.ffn_block.layernorm.get_weights())
    copy_feed_forward(
        ours.ffn, theirs._feedforward_intermediate_dense, theirs._feedforward_output_dense
    )

    expected = theirs(
        x,
        encoder_output,
        decoder_padding_mask=target_ids != 0,
        encoder_padding_mask=source_ids != 0,
        use_causal_mask=True,
    )
    look_ahead = tf.maximum(create_look_ahead_mask(x.shape[1]), create_padding_mask(target_ids))
    actual = ours(
        x,
        encoder_output,
        training=False,
        look_ahead_mask=look_ahead,
        padding_mask=create_padding_mask(source_ids),
    )[0]
    # keras-hub masks padded queries' keys the same way; compare every position that exists.
    np.testing.assert_allclose(actual, expected, atol=1e-5)


def test_the_oracle_notices_a_changed_weight():
    """The comparison is sharp: one perturbed LayerNorm bias breaks equality."""
    x, ids = padded_inputs(seed=5)
    ours = EncoderLayer(D_MODEL, NUM_HEADS, DFF, rate=0.0)
    ours.build((None, None, D_MODEL))
    theirs = keras_hub.layers.TransformerEncoder(
        intermediate_dim=DFF, num_heads=NUM_HEADS, dropout=0.0, layer_norm_epsilon=EPSILON
    )
    theirs.build((None, None, D_MODEL))
    copy_attention(ours.mha, theirs._self_attention_layer)
    gamma, beta = ours.attention_block.layernorm.get_weights()
    theirs._self_attention_layer_norm.set_weights([gamma, beta + 1e-3])
    theirs._feedforward_layer_norm.set_weights(ours.ffn_block.layernorm.get_weights())
    copy_feed_forward(
        ours.ffn, theirs._feedforward_intermediate_dense, theirs._feedforward_output_dense
    )
    difference = np.abs(ours(x, mask=create_padding_mask(ids)) - theirs(x, padding_mask=ids != 0))
    assert difference.max() > 1e-4
    assert keras.backend.backend() == "tensorflow"
