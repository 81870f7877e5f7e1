"""EncoderLayer and DecoderLayer against the same computation written with Keras's own layers."""

import numpy as np
import pytest

from model import DecoderLayer, EncoderLayer, create_look_ahead_mask, create_padding_mask
from model.layer_stack import LayerStack
from tests.keras_reference import keras_attention_mask, keras_mha_like, layer_norm_like

D_MODEL, HEADS, DFF = 16, 4, 32


def residual(block, x, sublayer):
    """Post-LN: LN(x + f(x)); pre-LN: x + f(LN(x)), with Keras's LayerNormalization."""
    norm = layer_norm_like(block.layernorm)
    if block.norm_first:
        return x + sublayer(norm(x))
    return norm(x + sublayer(x))


@pytest.fixture
def tokens():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 6, D_MODEL)).astype(np.float32)
    ids = np.array([[3, 4, 5, 6, 0, 0], [3, 4, 5, 6, 7, 8]])
    return x, ids


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_encoder_layer_matches_keras_composition(tokens, norm_first):
    x, ids = tokens
    mask = create_padding_mask(ids)
    layer = EncoderLayer(D_MODEL, HEADS, DFF, rate=0.1, norm_first=norm_first)
    output, weights = layer(x, training=False, mask=mask, return_attention_weights=True)

    mha = keras_mha_like(layer.mha, D_MODEL, D_MODEL)
    keras_mask = keras_attention_mask(np.broadcast_to(mask, (2, 1, 6, 6)))
    expected = residual(layer.attention_block, x, lambda h: mha(h, h, attention_mask=keras_mask))
    expected = residual(layer.ffn_block, expected, layer.ffn)
    np.testing.assert_allclose(output, expected, atol=1e-5)
    assert weights.shape == (2, HEADS, 6, 6)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_decoder_layer_matches_keras_composition(tokens, norm_first):
    x, ids = tokens
    enc_output = np.random.default_rng(1).normal(size=(2, 6, D_MODEL)).astype(np.float32)
    look_ahead = np.broadcast_to(create_look_ahead_mask(6), (2, 1, 6, 6))
    padding = np.broadcast_to(create_padding_mask(ids), (2, 1, 6, 6))
    layer = DecoderLayer(D_MODEL, HEADS, DFF, norm_first=norm_first)
    output, self_weights, cross_weights = layer(
        x, enc_output, training=False, look_ahead_mask=look_ahead, padding_mask=padding
    )

    self_mha = keras_mha_like(layer.mha1, D_MODEL, D_MODEL)
    cross_mha = keras_mha_like(layer.mha2, D_MODEL, D_MODEL)
    expected = residual(
        layer.self_attention_block,
        x,
        lambda h: self_mha(h, h, attention_mask=keras_attention_mask(look_ahead)),
    )
    expected = residual(
        layer.cross_attention_block,
        expected,
        lambda h: cross_mha(h, enc_output, attention_mask=keras_attention_mask(padding)),
    )
    expected = residual(layer.ffn_block, expected, layer.ffn)
    np.testing.assert_allclose(output, expected, atol=1e-5)
    assert self_weights.shape == cross_weights.shape == (2, HEADS, 6, 6)
    assert np.all(np.triu(self_weights.numpy(), k=1) == 0.0)


def test_dropout_is_active_only_in_training(tokens):
    x, _ = tokens
    layer = EncoderLayer(D_MODEL, HEADS, DFF, rate=0.5)
    inference = [layer(x, training=False).numpy() for _ in range(2)]
    training = [layer(x, training=True).numpy() for _ in range(2)]
    np.testing.assert_array_equal(inference[0], inference[1])
    assert np.abs(training[0] - training[1]).max() > 1e-3


@pytest.mark.parametrize("cls", [EncoderLayer, DecoderLayer])
def test_config_round_trip(cls):
    layer = cls(D_MODEL, HEADS, DFF, rate=0.2, norm_first=True, name="layer")
    config = cls.from_config(layer.get_config()).get_config()
    assert config == layer.get_config()
    assert (config["dff"], config["rate"], config["norm_first"]) == (DFF, 0.2, True)


def test_layer_stack_takes_keywords_only():
    # Positional, a swapped num_heads and dff would build a wrong model without an error.
    with pytest.raises(TypeError):
        LayerStack(EncoderLayer, "encoder_layer", "enc_layers", 1, D_MODEL, HEADS, DFF, 50, 16)
    stack = LayerStack(
        layer_class=EncoderLayer,
        layer_prefix="encoder_layer",
        layers_attribute="enc_layers",
        num_layers=1,
        d_model=D_MODEL,
        num_heads=HEADS,
        dff=DFF,
        vocab_size=50,
        maximum_position_encoding=16,
    )
    assert (stack.num_heads, stack.dff) == (HEADS, DFF)
    assert [layer.name for layer in stack.stack] == ["encoder_layer1"]
