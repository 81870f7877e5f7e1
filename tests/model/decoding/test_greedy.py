"""model/decoding/greedy.py: greedy search on a table of log-probabilities, finished rows leaving
the batch."""

import numpy as np
import pytest
import tensorflow as tf

from model.decoding import greedy_search
from model.decoding.greedy import _drop_finished_rows
from tests.model.decoding.decoding_helpers import (
    FAKE_LONGEST,
    FakeTable,
    assert_outputs_equal,
    fake_search,
    greedy_reference,
)


def test_finished_rows_leave_the_decoding_batch():
    alive = {
        "rows": tf.constant([0, 2, 3]),
        "cache": {"key": tf.reshape(tf.range(3 * 2 * 4, dtype=tf.float32), [3, 2, 4, 1])},
    }
    kept = _drop_finished_rows(alive, tf.constant([False, True, False]))
    np.testing.assert_array_equal(kept["rows"], [0, 3])
    np.testing.assert_array_equal(kept["cache"]["key"], alive["cache"]["key"].numpy()[[0, 2]])

    unchanged = _drop_finished_rows(alive, tf.zeros([3], tf.bool))
    np.testing.assert_array_equal(unchanged["rows"], alive["rows"])


@pytest.mark.parametrize("min_length", [0, 3])
@pytest.mark.parametrize("fixed_shape", [False, True], ids=["rows-leave", "fixed-shape"])
def test_greedy_search_follows_the_table(fixed_shape, min_length):
    sentences = 12
    table = FakeTable(np.random.default_rng(5), sentences)
    found = fake_search(
        greedy_search,
        table,
        sentences,
        max_decoding_length=8,
        min_length=min_length,
        fixed_shape=fixed_shape,
    )
    assert found["length"] <= FAKE_LONGEST
    assert_outputs_equal(
        found,
        table,
        [greedy_reference(table, sentence, min_length) for sentence in range(sentences)],
    )
