"""write_slot: the one-position writes of the key/value cache and the decoders' output buffers."""

import functools

import numpy as np
import pytest
import tensorflow as tf

from model.buffers import write_slot

RUNNERS = {
    "eager": write_slot,
    "graph": tf.function(write_slot),
    "xla": tf.function(functools.partial(write_slot, compiled=True), jit_compile=True),
}


@pytest.mark.parametrize("mode", sorted(RUNNERS))
@pytest.mark.parametrize("shape,axis", [((2, 3, 6, 4), 2), ((3, 6), 1), ((6, 2, 5), 0)])
def test_writes_only_its_positions(mode, shape, axis):
    rng = np.random.default_rng(7)
    buffer = rng.normal(size=shape).astype(np.float32)
    new_shape = list(shape)
    new_shape[axis] = 2
    new = rng.normal(size=new_shape).astype(np.float32)
    for index in (0, 3, 4):
        expected = buffer.copy()
        positions = [slice(None)] * len(shape)
        positions[axis] = slice(index, index + 2)
        expected[tuple(positions)] = new
        written = RUNNERS[mode](tf.constant(buffer), tf.constant(new), tf.constant(index), axis)
        np.testing.assert_array_equal(written, expected)


def test_leaves_its_input_unchanged_when_it_is_still_read():
    """The in-place update must not clobber a buffer something else still reads."""

    @tf.function
    def write_and_keep_both(buffer):
        written = write_slot(buffer, tf.ones([2, 1]), 0, axis=1)
        return buffer + 0.0, written

    kept, written = write_and_keep_both(tf.zeros([2, 3]))
    np.testing.assert_array_equal(kept, np.zeros([2, 3]))
    np.testing.assert_array_equal(written, [[1, 0, 0], [1, 0, 0]])
