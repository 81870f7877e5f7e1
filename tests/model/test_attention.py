"""scaled_dot_product_attention: the worked example, a NumPy reference, and half precision."""

import numpy as np
import pytest
import tensorflow as tf

from model import scaled_dot_product_attention

K = np.array([[10, 0, 0], [0, 10, 0], [0, 0, 10], [0, 0, 10]], dtype=np.float32)
V = np.array([[1, 0], [10, 0], [100, 5], [1000, 6]], dtype=np.float32)


def numpy_attention(q, k, v, mask=None):
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    logits = q @ np.swapaxes(k, -1, -2) / np.sqrt(k.shape[-1])
    if mask is not None:
        logits = np.where(np.asarray(mask) > 0, -np.inf, logits)
    logits = logits - logits.max(axis=-1, keepdims=True)
    weights = np.exp(logits)
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights @ v, weights


@pytest.mark.parametrize(
    "query, expected_weights, expected_output",
    [
        ([[0, 10, 0]], [[0, 1, 0, 0]], [[10, 0]]),
        ([[0, 0, 10]], [[0, 0, 0.5, 0.5]], [[550, 5.5]]),
        ([[10, 10, 0]], [[0.5, 0.5, 0, 0]], [[5.5, 0]]),
    ],
    ids=["aligned-with-second-key", "repeated-key", "between-two-keys"],
)
def test_worked_example(query, expected_weights, expected_output):
    output, weights = scaled_dot_product_attention(np.float32(query), K, V, None)
    np.testing.assert_allclose(weights, expected_weights, atol=1e-5)
    np.testing.assert_allclose(output, expected_output, atol=1e-5)


def test_worked_example_three_queries_at_once():
    queries = np.float32([[0, 0, 10], [0, 10, 0], [10, 10, 0]])
    output, weights = scaled_dot_product_attention(queries, K, V, None)
    np.testing.assert_allclose(
        weights, [[0, 0, 0.5, 0.5], [0, 1, 0, 0], [0.5, 0.5, 0, 0]], atol=1e-5
    )
    np.testing.assert_allclose(output, [[550, 5.5], [10, 0], [5.5, 0]], atol=1e-4)


def random_case(rng, with_mask=True):
    batch, heads, len_q, len_k, depth, depth_v = 3, 2, 5, 7, 16, 8
    q = rng.normal(size=(batch, heads, len_q, depth))
    k = rng.normal(size=(batch, heads, len_k, depth))
    v = rng.normal(size=(batch, heads, len_k, depth_v))
    mask = None
    if with_mask:
        mask = (rng.random((batch, 1, len_q, len_k)) < 0.3).astype(np.float32)
        mask[..., 0] = 0.0  # keep one key per row so the reference has no all-masked row
    return q, k, v, mask


@pytest.mark.parametrize("with_mask", [False, True])
def test_matches_numpy_reference_float32(with_mask):
    q, k, v, mask = random_case(np.random.default_rng(0), with_mask)
    output, weights = scaled_dot_product_attention(
        q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), mask
    )
    expected_output, expected_weights = numpy_attention(q, k, v, mask)
    np.testing.assert_allclose(weights, expected_weights, atol=1e-5)
    np.testing.assert_allclose(output, expected_output, atol=1e-5)


@pytest.mark.parametrize("dtype, atol", [(tf.float16, 5e-3), (tf.bfloat16, 3e-2)])
def test_matches_numpy_reference_half_precision(dtype, atol):
    q, k, v, mask = random_case(np.random.default_rng(1))
    # The reference sees the same rounded inputs as the half-precision computation.
    q, k, v = (tf.cast(a, dtype) for a in (q, k, v))
    output, weights = scaled_dot_product_attention(q, k, v, tf.constant(mask, dtype))
    assert output.dtype == dtype and weights.dtype == dtype
    expected_output, expected_weights = numpy_attention(
        *(tf.cast(a, tf.float64).numpy() for a in (q, k, v)), mask
    )
    np.testing.assert_allclose(tf.cast(weights, tf.float32), expected_weights, atol=atol)
    np.testing.assert_allclose(tf.cast(output, tf.float32), expected_output, atol=4 * atol)


def test_float16_large_logits_do_not_overflow():
    # q·k = 64 · 40 · 40 = 102400 overflows float16 (max 65504) unless scaled before the product.
    depth = 64
    q = tf.fill((1, 2, depth), tf.constant(40.0, tf.float16))
    k = tf.fill((1, 3, depth), tf.constant(40.0, tf.float16))
    v = tf.ones((1, 3, 4), tf.float16)
    mask = tf.constant([[[0.0, 0.0, 1.0]]], tf.float16)
    output, weights = scaled_dot_product_attention(q, k, v, mask)
    assert np.all(np.isfinite(output.numpy())) and np.all(np.isfinite(weights.numpy()))
    np.testing.assert_allclose(
        weights.numpy().astype(np.float32), [[[0.5, 0.5, 0.0]] * 2], atol=1e-3
    )


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.bfloat16])
def test_fully_masked_row_has_no_nan(dtype):
    q, k, v, _ = random_case(np.random.default_rng(2), with_mask=False)
    mask = np.zeros((3, 1, 5, 7), np.float32)
    mask[:, :, 2, :] = 1.0  # query row 2 may attend nothing
    output, weights = scaled_dot_product_attention(
        *(tf.cast(a, dtype) for a in (q, k, v)), tf.constant(mask, dtype)
    )
    assert not np.any(np.isnan(tf.cast(output, tf.float32).numpy()))
    weights = tf.cast(weights, tf.float32).numpy()
    assert not np.any(np.isnan(weights))
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=2e-2)


def test_masked_positions_get_zero_weight():
    q, k, v, mask = random_case(np.random.default_rng(3))
    _, weights = scaled_dot_product_attention(*(a.astype(np.float32) for a in (q, k, v)), mask)
    assert np.all(weights.numpy()[np.broadcast_to(mask, weights.shape) > 0] == 0.0)
