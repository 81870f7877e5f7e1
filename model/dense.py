"""Dense layers' arithmetic as one 2-D product and a bias add, which TensorFlow fuses on CPU.

Keras's `Dense` multiplies a 3-D input through `tf.tensordot` (a 2-D `MatMul` between reshapes)
and adds its bias to the reshaped product, which TensorFlow does not fuse. Written as a 2-D
`MatMul` followed by `BiasAdd`, the same arithmetic is fused by TensorFlow's CPU graph rewrites
into one oneDNN inner product (`_FusedMatMul`), whose weights a process started with
`TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1` packs once into the blocked layout oneDNN computes in and
keeps between calls, instead of packing them at every product. At a beam of 4 rows per step that
made served beam search faster (docs/benchmark-log.md, "Weights kept packed:
TF_ONEDNN_ASSUME_FROZEN_WEIGHTS"; serving/DEPLOY.md says when to set it). Without the variable
the fused product runs at the unfused one's speed.

That setting makes every fused product in the process treat its second operand as a constant
after its first call (a `MatMul` followed by the add of a vector, too), so in this project's
graphs only weights are multiplied this way. Only the incremental decoding step (inference)
multiplies this way: the forward pass keeps Keras's own arithmetic, which a fused product rounds
differently in the last bits, so that training runs (the bundle's, the tests' tiny ones)
reproduce bit for bit.
"""

import keras
import tensorflow as tf

# The environment variable that tells TensorFlow's oneDNN products their weights never change.
FROZEN_WEIGHTS_VARIABLE = "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS"


def matmul_bias_add(x, kernel, bias=None):
    """`x·kernel + bias` over x's last axis, as one 2-D `MatMul` and a `BiasAdd`.

    Args:
        x: `(..., d_in)`.
        kernel: `(d_in, d_out)`, x's dtype, its shape known when traced: a weight matrix, never
            an activation (module docstring).
        bias: optional `(d_out,)`, x's dtype.

    Returns:
        `(..., d_out)`.
    """
    x = tf.convert_to_tensor(x)
    rows = tf.reshape(x, (-1, kernel.shape[0])) if x.shape.rank != 2 else x
    product = tf.matmul(rows, kernel)
    if bias is not None:
        product = tf.nn.bias_add(product, bias)
    if x.shape.rank == 2:
        return product
    output = tf.reshape(product, tf.concat([tf.shape(x)[:-1], [kernel.shape[1]]], axis=0))
    output.set_shape(x.shape[:-1].concatenate([kernel.shape[1]]))
    return output


def apply_dense(layer, x, fused):
    """`layer(x)` for a built `keras.layers.Dense`: fused, computed by `matmul_bias_add` in the
    layer's compute dtype, then its activation (the same values as Keras's call, up to the
    last bits); else Keras's call itself.

    Args:
        layer: a built `keras.layers.Dense` (no LoRA, no quantization).
        x: `(..., d_in)`, any float dtype.
        fused: True in the decoding step (module docstring).

    Returns:
        `(..., units)` in the layer's compute dtype.
    """
    if not fused:
        return layer(x)
    dtype = layer.compute_dtype
    kernel = tf.cast(keras.ops.convert_to_tensor(layer.kernel), dtype)
    bias = tf.cast(keras.ops.convert_to_tensor(layer.bias), dtype) if layer.use_bias else None
    output = matmul_bias_add(tf.cast(x, dtype), kernel, bias)
    return layer.activation(output) if layer.activation is not None else output
