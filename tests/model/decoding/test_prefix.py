"""model/decoding/prefix.py: searches continuing a given target prefix, against the exhaustive
continuations."""

import itertools

import numpy as np
import pytest

from model.decoding import (
    beam_search,
    greedy_search,
)
from tests.model.decoding.decoding_helpers import (
    FAKE_END,
    FAKE_LONGEST,
    FAKE_WORDS,
    FakeTable,
    assert_outputs_equal,
    fake_search,
    gnmt_score,
    greedy_reference,
    nth_hypotheses,
)


def random_prefixes(rng, sentences, longest=FAKE_LONGEST - 1):
    """A word prefix of 0 to `longest` words per sentence: `(list of tuples, (sentences, P) ids
    padded with 0)`."""
    prefixes = [
        tuple(int(word) for word in rng.choice(FAKE_WORDS, size=rng.integers(0, longest + 1)))
        for _ in range(sentences)
    ]
    ids = np.zeros((sentences, longest), np.int32)
    for sentence, prefix in enumerate(prefixes):
        ids[sentence, : len(prefix)] = prefix
    return prefixes, ids


@pytest.mark.parametrize("min_length", [0, 3])
@pytest.mark.parametrize("fixed_shape", [False, True], ids=["rows-leave", "fixed-shape"])
def test_greedy_search_continues_each_rows_prefix(fixed_shape, min_length):
    """Rows of prefixes of 0 to 3 words in one batch: each output is its prefix, then greedy
    search over the table from there, scored after the prefix, with the alignment of every
    token (forced ones too); `min_length` counts the prefix."""
    sentences = 24
    table = FakeTable(np.random.default_rng(5), sentences)
    prefixes, ids = random_prefixes(np.random.default_rng(6), sentences)
    assert {len(prefix) for prefix in prefixes} == {0, 1, 2, 3}
    found = fake_search(
        greedy_search,
        table,
        sentences,
        max_decoding_length=8,
        min_length=min_length,
        fixed_shape=fixed_shape,
        prefix=ids,
    )
    expected = [
        greedy_reference(table, sentence, min_length, prefix)
        for sentence, prefix in enumerate(prefixes)
    ]
    assert_outputs_equal(found, table, expected)
    free = fake_search(
        greedy_search, table, sentences, max_decoding_length=8, min_length=min_length
    )
    assert any(
        tuple(found["tokens"][sentence]) != tuple(free["tokens"][sentence])
        for sentence, prefix in enumerate(prefixes)
        if prefix
    ), "every prefix is the greedy output's: the test tests little"


@pytest.mark.parametrize("search", [greedy_search, beam_search], ids=["greedy", "beam"])
def test_a_prefix_longer_than_max_decoding_length_is_cut_there_unscored(search):
    sentences = 4
    table = FakeTable(np.random.default_rng(5), sentences)
    ids = np.tile(np.int32([[3, 4, 5]]), [sentences, 1])
    found = fake_search(search, table, sentences, max_decoding_length=2, prefix=ids)
    np.testing.assert_array_equal(found["tokens"], ids[:, :2])
    np.testing.assert_array_equal(found["scores"], 0.0)


def exhaustive_prefix_ranking(table, sentence, alpha, prefix, min_length=0, bar_ends=True):
    """Every output that continues `prefix` (words), scored after it with the length penalty of
    the whole output, best first; with `bar_ends`, without `prefix + [END]` where [END] is not
    the most probable token after the prefix (CTranslate2 kills such candidates)."""
    outputs = []
    for length in range(max(min_length, 1, len(prefix) + 1), FAKE_LONGEST + 1):
        for words in itertools.product(FAKE_WORDS, repeat=length - 1 - len(prefix)):
            tokens = (*prefix, *words, FAKE_END)
            path = table.path_log_probs(sentence, tokens)
            log_prob = sum(path[i, tokens[i]] for i in range(len(prefix), length))
            outputs.append((tokens, gnmt_score(log_prob, length, alpha)))
    after_prefix = table.path_log_probs(sentence, (*prefix, FAKE_END))[-1][1:]
    if bar_ends and np.argmax(after_prefix) + 1 != FAKE_END:
        outputs = [output for output in outputs if output[0] != (*prefix, FAKE_END)]
    return sorted(outputs, key=lambda output: -output[1])


@pytest.mark.parametrize("fixed_shape", [False, True], ids=["rows-leave", "fixed-shape"])
@pytest.mark.parametrize("min_length", [0, 3])
@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_wide_beam_with_prefixes_equals_the_exhaustive_continuations(
    alpha, min_length, fixed_shape
):
    """Rows of prefixes of 0 to 2 words in one batch, `num_hypotheses` 3 of a beam as wide as
    every prefix: each sentence's 3 best continuations of its prefix, scored after it, and
    [END] right after the prefix only where it is the most probable token there."""
    sentences, count = 40, 3
    table = FakeTable(np.random.default_rng(11), sentences)
    prefixes, ids = random_prefixes(np.random.default_rng(12), sentences, longest=2)
    found = fake_search(
        beam_search,
        table,
        sentences,
        max_decoding_length=8,
        beam_width=32,
        alpha=alpha,
        min_length=min_length,
        num_hypotheses=count,
        prefix=ids,
        fixed_shape=fixed_shape,
    )
    rankings = [
        exhaustive_prefix_ranking(table, sentence, alpha, prefix, min_length)
        for sentence, prefix in enumerate(prefixes)
    ]
    for n in range(count):
        expected = [ranking[n] for ranking in rankings]
        assert_outputs_equal(nth_hypotheses(found, n), table, expected, lengths_vary=False)
    if min_length == 0:
        # The rule matters: some barred prefix + [END] would rank among the 3 best.
        unbarred = [
            exhaustive_prefix_ranking(table, sentence, alpha, prefix, bar_ends=False)
            for sentence, prefix in enumerate(prefixes)
        ]
        assert any(ranking[:count] != barred[:count] for ranking, barred in zip(unbarred, rankings))
