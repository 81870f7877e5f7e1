"""Sinusoidal positional encoding against the formula and its relative-position property."""

import numpy as np
import pytest
import tensorflow as tf

from model import PositionalEmbedding, positional_encoding


@pytest.mark.parametrize("position, d_model", [(50, 16), (7, 5), (128, 512)])
def test_matches_formula(position, d_model):
    encoding = positional_encoding(position, d_model)
    assert encoding.shape == (1, position, d_model)
    assert encoding.dtype == "float32"
    expected = np.zeros((position, d_model))
    for p in range(position):
        for j in range(d_model):
            i = j // 2
            angle = p / 10000 ** (2 * i / d_model)
            expected[p, j] = np.sin(angle) if j % 2 == 0 else np.cos(angle)
    np.testing.assert_allclose(encoding[0], expected, atol=1e-6)


def test_shift_is_a_fixed_rotation_per_frequency():
    """PE[p + k] = R(k·ω_i) · PE[p] for each (sin, cos) pair, the same R for every p."""
    d_model, offset = 32, 7
    encoding = positional_encoding(200, d_model).numpy()[0].astype(np.float64)
    for i in range(d_model // 2):
        omega = 1.0 / 10000 ** (2 * i / d_model)
        # [sin(a + b), cos(a + b)] = [[cos b, sin b], [-sin b, cos b]] · [sin a, cos a]
        rotation = np.array(
            [
                [np.cos(offset * omega), np.sin(offset * omega)],
                [-np.sin(offset * omega), np.cos(offset * omega)],
            ]
        )
        pairs = encoding[:, 2 * i : 2 * i + 2]
        np.testing.assert_allclose(pairs[:-offset] @ rotation.T, pairs[offset:], atol=2e-5)


def test_shift_map_is_recoverable_by_least_squares():
    """Independent of the closed form: one linear map fitted on positions 0..99 predicts the rest."""
    d_model, offset = 16, 3
    encoding = positional_encoding(160, d_model).numpy()[0].astype(np.float64)
    source, target = encoding[:-offset], encoding[offset:]
    linear_map, *_ = np.linalg.lstsq(source[:100], target[:100], rcond=None)
    # The slowest pairs barely turn over 100 positions, so the fit amplifies float32 rounding
    # to ~1e-4; a map that did not exist would miss by O(1).
    np.testing.assert_allclose(source[100:] @ linear_map, target[100:], atol=1e-3)


def test_positional_embedding_scales_embeddings_and_adds_encodings_from_an_offset():
    layer = PositionalEmbedding(vocab_size=20, d_model=8, maximum_position_encoding=10)
    tokens = np.array([[3, 4, 5, 6]])
    full = layer(tokens).numpy()
    table = layer.embedding.embeddings.numpy()
    np.testing.assert_allclose(
        full[0], table[tokens[0]] * np.sqrt(8) + positional_encoding(10, 8)[0, :4], rtol=1e-6
    )
    # One token at position 2 (as cached decoding feeds it) gets the encoding of position 2.
    np.testing.assert_allclose(layer(tokens[:, 2:3], start_position=2)[0, 0], full[0, 2], rtol=1e-6)


@pytest.mark.parametrize("in_graph", [False, True])
def test_positional_embedding_rejects_sequences_beyond_its_encodings(in_graph):
    layer = PositionalEmbedding(vocab_size=20, d_model=8, maximum_position_encoding=4)
    call = tf.function(layer) if in_graph else layer
    with pytest.raises(tf.errors.InvalidArgumentError, match="maximum_position_encoding=4"):
        call(tf.constant([[1, 2, 3, 4, 5]]))
