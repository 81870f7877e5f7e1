"""Greedy search: each row takes its most probable next token until it produces [END].

`greedy_search` runs over any step function (`model.decoding.step`); `greedy_decode` runs it over a
`Transformer` and its key/value cache, optionally compiled with XLA (`model.decoding.xla`).
`naive_greedy_decode` recomputes the whole prefix each step (the classic tutorial's
`Translator`): the reference the cached decoder is tested and timed against.
"""

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
from model.decoding.penalties import NextTokenRules, validate_repetition_controls
from model.decoding.prefix import forced_tokens
from model.decoding.step import decode_transformer
from model.decoding.xla import eager_xla_decoder
from model.masks import PAD_ID


def greedy_search(
    step_fn,
    start_ids,
    end_id,
    state,
    max_decoding_length,
    alignment_width,
    min_length=0,
    fixed_shape=False,
    compiled=False,
    slots=None,
    repetition_penalty=1.0,
    no_repeat_ngram_size=0,
    next_token=None,
    prefix=None,
    placeholders=None,
):
    """Greedy search: each row takes its most probable next token until it produces `end_id`.

    Args:
        step_fn: see `model.decoding.step`.
        start_ids: `(batch,)` int32, the first token fed to `step_fn`.
        end_id: the [END] id.
        state: `step_fn`'s state for the batch.
        max_decoding_length: int32 scalar, tokens output at most.
        alignment_width: the second dimension of `step_fn`'s alignment.
        min_length: `end_id` is forbidden before this many tokens.
        fixed_shape: every row steps until the last one ends (`_greedy_fixed_shape`, for XLA),
            instead of rows leaving the loop as they end (`_greedy_dropping_finished`).
        compiled: whether XLA compiles the search (it needs `fixed_shape`): the output buffers
            are then written with XLA's op (`model.buffers.write_slot`).
        slots: positions of the output buffers, ≥ max_decoding_length (default:
            max_decoding_length).
        repetition_penalty, no_repeat_ngram_size: CTranslate2's repetition controls
            (`model.decoding.penalties`); 1 and 0 disable them.
        next_token: how a row picks its token, `next_token(log_probs, rows, step)` -> `(rows,)`
            int32, from `log_probs` `(rows, vocab)` (the rules applied), `rows` the rows' indices
            in the batch; default the most probable (`model.decoding.sampling` draws one).
        prefix: None, or the tokens each row's output starts with: `(batch, P)` int32 padded
            with 0, or a `TargetPrefix` (`model.decoding.prefix` states the semantics).
        placeholders: None, or the `PlaceholderLimits` of each row's output
            (`model.decoding.copies`).

    Returns:
        dict: `tokens` `(batch, slots)`, `scores` `(batch,)` summed log-probabilities of the
        tokens up to and including [END] (after the prefix), `alignment`
        `(batch, slots, alignment_width)`, and `length`, the positions written (the loop's
        steps).
    """
    if compiled and not fixed_shape:
        raise ValueError("a compiled greedy search needs fixed_shape=True: XLA's shapes are fixed.")
    slots = max_decoding_length if slots is None else slots
    validate_repetition_controls(repetition_penalty, no_repeat_ngram_size)
    rules = NextTokenRules(
        end_id, min_length, repetition_penalty, no_repeat_ngram_size, placeholders
    )
    choice = _Choice(rules, next_token or _most_probable, forced_tokens(prefix))
    outputs = empty_outputs(tf.shape(start_ids)[0], slots, alignment_width)
    if fixed_shape:
        return _greedy_fixed_shape(
            step_fn, start_ids, choice, state, max_decoding_length, outputs, compiled
        )
    return _greedy_dropping_finished(
        step_fn, start_ids, choice, state, max_decoding_length, outputs
    )


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


def _greedy_fixed_shape(step_fn, start_ids, choice, state, max_decoding_length, outputs, compiled):
    """Greedy loop whose shapes never change (XLA compiles one program): every row steps until
    the last one ends, and rows that have ended write padding. `compiled`: as `greedy_search`."""

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

    steps, _, _, _, outputs = tf.while_loop(
        cond,
        body,
        (tf.constant(0), start_ids, tf.zeros(tf.shape(start_ids), tf.bool), state, outputs),
        maximum_iterations=max_decoding_length,
    )
    return {**outputs, "length": steps}


def _greedy_dropping_finished(step_fn, start_ids, choice, state, max_decoding_length, outputs):
    """Greedy loop in which a row leaves once it has produced [END] (`_drop_finished_rows`), so
    a batch's short sentences do not pay the steps of its longest. Outside XLA only: the
    loop's batch dimension changes."""
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

    alive = {"ids": start_ids, "rows": tf.range(tf.shape(start_ids)[0]), "state": state}
    loop_vars = (tf.constant(0), alive, outputs)
    steps, _, outputs = tf.while_loop(
        cond,
        body,
        loop_vars,
        maximum_iterations=max_decoding_length,
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
    """Greedy decoding of a `Transformer` with its key/value cache: one decoder step per token.

    A sentence leaves the loop once it has produced [END], except under XLA, whose shapes are
    fixed: there every row steps until the last one ends.

    Args:
        model: a `Transformer`.
        inp: `(batch, inp_len)` source ids.
        start_id, end_id: the [START] and [END] ids.
        max_decoding_length: output-token bound (int32 scalar); default
            `max_decoding_length_for(inp)` capped by the model's positional encodings.
        min_length: [END] is forbidden before this many tokens (= max_decoding_length forces a
            length).
        jit_compile: compile the encoder and the whole decoding loop with XLA (see
            `run_loop`). TF Serving runs a graph holding it only with
            `--xla_cpu_compilation_enabled` (`serving.export --jit_compile`). Called eagerly, it
            runs through one traced function per model (`eager_xla_decoder`), so only new
            shapes compile again.
        repetition_penalty, no_repeat_ngram_size, next_token: as in `greedy_search` (called
            eagerly, `jit_compile` takes no `next_token`: each call would compile anew).
        prefix: as in `greedy_search` (not with `jit_compile`: XLA's padded batch would need
            padded prefixes).
        with_alignment: False skips the alignments (not computed; a zero-width `alignment`).
        placeholder_ids: `(source_id, target_id)` pairs of the placeholder pieces no output may
            hold more often than its source (`model.decoding.copies`); () for none.
        xla_max_batch: with `jit_compile`, None (every batch under XLA), or the largest batch
            that runs under XLA, larger ones in the plain graph (`run_loop`).

    Returns:
        dict: `tokens` `(batch, out_len)`, `scores` `(batch,)` summed log-probabilities of the
        tokens up to and including [END] (after the prefix), `alignment`
        `(batch, out_len, inp_len)`.
    """
    if jit_compile and prefix is not None:
        raise ValueError("prefix is not supported with jit_compile: decode it without XLA.")
    repetition_controls = {
        "repetition_penalty": repetition_penalty,
        "no_repeat_ngram_size": no_repeat_ngram_size,
        "placeholder_ids": tuple(placeholder_ids),
    }
    if jit_compile and tf.executing_eagerly():
        if next_token is not None:
            raise ValueError("next_token needs a traced caller under jit_compile (tf.function).")
        return eager_xla_decoder(
            greedy_decode,
            model,
            with_alignment=with_alignment,
            xla_max_batch=xla_max_batch,
            **repetition_controls,
        )(inp, start_id, end_id, max_decoding_length, min_length)
    return decode_transformer(
        greedy_search,
        model,
        inp,
        start_id,
        max_decoding_length,
        jit_compile,
        with_alignment,
        xla_max_batch,
        end_id=end_id,
        min_length=min_length,
        next_token=next_token,
        prefix=prefix,
        **repetition_controls,
    )


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
