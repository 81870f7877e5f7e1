"""model/decoding/sampling.py: random sampling follows the tempered, top-k and top-p
distributions (chi-square tests), with reproducible counter-based noise."""

import numpy as np
import pytest
import tensorflow as tf

from model.decoding import (
    greedy_decode,
    greedy_search,
    sampling_decode,
    sampling_search,
    token_sampler,
)
from model.decoding.common import NEG_INF
from model.decoding.sampling import open_unit_interval, triple32, uniform_noise
from tests.model.decoding.decoding_helpers import (
    FAKE_END,
    FAKE_START,
    FakeTable,
    fake_search,
)
from tests.reverse_task import END, START

# Random sampling, over a step function whose distribution is the same at every step and row.
SAMPLING_LOGITS = np.log(np.float32([1e-9, 0.05, 0.1, 0.4, 0.3, 0.15]))  # pad: never drawn
SAMPLING_DRAWS = 20000


def constant_step_fn(logits):
    def step_fn(ids, step, state):
        rows = tf.shape(ids)[0]
        return tf.tile(tf.constant(logits)[tf.newaxis], [rows, 1]), tf.zeros([rows, 1]), state

    return step_fn


def first_draws(seed=3, **sampling):
    """`SAMPLING_DRAWS` first tokens drawn from `SAMPLING_LOGITS` by `sampling_search`."""
    outputs = tf.function(
        lambda: sampling_search(
            constant_step_fn(SAMPLING_LOGITS),
            tf.fill([SAMPLING_DRAWS], FAKE_START),
            FAKE_END,
            {"rows": tf.zeros([SAMPLING_DRAWS])},
            tf.constant(1),
            alignment_width=1,
            seed=seed,
            **sampling,
        )
    )()
    return outputs["tokens"].numpy()[:, 0]


def chi_square_critical_value(degrees_of_freedom, z=3.719):
    """The chi-square distribution's quantile at the standard normal's `z` (3.719: 1 - 1e-4),
    by the Wilson–Hilferty approximation (scipy is not installed)."""
    k = degrees_of_freedom
    return k * (1 - 2 / (9 * k) + z * np.sqrt(2 / (9 * k))) ** 3


def assert_draws_follow(draws, probs):
    """Every draw in the support of `probs` `(vocab,)`, and the counts fit it (a chi-square
    test at the 1e-4 level, on a fixed seed: deterministic)."""
    support = probs > 0
    assert set(np.unique(draws).tolist()) == set(np.nonzero(support)[0].tolist())
    if support.sum() == 1:
        return
    counts = np.bincount(draws, minlength=len(probs))[support]
    expected = len(draws) * probs[support]
    statistic = np.sum((counts - expected) ** 2 / expected)
    assert statistic < chi_square_critical_value(int(support.sum()) - 1), (counts, expected)


def pad_free_softmax(temperature=1.0):
    """The softmax of `SAMPLING_LOGITS / temperature` without [PAD], which is never an output."""
    probs = np.exp(SAMPLING_LOGITS.astype(np.float64) / temperature)
    probs[0] = 0
    return probs / probs.sum()


def test_the_chi_square_check_rejects_a_wrong_distribution():
    """The check has power: draws of the tempered softmax fail against the untempered one."""
    tempered = first_draws(sampling_temperature=2.0)
    with pytest.raises(AssertionError):
        assert_draws_follow(tempered, pad_free_softmax())


@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
def test_sampled_tokens_follow_the_tempered_softmax(temperature):
    draws = first_draws(sampling_temperature=temperature)
    assert_draws_follow(draws, pad_free_softmax(temperature))


# `token_sampler` itself over many rows and steps, its row seeds consecutive as the client gives
# them (`--seed + i`).
SAMPLER_ROWS, SAMPLER_STEPS = 5000, 4


def sampler_draws(first_seed=1000):
    """`(SAMPLER_ROWS, SAMPLER_STEPS)` tokens drawn by `token_sampler` from `pad_free_softmax()`
    at every step, row i seeded `first_seed + i`."""
    probs = pad_free_softmax()
    log_probs = np.tile(
        np.log(probs, out=np.full_like(probs, NEG_INF), where=probs > 0), (SAMPLER_ROWS, 1)
    )
    next_token = token_sampler(tf.range(SAMPLER_ROWS) + first_seed, SAMPLER_ROWS)
    draw = tf.function(
        lambda step: next_token(tf.constant(log_probs, tf.float32), tf.range(SAMPLER_ROWS), step)
    )
    return np.stack([draw(tf.constant(step)).numpy() for step in range(SAMPLER_STEPS)], axis=1)


def pair_codes(first, second):
    """One code for each pair of tokens `(first[i], second[i])`."""
    return (first * len(SAMPLING_LOGITS) + second).ravel()


def test_draws_are_independent_across_steps_and_neighbouring_seeds():
    """All 20,000 draws fit the softmax; disjoint pairs of them fit the product of the softmax
    with itself: (step 2j, step 2j + 1) of a row, (seed 2i, seed 2i + 1) at a step, and (seed
    2i at step 2j + 1, seed 2i + 1 at step 2j). Noise that ignored the step, or that
    neighbouring seeds shared, even a step apart, draws such pairs alike far too often."""
    draws = sampler_draws()
    probs = pad_free_softmax()
    assert_draws_follow(draws.ravel(), probs)
    pair_probs = np.outer(probs, probs).ravel()
    assert_draws_follow(pair_codes(draws[:, 0::2], draws[:, 1::2]), pair_probs)
    assert_draws_follow(pair_codes(draws[0::2], draws[1::2]), pair_probs)
    assert_draws_follow(pair_codes(draws[0::2, 1::2], draws[1::2, 0::2]), pair_probs)


def test_triple32_is_wellons_listing():
    """Against NumPy running the C listing of github.com/skeeto/hash-prospector's triple32."""

    def listing(x):
        for shift, multiplier in ((17, 0xED5AD4BB), (11, 0xAC4C1B51), (15, 0x31848BAB)):
            x = (x ^ (x >> np.uint32(shift))) * np.uint32(multiplier)
        return x ^ (x >> np.uint32(14))

    values = np.random.default_rng(0).integers(0, 2**32, 1000, dtype=np.uint64).astype(np.uint32)
    values = np.concatenate([values, np.uint32([0, 1, 2**31, 2**32 - 1])])
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(triple32(tf.constant(values)).numpy(), listing(values))


def test_noise_is_strictly_between_0_and_1():
    """The top 24 bits k as k / 2**24, k = 0 as 2**-25: never 0 or 1, so Gumbel noise is finite."""
    bits = tf.constant([0, 255, 256, 2**31, 2**32 - 257, 2**32 - 1], tf.uint32)
    uniform = open_unit_interval(bits).numpy()
    expected = [2**-25, 2**-25, 2**-24, 0.5, 1 - 2**-23, 1 - 2**-24]
    np.testing.assert_array_equal(uniform, np.float32(expected))
    assert np.all(np.isfinite(-np.log(-np.log(uniform))))


def test_a_rows_noise_depends_only_on_its_seed_and_step_wherever_it_runs():
    """`uniform_noise` eagerly, in a graph and under XLA: the same bits; a row's noise that of
    its seed alone, in any batch; another step or seed, other noise."""
    seeds = tf.constant([7, -7, 0, 2**31 - 1, -(2**31), 8], tf.int32)
    step, vocab = tf.constant(3), tf.constant(500)
    eager = uniform_noise(seeds, step, vocab).numpy()
    for compiled in (False, True):
        traced = tf.function(uniform_noise, jit_compile=compiled)(seeds, step, vocab).numpy()
        np.testing.assert_array_equal(traced, eager)
    assert eager.shape == (6, 500) and np.all((eager > 0) & (eager < 1))
    for row, seed in enumerate(seeds.numpy()):
        alone = uniform_noise(tf.constant([seed]), step, vocab).numpy()[0]
        np.testing.assert_array_equal(alone, eager[row])
        assert np.mean(uniform_noise(tf.constant([seed]), step + 1, vocab).numpy() == alone) < 0.01
    assert len({row.tobytes() for row in eager}) == len(eager)


def test_top_k_draws_among_the_k_most_probable_tokens():
    draws = first_draws(sampling_topk=3, sampling_temperature=0.8)
    probs = np.exp(SAMPLING_LOGITS.astype(np.float64) / 0.8)
    probs[[0, 1, 2]] = 0
    assert_draws_follow(draws, probs / probs.sum())


@pytest.mark.cpu_dependent
@pytest.mark.parametrize(
    "top_p, nucleus", [(0.3, [3]), (0.65, [3, 4]), (0.8, [3, 4, 5]), (0.9, [2, 3, 4, 5])]
)
def test_top_p_keeps_the_smallest_set_whose_mass_reaches_p(top_p, nucleus):
    """Probabilities 0.4, 0.3, 0.15, 0.1, 0.05: the nucleus holds the most probable tokens while
    the mass before them is below p, so the token that crosses p is in (CTranslate2's
    `TopPMask`); draws follow the nucleus renormalized. Each p is at least 0.05 from a
    cumulative mass (0.4, 0.7, 0.85, 0.95): float32 softmaxes summed in another order (another
    CPU's kernels) cannot move a token across it, as they did at p = 0.4."""
    draws = first_draws(sampling_topp=top_p)
    probs = np.zeros(len(SAMPLING_LOGITS))
    probs[nucleus] = np.exp(SAMPLING_LOGITS.astype(np.float64))[nucleus]
    assert_draws_follow(draws, probs / probs.sum())


def test_top_k_one_draws_the_greedy_outputs():
    """The sampler itself at top-k 1 (not the greedy shortcut `sampling_search` takes there)
    follows greedy search over the table, repetition rules and [END] included."""
    sentences = 12
    table = FakeTable(np.random.default_rng(5), sentences)
    rules = {"no_repeat_ngram_size": 1, "min_length": 2}
    greedy = fake_search(greedy_search, table, sentences, max_decoding_length=8, **rules)
    drawn = fake_search(
        greedy_search,
        table,
        sentences,
        max_decoding_length=8,
        next_token=token_sampler(7, sentences, sampling_topk=1),
        **rules,
    )
    for name in ("tokens", "scores", "alignment"):
        np.testing.assert_array_equal(drawn[name], greedy[name])


def test_sampling_is_reproducible_and_follows_the_rules_like_greedy():
    """Whole outputs over the table: the same seed draws the same outputs (whether rows leave
    the loop as they end or not), another seed others; each output ends with [END], repeats no
    word under `no_repeat_ngram_size` 1, and scores the summed log-probabilities of its path
    under the rules (banned words out of the softmax)."""
    sentences = 200
    table = FakeTable(np.random.default_rng(9), sentences)

    def draw(seed, fixed_shape=False):
        return fake_search(
            sampling_search,
            table,
            sentences,
            max_decoding_length=8,
            seed=seed,
            sampling_temperature=1.5,
            no_repeat_ngram_size=1,
            fixed_shape=fixed_shape,
        )

    found = draw(5)
    fixed_shape = draw(5, fixed_shape=True)
    np.testing.assert_array_equal(fixed_shape["tokens"], found["tokens"])
    np.testing.assert_allclose(fixed_shape["scores"], found["scores"], rtol=1e-6)
    assert np.mean(np.any(draw(6)["tokens"] != found["tokens"], axis=1)) > 0.3
    greedy = fake_search(
        greedy_search, table, sentences, max_decoding_length=8, no_repeat_ngram_size=1
    )
    assert np.any(found["tokens"] != greedy["tokens"]), "sampling drew only greedy's outputs"
    for sentence, row in enumerate(found["tokens"]):
        tokens = [int(token) for token in row if token != 0]
        assert tokens[-1] == FAKE_END and FAKE_END not in tokens[:-1]
        assert len(set(tokens)) == len(tokens), tokens
        # Each token's log-probability with the words already output banned (renormalized).
        path = table.path_log_probs(sentence, tokens)
        score = sum(
            path[i, token] - np.log(np.exp(np.delete(path[i], [0, *tokens[:i]])).sum())
            for i, token in enumerate(tokens)
        )
        assert found["scores"][sentence] == pytest.approx(score, abs=1e-4)


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"sampling_topk": -1}, "sampling_topk must be an int >= 0"),
        ({"sampling_topp": 0.0}, r"sampling_topp must be in \(0, 1\]"),
        ({"sampling_temperature": -1.0}, "sampling_temperature must be >= 0"),
    ],
)
def test_sampling_refuses_bad_settings(setting, message):
    with pytest.raises(ValueError, match=message):
        first_draws(**setting)


def test_sampling_decode_runs_the_model_reproducibly(trained_reverse_model, sources):
    """Over a `Transformer`: the same seed, the same outputs; at temperature 0, greedy's."""
    model, _ = trained_reverse_model
    source = tf.constant(sources[0][:6], tf.int32)
    decode = tf.function(
        lambda inp, seed: sampling_decode(model, inp, START, END, seed, sampling_temperature=3.0)
    )
    first, again, other = decode(source, 1), decode(source, 1), decode(source, 2)
    np.testing.assert_array_equal(first["tokens"], again["tokens"])
    assert np.any(first["tokens"].numpy() != other["tokens"].numpy()[:, : first["tokens"].shape[1]])
    greedy = greedy_decode(model, source, START, END)
    coldest = sampling_decode(model, source, START, END, 1, sampling_temperature=0.0)
    np.testing.assert_array_equal(coldest["tokens"], greedy["tokens"])


def test_sampling_draws_alike_in_a_graph_eagerly_and_under_xla(trained_reverse_model, sources):
    """The same seeds, the same outputs: `sampling_decode` in a graph, eagerly, and with
    `jit_compile` in a graph (6 rows, which XLA pads to 8: the padding rows borrow a seed)."""
    model, _ = trained_reverse_model
    source = tf.constant(sources[0][:6], tf.int32)
    seeds = tf.constant([3, -4, 5, 2**31 - 1, 7, 8], tf.int32)

    def decode(inp, seed, jit_compile=False):
        return sampling_decode(
            model, inp, START, END, seed, sampling_temperature=3.0, jit_compile=jit_compile
        )

    graph = tf.function(decode)(source, seeds)
    greedy = greedy_decode(model, source, START, END)
    assert np.any(graph["tokens"].numpy() != greedy["tokens"].numpy()), "nothing drawn off greedy"
    for other in (decode(source, seeds), tf.function(decode)(source, seeds, jit_compile=True)):
        np.testing.assert_array_equal(other["tokens"], graph["tokens"])
        np.testing.assert_allclose(other["scores"], graph["scores"], rtol=1e-4, atol=1e-4)
