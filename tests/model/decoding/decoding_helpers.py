"""What the decoding tests share: a table of log-probabilities standing in for a model, the
exhaustive and reference searches over it, and a decoder compiled once per model."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from tests.reverse_task import END, START

_GRAPHS = {}


def in_graph(decode, model, beam_width=None, **numeric_options):
    """`decode(model, inp, START, END, ...)` compiled once per decoder, model and beam width.

    Production decodes inside a graph (the SavedModel); eager while-loops are only slower.
    `numeric_options` (max_decoding_length, min_length, alpha) travel as tensors, so new values
    don't trace a new graph.
    """
    key = (decode, id(model), beam_width, tuple(sorted(numeric_options)))
    static = {} if beam_width is None else {"beam_width": beam_width}
    if key not in _GRAPHS:
        _GRAPHS[key] = tf.function(
            lambda inp, options: decode(model, inp, START, END, **static, **options),
            reduce_retracing=True,
        )
    options = {name: tf.constant(value) for name, value in numeric_options.items()}
    return lambda inp: _GRAPHS[key](tf.constant(inp, tf.int32), options)


def decode_lengths(tokens):
    """Tokens up to and including [END] per row."""
    return np.sum(tokens != 0, axis=1)


# A fake step function over a fixed table of log-probabilities, as OpenNMT-tf's decoding tests
# use: the searches are checked against an exhaustive search, independently of any model.
FAKE_START, FAKE_END = 1, 2
FAKE_WORDS = (3, 4, 5)
FAKE_VOCAB = 6  # pad 0, [START], [END] and the three words
# Every prefix of 3 words is followed by [END], so no output is longer than 4 tokens and an
# exhaustive search over lengths 1..4 sees every hypothesis.
FAKE_LONGEST = 4
FAKE_IMPOSSIBLE = -1e9


class FakeTable:
    """Log-probabilities of the next token for every prefix of words, per sentence.

    `log_probs[sentence, prefix_row]`: random over [END] and the words for prefixes of fewer
    than 3 words, [END] only after 3 words; pad and [START] never. Prefix rows: `prefixes`
    lists them (row 0 the empty prefix); `DEAD` stands for any prefix that cannot happen
    (through an impossible token), `BEFORE_START` for the state before [START] is fed.
    """

    def __init__(self, rng, sentences):
        self.prefixes = [()]
        for prefix in self.prefixes:
            if len(prefix) < FAKE_LONGEST - 1:
                self.prefixes.extend(prefix + (word,) for word in FAKE_WORDS)
        self.dead, self.before_start = len(self.prefixes), len(self.prefixes) + 1
        row_of = {prefix: row for row, prefix in enumerate(self.prefixes)}

        logits = np.full((sentences, self.dead + 1, FAKE_VOCAB), FAKE_IMPOSSIBLE)
        self.next_row = np.full((self.before_start + 1, FAKE_VOCAB), self.dead, np.int32)
        self.next_row[self.before_start, FAKE_START] = 0
        for row, prefix in enumerate(self.prefixes):
            logits[:, row, FAKE_END] = 0.0
            if len(prefix) < FAKE_LONGEST - 1:
                logits[:, row, [FAKE_END, *FAKE_WORDS]] = rng.normal(scale=1.5, size=(sentences, 4))
                for word in FAKE_WORDS:
                    self.next_row[row, word] = row_of[prefix + (word,)]
        logits[:, self.dead, 1:] = 0.0  # anything after an impossible token: irrelevant
        self.log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        self.row_of = row_of

    def step_fn(self, ids, step, state):
        """Logits `(rows, vocab)` for the prefix ending in `ids`; alignment: their probabilities."""
        row = tf.gather_nd(self.next_row, tf.stack([state["row"], ids], axis=1))
        log_probs = tf.constant(self.log_probs, tf.float32)
        logits = tf.gather_nd(log_probs, tf.stack([state["sentence"], row], axis=1))
        return logits, tf.exp(logits), {"sentence": state["sentence"], "row": row}

    def initial_state(self, sentences):
        return {"sentence": tf.range(sentences), "row": tf.fill([sentences], self.before_start)}

    def path_log_probs(self, sentence, tokens):
        """`(len(tokens), vocab)`: the distribution each token of `tokens` was drawn from."""
        rows = [self.row_of[tuple(tokens[:i])] for i in range(len(tokens))]
        return self.log_probs[sentence, rows]


def gnmt_score(log_prob, length, alpha):
    """log P / ((5 + |Y|) / 6)^alpha, Wu et al. (2016), eq. 14, written out."""
    return log_prob / ((5 + length) / 6) ** alpha


def exhaustive_ranking(table, sentence, alpha, min_length=0):
    """Every output `(tokens, score)` of a sentence (each word sequence + [END]), best first."""
    outputs = []
    for length in range(max(min_length, 1), FAKE_LONGEST + 1):
        for words in itertools.product(FAKE_WORDS, repeat=length - 1):
            tokens = (*words, FAKE_END)
            log_prob = sum(
                table.path_log_probs(sentence, tokens)[i, token] for i, token in enumerate(tokens)
            )
            outputs.append((tokens, gnmt_score(log_prob, length, alpha)))
    return sorted(outputs, key=lambda output: -output[1])


def exhaustive_best(table, sentence, alpha, min_length=0):
    """The best output `(tokens, score)` of a sentence over every word sequence + [END]."""
    return exhaustive_ranking(table, sentence, alpha, min_length)[0]


# How a search's loop runs: sentences leave it as they end, or every sentence steps to the end
# with fixed shapes, which XLA compiles (`fake_search` options).
LOOP_LAYOUTS = {
    "rows-leave": {},
    "fixed-shape": {"fixed_shape": True},
    "xla": {"fixed_shape": True, "compiled": True},
}


def fake_search(search, table, sentences, max_decoding_length, **options):
    """`search` (greedy_search or beam_search) over `table` in a graph, compiled by XLA when
    `options` say `compiled`: numpy outputs."""
    outputs = tf.function(
        lambda: search(
            table.step_fn,
            tf.fill([sentences], FAKE_START),
            FAKE_END,
            table.initial_state(sentences),
            tf.constant(max_decoding_length),
            alignment_width=FAKE_VOCAB,
            **options,
        ),
        jit_compile=options.get("compiled", False),
    )()
    return {name: value.numpy() for name, value in outputs.items()}


def assert_outputs_equal(found, table, expected, lengths_vary=True):
    """A search's outputs over `table` are the `(tokens, score)` of `expected` per sentence,
    padded with 0, with each token's alignment the distribution it was chosen from;
    `lengths_vary`: and `expected` holds outputs of several lengths."""
    for sentence, (tokens, score) in enumerate(expected):
        np.testing.assert_array_equal(found["tokens"][sentence, : len(tokens)], tokens)
        assert np.all(found["tokens"][sentence, len(tokens) :] == 0)
        assert found["scores"][sentence] == pytest.approx(score, abs=1e-4)
        np.testing.assert_allclose(
            found["alignment"][sentence, : len(tokens)],
            np.exp(table.path_log_probs(sentence, tokens)),
            atol=1e-5,
        )
        assert np.all(found["alignment"][sentence, len(tokens) :] == 0)
    assert not lengths_vary or len({len(tokens) for tokens, _ in expected}) > 1, (
        "every expected output has one length: the table tests too little"
    )


def nth_hypotheses(found, n):
    """The n-th hypothesis of every sentence of an n-best search's outputs, as a 1-best dict."""
    return {name: found[name][:, n] for name in ("tokens", "scores", "alignment")}


def greedy_reference(table, sentence, min_length, prefix=()):
    """Greedy search written out over the table: `(tokens, summed log-probability)`; with a
    `prefix` of words, its continuation: the prefix, then the most probable tokens, scored
    after the prefix."""
    tokens, log_prob = list(prefix), 0.0
    while len(tokens) == len(prefix) or tokens[-1] != FAKE_END:
        log_probs = table.path_log_probs(sentence, tokens + [FAKE_END])[-1].copy()
        log_probs[0] = -np.inf
        if len(tokens) + 1 < min_length:
            log_probs[FAKE_END] = -np.inf
        tokens.append(int(np.argmax(log_probs)))
        log_prob += log_probs[tokens[-1]]
    return tokens, log_prob
