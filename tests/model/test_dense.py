"""model.dense: the decoding step's Dense arithmetic against Keras's own Dense layer and NumPy,
in the form TensorFlow fuses (tests/inference/test_export_decoding.py serves an export with
TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from model.dense import apply_dense, matmul_bias_add
from model.embedding import project_to_logits
from tests.graphs import products_with_bias
from tests.numerics import BFLOAT16_HALF_ULP, BFLOAT16_ULP, requires_onednn_bfloat16


def _dense(policy, activation, d_in=12, units=20):
    layer = keras.layers.Dense(units, activation=activation, dtype=policy)
    layer.build((None, d_in))
    rng = np.random.default_rng(0)
    layer.set_weights(
        [rng.normal(size=(d_in, units)).astype("float32"), rng.normal(size=units).astype("float32")]
    )
    return layer


@pytest.mark.parametrize("shape", [(5, 12), (2, 3, 12), (2, 1, 3, 12)], ids=["2d", "3d", "4d"])
@pytest.mark.parametrize("activation", [None, "relu"])
@pytest.mark.parametrize(
    ("policy", "rtol"), [("float32", 1e-5), ("mixed_bfloat16", 1e-2), ("bfloat16", 1e-2)]
)
def test_fused_dense_equals_the_keras_layer(shape, activation, policy, rtol):
    layer = _dense(keras.dtype_policies.DTypePolicy(policy), activation)
    x = np.random.default_rng(1).normal(size=shape).astype("float32")
    expected = layer(x)
    # Eagerly nothing is fused: the same operations, the same bits.
    eager = apply_dense(layer, x, fused=True)
    assert eager.dtype == expected.dtype and eager.shape == expected.shape
    np.testing.assert_array_equal(np.asarray(eager, "float32"), np.asarray(expected, "float32"))
    # Traced, TensorFlow's CPU rewrites fuse the product and its bias into one kernel, which
    # rounds in its own order.
    traced = tf.function(lambda inputs: apply_dense(layer, inputs, fused=True))(x)
    np.testing.assert_allclose(
        np.asarray(traced, "float32"), np.asarray(expected, "float32"), rtol=rtol, atol=rtol
    )
    # Unfused, it is the layer's own call.
    np.testing.assert_array_equal(apply_dense(layer, x, fused=False), expected)


def test_matmul_bias_add_equals_numpy_and_keeps_static_shapes():
    rng = np.random.default_rng(2)
    x, kernel, bias = (rng.normal(size=s) for s in [(2, 3, 4, 6), (6, 5), (5,)])
    np.testing.assert_allclose(matmul_bias_add(x, kernel, bias), x @ kernel + bias, rtol=1e-12)
    np.testing.assert_allclose(matmul_bias_add(x, kernel), x @ kernel, rtol=1e-12)

    @tf.function(input_signature=[tf.TensorSpec([None, 3, 6], tf.float64)])
    def traced(inputs):
        return matmul_bias_add(inputs, kernel, bias)

    assert traced.get_concrete_function().structured_outputs.shape.as_list() == [None, 3, 5]


def test_the_product_and_its_bias_are_one_matmul_then_bias_add():
    kernel, bias = tf.ones((4, 3)), tf.zeros(3)

    def graph_of(function):
        traced = tf.function(function, input_signature=[tf.TensorSpec([None, None, 4])])
        return traced.get_concrete_function().graph.as_graph_def()

    assert products_with_bias(graph_of(lambda x: matmul_bias_add(x, kernel, bias))).total() == 1
    assert products_with_bias(graph_of(lambda x: matmul_bias_add(x, kernel))).total() == 0


def _logits_case():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 3, 8)).astype("float32")
    linear = {"W": rng.normal(size=(8, 11)).astype("float32"), "b": rng.normal(size=11)}
    linear["b"] = linear["b"].astype("float32")
    return x, linear


def _bfloat16_logits_case():
    """`(x, linear, product, exact)`: the case with W in bfloat16; `product` is x rounded to
    bfloat16 times W, and `exact` that plus b, both in float64."""
    x, linear = _logits_case()
    linear["W"] = tf.cast(linear["W"], "bfloat16")
    product = np.asarray(tf.cast(x, "bfloat16"), "float64") @ np.asarray(linear["W"], "float64")
    return x, linear, product, product + linear["b"]


def test_fused_logits_equal_the_forward_pass_logits():
    x, linear = _logits_case()
    np.testing.assert_allclose(
        project_to_logits(x, linear, fused=True), project_to_logits(x, linear), rtol=1e-6
    )


@pytest.mark.cpu_dependent
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_bfloat16_logits_are_within_a_rounding_of_the_product_and_one_of_the_bias(fused):
    """On every CPU: a bfloat16 product is its float32 sum rounded once to bfloat16, to nearest
    (oneDNN) or toward zero (TensorFlow's Eigen kernel, AVX2-only CPUs): within one bfloat16 unit
    (2⁻⁷) of the product; fused, the bias rounded to bfloat16 is added in bfloat16 (half a unit
    of the sum more) and its float32 remainder after."""
    x, linear, product, exact = _bfloat16_logits_case()
    logits = project_to_logits(x, linear, fused=fused)
    assert logits.dtype == tf.float32
    # float32 accumulation of 8 terms adds at most 8·2⁻²⁴ of the terms' magnitudes: negligible
    # beside the bfloat16 units, and covered by the 1 + 2⁻⁷ below.
    bound = BFLOAT16_ULP * np.abs(product)
    if fused:
        bound += BFLOAT16_HALF_ULP * (np.abs(product) + np.abs(linear["b"]))
    np.testing.assert_array_less(np.abs(np.asarray(logits, "float64") - exact), bound * (1 + 2**-7))
    # Where x·W is 0 both give b exactly, not b rounded to bfloat16.
    np.testing.assert_array_equal(
        project_to_logits(np.zeros_like(x), linear, fused=fused),
        np.broadcast_to(linear["b"], (2, 3, 11)),
    )


@pytest.mark.cpu_dependent
@requires_onednn_bfloat16
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_onednn_bfloat16_logits_round_once_to_nearest(fused):
    """Where oneDNN multiplies bfloat16 (AVX-512F CPUs): the logits are the float32 sum rounded
    once, to nearest, up to one bfloat16 rounding of their size (2⁻⁸ relative), the bias's
    float32 remainder kept."""
    x, linear, _, exact = _bfloat16_logits_case()
    logits = project_to_logits(x, linear, fused=fused)
    np.testing.assert_allclose(logits, exact, rtol=0, atol=np.abs(exact).max() * BFLOAT16_HALF_ULP)
