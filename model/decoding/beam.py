"""Beam search with the GNMT length penalty, a finished set and a per-sentence early exit.

`BeamSearch` runs over any step function (`model.decoding.step`), `decode_transformer` over a
`Transformer`, whose `reorder_cache` moves each hypothesis's key/value cache to its parent,
optionally compiled with XLA (`model.decoding.xla`); `beam_search` and `beam_search_decode` are
the two as keyword arguments.
"""

import dataclasses
from typing import NamedTuple

import tensorflow as tf

from model.buffers import write_slot
from model.decoding.common import (
    NEG_INF,
    empty_outputs,
    length_penalty,
    take_rows,
    unknown_shapes,
)
from model.decoding.penalties import NextTokenRules
from model.decoding.step import SearchOptions, decode_transformer
from model.decoding.strategy import DecodingStrategy, keyword_search
from model.masks import PAD_ID

# GNMT's and the paper's beam: 4 hypotheses, length-penalty exponent 0.6.
DEFAULT_BEAM_WIDTH = 4
DEFAULT_ALPHA = 0.6


class BeamState(NamedTuple):
    """The sentences still searching. Per sentence, `(sentences, ...)` or `(sentences, beam, ...)`:

    Attributes:
        rows: `(sentences,)` int32, each sentence's row in the batch.
        alive_seq: `(sentences, beam, t)` int32, the hypotheses that have not ended.
        alive_log_probs: `(sentences, beam)` their log-probabilities, best first.
        alive_alignment: `(sentences, beam, t, alignment_width)`.
        finished_seq, finished_scores, finished_alignment: the same for the best hypotheses that
            ended with [END], scored log P / length_penalty (NEG_INF where there are none yet),
            padded to length t.

    Per beam, `(sentences * beam, ...)`, what the step function reads:
        last_ids: `(sentences * beam,)` int32, each alive hypothesis's last token.
        step_state: the step function's state.
    """

    rows: tf.Tensor
    alive_seq: tf.Tensor
    alive_log_probs: tf.Tensor
    alive_alignment: tf.Tensor
    finished_seq: tf.Tensor
    finished_scores: tf.Tensor
    finished_alignment: tf.Tensor
    last_ids: tf.Tensor
    step_state: object


def beam_search(
    step_fn,
    start_ids,
    end_id,
    state,
    max_decoding_length,
    alignment_width,
    beam_width=DEFAULT_BEAM_WIDTH,
    alpha=DEFAULT_ALPHA,
    num_hypotheses=None,
    **options,
):
    """`BeamSearch(beam_width, alpha, num_hypotheses).search` as keyword arguments: `options`
    are `keyword_search`'s (`min_length`, the repetition controls, `placeholders`, `prefix`,
    `fixed_shape`, `compiled`, `slots`, `reorder_state`). Returns as `BeamSearch.run`."""
    inputs = (step_fn, start_ids, end_id, state, max_decoding_length, alignment_width)
    return keyword_search(BeamSearch(beam_width, alpha, num_hypotheses), inputs, **options)


@dataclasses.dataclass(frozen=True)
class BeamSearch(DecodingStrategy):
    """Beam search with the GNMT length penalty, a finished set and a per-sentence early exit.

    Each step expands the `beam_width` alive hypotheses, keeps the 2·beam_width best
    continuations (so that beam_width of them are still alive even if the rest ended), and
    merges the ended ones into the finished set, scored by log P(y | x) / length_penalty(|y|).
    A sentence's search is over once no alive hypothesis can still beat its worst finished one
    (`_search_is_over`); its best hypotheses are then stored and its beams leave the loop, which
    runs until the last sentence's search is over, or `max_decoding_length`. With `fixed_shape`
    (for XLA) nothing leaves the loop: a sentence whose search is over is stored and steps on,
    ignored, and the hypotheses are written into buffers of `slots` positions instead of
    growing by one a step; the hypotheses and scores found are the same.

    Attributes:
        beam_width: hypotheses kept per sentence (1 = greedy when alpha = 0).
        alpha: length-penalty exponent (0.6 in GNMT and the paper; 0 disables it), a float or
            a float32 scalar.
        num_hypotheses: None for the best hypothesis; a Python int N (1 ≤ N ≤ beam_width) for
            the N best, best first (`_best_hypotheses`), each sentence's outputs then gaining an
            axis of N.

    Raises:
        ValueError: a `beam_width` or `num_hypotheses` the search cannot use.
    """

    beam_width: int = DEFAULT_BEAM_WIDTH
    alpha: float = DEFAULT_ALPHA
    num_hypotheses: int | None = None

    def __post_init__(self):
        if not isinstance(self.beam_width, int) or self.beam_width < 1:
            raise ValueError(f"beam_width must be an int >= 1, got {self.beam_width!r}.")
        _validate_num_hypotheses(self.num_hypotheses, self.beam_width)

    @property
    def hypotheses(self):
        """The hypotheses the search returns per sentence."""
        return 1 if self.num_hypotheses is None else self.num_hypotheses

    def run(self, loop, rules, prefix):
        """`DecodingStrategy.search`; the state is repeated per beam, and each hypothesis
        continues its parent's (`reorder_state`). The repetition controls read each
        hypothesis's own tokens, and the length penalty counts the prefix.

        Returns:
            dict: `tokens` `(batch, slots)` of each sentence's best hypothesis, `scores`
            `(batch,)` its length-normalized log-probability (after the prefix), `alignment`
            `(batch, slots, alignment_width)`, and `length`, the positions the loop ran; with
            `num_hypotheses` N, `tokens` `(batch, N, slots)`, `scores` `(batch, N)` and
            `alignment` `(batch, N, slots, alignment_width)`.
        """
        search = _Search(
            loop.step_fn,
            loop.reorder_state,
            self.beam_width,
            rules,
            self.alpha,
            self.hypotheses,
            prefix,
            _Positions(loop.fixed_shape, loop.compiled),
        )
        batch_size, width = tf.shape(loop.start_ids)[0], loop.alignment_width
        outputs = empty_outputs(batch_size, loop.slots, width, self.hypotheses)
        buffer_slots = loop.slots if loop.fixed_shape else 0
        beams = _initial_beams(loop.start_ids, loop.state, self.beam_width, width, buffer_slots)
        search_loop = (
            _beam_search_fixed_shape if loop.fixed_shape else _beam_search_dropping_finished
        )
        outputs, steps = search_loop(search, beams, outputs, loop.max_decoding_length)
        if self.num_hypotheses is None:
            outputs = tf.nest.map_structure(lambda tensor: tensor[:, 0], outputs)
        return {**outputs, "length": steps}


class _Positions(NamedTuple):
    """How the hypotheses `(sentences, beam, positions, ...)` take each step's new position:
    appended (they grow by one position a step), or, with `fixed_shape`, written at the step
    into buffers of a fixed number of positions (with XLA's op where `compiled`)."""

    fixed_shape: bool = False
    compiled: bool = False

    def extend(self, hypotheses, new, step):
        """`hypotheses` with `new` `(sentences, n, 1, ...)` at position `step`."""
        if self.fixed_shape:
            return write_slot(hypotheses, new, step, axis=2, compiled=self.compiled)
        return tf.concat([hypotheses, new], axis=2)

    def with_room(self, hypotheses):
        """`hypotheses` as wide as those `extend` returns (for merging with them)."""
        if self.fixed_shape:
            return hypotheses
        return tf.pad(hypotheses, [[0, 0], [0, 0], [0, 1]] + [[0, 0]] * (hypotheses.shape.rank - 3))


class _Search(NamedTuple):
    """One beam search's settings, as `BeamSearch.run` takes them: `rules` its `NextTokenRules`,
    `hypotheses` the hypotheses returned per sentence, `prefix` its `ForcedTokens` or None."""

    step_fn: object
    reorder_state: object
    beam_width: int
    rules: NextTokenRules
    alpha: float
    hypotheses: int
    prefix: object
    positions: _Positions

    def advance(self, beams, step):
        """`_beam_step` of `beams` at `step`."""
        return _beam_step(
            self.step_fn,
            self.reorder_state,
            beams,
            step,
            self.beam_width,
            self.rules,
            self.alpha,
            self.prefix,
            self.positions,
        )


def _beam_search_dropping_finished(search, beams, outputs, max_decoding_length):
    """The loop in which a sentence leaves once its search is over (its beams gathered out on
    the steps where some search ends), so a batch's short sentences do not pay the steps of its
    longest. Outside XLA only: the loop's batch dimension changes. Returns `(outputs, steps)`."""

    def body(step, beams, outputs):
        beams = search.advance(beams, step)
        over = _search_is_over(beams, max_decoding_length, search.alpha)

        def store_and_drop_finished_searches():
            best = _best_hypotheses(beams, search.alpha, search.hypotheses, step + 1)
            done = take_rows(best, tf.where(over)[:, 0])
            return (
                _keep_searches(beams, tf.where(tf.logical_not(over))[:, 0], search.beam_width),
                _store(outputs, done, max_decoding_length),
            )

        return (step + 1,) + tf.cond(
            tf.reduce_any(over), store_and_drop_finished_searches, lambda: (beams, outputs)
        )

    def cond(step, beams, outputs):
        return tf.size(beams.rows) > 0

    loop_vars = (tf.constant(0), beams, outputs)
    steps, beams, outputs = tf.while_loop(
        cond,
        body,
        loop_vars,
        shape_invariants=unknown_shapes(loop_vars),
        maximum_iterations=max_decoding_length,
    )
    # Sentences still searching when max_decoding_length cut the loop short.
    best = _best_hypotheses(beams, search.alpha, search.hypotheses, steps)
    return _store(outputs, best, max_decoding_length), steps


def _beam_search_fixed_shape(search, beams, outputs, max_decoding_length):
    """The loop whose shapes never change (XLA compiles one program): every sentence steps
    until the last search is over. A sentence whose search is over has its best hypotheses
    stored then, as `_beam_search_dropping_finished` stores them, and steps on ignored.
    Returns `(outputs, steps)`."""

    def store(outputs, beams, length, rows):
        """`outputs` with the best hypotheses of the sentences where `rows` `(batch,)` holds."""
        return tf.cond(
            tf.reduce_any(rows),
            lambda: _store_rows(
                outputs, _best_hypotheses(beams, search.alpha, search.hypotheses, length), rows
            ),
            lambda: outputs,
        )

    def body(step, beams, searching, outputs):
        beams = search.advance(beams, step)
        over = searching & _search_is_over(beams, max_decoding_length, search.alpha)
        return step + 1, beams, searching & ~over, store(outputs, beams, step + 1, over)

    def cond(step, beams, searching, outputs):
        return tf.reduce_any(searching)

    searching = tf.ones(tf.shape(beams.rows), tf.bool)
    steps, beams, searching, outputs = tf.while_loop(
        cond,
        body,
        (tf.constant(0), beams, searching, outputs),
        maximum_iterations=max_decoding_length,
    )
    # Sentences still searching when max_decoding_length cut the loop short.
    return store(outputs, beams, steps, searching), steps


def _validate_num_hypotheses(num_hypotheses, beam_width):
    """ValueError unless `num_hypotheses` is None or 1 ≤ num_hypotheses ≤ beam_width."""
    if num_hypotheses is not None and (
        not isinstance(num_hypotheses, int) or not 1 <= num_hypotheses <= beam_width
    ):
        raise ValueError(
            f"num_hypotheses must be an int from 1 to beam_width ({beam_width}), "
            f"got {num_hypotheses!r}."
        )


def _initial_beams(start_ids, state, beam_width, alignment_width, slots=0):
    """Every sentence searching, with only beam 0 alive (the others would duplicate it); the
    hypotheses hold `slots` positions (0: they grow; fixed-shape buffers: padding)."""
    batch_size = tf.shape(start_ids)[0]
    empty_seq = tf.zeros([batch_size, beam_width, slots], tf.int32)
    empty_alignment = tf.zeros([batch_size, beam_width, slots, alignment_width], tf.float32)
    return BeamState(
        rows=tf.range(batch_size),
        alive_seq=empty_seq,
        alive_log_probs=tf.tile(
            tf.concat([[0.0], tf.fill([beam_width - 1], NEG_INF)], axis=0)[tf.newaxis],
            [batch_size, 1],
        ),
        alive_alignment=empty_alignment,
        finished_seq=empty_seq,
        finished_scores=tf.fill([batch_size, beam_width], NEG_INF),
        finished_alignment=empty_alignment,
        last_ids=tf.repeat(start_ids, beam_width, axis=0),
        step_state=tf.nest.map_structure(lambda t: tf.repeat(t, beam_width, axis=0), state),
    )


def _gather_beams(x, beam_indices):
    """Picks `(sentences, n)` beams from `x` of shape `(sentences, beam, ...)`."""
    return tf.gather(x, beam_indices, axis=1, batch_dims=1)


def _beam_step(
    step_fn, reorder_state, beams, step, beam_width, rules, alpha, prefix=None, positions=None
):
    """One step of every searching sentence: the next `BeamState`; `prefix`: `ForcedTokens`
    or None; `positions`: how the hypotheses take the new position (`_Positions`, default
    appended)."""
    positions = positions or _Positions()
    count = tf.shape(beams.rows)[0]
    logits, step_alignment, step_state = step_fn(beams.last_ids, step, beams.step_state)
    generated = None
    if rules.reads_generated:
        generated = tf.reshape(beams.alive_seq, [count * beam_width, -1])
    log_probs = rules.log_probs(logits, step, generated, tf.repeat(beams.rows, beam_width), prefix)
    vocab_size = tf.shape(log_probs)[-1]
    log_probs = tf.reshape(log_probs, [count, beam_width, vocab_size])
    if prefix is not None:
        forced, forced_ids = prefix.at(step, beams.rows)
        # Only beam 0 is alive while a prefix is forced (the others hold NEG_INF): its forced
        # token is the one candidate, at log-probability 0 (unscored).
        only_forced = tf.one_hot(forced_ids, vocab_size, on_value=0.0, off_value=NEG_INF)
        log_probs = tf.where(
            forced[:, tf.newaxis, tf.newaxis], only_forced[:, tf.newaxis], log_probs
        )
    step_alignment = tf.reshape(step_alignment, [count, beam_width, 1, -1])

    # The 2k best continuations over all beams and tokens.
    candidates = tf.reshape(beams.alive_log_probs[:, :, tf.newaxis] + log_probs, [count, -1])
    top_log_probs, top_indices = tf.math.top_k(candidates, k=2 * beam_width)
    top_origins = top_indices // vocab_size
    top_tokens = top_indices % vocab_size
    top_seq = positions.extend(
        _gather_beams(beams.alive_seq, top_origins), top_tokens[:, :, tf.newaxis], step
    )
    top_alignment = positions.extend(
        _gather_beams(beams.alive_alignment, top_origins),
        _gather_beams(step_alignment, top_origins),
        step,
    )
    top_ended = tf.cast(tf.equal(top_tokens, rules.end_id), tf.float32)
    if prefix is not None:
        top_ended, barred = _prefix_ends(prefix, step, beams.rows, top_tokens, top_ended, rules)

    # Alive: the k best continuations that did not end.
    alive_log_probs, alive_choice = tf.math.top_k(top_log_probs + top_ended * NEG_INF, k=beam_width)
    if prefix is not None and not prefix.as_context:
        alive_log_probs, alive_choice = _kill_barred(alive_log_probs, alive_choice, barred)
        top_seq = tf.where(barred[:, :, tf.newaxis] & _is_at(top_seq, step), PAD_ID, top_seq)
    alive_seq = _gather_beams(top_seq, alive_choice)

    # Finished: the k best among the previous finished and the continuations that ended now.
    new_scores = top_log_probs / length_penalty(step + 1, alpha) + (1.0 - top_ended) * NEG_INF
    padded_finished = positions.with_room(beams.finished_seq)
    padded_alignment = positions.with_room(beams.finished_alignment)
    finished_scores, finished_choice = tf.math.top_k(
        tf.concat([beams.finished_scores, new_scores], axis=1), k=beam_width
    )

    # Each alive hypothesis continues the step state of its parent beam.
    parents = _gather_beams(top_origins, alive_choice)
    parent_rows = tf.reshape(parents + tf.range(count)[:, tf.newaxis] * beam_width, [-1])
    return BeamState(
        rows=beams.rows,
        alive_seq=alive_seq,
        alive_log_probs=alive_log_probs,
        alive_alignment=_gather_beams(top_alignment, alive_choice),
        finished_seq=_gather_beams(tf.concat([padded_finished, top_seq], axis=1), finished_choice),
        finished_scores=finished_scores,
        finished_alignment=_gather_beams(
            tf.concat([padded_alignment, top_alignment], axis=1), finished_choice
        ),
        last_ids=tf.reshape(alive_seq[:, :, step], [-1]),
        step_state=reorder_state(step_state, parent_rows),
    )


def _prefix_ends(prefix, step, rows, top_tokens, top_ended, rules):
    """`(top_ended, barred)` of the candidates `(sentences, 2k)` under the sentences' prefixes:
    a forced [END] does not end a hypothesis; `barred` `(sentences, 2k)` bool: the [END]
    candidates below the best one at a sentence's first free step, which CTranslate2 kills
    (`model.decoding.prefix`), so they do not end either (always False `as_context`)."""
    forced, _ = prefix.at(step, rows)
    is_end = tf.equal(top_tokens, rules.end_id)
    barred = tf.zeros_like(is_end)
    if not prefix.as_context:
        below_the_best = tf.range(tf.shape(top_tokens)[1])[tf.newaxis] > 0
        barred = is_end & below_the_best & prefix.first_free(step, rows)[:, tf.newaxis]
    return top_ended * tf.cast(~forced[:, tf.newaxis] & ~barred, tf.float32), barred


def _kill_barred(alive_log_probs, alive_choice, barred):
    """The alive choice with its barred candidates dead: they were chosen in their rank among
    the candidates (so the beam holds one live hypothesis fewer, as CTranslate2's), now score
    NEG_INF and move last (the alive hypotheses stay best first)."""
    dead = _gather_beams(barred, alive_choice)
    alive_log_probs = tf.where(dead, NEG_INF, alive_log_probs)
    alive_log_probs, order = tf.math.top_k(alive_log_probs, k=tf.shape(alive_choice)[1])
    return alive_log_probs, _gather_beams(alive_choice, order)


def _is_at(seq, position):
    """`(..., t)` bool: True at each sequence's `position` (the step's new token)."""
    return tf.equal(tf.range(tf.shape(seq)[-1]), position)


def _search_is_over(beams, max_decoding_length, alpha):
    """`(sentences,)` bool: no alive hypothesis can still beat the worst finished one.

    Log-probabilities only fall as a hypothesis grows, so an alive one's best reachable score
    is its log-probability / length_penalty(max_decoding_length).
    """
    best_alive = beams.alive_log_probs[:, 0] / length_penalty(max_decoding_length, alpha)
    return best_alive <= tf.reduce_min(beams.finished_scores, axis=1)


def _keep_searches(beams, keep, beam_width):
    """The `BeamState` of the sentences `keep` `(n,)` (indices among the searching ones)."""
    keep = tf.cast(keep, tf.int32)
    keep_beams = tf.reshape(keep[:, tf.newaxis] * beam_width + tf.range(beam_width), [-1])
    per_sentence = take_rows(beams._replace(last_ids=(), step_state=()), keep)
    return per_sentence._replace(
        last_ids=tf.gather(beams.last_ids, keep_beams),
        step_state=take_rows(beams.step_state, keep_beams),
    )


def _best_hypotheses(beams, alpha, count, alive_length):
    """Each searching sentence's `count` best hypotheses, best first: its finished ones, then,
    where fewer than `count` have finished (max_decoding_length reached), its best alive ones (scored
    log P / length_penalty(`alive_length`), the steps taken): dict of `rows` `(n,)`, `tokens`
    `(n, count, t)`, `scores` `(n, count)`, `alignment` `(n, count, t, alignment_width)`."""
    beam_width = tf.shape(beams.finished_scores)[1]
    finished = tf.reduce_sum(tf.cast(beams.finished_scores > NEG_INF / 2, tf.int32), axis=1)
    alive_scores = beams.alive_log_probs / length_penalty(alive_length, alpha)
    # Slot i: the i-th finished hypothesis (they are sorted, the real ones first), or the
    # (i - finished)-th alive one, at index beam_width + i - finished of the pool.
    slots = tf.range(count)[tf.newaxis]
    choice = tf.where(
        slots < finished[:, tf.newaxis], slots, beam_width + slots - finished[:, tf.newaxis]
    )
    pool = {
        "tokens": tf.concat([beams.finished_seq, beams.alive_seq], axis=1),
        "scores": tf.concat([beams.finished_scores, alive_scores], axis=1),
        "alignment": tf.concat([beams.finished_alignment, beams.alive_alignment], axis=1),
    }
    return {
        "rows": beams.rows,
        **{name: _gather_beams(tensor, choice) for name, tensor in pool.items()},
    }


def _store(outputs, best, max_decoding_length):
    """`outputs` with the hypotheses `best` (from `_best_hypotheses`) written at their rows."""
    rows = best["rows"][:, tf.newaxis]
    room = max_decoding_length - tf.shape(best["tokens"])[2]
    return {
        "tokens": tf.tensor_scatter_nd_update(
            outputs["tokens"], rows, tf.pad(best["tokens"], [[0, 0], [0, 0], [0, room]])
        ),
        # A search without alignments carries them zero wide, where a scatter is an error.
        "alignment": tf.cond(
            tf.size(outputs["alignment"]) > 0,
            lambda: tf.tensor_scatter_nd_update(
                outputs["alignment"],
                rows,
                tf.pad(best["alignment"], [[0, 0], [0, 0], [0, room], [0, 0]]),
            ),
            lambda: outputs["alignment"],
        ),
        "scores": tf.tensor_scatter_nd_update(outputs["scores"], rows, best["scores"]),
    }


def _store_rows(outputs, best, rows):
    """`outputs` with the hypotheses `best` of every sentence (from `_best_hypotheses`, as wide
    as `outputs`) written where `rows` `(batch,)` bool holds: `_store` with fixed shapes."""
    return {
        name: tf.where(tf.reshape(rows, [-1] + [1] * (tensor.shape.rank - 1)), best[name], tensor)
        for name, tensor in outputs.items()
    }


def beam_search_decode(
    model,
    inp,
    start_id,
    end_id,
    beam_width=DEFAULT_BEAM_WIDTH,
    alpha=DEFAULT_ALPHA,
    max_decoding_length=None,
    min_length=0,
    with_alignment=True,
    repetition_penalty=1.0,
    no_repeat_ngram_size=0,
    num_hypotheses=None,
    prefix=None,
    jit_compile=False,
    placeholder_ids=(),
    xla_max_batch=None,
):
    """Beam search over a `Transformer` with its key/value cache, whose `reorder_cache` moves
    each hypothesis's cache to its parent: `decode_transformer(BeamSearch(beam_width, alpha,
    num_hypotheses), ...)` as keyword arguments.

    Args:
        model: a `Transformer`.
        inp: `(batch, inp_len)` source ids.
        start_id, end_id: the [START] and [END] ids.
        beam_width, alpha, num_hypotheses: as `BeamSearch`.
        max_decoding_length, with_alignment, jit_compile, xla_max_batch: as `SearchOptions`
            (without alignment, every beam's is neither gathered nor concatenated at each step).
        min_length, repetition_penalty, no_repeat_ngram_size, placeholder_ids: as
            `NextTokenRules`.
        prefix: as `DecodingStrategy.search` (not with `jit_compile`).

    Returns:
        dict: `tokens` `(batch, out_len)` of the best hypothesis, `scores` `(batch,)` its
        length-normalized log-probability, `alignment` `(batch, out_len, inp_len)` (or
        `(batch, out_len, 0)` without alignment); with `num_hypotheses` N, the N best
        hypotheses, best first: `(batch, N, out_len)`, `(batch, N)`, `(batch, N, out_len, ...)`.
    """
    rules = NextTokenRules(
        end_id, min_length, repetition_penalty, no_repeat_ngram_size, tuple(placeholder_ids)
    )
    options = SearchOptions(
        rules, max_decoding_length, prefix, with_alignment, jit_compile, xla_max_batch
    )
    strategy = BeamSearch(beam_width, alpha, num_hypotheses)
    return decode_transformer(strategy, model, inp, start_id, options)
