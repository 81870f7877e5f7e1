"""model/decoding/penalties.py: the next-token rules (minimum length, banned n-grams, repetition
penalty) against CTranslate2's rules."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from model.decoding import (
    beam_search_decode,
    greedy_decode,
)
from model.decoding.common import NEG_INF
from model.decoding.penalties import ban_repeated_ngrams, penalize_repetitions
from tests.model.decoding.decoding_helpers import in_graph
from tests.reverse_task import END, START, reverse_task


@pytest.mark.parametrize("decode", [greedy_decode, beam_search_decode], ids=["greedy", "beam"])
def test_min_length_above_the_true_length_delays_end(trained_reverse_model, decode):
    """Sources of 4 tokens translate to 4 tokens + [END]; with min_length 7 no [END] comes
    before the 7th token, and one comes then or later."""
    model, _ = trained_reverse_model
    source, _, labels = reverse_task(np.random.default_rng(3), 40)
    source = source[np.sum(source != 0, axis=1) == 4][:, :4]
    assert len(source) >= 3
    free = in_graph(decode, model)(source)["tokens"].numpy()
    np.testing.assert_array_equal(np.argmax(free == END, axis=1), 4)
    forced = in_graph(decode, model, min_length=7)(source)["tokens"].numpy()
    assert not np.any(forced[:, :6] == END)
    assert np.all(np.any(forced[:, 6:] == END, axis=1))


def ctranslate2_banned_tokens(sequence, ngram_size):
    """CTranslate2's `NoRepeatNgram::apply` (src/decoding_utils.cc) written out for one row: the
    tokens that followed each earlier occurrence of the last `ngram_size - 1` tokens."""
    if len(sequence) < ngram_size:
        return set()
    context = sequence[len(sequence) - ngram_size + 1 :]
    return {
        sequence[start + ngram_size - 1]
        for start in range(len(sequence) - ngram_size + 1)
        if sequence[start : start + ngram_size - 1] == context
    }


@pytest.mark.parametrize("ngram_size", [1, 2, 3, 4])
def test_banned_ngrams_equal_ctranslate2s_rule_on_every_short_sequence(ngram_size):
    """Every sequence of up to 6 tokens over 3 words, read from a buffer wider than it (pad
    after it, as the searches' buffers are)."""
    vocab, width = 6, 9
    sequences = [
        list(words) for length in range(7) for words in itertools.product((3, 4, 5), repeat=length)
    ]
    generated = np.zeros((len(sequences), width), np.int32)
    for row, sequence in enumerate(sequences):
        generated[row, : len(sequence)] = sequence
    logits = tf.zeros([len(sequences), vocab])
    for length in range(7):
        rows = [row for row, sequence in enumerate(sequences) if len(sequence) == length]
        banned = ban_repeated_ngrams(
            tf.gather(logits, rows), generated[rows], tf.constant(length), ngram_size
        ).numpy()
        for row, row_logits in zip(rows, banned):
            expected = ctranslate2_banned_tokens(sequences[row], ngram_size)
            found = {token for token in range(1, vocab) if row_logits[token] <= NEG_INF / 2}
            assert found == expected, (sequences[row], ngram_size)


def test_repetition_penalty_is_ctranslate2s_rule():
    """Each token already generated, once whatever its count: positive logits divided by the
    penalty, negative ones multiplied (CTranslate2's `penalize_previous_tokens`); others kept."""
    logits = np.float32([[2.0, -1.0, 0.5, -3.0, 4.0, 0.0], [1.0, 1.0, -2.0, 2.0, -1.0, 3.0]])
    generated = np.int32([[4, 1, 4, 0], [3, 2, 0, 0]])
    penalized = penalize_repetitions(tf.constant(logits), tf.constant(generated), 2.0).numpy()
    expected = logits.copy()
    for row, tokens in enumerate(generated):
        for token in set(tokens[tokens != 0].tolist()):
            score = logits[row, token]
            expected[row, token] = score * 2.0 if score < 0 else score / 2.0
    np.testing.assert_array_equal(penalized[:, 1:], expected[:, 1:])  # pad: never an output


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_no_output_repeats_a_banned_ngram(half_trained_model, search):
    """Whatever the model prefers, no output of a search with `no_repeat_ngram_size` 2 holds a
    bigram twice."""
    source, _, _ = reverse_task(np.random.default_rng(4), 16)
    # Sources of one repeated token invite repeated outputs.
    source[:8] = np.where(source[:8] != 0, source[:8, :1], 0)
    options = {"beam_width": 3} if search == "beam" else {}
    decode = beam_search_decode if search == "beam" else greedy_decode
    plain = decode(half_trained_model, source, START, END, **options)["tokens"].numpy()
    controlled = decode(half_trained_model, source, START, END, no_repeat_ngram_size=2, **options)[
        "tokens"
    ].numpy()

    def repeats_a_bigram(row):
        tokens = [int(token) for token in row if token != 0]
        bigrams = list(zip(tokens, tokens[1:]))
        return len(bigrams) != len(set(bigrams))

    assert any(repeats_a_bigram(row) for row in plain), "no repetition to prevent"
    assert not any(repeats_a_bigram(row) for row in controlled)
