"""Random sampling: each row draws its next token from the model's distribution, restricted and
tempered with CTranslate2's `sampling_topk`, `sampling_topp` and `sampling_temperature`
(`src/sampling.cc`), until it draws [END].

`Sampling` is greedy search (`model.decoding.greedy`) with a draw in place of the argmax: the same
loops, [END], `min_length` and repetition rules (`NextTokenRules`), and scores (the summed
log-probabilities of the drawn tokens under the untempered distribution, as CTranslate2's).
The draws are stateless and counter-based: each row has a seed of its own, and its Gumbel noise
at a step is, token by token, a hash of (row seed, step, token id) (`uniform_noise`: Wellons'
triple32 in uint32 ops, over the whole `(rows, vocab)` at once). So the same seeds give the same
noise, bit for bit, in a graph, eagerly and under XLA, and a row's draws depend only on its own
seed: not on its index in the batch, on the other rows or on which of them are still decoding.
(TensorFlow's stateless random ops take one seed a call: per-row seeds need a loop over the rows
at every step, `tf.map_fn`, to which `tf.vectorized_map` falls back for them; and under XLA they
draw other numbers than in a graph.) `seed` is either those row seeds, int32 `(batch,)` (what
the `sample` signature serves: a sentence's draws follow its own seed whatever it is batched
with), or one scalar from which the row seeds are drawn (rows of the same source then draw
differently).
"""

import dataclasses

import tensorflow as tf

from model.decoding.common import NEG_INF
from model.decoding.greedy import GreedySearch, greedy_decode, greedy_search
from model.decoding.strategy import DecodingStrategy


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


# Wellons' triple32 (github.com/skeeto/hash-prospector): three xorshift-multiply rounds and a
# last xorshift, a bijection of uint32 whose avalanche bias (how far an output bit's chance of
# flipping, when one input bit flips, strays from 1/2) is 0.021, the limit a random permutation
# reaches; the two-round lowbias32's is 0.17.
TRIPLE32_ROUNDS = ((17, 0xED5AD4BB), (11, 0xAC4C1B51), (15, 0x31848BAB))
TRIPLE32_LAST_SHIFT = 14

# Hashed into the token and step codes so that they are codes of different inputs: triple32
# gives token 5 and step 5 the same code otherwise (and 0 the code 0).
TOKEN_DOMAIN = 0x9E3779B9
STEP_DOMAIN = 0x85EBCA6B

NOISE_BITS = 24  # a float32's significand: every value k / 2**24 is exact, and 1 - 2**-24 < 1


def xor(x, y):
    return tf.bitwise.bitwise_xor(x, tf.cast(y, tf.uint32))


def xorshift_right(x, shift):
    return xor(x, tf.bitwise.right_shift(x, tf.constant(shift, tf.uint32)))


def triple32(x):
    """uint32 `x`, any shape, hashed elementwise by triple32 (`TRIPLE32_ROUNDS`): a bijection,
    wrapping multiplications and logical shifts only, so eager, graph and XLA agree bit for
    bit."""
    for shift, multiplier in TRIPLE32_ROUNDS:
        x = xorshift_right(x, shift) * tf.constant(multiplier, tf.uint32)
    return xorshift_right(x, TRIPLE32_LAST_SHIFT)


def open_unit_interval(bits):
    """float32 in (0, 1), both ends excluded, from uint32 `bits` of any shape: their top
    `NOISE_BITS` bits k as k / 2**NOISE_BITS, except k = 0, which would make the Gumbel
    transform infinite and becomes half the smallest step. Uniform bits give a uniform draw
    on that grid, from 2**-25 to 1 - 2**-24."""
    high_bits = tf.bitwise.right_shift(bits, tf.constant(32 - NOISE_BITS, tf.uint32))
    return tf.maximum(tf.cast(high_bits, tf.float32), 0.5) * 2.0**-NOISE_BITS


def uniform_noise(seeds, step, vocab_size):
    """float32 `(rows, vocab_size)` in (0, 1), both ends excluded: element `[r, t]` is a hash
    of (`seeds[r]`, `step`, `t`) alone, so a row's noise does not depend on the other rows.

    Counter-based, vectorized over rows and tokens: a row's code is triple32 of its seed xor
    the step's code, and its noise triple32 of that code xor each token's code, whose top bits
    `open_unit_interval` maps into (0, 1). The codes are 32 bits, hashed by bijections: two
    steps of a row, two seeds at a step or two tokens of a row never share one; any other two
    (seed, step) pairs share a row code, and so all its noise, with probability 2**-32.

    Args:
        seeds: int32 `(rows,)`, each row's seed (any int32, negative too).
        step: int32 scalar, the decoding step (>= 0).
        vocab_size: int32 scalar.
    """
    token_codes = triple32(xor(tf.cast(tf.range(vocab_size), tf.uint32), TOKEN_DOMAIN))
    step_code = triple32(xor(tf.cast(step, tf.uint32), STEP_DOMAIN))
    row_codes = triple32(xor(tf.bitcast(tf.cast(seeds, tf.int32), tf.uint32), step_code))
    bits = triple32(xor(row_codes[:, tf.newaxis], token_codes[tf.newaxis, :]))
    return open_unit_interval(bits)


def token_sampler(seed, batch_size, sampling_topk=0, sampling_topp=1.0, sampling_temperature=1.0):
    """A `next_token` for `GreedySearch` that draws from `log_probs` restricted to the
    `sampling_topk` most probable tokens (0: all), divided by `sampling_temperature`, then
    restricted to the `sampling_topp` nucleus (`keep_top_p`): CTranslate2's order.

    The draw is Gumbel-max over each row's own noise `(vocab,)`, `uniform_noise` of its seed
    (`row_seeds` of `seed`) and the step, so a row's draw does not depend on the others.
    """
    return _draws(row_seeds(seed, batch_size), sampling_topk, sampling_topp, sampling_temperature)


def _draws(seeds, sampling_topk, sampling_topp, sampling_temperature):
    """`token_sampler` over the row seeds `seeds` `(batch,)`."""

    def next_token(log_probs, rows, step):
        scores = log_probs
        if sampling_topk > 0:
            kth_best = tf.math.top_k(scores, k=sampling_topk).values[:, -1:]
            scores = tf.where(scores < kth_best, NEG_INF, scores)
        scores = scores / sampling_temperature
        if sampling_topp < 1:
            scores = keep_top_p(scores, sampling_topp)
        # XLA's loop decodes a batch padded past batch_size (`pad_to_xla_buckets`): its padding
        # rows borrow the last row's seed, their draws discarded.
        seeds_of_rows = tf.gather(seeds, tf.minimum(rows, tf.size(seeds) - 1))
        uniform = uniform_noise(seeds_of_rows, step, tf.shape(scores)[1])
        gumbel = -tf.math.log(-tf.math.log(uniform))
        # The argmax (top_k's ties go to the lower id, as argmax's): XLA on CPU fuses the noise
        # into tf.argmax's reduction and runs it several times slower than top_k's.
        return tf.math.top_k(scores + gumbel, k=1).indices[:, 0]

    return next_token


@dataclasses.dataclass(frozen=True)
class Sampling(DecodingStrategy):
    """Random sampling: `GreedySearch` drawing each token (CTranslate2's `sampling_topk`,
    `sampling_topp` and `sampling_temperature`), or taking the most probable where the settings
    leave one choice (top-k 1 or temperature 0, as CTranslate2 then searches greedily too).
    A prefix's tokens are forced, as CTranslate2 forces them before its sampler's draws;
    `scores` sum the drawn tokens' untempered log-probabilities.

    Attributes:
        seeds: int32 `(batch,)`, each sentence's seed (`row_seeds` makes them from one
            scalar); the same seeds, the same draws.
        sampling_topk: draw among the k most probable tokens (0: all, 1: greedy).
        sampling_topp: then among the nucleus of mass `sampling_topp` (1: all), `keep_top_p`.
        sampling_temperature: divides the log-probabilities before the nucleus and the draw
            (0: greedy).

    Raises:
        ValueError: settings sampling cannot use (`validate_sampling`).
    """

    seeds: tf.Tensor
    sampling_topk: int = 0
    sampling_topp: float = 1.0
    sampling_temperature: float = 1.0

    def __post_init__(self):
        validate_sampling(self.sampling_topk, self.sampling_topp, self.sampling_temperature)

    @property
    def next_token(self):
        """`GreedySearch`'s `next_token` of these settings: the draw, or None (the argmax)."""
        if self.sampling_topk == 1 or self.sampling_temperature == 0:
            return None
        return _draws(self.seeds, self.sampling_topk, self.sampling_topp, self.sampling_temperature)

    def run(self, loop, rules, prefix):
        """`GreedySearch.run` with `next_token`'s choice."""
        return GreedySearch(self.next_token).run(loop, rules, prefix)

    def baked(self):
        return GreedySearch(self.next_token).baked()


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
    """Random sampling over a step function, as keyword arguments: `greedy_search` with the
    `next_token` of `Sampling`.

    Args:
        step_fn, start_ids, end_id, state, max_decoding_length, alignment_width: as in
            `greedy_search`.
        seed: int32 `(batch,)`, each row's seed, or a scalar (`row_seeds`).
        sampling_topk, sampling_topp, sampling_temperature: as `Sampling`.
        greedy_options: `greedy_search`'s min_length, fixed_shape, slots, repetition_penalty,
            no_repeat_ngram_size, prefix.

    Returns:
        as `greedy_search`; `scores` sum the drawn tokens' untempered log-probabilities.
    """
    sampling = Sampling(
        row_seeds(seed, tf.shape(start_ids)[0]),
        sampling_topk,
        sampling_topp,
        sampling_temperature,
    )
    return greedy_search(
        step_fn,
        start_ids,
        end_id,
        state,
        max_decoding_length,
        alignment_width,
        next_token=sampling.next_token,
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
    """`Sampling` over a `Transformer`, as keyword arguments: `greedy_decode` drawing each
    token.

    Args:
        model, inp, start_id, end_id: as in `greedy_decode`.
        seed, sampling_topk, sampling_topp, sampling_temperature: as in `sampling_search`.
        greedy_options: `greedy_decode`'s max_decoding_length, min_length, jit_compile (in a traced
            caller), repetition_penalty, no_repeat_ngram_size, prefix.

    Returns:
        as `greedy_decode`.
    """
    sampling = Sampling(
        row_seeds(seed, tf.shape(inp)[0]), sampling_topk, sampling_topp, sampling_temperature
    )
    return greedy_decode(
        model, inp, start_id, end_id, next_token=sampling.next_token, **greedy_options
    )
