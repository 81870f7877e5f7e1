"""Decoding: greedy and beam search over a trained Transformer, as graph-friendly functions.

Everything here runs inside `tf.function` / a SavedModel: loops are `tf.while_loop`s bounded by
`maximum_iterations`, batched, and stop early once every sequence has produced `end_id`.
Cached decoders feed one new token per step through the key/value cache of `Transformer.decode`;
`naive_greedy_decode` recomputes the whole prefix each step (the classic tutorial's
`Translator`) and exists as the reference the cached decoders are tested and timed against.

Shared conventions:
    inp: source token ids `(batch, inp_len)`, 0 = padding.
    Returned tokens: `(batch, out_len)` int32, without [START], including [END], then 0s.
    alignment: last decoder layer's cross-attention averaged over heads, `(batch, out_len, inp_len)`:
        for each output token, how much it attended to each source token; 0 after [END].
"""

import weakref

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


def _forbid_end_before(log_probs, step, min_length, end_id):
    """Sets the [END] log-probability to -inf before `min_length` tokens (forced lengths, benches)."""
    too_early = tf.less(step + 1, min_length)
    end_column = tf.one_hot(end_id, tf.shape(log_probs)[-1], on_value=NEG_INF, off_value=0.0)
    return tf.where(too_early, log_probs + end_column, log_probs)


def _next_token_log_probs(logits):
    """Log-probabilities of the next token from `(batch, t, vocab)` logits, padding forbidden.

    The pad id is never a real output (labels never contain it), and emitting it would corrupt
    the prefix: the decoder's self-attention masks pad positions out.
    """
    log_probs = tf.nn.log_softmax(tf.cast(logits[:, -1, :], tf.float32), axis=-1)
    pad_column = tf.one_hot(PAD_ID, tf.shape(log_probs)[-1], on_value=NEG_INF, off_value=0.0)
    return log_probs + pad_column


def _last_layer_alignment(model, attention_weights):
    """`(batch, 1, inp_len)`: the last decoder layer's cross-attention, mean over heads."""
    weights = attention_weights[f"{model.decoder.dec_layers[-1].name}_block2"]
    return tf.reduce_mean(tf.cast(weights, tf.float32), axis=1)


def _unknown_shapes(structure):
    """`tf.while_loop` shape invariants that only fix the rank (batch and lengths vary by call)."""
    return tf.nest.map_structure(lambda tensor: tf.TensorShape([None] * tensor.shape.rank), structure)


def _take_rows(structure, rows):
    """Every tensor of `structure` (a nest of tensors whose first dimension is the row) at `rows`."""
    return tf.nest.map_structure(lambda tensor: tf.gather(tensor, rows), structure)


def greedy_decode(model, inp, start_id, end_id, max_length=None, min_length=0, jit_compile=False):
    """Greedy decoding with the key/value cache: one decoder step per output token.

    A sentence leaves the loop once it has produced [END] (`_drop_finished_rows`), except under
    XLA, whose shapes are fixed: there every row steps until the last one ends.

    Args:
        model: a `Transformer`.
        inp: `(batch, inp_len)` source ids.
        start_id, end_id: the [START] and [END] ids.
        max_length: output-token bound (int32 scalar); default `max_output_length(inp)` capped
            by the model's positional encodings.
        min_length: [END] is forbidden before this many tokens (use = max_length to force a length).
        jit_compile: compile the encoder and the whole decoding loop with XLA (see
            `_run_loop`). Leave it off in graphs for TF Serving, which runs XLA only with
            `--xla_cpu_compilation_enabled`. Called eagerly, it runs through one traced
            function per model (`_eager_xla_greedy`), so only new shapes compile again.

    Returns:
        dict: `tokens` `(batch, out_len)`, `scores` `(batch,)` summed log-probabilities of the
        tokens up to and including [END], `alignment` `(batch, out_len, inp_len)`.
    """
    if jit_compile and tf.executing_eagerly():
        return _eager_xla_greedy(model)(inp, start_id, end_id, max_length, min_length)
    if max_length is None:
        max_length = max_output_length(inp, limit=model.pe_target - 1)

    def decode_loop(inp, max_length, slots):
        batch_size = tf.shape(inp)[0]
        enc_output, enc_padding_mask = model.encode(inp, training=False)
        # The rows still decoding: everything a step reads of them, and outside XLA (where rows
        # leave) their index in the batch. The cache's cross-attention keys/values stand in for
        # `enc_output`.
        alive = {
            "last_token": tf.fill([batch_size, 1], tf.cast(start_id, tf.int32)),
            "finished": tf.zeros([batch_size], tf.bool),
            "enc_padding_mask": enc_padding_mask,
            "cache": model.init_cache(enc_output, slots),
        }
        if not jit_compile:
            alive["rows"] = tf.range(batch_size)

        def body(step, alive, tokens, alignment, scores):
            logits, attention_weights, cache = model.decode(
                alive["last_token"], None, alive["enc_padding_mask"], training=False,
                cache=alive["cache"], cache_update_index=step,
            )
            log_probs = _forbid_end_before(_next_token_log_probs(logits), step, min_length, end_id)
            next_token = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
            token_log_prob = tf.gather(log_probs, next_token, axis=1, batch_dims=1)
            step_alignment = _last_layer_alignment(model, attention_weights)[:, 0]
            finished = alive["finished"]
            if jit_compile:
                # XLA needs fixed shapes: every row steps until the last one ends, and rows that
                # have ended write padding.
                next_token = tf.where(finished, PAD_ID, next_token)
                scores += tf.where(finished, 0.0, token_log_prob)
                step_alignment = tf.where(finished[:, tf.newaxis], 0.0, step_alignment)
                tokens = write_slot(tokens, next_token[:, tf.newaxis], step, axis=1)
                alignment = write_slot(alignment, step_alignment[:, tf.newaxis], step, axis=1)
            else:
                # No row here has ended (`_drop_finished_rows`): each writes at its batch index.
                rows = alive["rows"]
                at_step = tf.stack([rows, tf.fill(tf.shape(rows), step)], axis=1)
                scores = tf.tensor_scatter_nd_add(scores, rows[:, tf.newaxis], token_log_prob)
                tokens = tf.tensor_scatter_nd_update(tokens, at_step, next_token)
                alignment = tf.tensor_scatter_nd_update(alignment, at_step, step_alignment)
            alive = {**alive, "last_token": next_token[:, tf.newaxis], "cache": cache,
                     "finished": finished | tf.equal(next_token, end_id)}
            if not jit_compile:
                alive = _drop_finished_rows(alive)
            return step + 1, alive, tokens, alignment, scores

        def cond(step, alive, tokens, alignment, scores):
            return tf.logical_not(tf.reduce_all(alive["finished"]))

        loop_vars = (
            tf.constant(0),
            alive,
            tf.zeros([batch_size, slots], tf.int32),
            tf.zeros([batch_size, slots, tf.shape(inp)[1]], tf.float32),
            tf.zeros([batch_size], tf.float32),
        )
        steps, _, tokens, alignment, scores = tf.while_loop(
            cond, body, loop_vars, maximum_iterations=max_length,
            # Rows leave outside XLA, so the alive rows' shapes change between steps.
            shape_invariants=None if jit_compile else _unknown_shapes(loop_vars),
        )
        return steps, tokens, alignment, scores

    steps, tokens, alignment, scores = _run_loop(decode_loop, inp, max_length, jit_compile)
    return {"tokens": tokens[:, :steps], "scores": scores, "alignment": alignment[:, :steps]}


def _drop_finished_rows(alive):
    """Keeps the rows of `alive` (a dict of tensors whose first dimension is the row) that have
    not finished.

    A batch decodes until its longest output ends; rows that ended earlier would keep paying for
    full steps. Gathering the rest costs one copy of their cache, so it happens only on the steps
    where some row ends. Outside XLA only: the batch dimension of the loop changes.
    """
    def gather_unfinished():
        keep = tf.where(tf.logical_not(alive["finished"]))[:, 0]
        return _take_rows(alive, keep)

    return tf.cond(tf.reduce_any(alive["finished"]), gather_unfinished, lambda: alive)


def _run_loop(decode_loop, inp, max_length, jit_compile):
    """Runs `decode_loop(inp, max_length, slots)`, whose buffers hold `slots` output positions.

    Every buffer of the loop (key/value caches, tokens, alignments) has a fixed size, so that each
    step has the same shapes. In a plain graph that size is `max_length` itself. XLA compiles one
    program per set of static sizes: with `jit_compile` the loop runs as one XLA function, whose
    `slots` is `max_length` rounded up to a multiple of `SLOT_GRANULARITY`, so a few programs serve
    every length (XLA reads such size arguments at run time and compiles per value).
    """
    if not jit_compile:
        return decode_loop(inp, max_length, max_length)
    slots = (max_length + SLOT_GRANULARITY - 1) // SLOT_GRANULARITY * SLOT_GRANULARITY
    return tf.function(decode_loop, jit_compile=True, autograph=False)(inp, max_length, slots)


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
                model_ref(), inp, start_id, end_id, max_length, min_length, jit_compile=True),
            reduce_retracing=True,
        )
    return _EAGER_XLA_GREEDY[model]


def naive_greedy_decode(model, inp, start_id, end_id, max_length=None, min_length=0):
    """Greedy decoding that re-runs the decoder on the whole prefix every step (no cache).

    The classic tutorial's `Translator` loop, batched: O(n²) decoder work for n tokens. Kept as
    the reference for `greedy_decode` (same tokens on the same weights) and for benchmarks.

    Returns:
        dict with `tokens` and `scores` as `greedy_decode`.
    """
    batch_size = tf.shape(inp)[0]
    if max_length is None:
        max_length = max_output_length(inp, limit=model.pe_target - 1)
    enc_output, enc_padding_mask = model.encode(inp, training=False)

    def body(step, prefix, scores, finished):
        logits, _ = model.decode(prefix, enc_output, enc_padding_mask, training=False)
        log_probs = _forbid_end_before(_next_token_log_probs(logits), step, min_length, end_id)
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
        (tf.constant(0), tf.fill([batch_size, 1], tf.cast(start_id, tf.int32)),
         tf.zeros([batch_size], tf.float32), tf.zeros([batch_size], tf.bool)),
        shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, None]),
                          tf.TensorShape([None]), tf.TensorShape([None])),
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
    logits = model((inp, decoder_input), training=False)
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
    token_log_probs = tf.gather(log_probs, tokens, axis=2, batch_dims=2)
    return tf.reduce_sum(token_log_probs * tf.cast(tf.not_equal(tokens, PAD_ID), tf.float32), 1)


def _merge_beams(x, batch_size, beam_width):
    """`(batch, beam, ...)` → `(batch * beam, ...)`."""
    return tf.reshape(x, tf.concat([[batch_size * beam_width], tf.shape(x)[2:]], axis=0))


def _split_beams(x, batch_size, beam_width):
    """`(batch * beam, ...)` → `(batch, beam, ...)`."""
    return tf.reshape(x, tf.concat([[batch_size, beam_width], tf.shape(x)[1:]], axis=0))


def _tile_beams(x, beam_width):
    """`(batch, ...)` → `(batch * beam, ...)`, each row repeated `beam_width` times in a row."""
    return tf.repeat(x, beam_width, axis=0)


def _gather_beams(x, beam_indices):
    """Picks `(batch, n)` beams from `x` of shape `(batch, beam, ...)`."""
    return tf.gather(x, beam_indices, axis=1, batch_dims=1)


def beam_search_decode(
    model, inp, start_id, end_id, beam_width=4, alpha=0.6, max_length=None, min_length=0
):
    """Beam search with the key/value cache and the GNMT length penalty.

    Each step expands the `beam_width` alive hypotheses, keeps the 2·beam_width best
    continuations (so that beam_width of them are still alive even if the rest ended), and
    merges the ended ones into the finished set, scored by log P(y | x) / length_penalty(|y|).
    A sentence's search is over once no alive hypothesis can still beat its worst finished one:
    log-probabilities only fall as a hypothesis grows, so an alive one's best reachable score is
    log_prob / length_penalty(max_length). Its best hypothesis is then stored and the sentence
    leaves the loop (`_search_is_over`), which runs until the last sentence's search is over.

    Args:
        model: a `Transformer`.
        inp: `(batch, inp_len)` source ids.
        start_id, end_id: the [START] and [END] ids.
        beam_width: hypotheses kept per sentence (1 = greedy when alpha = 0).
        alpha: length-penalty exponent (0.6 in GNMT and the paper).
        max_length, min_length: as in `greedy_decode`.

    Returns:
        dict: `tokens` `(batch, out_len)` of the best hypothesis, `scores` `(batch,)` its
        length-normalized log-probability, `alignment` `(batch, out_len, inp_len)`.
    """
    batch_size = tf.shape(inp)[0]
    inp_len = tf.shape(inp)[1]
    vocab_size = model.target_vocab_size
    if max_length is None:
        max_length = max_output_length(inp, limit=model.pe_target - 1)
    enc_output, enc_padding_mask = model.encode(inp, training=False)

    # The sentences still searching. `sentences` entries are `(sentences, ...)` or
    # `(sentences, beam, ...)`; `beams` entries, what the decoder reads, `(sentences * beam, ...)`.
    # Only beam 0 starts alive; the others would duplicate it.
    empty_seq = tf.zeros([batch_size, beam_width, 0], tf.int32)
    empty_alignment = tf.zeros([batch_size, beam_width, 0, inp_len], tf.float32)
    searching = {
        "sentences": {
            "rows": tf.range(batch_size),
            "alive_seq": empty_seq,
            "alive_log_probs": tf.tile(
                tf.concat([[0.0], tf.fill([beam_width - 1], NEG_INF)], axis=0)[tf.newaxis],
                [batch_size, 1]),
            "alive_alignment": empty_alignment,
            "finished_seq": empty_seq,
            "finished_scores": tf.fill([batch_size, beam_width], NEG_INF),
            "finished_alignment": empty_alignment,
        },
        "beams": {
            "last_tokens": tf.fill([batch_size * beam_width, 1], tf.cast(start_id, tf.int32)),
            "enc_padding_mask": _tile_beams(enc_padding_mask, beam_width),
            # The cross-attention keys/values stand in for the encoder output from here on.
            "cache": model.init_cache(_tile_beams(enc_output, beam_width), max_length),
        },
    }

    def reorder_self_caches(cache, origins, sentences):
        """Alive beams may come from any parent beam: their self-attention history follows them.

        Cross-attention caches are identical across the beams of one sentence, so stay as they are.
        """
        return {
            layer: {
                "self": {
                    name: _merge_beams(
                        _gather_beams(_split_beams(t, sentences, beam_width), origins),
                        sentences, beam_width,
                    )
                    for name, t in layer_cache["self"].items()
                },
                "cross": layer_cache["cross"],
            }
            for layer, layer_cache in cache.items()
        }

    def beam_step(step, sentences, beams):
        """One step of every searching sentence: the updated `(sentences, beams)`."""
        count = tf.shape(sentences["rows"])[0]
        logits, attention_weights, cache = model.decode(
            beams["last_tokens"], None, beams["enc_padding_mask"], training=False,
            cache=beams["cache"], cache_update_index=step,
        )
        log_probs = _forbid_end_before(_next_token_log_probs(logits), step, min_length, end_id)
        log_probs = _split_beams(log_probs, count, beam_width)
        step_alignment = _split_beams(
            _last_layer_alignment(model, attention_weights), count, beam_width
        )

        # The 2k best continuations over all beams and tokens.
        candidates = tf.reshape(sentences["alive_log_probs"][:, :, tf.newaxis] + log_probs,
                                [count, -1])
        top_log_probs, top_indices = tf.math.top_k(candidates, k=2 * beam_width)
        top_origins = top_indices // vocab_size
        top_tokens = top_indices % vocab_size
        top_seq = tf.concat(
            [_gather_beams(sentences["alive_seq"], top_origins), top_tokens[:, :, tf.newaxis]],
            axis=2,
        )
        top_alignment = tf.concat(
            [_gather_beams(sentences["alive_alignment"], top_origins),
             _gather_beams(step_alignment, top_origins)], axis=2,
        )
        top_ended = tf.cast(tf.equal(top_tokens, end_id), tf.float32)

        # Alive: the k best continuations that did not end.
        alive_log_probs, alive_choice = tf.math.top_k(
            top_log_probs + top_ended * NEG_INF, k=beam_width
        )
        alive_seq = _gather_beams(top_seq, alive_choice)

        # Finished: the k best among the previous finished and the continuations that ended now.
        new_scores = top_log_probs / length_penalty(step + 1, alpha) + (1.0 - top_ended) * NEG_INF
        padded_finished = tf.pad(sentences["finished_seq"], [[0, 0], [0, 0], [0, 1]])
        padded_alignment = tf.pad(sentences["finished_alignment"], [[0, 0], [0, 0], [0, 1], [0, 0]])
        finished_scores, finished_choice = tf.math.top_k(
            tf.concat([sentences["finished_scores"], new_scores], axis=1), k=beam_width
        )
        sentences = {
            "rows": sentences["rows"],
            "alive_seq": alive_seq,
            "alive_log_probs": alive_log_probs,
            "alive_alignment": _gather_beams(top_alignment, alive_choice),
            "finished_seq": _gather_beams(tf.concat([padded_finished, top_seq], axis=1),
                                          finished_choice),
            "finished_scores": finished_scores,
            "finished_alignment": _gather_beams(
                tf.concat([padded_alignment, top_alignment], axis=1), finished_choice),
        }
        beams = {
            **beams,
            "last_tokens": tf.reshape(alive_seq[:, :, -1], [-1, 1]),
            "cache": reorder_self_caches(cache, _gather_beams(top_origins, alive_choice), count),
        }
        return sentences, beams

    def store(outputs, sentences):
        """`outputs` with the best hypotheses of `sentences` written at their rows."""
        best = _best_hypotheses(sentences, alpha)
        rows = sentences["rows"][:, tf.newaxis]
        room = max_length - tf.shape(best["tokens"])[1]
        return {
            "tokens": tf.tensor_scatter_nd_update(
                outputs["tokens"], rows, tf.pad(best["tokens"], [[0, 0], [0, room]])),
            "alignment": tf.tensor_scatter_nd_update(
                outputs["alignment"], rows, tf.pad(best["alignment"], [[0, 0], [0, room], [0, 0]])),
            "scores": tf.tensor_scatter_nd_update(outputs["scores"], rows, best["scores"]),
        }

    def body(step, searching, outputs):
        sentences, beams = beam_step(step, searching["sentences"], searching["beams"])
        over = _search_is_over(sentences, max_length, alpha)

        def store_and_drop_finished_searches():
            keep = tf.where(tf.logical_not(over))[:, 0]
            keep_beams = tf.reshape(
                keep[:, tf.newaxis] * beam_width + tf.range(beam_width, dtype=keep.dtype), [-1])
            kept = {
                "sentences": _take_rows(sentences, keep),
                "beams": _take_rows(beams, keep_beams),
            }
            return kept, store(outputs, _take_rows(sentences, tf.where(over)[:, 0]))

        return (step + 1,) + tf.cond(
            tf.reduce_any(over), store_and_drop_finished_searches,
            lambda: ({"sentences": sentences, "beams": beams}, outputs))

    def cond(step, searching, outputs):
        return tf.size(searching["sentences"]["rows"]) > 0

    loop_vars = (
        tf.constant(0),
        searching,
        {"tokens": tf.zeros([batch_size, max_length], tf.int32),
         "alignment": tf.zeros([batch_size, max_length, inp_len], tf.float32),
         "scores": tf.zeros([batch_size], tf.float32)},
    )
    steps, searching, outputs = tf.while_loop(
        cond, body, loop_vars, shape_invariants=_unknown_shapes(loop_vars),
        maximum_iterations=max_length,
    )
    # Sentences still searching when max_length cut the loop short.
    outputs = store(outputs, searching["sentences"])
    return {"tokens": outputs["tokens"][:, :steps], "scores": outputs["scores"],
            "alignment": outputs["alignment"][:, :steps]}


def _search_is_over(sentences, max_length, alpha):
    """`(sentences,)` bool: no alive hypothesis can still beat the worst finished one."""
    best_alive = sentences["alive_log_probs"][:, 0] / length_penalty(max_length, alpha)
    return best_alive <= tf.reduce_min(sentences["finished_scores"], axis=1)


def _best_hypotheses(sentences, alpha):
    """Each sentence's best finished hypothesis, or its best alive one if none has finished
    (max_length reached): dict of `tokens` `(n, len)`, `scores` `(n,)`, `alignment`."""
    has_finished = sentences["finished_scores"][:, 0] > NEG_INF / 2
    alive_seq = sentences["alive_seq"]
    alive_length = tf.shape(alive_seq)[2]
    alive_scores = sentences["alive_log_probs"][:, 0] / length_penalty(alive_length, alpha)
    return {
        "tokens": tf.where(has_finished[:, tf.newaxis], sentences["finished_seq"][:, 0],
                           alive_seq[:, 0]),
        "scores": tf.where(has_finished, sentences["finished_scores"][:, 0], alive_scores),
        "alignment": tf.where(has_finished[:, tf.newaxis, tf.newaxis],
                              sentences["finished_alignment"][:, 0],
                              sentences["alive_alignment"][:, 0]),
    }
