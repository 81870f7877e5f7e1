"""Padding and look-ahead masks: 1 marks a position that may not be attended."""

import numpy as np

from model import (
    create_cache_mask,
    create_decoder_self_attention_mask,
    create_look_ahead_mask,
    create_padding_mask,
)


def test_padding_mask_marks_pad_id_zero():
    seq = np.array([[7, 6, 0, 0, 1], [1, 2, 3, 0, 0], [0, 0, 0, 4, 5]])
    mask = create_padding_mask(seq)
    assert mask.shape == (3, 1, 1, 5)
    np.testing.assert_array_equal(mask.numpy()[:, 0, 0, :], (seq == 0).astype(np.float32))


def test_look_ahead_mask_is_strictly_upper_triangular():
    mask = create_look_ahead_mask(4).numpy()
    np.testing.assert_array_equal(mask, np.triu(np.ones((4, 4)), k=1))


def test_decoder_mask_combines_look_ahead_and_target_padding():
    tar = np.array([[5, 6, 0]])
    mask = create_decoder_self_attention_mask(tar).numpy()
    assert mask.shape == (1, 1, 3, 3)
    expected = np.maximum(np.triu(np.ones((3, 3)), k=1), (tar == 0)[:, None, :])
    np.testing.assert_array_equal(mask[0, 0], expected[0])


def test_cache_mask_hides_the_slots_after_the_position():
    np.testing.assert_array_equal(create_cache_mask(5, 2), [[[[0, 0, 0, 1, 1]]]])
    np.testing.assert_array_equal(create_cache_mask(3, 2), [[[[0, 0, 0]]]])
