"""Greedy search: each row takes its most probable next token until it produces [END].

`GreedySearch` runs over any step function (`model.decoding.step`), `decode_transformer` over a
`Transformer` and its key/value cache, optionally compiled with XLA (`model.decoding.xla`);
`greedy_search` and `greedy_decode` are the two as keyword arguments.
`naive_greedy_decode` recomputes the whole prefix each step (the classic tutorial's
`Translator`): the reference the cached decoder is tested and timed against.
"""

import dataclasses
from typing import NamedTuple

import tensorflow as tf

from model.buffers import write_slot
from model.decoding.common import (
    empty_outputs,
    mask_after_end,
    max_decoding_length_for,
    take_rows,
    unknown_shapes,
)
from model.decoding.penalties import NextTokenRules
from model.decoding.step import SearchOptions, decode_transformer
from model.decoding.strategy import DecodingStrategy, keyword_search
from model.masks import PAD_ID


def greedy_search(
    step_fn,
    start_ids,
    end_id,
    state,
    max_decoding_length,
    alignment_width,
    next_token=None,
    **options,
):
    """`GreedySearch(next_token).search` as keyword arguments: `options` are `keyword_search`'s
    (`min_length`, the repetition controls, `placeholders`, `prefix`, `fixed_shape`,
    `compiled`, `slots`).

    Returns:
        dict: `tokens` `(batch, slots)`, `scores` `(batch,)` summed log-probabilities of the
        tokens up to and including [END] (after the prefix), `alignment`
        `(batch, slots, alignment_width)`, and `length`, the positions written (the loop's
        steps).
    """
    inputs = (step_fn, start_ids, end_id, state, max_decoding_length, alignment_width)
    return keyword_search(GreedySearch(next_token), inputs, **options)


@dataclasses.dataclass(frozen=True)
class GreedySearch(DecodingStrategy):
    """Each row takes its most probable next token until it produces [END].

    Attributes:
        next_token: how a row picks its token instead, `next_token(log_probs, rows, step)` ->
            `(rows,)` int32, from `log_probs` `(rows, vocab)` (the rules applied), `rows` the
            rows' indices in the batch; None: the most probable (`model.decoding.sampling`
            draws one).
    """

    next_token: object = None

    def run(self, loop, rules, prefix):
        """`DecodingStrategy.search`: with `fixed_shape`, every row steps until the last one
        ends (`_greedy_fixed_shape`), else rows leave the loop as they end
        (`_greedy_dropping_finished`). `scores`: the summed log-probabilities of the tokens up
        to and including [END] (after the prefix)."""
        choice = _Choice(rules, self.next_token or _most_probable, prefix)
        outputs = empty_outputs(tf.shape(loop.start_ids)[0], loop.slots, loop.alignment_width)
        if loop.fixed_shape:
            return _greedy_fixed_shape(loop, choice, outputs)
        return _greedy_dropping_finished(loop, choice, outputs)

    def baked(self):
        if self.next_token is not None:
            raise ValueError("next_token needs a traced caller under jit_compile (tf.function).")
        return self


def _most_probable(log_probs, rows, step):
    return tf.argmax(log_probs, axis=-1, output_type=tf.int32)


class _Choice(NamedTuple):
    """How a row takes its next token: `rules`, then `next_token`, where `prefix`
    (`ForcedTokens` or None) does not force it."""

    rules: NextTokenRules
    next_token: object
    prefix: object


def _greedy_step(step_fn, ids, step, state, choice, rows, generated):
    """One step of every row: `(next_ids, their log-probabilities, ended, alignment, state)`;
    `rows`: the rows' batch indices; `generated`: their tokens so far `(rows, width)`, read
    only when the rules read them. `ended`: the row output [END] after its prefix."""
    logits, alignment, state = step_fn(ids, step, state)
    rules, prefix = choice.rules, choice.prefix
    log_probs = rules.log_probs(logits, step, generated, rows, prefix)
    next_ids = choice.next_token(log_probs, rows, step)
    log_probs = tf.gather(log_probs, next_ids, axis=1, batch_dims=1)
    if prefix is not None:
        forced, forced_ids = prefix.at(step, rows)
        next_ids = tf.where(forced, forced_ids, next_ids)
        log_probs = tf.where(forced, 0.0, log_probs)
        return next_ids, log_probs, tf.equal(next_ids, rules.end_id) & ~forced, alignment, state
    return next_ids, log_probs, tf.equal(next_ids, rules.end_id), alignment, state


def _greedy_fixed_shape(loop, choice, outputs):
    """Greedy loop whose shapes never change (XLA compiles one program): every row steps until
    the last one ends, and rows that have ended write padding (with XLA's op where
    `loop.compiled`)."""
    step_fn, compiled = loop.step_fn, loop.compiled

    def body(step, ids, finished, state, outputs):
        next_ids, log_probs, ended, alignment, state = _greedy_step(
            step_fn, ids, step, state, choice, tf.range(tf.shape(ids)[0]), outputs["tokens"]
        )
        next_ids = tf.where(finished, PAD_ID, next_ids)
        alignment = tf.where(finished[:, tf.newaxis], 0.0, alignment)
        outputs = {
            "tokens": write_slot(
                outputs["tokens"], next_ids[:, tf.newaxis], step, axis=1, compiled=compiled
            ),
            "alignment": write_slot(
                outputs["alignment"], alignment[:, tf.newaxis], step, axis=1, compiled=compiled
            ),
            "scores": outputs["scores"] + tf.where(finished, 0.0, log_probs),
        }
        return step + 1, next_ids, finished | ended, state, outputs

    def cond(step, ids, finished, state, outputs):
        return tf.logical_not(tf.reduce_all(finished))

    start_ids = loop.start_ids
    steps, _, _, _, outputs = tf.while_loop(
        cond,
        body,
        (tf.constant(0), start_ids, tf.zeros(tf.shape(start_ids), tf.bool), loop.state, outputs),
        maximum_iterations=loop.max_decoding_length,
    )
    return {**outputs, "length": steps}


def _greedy_dropping_finished(loop, choice, outputs):
    """Greedy loop in which a row leaves once it has produced [END] (`_drop_finished_rows`), so
    a batch's short sentences do not pay the steps of its longest. Outside XLA only: the
    loop's batch dimension changes."""
    step_fn = loop.step_fn
    # A zero-width alignment (not asked for) is not written: a scatter into it is an error.
    writes_alignment = outputs["alignment"].shape[-1] != 0

    def body(step, alive, outputs):
        rows = alive["rows"]
        generated = tf.gather(outputs["tokens"], rows) if choice.rules.reads_generated else None
        next_ids, log_probs, ended, alignment, state = _greedy_step(
            step_fn, alive["ids"], step, alive["state"], choice, rows, generated
        )
        # No row here has ended: each writes at its batch index.
        at_step = tf.stack([rows, tf.fill(tf.shape(rows), step)], axis=1)
        outputs = {
            "tokens": tf.tensor_scatter_nd_update(outputs["tokens"], at_step, next_ids),
            "alignment": tf.tensor_scatter_nd_update(outputs["alignment"], at_step, alignment)
            if writes_alignment
            else outputs["alignment"],
            "scores": tf.tensor_scatter_nd_add(outputs["scores"], rows[:, tf.newaxis], log_probs),
        }
        alive = {"ids": next_ids, "rows": rows, "state": state}
        return step + 1, _drop_finished_rows(alive, ended), outputs

    def cond(step, alive, outputs):
        return tf.size(alive["rows"]) > 0

    rows = tf.range(tf.shape(loop.start_ids)[0])
    alive = {"ids": loop.start_ids, "rows": rows, "state": loop.state}
    loop_vars = (tf.constant(0), alive, outputs)
    steps, _, outputs = tf.while_loop(
        cond,
        body,
        loop_vars,
        maximum_iterations=loop.max_decoding_length,
        shape_invariants=unknown_shapes(loop_vars),
    )
    return {**outputs, "length": steps}


def _drop_finished_rows(alive, finished):
    """The rows of `alive` (a nest of tensors whose first dimension is the row) where
    `finished` `(rows,)` is False.

    Gathering the rest costs one copy of their state, so it happens only on the steps where
    some row ends.
    """
    return tf.cond(
        tf.reduce_any(finished),
        lambda: take_rows(alive, tf.where(tf.logical_not(finished))[:, 0]),
        lambda: alive,
    )


def greedy_decode(
    model,
    inp,
    start_id,
    end_id,
    max_decoding_length=None,
    min_length=0,
    jit_compile=False,
    repetition_penalty=1.0,
    no_repeat_ngram_size=0,
    next_token=None,
    prefix=None,
    with_alignment=True,
    placeholder_ids=(),
    xla_max_batch=None,
):
    """Greedy decoding of a `Transformer` with its key/value cache, one decoder step per token:
    `decode_transformer(GreedySearch(next_token), ...)` as keyword arguments.

    A sentence leaves the loop once it has produced [END], except under XLA, whose shapes are
    fixed: there every row steps until the last one ends.

    Args:
        model: a `Transformer`.
        inp: `(batch, inp_len)` source ids.
        start_id, end_id: the [START] and [END] ids.
        max_decoding_length, with_alignment, jit_compile, xla_max_batch: as `SearchOptions`
            (called eagerly, `jit_compile` takes no `next_token`: each call would compile anew).
        min_length: [END] is forbidden before this many tokens (= max_decoding_length forces a
            length).
        repetition_penalty, no_repeat_ngram_size, placeholder_ids: as `NextTokenRules`.
        next_token: as `GreedySearch`.
        prefix: as `DecodingStrategy.search` (not with `jit_compile`).

    Returns:
        dict: `tokens` `(batch, out_len)`, `scores` `(batch,)` summed log-probabilities of the
        tokens up to and including [END] (after the prefix), `alignment`
        `(batch, out_len, inp_len)`.
    """
    rules = NextTokenRules(
        end_id, min_length, repetition_penalty, no_repeat_ngram_size, tuple(placeholder_ids)
    )
    options = SearchOptions(
        rules, max_decoding_length, prefix, with_alignment, jit_compile, xla_max_batch
    )
    return decode_transformer(GreedySearch(next_token), model, inp, start_id, options)


def naive_greedy_decode(model, inp, start_id, end_id, max_decoding_length=None, min_length=0):
    """Greedy decoding that re-runs the decoder on the whole prefix every step.

    The classic tutorial's `Translator` loop, batched: O(n²) decoder work for n tokens (each
    step writes the whole prefix into the same empty cache). Kept as the reference for
    `greedy_decode` (same tokens on the same weights) and for benchmarks.

    Returns:
        dict with `tokens` and `scores` as `greedy_decode`.
    """
    batch_size = tf.shape(inp)[0]
    if max_decoding_length is None:
        max_decoding_length = max_decoding_length_for(inp, limit=model.pe_target - 1)
    empty_cache = model.init_cache(*model.encode(inp, training=False), max_decoding_length)

    def body(step, prefix, scores, finished):
        logits = model.decode(prefix, empty_cache, 0).logits[:, -1]
        log_probs = NextTokenRules(end_id, min_length).log_probs(logits, step)
        next_token = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        scores += tf.where(finished, 0.0, tf.gather(log_probs, next_token, axis=1, batch_dims=1))
        # Finished rows keep extending with [END], not pad: a pad id would be masked out of the
        # decoder's self-attention and change nothing, but [END] keeps the prefix a real sentence.
        next_token = tf.where(finished, tf.cast(end_id, tf.int32), next_token)
        finished |= tf.equal(next_token, end_id)
        return step + 1, tf.concat([prefix, next_token[:, tf.newaxis]], axis=1), scores, finished

    def cond(step, prefix, scores, finished):
        return tf.logical_not(tf.reduce_all(finished))

    _, prefix, scores, _ = tf.while_loop(
        cond,
        body,
        (
            tf.constant(0),
            tf.fill([batch_size, 1], tf.cast(start_id, tf.int32)),
            tf.zeros([batch_size], tf.float32),
            tf.zeros([batch_size], tf.bool),
        ),
        shape_invariants=(
            tf.TensorShape([]),
            tf.TensorShape([None, None]),
            tf.TensorShape([None]),
            tf.TensorShape([None]),
        ),
        maximum_iterations=max_decoding_length,
    )
    return {"tokens": mask_after_end(prefix[:, 1:], end_id), "scores": scores}
