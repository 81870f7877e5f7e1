"""Random sampling: each row draws its next token from the model's distribution, restricted and
tempered with CTranslate2's `sampling_topk`, `sampling_topp` and `sampling_temperature`
(`src/sampling.cc`), until it draws [END].

It is greedy search (`model.decoding.greedy`) with a draw in place of the argmax: the same
loops, [END], `min_length` and repetition rules (`NextTokenRules`), and scores (the summed
log-probabilities of the drawn tokens under the untempered distribution, as CTranslate2's).
The draws are stateless: each row has a seed of its own, and its noise at a step is
`tf.random.stateless_uniform` seeded by `(row seed, step)`. So the same seeds give the same
outputs, in a graph or eagerly, and a row's draws depend only on its own seed: not on its index
in the batch, on the other rows or on which of them are still decoding. `seed` is either those
row seeds, int32 `(batch,)` (what the `sample` signature serves: a sentence's draws follow its
own seed whatever it is batched with), or one scalar from which the row seeds are drawn (rows
of the same source then draw differently).
"""

import tensorflow as tf

from model.decoding.common import NEG_INF
from model.decoding.greedy import greedy_decode, greedy_search


def validate_sampling(sampling_topk, sampling_topp, sampling_temperature):
    """Raises ValueError, saying what is allowed, for settings sampling cannot use."""
    if not isinstance(sampling_topk, int) or sampling_topk < 0:
        raise ValueError(
            f"sampling_topk must be an int >= 0 (0: the whole vocabulary), got {sampling_topk!r}."
        )
    if not 0 < sampling_topp <= 1:
        raise ValueError(f"sampling_topp must be in (0, 1] (1 disables it), got {sampling_topp!r}.")
    if not sampling_temperature >= 0:
        raise ValueError(
            f"sampling_temperature must be >= 0 (0: greedy), got {sampling_temperature!r}."
        )


def keep_top_p(scores, top_p):
    """`scores` `(rows, vocab)` with NEG_INF outside each row's nucleus: its most probable
    tokens (under the softmax of `scores`) while the mass before them is below `top_p`, so the
    token whose probability crosses `top_p` is kept (CTranslate2's `TopPMask`); ties in the
    order of their ids."""
    order = tf.argsort(scores, axis=-1, direction="DESCENDING", stable=True)
    sorted_probs = tf.gather(tf.nn.softmax(scores, axis=-1), order, batch_dims=1)
    kept_sorted = tf.cumsum(sorted_probs, axis=-1, exclusive=True) < top_p
    kept = tf.gather(kept_sorted, tf.argsort(order, axis=-1, stable=True), batch_dims=1)
    return tf.where(kept, scores, NEG_INF)


def row_seeds(seed, batch_size):
    """int32 `(batch_size,)`: `seed` itself if it is a vector (one seed per row), else row seeds
    drawn from the scalar `seed`."""
    seed = tf.cast(seed, tf.int32)
    if seed.shape.rank == 0:
        return tf.random.stateless_uniform(
            [batch_size], seed=tf.stack([seed, 0]), minval=None, maxval=None, dtype=tf.int32
        )
    tf.debugging.assert_equal(
        tf.shape(seed)[0], batch_size, message="sampling needs one seed per row of the batch"
    )
    return seed


def token_sampler(seed, batch_size, sampling_topk=0, sampling_topp=1.0, sampling_temperature=1.0):
    """A `next_token` for `greedy_search` that draws from `log_probs` restricted to the
    `sampling_topk` most probable tokens (0: all), divided by `sampling_temperature`, then
    restricted to the `sampling_topp` nucleus (`keep_top_p`): CTranslate2's order.

    The draw is Gumbel-max over each row's own noise `(vocab,)`, seeded by `(row seed, step)`
    (`row_seeds` of `seed`), so a row's draw does not depend on the others.
    """
    seeds = row_seeds(seed, batch_size)

    def next_token(log_probs, rows, step):
        scores = log_probs
        if sampling_topk > 0:
            kth_best = tf.math.top_k(scores, k=sampling_topk).values[:, -1:]
            scores = tf.where(scores < kth_best, NEG_INF, scores)
        scores = scores / sampling_temperature
        if sampling_topp < 1:
            scores = keep_top_p(scores, sampling_topp)
        vocab_size = tf.shape(scores)[1]
        # XLA's loop decodes a batch padded past batch_size (`pad_to_xla_buckets`): its padding
        # rows borrow the last row's seed, their draws discarded.
        seeds_of_rows = tf.gather(seeds, tf.minimum(rows, tf.size(seeds) - 1))
        step_seed = tf.cast(step, tf.int32)
        uniform = tf.map_fn(
            lambda row_seed: tf.random.stateless_uniform(
                [vocab_size],
                seed=tf.stack([row_seed, step_seed]),
                minval=tf.experimental.numpy.finfo(tf.float32).tiny,
                maxval=1.0,
            ),
            seeds_of_rows,
            fn_output_signature=tf.float32,
        )
        gumbel = -tf.math.log(-tf.math.log(uniform))
        return tf.argmax(scores + gumbel, axis=-1, output_type=tf.int32)

    return next_token


def _sampler_or_greedy(seed, batch_size, sampling_topk, sampling_topp, sampling_temperature):
    """`token_sampler`, or None (the argmax) where the settings leave one choice: top-k 1 or
    temperature 0 (CTranslate2 then searches greedily too)."""
    validate_sampling(sampling_topk, sampling_topp, sampling_temperature)
    if sampling_topk == 1 or sampling_temperature == 0:
        return None
    return token_sampler(seed, batch_size, sampling_topk, sampling_topp, sampling_temperature)


def sampling_search(
    step_fn,
    start_ids,
    end_id,
    state,
    max_decoding_length,
    alignment_width,
    seed,
    sampling_topk=0,
    sampling_topp=1.0,
    sampling_temperature=1.0,
    **greedy_options,
):
    """Random sampling over a step function: `greedy_search` drawing each token.

    Args:
        step_fn, start_ids, end_id, state, max_decoding_length, alignment_width: as in
            `greedy_search`.
        seed: int32 `(batch,)`, each row's seed, or a scalar (`row_seeds`); the same seeds,
            the same draws.
        sampling_topk: draw among the k most probable tokens (0: all, 1: greedy).
        sampling_topp: then among the nucleus of mass `sampling_topp` (1: all), `keep_top_p`.
        sampling_temperature: divides the log-probabilities before the nucleus and the draw
            (0: greedy).
        greedy_options: `greedy_search`'s min_length, fixed_shape, slots, repetition_penalty,
            no_repeat_ngram_size, prefix (its tokens forced, as CTranslate2 forces them before
            its sampler's draws).

    Returns:
        as `greedy_search`; `scores` sum the drawn tokens' untempered log-probabilities.
    """
    next_token = _sampler_or_greedy(
        seed, tf.shape(start_ids)[0], sampling_topk, sampling_topp, sampling_temperature
    )
    return greedy_search(
        step_fn,
        start_ids,
        end_id,
        state,
        max_decoding_length,
        alignment_width,
        next_token=next_token,
        **greedy_options,
    )


def sampling_decode(
    model,
    inp,
    start_id,
    end_id,
    seed,
    sampling_topk=0,
    sampling_topp=1.0,
    sampling_temperature=1.0,
    **greedy_options,
):
    """`sampling_search` over a `Transformer`: `greedy_decode` drawing each token.

    Args:
        model, inp, start_id, end_id: as in `greedy_decode`.
        seed, sampling_topk, sampling_topp, sampling_temperature: as in `sampling_search`.
        greedy_options: `greedy_decode`'s max_decoding_length, min_length, jit_compile (in a traced
            caller), repetition_penalty, no_repeat_ngram_size, prefix.

    Returns:
        as `greedy_decode`.
    """
    next_token = _sampler_or_greedy(
        seed, tf.shape(inp)[0], sampling_topk, sampling_topp, sampling_temperature
    )
    return greedy_decode(model, inp, start_id, end_id, next_token=next_token, **greedy_options)
