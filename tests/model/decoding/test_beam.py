"""model/decoding/beam.py: beam search against an exhaustive search and a reference beam search
on a table of log-probabilities, its finished set and n-best lists."""

import numpy as np
import pytest
import tensorflow as tf

from model.decoding import (
    beam_search,
    length_penalty,
)
from model.decoding.beam import _beam_step, _initial_beams
from model.decoding.common import NEG_INF, take_rows
from model.decoding.penalties import NextTokenRules
from tests.model.decoding.decoding_helpers import (
    FAKE_END,
    FAKE_IMPOSSIBLE,
    FAKE_LONGEST,
    FAKE_START,
    FAKE_VOCAB,
    FAKE_WORDS,
    LOOP_LAYOUTS,
    FakeTable,
    assert_outputs_equal,
    exhaustive_best,
    exhaustive_ranking,
    fake_search,
    gnmt_score,
    nth_hypotheses,
)


def test_length_penalty_is_gnmt_formula():
    for alpha in (0.0, 0.6, 1.0):
        for length in range(1, 12):
            assert float(length_penalty(length, alpha)) == pytest.approx(
                ((5 + length) / 6) ** alpha
            )


@pytest.mark.parametrize("min_length", [0, 3])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_wide_beam_search_equals_exhaustive_search(alpha, min_length):
    """A beam as wide as the largest set of prefixes (27) finds the exhaustive search's best
    output, score and alignment for each sentence; every search is over at [END]'s forced
    step, so the loop stops after 4 steps of the 8 allowed (the early exit)."""
    sentences = 12
    table = FakeTable(np.random.default_rng(11), sentences)
    found = fake_search(
        beam_search,
        table,
        sentences,
        max_decoding_length=8,
        beam_width=32,
        alpha=alpha,
        min_length=min_length,
    )
    assert found["length"] == FAKE_LONGEST, "searches not over once every hypothesis ended"
    assert_outputs_equal(
        found,
        table,
        [exhaustive_best(table, sentence, alpha, min_length) for sentence in range(sentences)],
    )


def reference_beam_search(table, sentence, beam_width, alpha, max_decoding_length, min_length=0):
    """Beam search written out over the table, as `beam_search` documents it.

    Each step expands the alive hypotheses and keeps the 2·beam_width best continuations; the
    beam_width best of those that did not end stay alive, those that ended join the finished
    set (its beam_width best by log P / length penalty). A search is over once the best alive
    hypothesis, at the penalty of `max_decoding_length`, cannot beat the worst of beam_width
    finished ones.

    Returns:
        `(ranking, end_outranked_a_parent)`: the finished hypotheses `(tokens, score)`, best
        first, then the alive ones (where max_decoding_length cut the search), and whether at
        some step an ended candidate ranked above a prefix of the best one (so that the alive
        beams' parents are not the first beam_width origins of the ranking).
    """
    alive, finished, ranked_below_an_end = [(0.0, ())], [], set()
    for step in range(max_decoding_length):
        candidates = []
        for log_prob, tokens in alive:
            log_probs = table.path_log_probs(sentence, (*tokens, FAKE_END))[-1].copy()
            if step + 1 < min_length:
                log_probs[FAKE_END] = -np.inf
            candidates += [
                (log_prob + log_probs[token], (*tokens, token))
                for token in (FAKE_END, *FAKE_WORDS)
                if log_probs[token] > FAKE_IMPOSSIBLE / 2
            ]
        top = sorted(candidates, key=lambda candidate: -candidate[0])[: 2 * beam_width]
        ended = [tokens[-1] == FAKE_END for _, tokens in top]
        for rank, (_, tokens) in enumerate(top):
            if not ended[rank] and any(ended[:rank]):
                ranked_below_an_end.add(tokens)
        alive = [candidate for candidate, end in zip(top, ended) if not end][:beam_width]
        finished = sorted(
            finished
            + [
                (gnmt_score(log_prob, step + 1, alpha), tokens)
                for (log_prob, tokens), end in zip(top, ended)
                if end
            ],
            key=lambda hypothesis: -hypothesis[0],
        )[:beam_width]
        if not alive or (
            len(finished) == beam_width
            and gnmt_score(alive[0][0], max_decoding_length, alpha) <= finished[-1][0]
        ):
            break
    ranking = [(tokens, score) for score, tokens in finished] + [
        (tokens, gnmt_score(log_prob, len(tokens), alpha)) for log_prob, tokens in alive
    ]
    best = ranking[0][0]
    outranked = any(best[:length] in ranked_below_an_end for length in range(len(best)))
    return ranking, outranked


@pytest.mark.parametrize("min_length", [0, 2])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0, 2.0])
@pytest.mark.parametrize("beam_width", [2, 3])
def test_narrow_beam_search_equals_the_reference_beam_search(beam_width, alpha, min_length):
    """Narrow beams drop hypotheses, so they are checked against the same algorithm written out
    in Python, including sentences whose winner continues a beam that ranked below an [END]
    candidate (where the alive beams' parents are not the ranking's first origins)."""
    sentences = 60
    table = FakeTable(np.random.default_rng(23), sentences)
    found = fake_search(
        beam_search,
        table,
        sentences,
        max_decoding_length=8,
        beam_width=beam_width,
        alpha=alpha,
        min_length=min_length,
    )
    references = [
        reference_beam_search(table, sentence, beam_width, alpha, 8, min_length)
        for sentence in range(sentences)
    ]
    assert_outputs_equal(found, table, [ranking[0] for ranking, _ in references])
    # Longer hypotheses win only under a strong length penalty, so only there do winners
    # continue beams that an [END] outranked.
    if alpha >= 1.0:
        assert any(outranked for _, outranked in references), "no winner ranked below an [END]"


@pytest.mark.parametrize("min_length", [0, 3])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_wide_beam_n_best_equals_the_exhaustive_ranking(alpha, min_length):
    """With `num_hypotheses` 5, a beam as wide as every prefix returns each sentence's 5 best
    outputs of the exhaustive search, in order, with their scores and alignments."""
    sentences, count = 12, 5
    table = FakeTable(np.random.default_rng(11), sentences)
    found = fake_search(
        beam_search,
        table,
        sentences,
        max_decoding_length=8,
        beam_width=32,
        alpha=alpha,
        min_length=min_length,
        num_hypotheses=count,
    )
    assert found["tokens"].shape[:2] == (sentences, count) and found["scores"].shape == (12, 5)
    rankings = [
        exhaustive_ranking(table, sentence, alpha, min_length) for sentence in range(sentences)
    ]
    for n in range(count):
        expected = [ranking[n] for ranking in rankings]
        assert_outputs_equal(nth_hypotheses(found, n), table, expected, lengths_vary=False)
    assert len({len(ranking[n][0]) for ranking in rankings for n in range(count)}) > 1


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
@pytest.mark.parametrize("beam_width", [2, 3])
def test_narrow_beam_n_best_equals_the_reference_finished_set(beam_width, alpha):
    """`num_hypotheses` = beam_width returns the whole finished set of the reference beam
    search, best first (and `num_hypotheses` 1 its best, with the axis of hypotheses)."""
    sentences = 60
    table = FakeTable(np.random.default_rng(23), sentences)
    references = [
        reference_beam_search(table, sentence, beam_width, alpha, 8)[0]
        for sentence in range(sentences)
    ]
    for count in (1, beam_width):
        found = fake_search(
            beam_search,
            table,
            sentences,
            max_decoding_length=8,
            beam_width=beam_width,
            alpha=alpha,
            num_hypotheses=count,
        )
        for n in range(count):
            expected = [ranking[n] for ranking in references]
            assert_outputs_equal(nth_hypotheses(found, n), table, expected, lengths_vary=False)
    assert len({len(ranking[n][0]) for ranking in references for n in range(count)}) > 1


@pytest.mark.parametrize("layout", LOOP_LAYOUTS)
def test_beam_search_n_best_is_cut_at_max_decoding_length_with_alive_hypotheses(layout):
    """Cut at 2 steps, no output of the table has ended but a few [END]s: each sentence's
    slots hold its finished hypotheses, then its best alive ones (the reference's ranking)."""
    sentences, beam_width = 30, 3
    table = FakeTable(np.random.default_rng(5), sentences)
    found = fake_search(
        beam_search,
        table,
        sentences,
        max_decoding_length=2,
        beam_width=beam_width,
        alpha=0.6,
        num_hypotheses=beam_width,
        **LOOP_LAYOUTS[layout],
    )
    references = [
        reference_beam_search(table, sentence, beam_width, 0.6, 2)[0]
        for sentence in range(sentences)
    ]
    ended = [sum(tokens[-1] == FAKE_END for tokens, _ in ranking) for ranking in references]
    assert 0 < min(ended) < beam_width or 0 < max(ended) < beam_width, ended
    for n in range(beam_width):
        for sentence, ranking in enumerate(references):
            tokens, score = ranking[n]
            np.testing.assert_array_equal(found["tokens"][sentence, n, : len(tokens)], tokens)
            assert not found["tokens"][sentence, n, len(tokens) :].any()
            assert found["scores"][sentence, n] == pytest.approx(score, abs=1e-4)


@pytest.mark.parametrize("layout", ["fixed-shape", "xla"])
@pytest.mark.parametrize("alpha, min_length", [(0.6, 0), (2.0, 2)])
def test_fixed_shape_beam_search_finds_the_reference_finished_set(layout, alpha, min_length):
    """Every sentence stepping to the end of the loop (XLA's fixed shapes), each still returns
    the reference beam search's whole finished set, best first, although the loop runs on
    after its search is over, and the loop stops where the last search is over, as when
    sentences leave it; alpha 2 makes winners continue beams an [END] outranked."""
    sentences, beam_width = 60, 3
    table = FakeTable(np.random.default_rng(23), sentences)
    options = {
        "max_decoding_length": 8,
        "beam_width": beam_width,
        "alpha": alpha,
        "min_length": min_length,
        "num_hypotheses": beam_width,
    }
    found = fake_search(beam_search, table, sentences, **options, **LOOP_LAYOUTS[layout])
    references = [
        reference_beam_search(table, sentence, beam_width, alpha, 8, min_length)
        for sentence in range(sentences)
    ]
    for n in range(beam_width):
        expected = [ranking[n] for ranking, _ in references]
        assert_outputs_equal(nth_hypotheses(found, n), table, expected, lengths_vary=False)
    rows_leave = fake_search(beam_search, table, sentences, **options)
    assert found["length"] == rows_leave["length"] < options["max_decoding_length"]
    if alpha >= 1.0:
        assert any(outranked for _, outranked in references), "no winner ranked below an [END]"


@pytest.mark.parametrize("count", [0, 4, 2.0])
def test_beam_search_refuses_more_hypotheses_than_beams(count):
    with pytest.raises(ValueError, match="num_hypotheses must be an int from 1 to beam_width"):
        beam_search(
            lambda ids, step, state: None, tf.constant([1]), 2, {}, 5, 0, 3, num_hypotheses=count
        )


def test_each_alive_beam_carries_the_state_of_its_own_prefix():
    """After every step, the step state of each alive hypothesis is the one its own prefix
    produced (the table's state names the prefix it has read), with [END]
    candidates among the kept continuations."""
    sentences, beam_width = 16, 2
    table = FakeTable(np.random.default_rng(23), sentences)
    beams = _initial_beams(
        tf.fill([sentences], FAKE_START), table.initial_state(sentences), beam_width, FAKE_VOCAB
    )
    ended_candidates, rules = 0, NextTokenRules(FAKE_END)
    for step in range(FAKE_LONGEST):
        beams = _beam_step(
            table.step_fn, take_rows, beams, tf.constant(step), beam_width, rules, 0.6
        )
        alive_seq, rows = beams.alive_seq.numpy(), beams.step_state["row"].numpy()
        is_alive = beams.alive_log_probs.numpy() > NEG_INF / 2
        for sentence, beam in zip(*np.nonzero(is_alive)):
            prefix = tuple(alive_seq[sentence, beam, :-1])
            assert rows[sentence * beam_width + beam] == table.row_of[prefix], (step, sentence)
            assert beams.step_state["sentence"][sentence * beam_width + beam] == sentence
        ended_candidates += np.sum(beams.finished_scores.numpy() > NEG_INF / 2)
    assert ended_candidates > 0, "no [END] candidate: the table tests too little"
