"""Decoding: greedy and beam search as graph-friendly functions over a step function.

Everything here runs inside `tf.function` / a SavedModel: loops are `tf.while_loop`s bounded by
`maximum_iterations`, batched, and stop early once every sequence has produced `end_id`.

The searches (`greedy_search`, `beam_search`) know nothing of the model. They call

    step_fn(ids, step, state) -> (logits, alignment, state)
        ids: `(rows,)` int32, each row's last token; step: int32 scalar, that token's position.
        logits: `(rows, vocab)` float32, the next token's unnormalized log-probabilities.
        alignment: `(rows, alignment_width)` float32, recorded with the token chosen.
        state: a nest of tensors whose first dimension is the row: the searches drop, repeat and
            gather rows of it as a whole.

and, in beam search, `reorder_state(state, indices)`: the rows `indices` of `state`, each among
the rows of its own sentence (default: every tensor gathered). `greedy_decode` and
`beam_search_decode` run them over a `Transformer` (`transformer_step_fn`: `encode`,
`init_cache`, `decode`, `reorder_cache`). `naive_greedy_decode` recomputes the whole prefix each
step (the classic tutorial's `Translator`) and exists as the reference the cached decoders are
tested and timed against.

Shared conventions:
    inp: source token ids `(batch, inp_len)`, 0 = padding.
    Returned tokens: `(batch, out_len)` int32, without [START], including [END], then 0s.
    alignment: last decoder layer's cross-attention averaged over heads, `(batch, out_len, inp_len)`:
        for each output token, how much it attended to each source token; 0 after [END].
"""

import weakref
from typing import NamedTuple

import tensorflow as tf

from model.buffers import write_slot
from model.masks import PAD_ID

NEG_INF = -1e9
# With XLA, loop buffers are sized in multiples of this many positions (see `_run_loop`).
SLOT_GRANULARITY = 16


def max_output_length(inp, max_length_ratio=1.5, max_length_offset=10, limit=None):
    """Output-length bound relative to the longest source in the batch: ratio · len + offset.

    Args:
        inp: `(batch, inp_len)` source ids.
        limit: optional hard cap (e.g. the model's `pe_target - 1`).

    Returns:
        int32 scalar.
    """
    source_lengths = tf.reduce_sum(tf.cast(tf.not_equal(inp, PAD_ID), tf.float32), axis=1)
    bound = tf.cast(tf.math.ceil(tf.reduce_max(source_lengths) * max_length_ratio), tf.int32)
    bound = tf.maximum(bound + max_length_offset, 1)
    if limit is not None:
        bound = tf.minimum(bound, limit)
    return bound


def length_penalty(length, alpha):
    """GNMT length penalty (Wu et al., 2016): ((5 + length) / 6)^alpha; alpha = 0 disables it."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def transformer_step_fn(model, with_alignment=True):
    """The step function of a `Transformer` whose state is its decoding cache (`init_cache`).

    Without alignment, it returns a `(rows, 0)` one, so a search carries no alignment at all.
    """

    def step_fn(ids, step, cache):
        output = model.decode(ids[:, tf.newaxis], cache, step)
        alignment = output.alignment[:, 0]
        if not with_alignment:
            alignment = alignment[:, :0]
        return output.logits[:, 0], alignment, output.cache

    return step_fn


def output_log_probs(logits):
    """Log-probabilities over the tokens a decoder may output: the softmax of `logits`
    `(..., vocab)` without the pad id.

    The pad id is never a real output (labels never contain it, so its logit is untrained), and
    emitting it would corrupt the prefix: the decoder's self-attention masks pad positions out.
    It is left out of the softmax, not just forbidden after it, so the scores are those of a
    distribution over real tokens (as CTranslate2 computes them with [PAD] suppressed).
    """
    logits = tf.cast(logits, tf.float32)
    no_pad = tf.one_hot(PAD_ID, tf.shape(logits)[-1], on_value=NEG_INF, off_value=0.0)
    return tf.nn.log_softmax(logits + no_pad, axis=-1)


def _next_token_log_probs(logits, step, min_length, end_id):
    """`output_log_probs` of the token at `step`, with [END] forbidden before `min_length`
    tokens (forced lengths, benchmarks)."""
    log_probs = output_log_probs(logits)
    end_forbidden = tf.one_hot(end_id, tf.shape(log_probs)[-1], on_value=NEG_INF, off_value=0.0)
    return log_probs + tf.where(
        tf.less(step + 1, min_length), end_forbidden, tf.zeros_like(end_forbidden)
    )


def _unknown_shapes(structure):
    """`tf.while_loop` shape invariants that only fix the rank (batch and lengths vary by call)."""
    return tf.nest.map_structure(
        lambda tensor: tf.TensorShape([None] * tensor.shape.rank), structure
    )


def _take_rows(structure, rows):
    """Every tensor of `structure` (a nest of tensors whose first dimension is the row) at `rows`."""
    return tf.nest.map_structure(lambda tensor: tf.gather(tensor, rows), structure)


def _empty_outputs(batch_size, slots, alignment_width):
    """The decoders' output buffers: nothing written yet."""
    return {
        "tokens": tf.zeros([batch_size, slots], tf.int32),
        "alignment": tf.zeros([batch_size, slots, alignment_width], tf.float32),
        "scores": tf.zeros([batch_size], tf.float32),
    }


def _trim(outputs):
    """Search outputs cut to the positions the loop ran (`length`)."""
    length = outputs["length"]
    return {
        "tokens": outputs["tokens"][:, :length],
        "scores": outputs["scores"],
        "alignment": outputs["alignment"][:, :length],
    }


def greedy_search(
    step_fn,
    start_ids,
    end_id,
    state,
    max_length,
    alignment_width,
    min_length=0,
    fixed_shape=False,
    slots=None,
):
    """Greedy search: each row takes its most probable next token until it produces `end_id`.

    Args:
        step_fn: see the module docstring.
        start_ids: `(batch,)` int32, the first token fed to `step_fn`.
        end_id: the [END] id.
        state: `step_fn`'s state for the batch.
        max_length: int32 scalar, tokens output at most.
        alignment_width: the second dimension of `step_fn`'s alignment.
        min_length: `end_id` is forbidden before this many tokens.
        fixed_shape: every row steps until the last one ends (`_greedy_fixed_shape`, for XLA),
            instead of rows leaving the loop as they end (`_greedy_dropping_finished`).
        slots: positions of the output buffers, ≥ max_length (default max_length).

    Returns:
        dict: `tokens` `(batch, slots)`, `scores` `(batch,)` summed log-probabilities of the
        tokens up to and including [END], `alignment` `(batch, slots, alignment_width)`, and
        `length`, the positions written (the loop's steps).
    """
    slots = max_length if slots is None else slots
    loop = _greedy_fixed_shape if fixed_shape else _greedy_dropping_finished
    return loop(
        step_fn,
        start_ids,
        end_id,
        state,
        max_length,
        min_length,
        _empty_outputs(tf.shape(start_ids)[0], slots, alignment_width),
    )


def _greedy_step(step_fn, ids, step, state, end_id, min_length):
    """One greedy step of every row: `(next_ids, their log-probabilities, alignment, state)`."""
    logits, alignment, state = step_fn(ids, step, state)
    log_probs = _next_token_log_probs(logits, step, min_length, end_id)
    next_ids = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
    return next_ids, tf.gather(log_probs, next_ids, axis=1, batch_dims=1), alignment, state


def _greedy_fixed_shape(step_fn, start_ids, end_id, state, max_length, min_length, outputs):
    """Greedy loop whose shapes never change (XLA compiles one program): every row steps until
    the last one ends, and rows that have ended write padding."""

    def body(step, ids, finished, state, outputs):
        next_ids, log_probs, alignment, state = _greedy_step(
            step_fn, ids, step, state, end_id, min_length
        )
        next_ids = tf.where(finished, PAD_ID, next_ids)
        alignment = tf.where(finished[:, tf.newaxis], 0.0, alignment)
        outputs = {
            "tokens": write_slot(outputs["tokens"], next_ids[:, tf.newaxis], step, axis=1),
            "alignment": write_slot(outputs["alignment"], alignment[:, tf.newaxis], step, axis=1),
            "scores": outputs["scores"] + tf.where(finished, 0.0, log_probs),
        }
        return step + 1, next_ids, finished | tf.equal(next_ids, end_id), state, outputs

    def cond(step, ids, finished, state, outputs):
        return tf.logical_not(tf.reduce_all(finished))

    steps, _, _, _, outputs = tf.while_loop(
        cond,
        body,
        (tf.constant(0), start_ids, tf.zeros(tf.shape(start_ids), tf.bool), state, outputs),
        maximum_iterations=max_length,
    )
    return {**outputs, "length": steps}


def _greedy_dropping_finished(step_fn, start_ids, end_id, state, max_length, min_length, outputs):
    """Greedy loop in which a row leaves once it has produced [END] (`_drop_finished_rows`), so
    a batch's short sentences do not pay the steps of its longest. Outside XLA only: the
    loop's batch dimension changes."""

    def body(step, alive, outputs):
        next_ids, log_probs, alignment, state = _greedy_step(
            step_fn, alive["ids"], step, alive["state"], end_id, min_length
        )
        # No row here has ended: each writes at its batch index.
        rows = alive["rows"]
        at_step = tf.stack([rows, tf.fill(tf.shape(rows), step)], axis=1)
        outputs = {
            "tokens": tf.tensor_scatter_nd_update(outputs["tokens"], at_step, next_ids),
            "alignment": tf.tensor_scatter_nd_update(outputs["alignment"], at_step, alignment),
            "scores": tf.tensor_scatter_nd_add(outputs["scores"], rows[:, tf.newaxis], log_probs),
        }
        alive = {"ids": next_ids, "rows": rows, "state": state}
        return step + 1, _drop_finished_rows(alive, tf.equal(next_ids, end_id)), outputs

    def cond(step, alive, outputs):
        return tf.size(alive["rows"]) > 0

    alive = {"ids": start_ids, "rows": tf.range(tf.shape(start_ids)[0]), "state": state}
    loop_vars = (tf.constant(0), alive, outputs)
    steps, _, outputs = tf.while_loop(
        cond,
        body,
        loop_vars,
        maximum_iterations=max_length,
        shape_invariants=_unknown_shapes(loop_vars),
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
        lambda: _take_rows(alive, tf.where(tf.logical_not(finished))[:, 0]),
        lambda: alive,
    )


def greedy_decode(model, inp, start_id, end_id, max_length=None, min_length=0, jit_compile=False):
    """Greedy decoding of a `Transformer` with its key/value cache: one decoder step per token.

    A sentence leaves the loop once it has produced [END], except under XLA, whose shapes are
    fixed: there every row steps until the last one ends.

    Args:
        model: a `Transformer`.
        inp: `(batch, inp_len)` source ids.
        start_id, end_id: the [START] and [END] ids.
        max_length: output-token bound (int32 scalar); default `max_output_length(inp)` capped
            by the model's positional encodings.
        min_length: [END] is forbidden before this many tokens (use = max_length to force a length).
        jit_compile: compile the encoder and the whole decoding loop with XLA (see
            `_run_loop`). TF Serving runs a graph holding it only with
            `--xla_cpu_compilation_enabled` (`serving.export --jit_compile`). Called eagerly, it
            runs through one traced function per model (`_eager_xla_greedy`), so only new
            shapes compile again.

    Returns:
        dict: `tokens` `(batch, out_len)`, `scores` `(batch,)` summed log-probabilities of the
        tokens up to and including [END], `alignment` `(batch, out_len, inp_len)`.
    """
    if jit_compile and tf.executing_eagerly():
        return _eager_xla_greedy(model)(inp, start_id, end_id, max_length, min_length)
    if max_length is None:
        max_length = max_output_length(inp, limit=model.pe_target - 1)

    def search(inp, max_length, slots):
        cache = model.init_cache(*model.encode(inp, training=False), slots)
        start_ids = tf.fill([tf.shape(inp)[0]], tf.cast(start_id, tf.int32))
        return greedy_search(
            transformer_step_fn(model),
            start_ids,
            end_id,
            cache,
            max_length,
            alignment_width=tf.shape(inp)[1],
            min_length=min_length,
            fixed_shape=jit_compile,
            slots=slots,
        )

    return _trim(_run_loop(search, inp, max_length, jit_compile, model.pe_input))


def _run_loop(search, inp, max_length, jit_compile, max_source_length):
    """Runs `search(inp, max_length, slots)`, whose buffers hold `slots` output positions.

    Every buffer of the loop (key/value caches, tokens, alignments) has a fixed size, so that each
    step has the same shapes. In a plain graph that size is `max_length` itself. XLA compiles one
    program per set of static sizes, so with `jit_compile` the loop runs as one XLA function on
    sizes rounded up to a few buckets: `slots` is `max_length` rounded up
    to a multiple of `SLOT_GRANULARITY` (XLA reads such size arguments at run time and compiles
    per value), and `inp` is padded as `_pad_to_xla_buckets` says; the padding is cut off the
    outputs again, so they equal the plain graph's.
    """
    if not jit_compile:
        return search(inp, max_length, max_length)
    slots = _round_up(max_length, SLOT_GRANULARITY)
    batch_size, width = tf.shape(inp)[0], tf.shape(inp)[1]
    padded = _pad_to_xla_buckets(inp, max_source_length)
    outputs = tf.function(search, jit_compile=True, autograph=False)(padded, max_length, slots)
    return {
        "tokens": outputs["tokens"][:batch_size],
        "scores": outputs["scores"][:batch_size],
        "alignment": outputs["alignment"][:batch_size, :, :width],
        "length": outputs["length"],
    }


def _round_up(value, multiple):
    return (value + multiple - 1) // multiple * multiple


def _pad_to_xla_buckets(inp, max_source_length):
    """`inp` `(batch, width)` padded for XLA to one of a few shapes, so that a server compiles
    a handful of programs rather than one per request shape.

    Columns: padding (masked out everywhere) up to a multiple of `SLOT_GRANULARITY`, at most
    `max_source_length` (the model's positional encodings). Rows: copies of the first row up to
    the next power of two; copies of a real sentence end when it ends, where rows of padding
    might never produce [END] and keep the fixed-shape loop running to `max_length`.
    """
    batch_size, width = tf.shape(inp)[0], tf.shape(inp)[1]
    padded_width = tf.maximum(
        tf.minimum(_round_up(width, SLOT_GRANULARITY), max_source_length), width
    )
    powers_of_two = tf.bitwise.left_shift(1, tf.range(31))
    padded_batch = tf.reduce_min(tf.boolean_mask(powers_of_two, powers_of_two >= batch_size))
    rows = tf.range(padded_batch)
    inp = tf.gather(inp, tf.where(rows < batch_size, rows, 0))
    return tf.pad(inp, [[0, 0], [0, padded_width - width]], constant_values=PAD_ID)


# model -> its traced XLA greedy decoder. Weak keys: a model that is gone takes its entry along.
_EAGER_XLA_GREEDY = weakref.WeakKeyDictionary()


def _eager_xla_greedy(model):
    """`greedy_decode(model, ..., jit_compile=True)` as one `tf.function` per model.

    Eagerly, `_run_loop` would wrap a fresh closure in a fresh XLA function at each call and
    compile it again (seconds). Traced once, the inner XLA function persists, and XLA's cache
    compiles only shapes it has not seen. The function reaches the model through a weak
    reference, or the cache entry would keep its own key alive.
    """
    if model not in _EAGER_XLA_GREEDY:
        model_ref = weakref.ref(model)
        _EAGER_XLA_GREEDY[model] = tf.function(
            lambda inp, start_id, end_id, max_length, min_length: greedy_decode(
                model_ref(), inp, start_id, end_id, max_length, min_length, jit_compile=True
            ),
            reduce_retracing=True,
        )
    return _EAGER_XLA_GREEDY[model]


def naive_greedy_decode(model, inp, start_id, end_id, max_length=None, min_length=0):
    """Greedy decoding that re-runs the decoder on the whole prefix every step.

    The classic tutorial's `Translator` loop, batched: O(n²) decoder work for n tokens (each
    step writes the whole prefix into the same empty cache). Kept as the reference for
    `greedy_decode` (same tokens on the same weights) and for benchmarks.

    Returns:
        dict with `tokens` and `scores` as `greedy_decode`.
    """
    batch_size = tf.shape(inp)[0]
    if max_length is None:
        max_length = max_output_length(inp, limit=model.pe_target - 1)
    empty_cache = model.init_cache(*model.encode(inp, training=False), max_length)

    def body(step, prefix, scores, finished):
        logits = model.decode(prefix, empty_cache, 0).logits[:, -1]
        log_probs = _next_token_log_probs(logits, step, min_length, end_id)
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
        maximum_iterations=max_length,
    )
    return {"tokens": mask_after_end(prefix[:, 1:], end_id), "scores": scores}


def mask_after_end(tokens, end_id):
    """Replaces every token after the first [END] of each row with padding."""
    is_end = tf.cast(tf.equal(tokens, end_id), tf.int32)
    ends_before = tf.cumsum(is_end, axis=1, exclusive=True)
    return tf.where(ends_before > 0, tf.zeros_like(tokens), tokens)


def sequence_log_prob(model, inp, tokens, start_id):
    """Teacher-forced log-probability of given output tokens (up to and including [END]).

    Args:
        tokens: `(batch, out_len)` as returned by the decoders (0 after [END]).

    Returns:
        `(batch,)` float32 sums of token log-probabilities over the non-pad tokens.
    """
    batch_size = tf.shape(tokens)[0]
    decoder_input = tf.concat(
        [tf.fill([batch_size, 1], tf.cast(start_id, tf.int32)), tokens[:, :-1]], axis=1
    )
    log_probs = output_log_probs(model((inp, decoder_input), training=False))
    token_log_probs = tf.gather(log_probs, tokens, axis=2, batch_dims=2)
    return tf.reduce_sum(token_log_probs * tf.cast(tf.not_equal(tokens, PAD_ID), tf.float32), 1)


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
    max_length,
    alignment_width,
    beam_width=4,
    alpha=0.6,
    min_length=0,
    reorder_state=_take_rows,
):
    """Beam search with the GNMT length penalty.

    Each step expands the `beam_width` alive hypotheses, keeps the 2·beam_width best
    continuations (so that beam_width of them are still alive even if the rest ended), and
    merges the ended ones into the finished set, scored by log P(y | x) / length_penalty(|y|).
    A sentence's search is over once no alive hypothesis can still beat its worst finished one
    (`_search_is_over`); its best hypothesis is then stored and its beams leave the loop, which
    runs until the last sentence's search is over, or `max_length`.

    Args:
        step_fn, reorder_state: see the module docstring.
        start_ids: `(batch,)` int32, the first token fed to `step_fn`.
        end_id: the [END] id.
        state: `step_fn`'s state for the batch (one row per sentence; repeated here per beam).
        max_length: int32 scalar, tokens output at most.
        alignment_width: the second dimension of `step_fn`'s alignment.
        beam_width: hypotheses kept per sentence (1 = greedy when alpha = 0).
        alpha: length-penalty exponent (0.6 in GNMT and the paper).
        min_length: `end_id` is forbidden before this many tokens.

    Returns:
        dict: `tokens` `(batch, max_length)` of each sentence's best hypothesis, `scores`
        `(batch,)` its length-normalized log-probability, `alignment`
        `(batch, max_length, alignment_width)`, and `length`, the positions the loop ran.
    """
    batch_size = tf.shape(start_ids)[0]

    def body(step, beams, outputs):
        beams = _beam_step(
            step_fn, reorder_state, beams, step, beam_width, end_id, min_length, alpha
        )
        over = _search_is_over(beams, max_length, alpha)

        def store_and_drop_finished_searches():
            done = _take_rows(_best_hypotheses(beams, alpha), tf.where(over)[:, 0])
            return (
                _keep_searches(beams, tf.where(tf.logical_not(over))[:, 0], beam_width),
                _store(outputs, done, max_length),
            )

        return (step + 1,) + tf.cond(
            tf.reduce_any(over), store_and_drop_finished_searches, lambda: (beams, outputs)
        )

    def cond(step, beams, outputs):
        return tf.size(beams.rows) > 0

    loop_vars = (
        tf.constant(0),
        _initial_beams(start_ids, state, beam_width, alignment_width),
        _empty_outputs(batch_size, max_length, alignment_width),
    )
    steps, beams, outputs = tf.while_loop(
        cond,
        body,
        loop_vars,
        shape_invariants=_unknown_shapes(loop_vars),
        maximum_iterations=max_length,
    )
    # Sentences still searching when max_length cut the loop short.
    outputs = _store(outputs, _best_hypotheses(beams, alpha), max_length)
    return {**outputs, "length": steps}


def _initial_beams(start_ids, state, beam_width, alignment_width):
    """Every sentence searching, with only beam 0 alive (the others would duplicate it)."""
    batch_size = tf.shape(start_ids)[0]
    empty_seq = tf.zeros([batch_size, beam_width, 0], tf.int32)
    empty_alignment = tf.zeros([batch_size, beam_width, 0, alignment_width], tf.float32)
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


def _beam_step(step_fn, reorder_state, beams, step, beam_width, end_id, min_length, alpha):
    """One step of every searching sentence: the next `BeamState`."""
    count = tf.shape(beams.rows)[0]
    logits, step_alignment, step_state = step_fn(beams.last_ids, step, beams.step_state)
    log_probs = _next_token_log_probs(logits, step, min_length, end_id)
    vocab_size = tf.shape(log_probs)[-1]
    log_probs = tf.reshape(log_probs, [count, beam_width, vocab_size])
    step_alignment = tf.reshape(step_alignment, [count, beam_width, 1, -1])

    # The 2k best continuations over all beams and tokens.
    candidates = tf.reshape(beams.alive_log_probs[:, :, tf.newaxis] + log_probs, [count, -1])
    top_log_probs, top_indices = tf.math.top_k(candidates, k=2 * beam_width)
    top_origins = top_indices // vocab_size
    top_tokens = top_indices % vocab_size
    top_seq = tf.concat(
        [_gather_beams(beams.alive_seq, top_origins), top_tokens[:, :, tf.newaxis]], axis=2
    )
    top_alignment = tf.concat(
        [
            _gather_beams(beams.alive_alignment, top_origins),
            _gather_beams(step_alignment, top_origins),
        ],
        axis=2,
    )
    top_ended = tf.cast(tf.equal(top_tokens, end_id), tf.float32)

    # Alive: the k best continuations that did not end.
    alive_log_probs, alive_choice = tf.math.top_k(top_log_probs + top_ended * NEG_INF, k=beam_width)
    alive_seq = _gather_beams(top_seq, alive_choice)

    # Finished: the k best among the previous finished and the continuations that ended now.
    new_scores = top_log_probs / length_penalty(step + 1, alpha) + (1.0 - top_ended) * NEG_INF
    padded_finished = tf.pad(beams.finished_seq, [[0, 0], [0, 0], [0, 1]])
    padded_alignment = tf.pad(beams.finished_alignment, [[0, 0], [0, 0], [0, 1], [0, 0]])
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
        last_ids=tf.reshape(alive_seq[:, :, -1], [-1]),
        step_state=reorder_state(step_state, parent_rows),
    )


def _search_is_over(beams, max_length, alpha):
    """`(sentences,)` bool: no alive hypothesis can still beat the worst finished one.

    Log-probabilities only fall as a hypothesis grows, so an alive one's best reachable score
    is its log-probability / length_penalty(max_length).
    """
    best_alive = beams.alive_log_probs[:, 0] / length_penalty(max_length, alpha)
    return best_alive <= tf.reduce_min(beams.finished_scores, axis=1)


def _keep_searches(beams, keep, beam_width):
    """The `BeamState` of the sentences `keep` `(n,)` (indices among the searching ones)."""
    keep = tf.cast(keep, tf.int32)
    keep_beams = tf.reshape(keep[:, tf.newaxis] * beam_width + tf.range(beam_width), [-1])
    per_sentence = _take_rows(beams._replace(last_ids=(), step_state=()), keep)
    return per_sentence._replace(
        last_ids=tf.gather(beams.last_ids, keep_beams),
        step_state=_take_rows(beams.step_state, keep_beams),
    )


def _best_hypotheses(beams, alpha):
    """Each searching sentence's best finished hypothesis, or its best alive one if none has
    finished (max_length reached): dict of `rows` `(n,)`, `tokens` `(n, t)`, `scores` `(n,)`,
    `alignment` `(n, t, alignment_width)`."""
    has_finished = beams.finished_scores[:, 0] > NEG_INF / 2
    alive_length = tf.shape(beams.alive_seq)[2]
    alive_scores = beams.alive_log_probs[:, 0] / length_penalty(alive_length, alpha)
    return {
        "rows": beams.rows,
        "tokens": tf.where(
            has_finished[:, tf.newaxis], beams.finished_seq[:, 0], beams.alive_seq[:, 0]
        ),
        "scores": tf.where(has_finished, beams.finished_scores[:, 0], alive_scores),
        "alignment": tf.where(
            has_finished[:, tf.newaxis, tf.newaxis],
            beams.finished_alignment[:, 0],
            beams.alive_alignment[:, 0],
        ),
    }


def _store(outputs, best, max_length):
    """`outputs` with the hypotheses `best` (from `_best_hypotheses`) written at their rows."""
    rows = best["rows"][:, tf.newaxis]
    room = max_length - tf.shape(best["tokens"])[1]
    return {
        "tokens": tf.tensor_scatter_nd_update(
            outputs["tokens"], rows, tf.pad(best["tokens"], [[0, 0], [0, room]])
        ),
        # A search without alignments carries them zero wide, where a scatter is an error.
        "alignment": tf.cond(
            tf.size(outputs["alignment"]) > 0,
            lambda: tf.tensor_scatter_nd_update(
                outputs["alignment"], rows, tf.pad(best["alignment"], [[0, 0], [0, room], [0, 0]])
            ),
            lambda: outputs["alignment"],
        ),
        "scores": tf.tensor_scatter_nd_update(outputs["scores"], rows, best["scores"]),
    }


def beam_search_decode(
    model,
    inp,
    start_id,
    end_id,
    beam_width=4,
    alpha=0.6,
    max_length=None,
    min_length=0,
    with_alignment=True,
):
    """`beam_search` over a `Transformer` with its key/value cache.

    Args:
        model: a `Transformer`.
        inp: `(batch, inp_len)` source ids.
        start_id, end_id: the [START] and [END] ids.
        beam_width: hypotheses kept per sentence (1 = greedy when alpha = 0).
        alpha: length-penalty exponent (0.6 in GNMT and the paper).
        max_length, min_length: as in `greedy_decode`.
        with_alignment: False skips the alignments (every beam's would be gathered and
            concatenated at each step, for nothing when only the translation is wanted).

    Returns:
        dict: `tokens` `(batch, out_len)` of the best hypothesis, `scores` `(batch,)` its
        length-normalized log-probability, `alignment` `(batch, out_len, inp_len)` (or
        `(batch, out_len, 0)` without alignment).
    """
    if max_length is None:
        max_length = max_output_length(inp, limit=model.pe_target - 1)
    cache = model.init_cache(*model.encode(inp, training=False), max_length)
    start_ids = tf.fill([tf.shape(inp)[0]], tf.cast(start_id, tf.int32))
    return _trim(
        beam_search(
            transformer_step_fn(model, with_alignment),
            start_ids,
            end_id,
            cache,
            max_length,
            alignment_width=tf.shape(inp)[1] if with_alignment else 0,
            beam_width=beam_width,
            alpha=alpha,
            min_length=min_length,
            reorder_state=model.reorder_cache,
        )
    )
