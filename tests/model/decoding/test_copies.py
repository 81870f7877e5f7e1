"""model/decoding/copies.py: placeholder limits in greedy and beam search against exhaustive
references."""

import numpy as np
import pytest
import tensorflow as tf

from model.decoding import (
    beam_search,
    greedy_search,
)
from model.decoding.copies import PlaceholderLimits
from tests.model.decoding.decoding_helpers import (
    FAKE_END,
    FAKE_WORDS,
    LOOP_LAYOUTS,
    FakeTable,
    assert_outputs_equal,
    exhaustive_best,
    exhaustive_ranking,
    fake_search,
    greedy_reference,
)

# Placeholder limits (`model.decoding.copies`): the fake table's first word plays the
# placeholder piece, and each sentence's source holds it 0 or 1 times.
FAKE_PLACEHOLDER = FAKE_WORDS[0]


def placeholder_counts(sentences):
    return np.arange(sentences, dtype=np.int32) % 2


def placeholder_limits(sentences):
    return PlaceholderLimits(
        (FAKE_PLACEHOLDER,), tf.constant(placeholder_counts(sentences)[:, np.newaxis])
    )


def within_limit(tokens, limit):
    return list(tokens).count(FAKE_PLACEHOLDER) <= limit


@pytest.mark.parametrize("layout", LOOP_LAYOUTS)
@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_wide_beam_search_with_placeholder_limits_equals_the_exhaustive_search(layout, alpha):
    """The best output among those holding the placeholder at most as often as the sentence's
    source, with the table's score; and the limits change some outputs."""
    sentences = 12
    table = FakeTable(np.random.default_rng(23), sentences)
    options = {"beam_width": 32, "alpha": alpha, **LOOP_LAYOUTS[layout]}
    found = fake_search(
        beam_search, table, sentences, 8, placeholders=placeholder_limits(sentences), **options
    )
    limits = placeholder_counts(sentences)
    expected = [
        next(
            output
            for output in exhaustive_ranking(table, sentence, alpha)
            if within_limit(output[0], limits[sentence])
        )
        for sentence in range(sentences)
    ]
    assert_outputs_equal(found, table, expected)
    unlimited = [exhaustive_best(table, s, alpha)[0] for s in range(sentences)]
    assert sum(tokens != best[0] for tokens, best in zip(unlimited, expected)) >= 2, (
        "the table's best outputs are within the limits: the test tests nothing"
    )


def greedy_limited_reference(table, sentence, limit):
    """Greedy search under the placeholder limit, written out: `(tokens, summed
    log-probability)`."""
    tokens, log_prob = [], 0.0
    while not tokens or tokens[-1] != FAKE_END:
        log_probs = table.path_log_probs(sentence, tokens + [FAKE_END])[-1].copy()
        log_probs[0] = -np.inf
        if not within_limit(tokens + [FAKE_PLACEHOLDER], limit):
            log_probs[FAKE_PLACEHOLDER] = -np.inf
        tokens.append(int(np.argmax(log_probs)))
        log_prob += log_probs[tokens[-1]]
    return tokens, log_prob


@pytest.mark.parametrize("layout", LOOP_LAYOUTS)
def test_greedy_search_with_placeholder_limits_follows_the_reference(layout):
    sentences = 12
    table = FakeTable(np.random.default_rng(29), sentences)
    found = fake_search(
        greedy_search,
        table,
        sentences,
        8,
        placeholders=placeholder_limits(sentences),
        **LOOP_LAYOUTS[layout],
    )
    limits = placeholder_counts(sentences)
    expected = [greedy_limited_reference(table, s, limits[s]) for s in range(sentences)]
    assert_outputs_equal(found, table, expected)
    unlimited = [greedy_reference(table, s, 0)[0] for s in range(sentences)]
    assert sum(tokens != best[0] for tokens, best in zip(unlimited, expected)) >= 2, (
        "greedy search is within the limits already: the test tests nothing"
    )


def test_placeholder_limits_count_a_prefix_as_output():
    """A placeholder forced by a prefix counts: a source that holds it once gets it no more."""
    sentences = 12
    table = FakeTable(np.random.default_rng(31), sentences)
    prefix = tf.fill([sentences, 1], FAKE_PLACEHOLDER)
    limits = PlaceholderLimits((FAKE_PLACEHOLDER,), tf.ones([sentences, 1], tf.int32))

    def placeholders_written(**options):
        found = fake_search(greedy_search, table, sentences, 8, prefix=prefix, **options)
        return [list(row).count(FAKE_PLACEHOLDER) for row in found["tokens"]]

    assert placeholders_written(placeholders=limits) == [1] * sentences
    assert max(placeholders_written()) > 1, "no output repeats the prefix's placeholder"
