"""Fixed-size buffers written one position at a time: the key/value cache and the decoders' outputs."""

import keras
import tensorflow as tf


def write_slot(buffer, new, index, axis, compiled=False):
    """`buffer` with `new` written at positions `index .. index + n - 1` of `axis`.

    Args:
        buffer: a tensor with a static rank, e.g. a cache `(batch, num_heads, slots, depth)`.
        new: same shape as `buffer` except `n` positions along `axis`.
        index: int32 scalar, the first position written.
        axis: the (non-negative) axis of the positions.
        compiled: whether XLA compiles the caller (`tf.function(jit_compile=True)`); each
            choice's op runs only there (see below).

    Returns:
        A tensor shaped as `buffer`.

    Without XLA this is TensorStridedSliceUpdate, a core op that TF Serving runs. Inside a
    `tf.while_loop` it still copies the buffer once per write: the loop holds a reference to its
    state while the body runs, so the kernel cannot take the buffer over (also with
    `parallel_iterations=1`). That is one pass over the buffer, as attention's read of the cache
    is; a `tf.where` over all slots would read three. XLA needs the
    op's slice bounds as constants, so `compiled` writes with `keras.ops.slice_update`, XLA's own
    dynamic-update-slice, which has no kernel outside XLA and which XLA does update in place.
    """
    rank = buffer.shape.rank
    index = tf.cast(index, tf.int32)
    start = tf.one_hot(axis, rank, on_value=index, off_value=0, dtype=tf.int32)
    if compiled:
        return keras.ops.slice_update(buffer, start, new)
    length = tf.one_hot(axis, rank, on_value=tf.shape(new)[axis], off_value=0, dtype=tf.int32)
    whole_other_axes = (1 << rank) - 1 - (1 << axis)  # begin/end mask bits: take the axis whole.
    return tf.raw_ops.TensorStridedSliceUpdate(
        input=buffer,
        begin=start,
        end=start + length,
        strides=tf.ones([rank], tf.int32),
        value=new,
        begin_mask=whole_other_axes,
        end_mask=whole_other_axes,
    )
