"""MultiHeadAttention against keras.layers.MultiHeadAttention, and its decoding cache."""

import numpy as np
import pytest
import tensorflow as tf

from model import MultiHeadAttention, create_look_ahead_mask
from tests.keras_reference import keras_attention_mask, keras_mha_like


def test_rejects_d_model_not_divisible_by_heads():
    with pytest.raises(ValueError, match=r"d_model \(30\) must be divisible by num_heads \(4\)"):
        MultiHeadAttention(30, 4)


def test_shapes_and_dense_sublayers():
    mha = MultiHeadAttention(d_model=32, num_heads=4)
    q = np.random.rand(2, 5, 16).astype(np.float32)
    kv = np.random.rand(2, 9, 24).astype(np.float32)
    output, weights = mha(v=kv, k=kv, q=q, mask=None)
    assert output.shape == (2, 5, 32)
    assert weights.shape == (2, 4, 5, 9)
    for dense in (mha.wq, mha.wk, mha.wv, mha.dense):
        assert dense.units == 32 and dense.use_bias
    assert mha.split_heads(np.zeros((2, 5, 32), np.float32), 2).shape == (2, 4, 5, 8)


@pytest.mark.parametrize("masked", [False, True])
def test_equals_keras_multi_head_attention(masked):
    rng = np.random.default_rng(0)
    batch, len_q, len_k, d_model, num_heads = 3, 6, 8, 32, 4
    q = rng.normal(size=(batch, len_q, 20)).astype(np.float32)
    v = rng.normal(size=(batch, len_k, 24)).astype(np.float32)
    k = rng.normal(size=(batch, len_k, 24)).astype(np.float32)
    mask = None
    if masked:
        mask = (rng.random((batch, 1, len_q, len_k)) < 0.4).astype(np.float32)
        mask[..., 0] = 0.0

    ours = MultiHeadAttention(d_model, num_heads)
    output, weights = ours(v, k, q, mask)
    reference = keras_mha_like(ours, query_dim=20, value_dim=24)
    expected_output, expected_weights = reference(
        q,
        v,
        key=k,
        attention_mask=None if mask is None else keras_attention_mask(mask),
        return_attention_scores=True,
    )
    np.testing.assert_allclose(weights, expected_weights, atol=1e-5)
    np.testing.assert_allclose(output, expected_output, atol=1e-5)


@pytest.mark.parametrize("compiled", [False, True], ids=["graph", "xla"])
def test_cache_writes_keys_and_values_step_by_step(compiled):
    """Feeding tokens one at a time through the cache equals masked attention over the sequence,
    compiled by XLA or not: XLA writes into a cache one slot larger than needed (the spare slot
    stays zero) and attends over all of it with the slots not yet written masked; a plain
    graph's cache grows by one slot a step and holds the positions fed, nothing more."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 5, 16)).astype(np.float32)
    mha = MultiHeadAttention(16, 2)
    full_output, _ = mha(x, x, x, create_look_ahead_mask(5))
    step = tf.function(
        lambda token, cache, t: mha.write_cache_and_attend(
            token, token, token, cache, t, compiled=compiled
        ),
        jit_compile=compiled,
    )

    cache = mha.empty_cache(batch_size=2, cache_slots=6, compiled=compiled)
    step_outputs = []
    for t in range(5):
        output, cache = step(x[:, t : t + 1], cache, tf.constant(t))
        step_outputs.append(output)
    if compiled:
        assert cache["key"].shape == (2, 2, 6, 8)
        np.testing.assert_array_equal(cache["key"][:, :, 5], 0.0)
    else:
        assert cache["key"].shape == (2, 2, 5, 8)
    np.testing.assert_allclose(np.concatenate(step_outputs, axis=1), full_output, atol=1e-5)


@pytest.mark.parametrize("compiled", [False, True], ids=["graph", "xla"])
def test_cache_takes_several_positions_a_step_after_earlier_ones(compiled):
    """Positions written in chunks (two, one, two) attend as in one causal pass: each chunk's
    positions go after the cache's, in order, and see each other causally (a plain graph's
    cache appends them, XLA's writes them at their slots)."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 5, 16)).astype(np.float32)
    mha = MultiHeadAttention(16, 2)
    full_output, _ = mha(x, x, x, create_look_ahead_mask(5))
    cache = mha.empty_cache(batch_size=2, cache_slots=5, compiled=compiled)
    outputs = []
    for start, end in ((0, 2), (2, 3), (3, 5)):
        chunk = x[:, start:end]
        output, cache = mha.write_cache_and_attend(
            chunk, chunk, chunk, cache, tf.constant(start), compiled=compiled
        )
        outputs.append(output)
    np.testing.assert_allclose(np.concatenate(outputs, axis=1), full_output, atol=1e-5)


def test_fixed_cache_equals_recomputing_keys_and_values():
    rng = np.random.default_rng(2)
    memory = rng.normal(size=(2, 7, 16)).astype(np.float32)
    q = rng.normal(size=(2, 1, 16)).astype(np.float32)
    mha = MultiHeadAttention(16, 4)
    expected, _ = mha(memory, memory, q)
    output, _ = mha.attend_to_cache(q, mha.compute_key_value(memory, memory))
    np.testing.assert_allclose(output, expected, atol=1e-6)


def test_config_round_trip():
    mha = MultiHeadAttention(24, 3, name="attn")
    clone = MultiHeadAttention.from_config(mha.get_config())
    assert (clone.d_model, clone.num_heads, clone.depth, clone.name) == (24, 3, 8, "attn")


def test_runs_under_mixed_precision():
    mha = MultiHeadAttention(16, 2, dtype="mixed_float16")
    x = np.random.rand(2, 4, 16).astype(np.float32) * 50
    output, weights = mha(x, x, x)
    assert output.dtype == "float16" and np.all(np.isfinite(output.numpy()))
    assert mha.wq.kernel.dtype == "float32"
