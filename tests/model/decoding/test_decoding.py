"""Decoding: cached greedy vs the naive decoder, beam search properties, batching, alignments."""

import functools
import gc
import itertools
import weakref

import keras
import numpy as np
import pytest
import tensorflow as tf

from model import Transformer
from model.decoding import (
    BeamSearch,
    GreedySearch,
    beam_search,
    beam_search_decode,
    greedy_decode,
    greedy_search,
    length_penalty,
    mask_after_end,
    max_decoding_length_for,
    naive_greedy_decode,
    sampling_decode,
    sampling_search,
    sequence_log_prob,
    token_sampler,
)
from model.decoding.beam import _beam_step, _initial_beams
from model.decoding.common import NEG_INF, take_rows
from model.decoding.copies import PlaceholderLimits
from model.decoding.greedy import _drop_finished_rows
from model.decoding.penalties import NextTokenRules, ban_repeated_ngrams, penalize_repetitions
from model.decoding.sampling import open_unit_interval, triple32, uniform_noise
from model.decoding.xla import (
    _EAGER_XLA_DECODERS,
    pad_to_xla_buckets,
    run_loop,
    xla_buckets,
    xla_slots,
)
from tests.reverse_task import END, START, reverse_task

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


@pytest.fixture(scope="module")
def sources():
    """A held-out batch with different source lengths (4..8 tokens, padded)."""
    source, _, labels = reverse_task(np.random.default_rng(7), 24)
    return source, labels


@pytest.fixture(scope="module")
def untrained_model():
    model = Transformer(2, 32, 4, 64, 30, 30, 80, 80)
    return model


def test_cached_greedy_equals_naive_decoder_on_trained_model(trained_reverse_model, sources):
    model, _ = trained_reverse_model
    source, _ = sources
    cached = in_graph(greedy_decode, model)(source)
    naive = in_graph(naive_greedy_decode, model)(source)
    np.testing.assert_array_equal(cached["tokens"], naive["tokens"])
    np.testing.assert_allclose(cached["scores"], naive["scores"], atol=1e-4)


def test_cached_greedy_equals_naive_decoder_over_long_outputs(untrained_model):
    """An untrained model never says [END]: 40 forced steps stress the cache and positions."""
    source = np.random.default_rng(0).integers(4, 30, size=(3, 11))
    source[1, 4:] = 0
    cached = in_graph(greedy_decode, untrained_model, max_decoding_length=40, min_length=40)(source)
    naive = in_graph(naive_greedy_decode, untrained_model, max_decoding_length=40, min_length=40)(
        source
    )
    assert cached["tokens"].shape == (3, 40)
    np.testing.assert_array_equal(cached["tokens"], naive["tokens"])
    np.testing.assert_allclose(cached["scores"], naive["scores"], rtol=1e-5)


@pytest.mark.parametrize("forced_length", [None, 40])
def test_xla_compiled_greedy_equals_graph_greedy(
    trained_reverse_model, untrained_model, sources, forced_length
):
    """`jit_compile`: the same tokens, scores and alignments as the plain graph, with the
    length bound computed in the graph (XLA sizes its buffers from it at run time) or forced
    (40 steps in 48 slots: the spare slots stay masked)."""
    if forced_length is None:
        model, source = trained_reverse_model[0], sources[0]
        lengths = {}
    else:
        model = untrained_model
        source = np.random.default_rng(3).integers(4, 30, size=(3, 9))
        lengths = {"max_decoding_length": forced_length, "min_length": forced_length}
    results = [
        tf.function(lambda inp: greedy_decode(model, inp, START, END, jit_compile=jit, **lengths))(
            tf.constant(source, tf.int32)
        )
        for jit in (False, True)
    ]
    graph, xla = ({name: tensor.numpy() for name, tensor in result.items()} for result in results)
    np.testing.assert_array_equal(xla["tokens"], graph["tokens"])
    np.testing.assert_allclose(xla["scores"], graph["scores"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(xla["alignment"], graph["alignment"], atol=1e-4)
    if forced_length:
        assert xla["tokens"].shape == (3, forced_length)


@pytest.mark.parametrize(
    "batch, width, max_source, padded_shape",
    [(1, 5, 80, (1, 16)), (3, 16, 80, (4, 16)), (5, 17, 80, (8, 32)), (32, 70, 72, (32, 72))],
)
def test_xla_inputs_are_padded_to_a_few_shapes(batch, width, max_source, padded_shape):
    """Rows up to a power of two (copies of row 0), columns up to a multiple of 16 (padding,
    capped by the positional encodings): a server compiles a few programs, not one per shape."""
    inp = np.random.default_rng(batch).integers(1, 30, size=(batch, width)).astype(np.int32)
    padded = pad_to_xla_buckets(tf.constant(inp), max_source).numpy()
    assert padded.shape == padded_shape
    np.testing.assert_array_equal(padded[:batch, :width], inp)
    np.testing.assert_array_equal(
        padded[batch:, :width], np.repeat(inp[:1], len(padded) - batch, 0)
    )
    assert not padded[:, width:].any()


def test_xla_slots_round_output_lengths_up_to_multiples_of_16():
    assert [int(xla_slots(length)) for length in (1, 16, 17, 32, 33)] == [16, 16, 32, 32, 48]


def test_xla_buckets_name_the_programs_of_every_batch_and_source_length():
    """Each (batch, longest source) of the ranges falls in one of the buckets, as
    `pad_to_xla_buckets` pads it and `xla_slots` sizes its outputs, and each bucket holds the
    smallest batch and length that fall in it."""
    max_batch, max_source = 5, 40

    def max_decoding_length(length):
        return 2 * length + 3

    buckets = xla_buckets(max_batch, range(2, max_source + 1), max_source, max_decoding_length)
    smallest = {}
    for batch_size, length in itertools.product(range(1, max_batch + 1), range(2, max_source + 1)):
        inp = tf.ones([batch_size, length], tf.int32)
        bucket = (
            *pad_to_xla_buckets(inp, max_source).shape,
            int(xla_slots(max_decoding_length(length))),
        )
        smallest.setdefault(bucket, (batch_size, length))
    assert buckets == smallest
    # Four batch buckets (1, 2, 4, 8) by the (width, slots) of lengths 2-6, 7-14, 15-16, 17-22,
    # 23-30, 31-32, 33-38 and 39-40.
    assert len(buckets) == 4 * 8


@pytest.fixture(scope="module")
def ending_model():
    """A random model whose beam search ends sentences at many lengths, and some not before
    max_decoding_length, and whose hypotheses depend on their own prefixes (an untrained model never
    says [END], and heeds its source and prefix little): logits sharper than at
    initialization, a bias towards [END], louder attention (W^O scaled up)."""
    keras.utils.set_random_seed(5)
    model = Transformer(1, 16, 2, 32, 24, 24, 64, 64)
    model.build(((None, None), (None, None)))
    embeddings = model.final_layer.token_embedding.embeddings
    embeddings.assign(embeddings * 2.0)
    model.final_layer.bias.assign(tf.one_hot(END, 24) * 2.0)
    for attention in (model.decoder.dec_layers[0].mha1, model.decoder.dec_layers[0].mha2):
        attention.dense.kernel.assign(attention.dense.kernel * 3.0)
    return model


# Beam search settings compiled by XLA in the tests: the default length penalty, a stronger one
# with the repetition controls, and the n best without a length penalty.
BEAM_XLA_OPTIONS = {
    "alpha": {},
    "alpha-and-repetition-controls": {
        "alpha": 1.0,
        "no_repeat_ngram_size": 2,
        "repetition_penalty": 1.5,
    },
    "n-best": {"alpha": 0.0, "num_hypotheses": 3},
}
# (batch, source width): XLA pads them to batches of 1, 4 and 8 rows, sources of 16 and 32
# columns and outputs of 16, 32 and 48 slots (their max_decoding_length: 1.5 · width + 10).
ONE_SHORT, THREE_IN_ONE_BUCKET, FIVE_LONG = (1, 3), (3, 12), (5, 20)


@pytest.mark.parametrize(
    "options, batch, width",
    [
        ("alpha", *ONE_SHORT),
        ("alpha", *THREE_IN_ONE_BUCKET),
        ("alpha", *FIVE_LONG),
        ("alpha-and-repetition-controls", *THREE_IN_ONE_BUCKET),
        ("alpha-and-repetition-controls", *FIVE_LONG),
        ("n-best", *FIVE_LONG),
    ],
)
def test_xla_compiled_beam_search_equals_graph_beam_search(ending_model, options, batch, width):
    """`jit_compile`: the same hypotheses, scores and alignments as the plain graph, and as
    many steps, on batches and lengths that XLA pads to different buckets, with sentences
    whose searches end at different steps (in XLA's fixed-shape loop they step on) and some
    that max_decoding_length cuts."""
    rng = np.random.default_rng(width)
    source = rng.integers(4, 24, size=(batch, width))
    for row in range(1, batch):  # row 0 is the longest: max_decoding_length is 1.5 · width + 10
        source[row, rng.integers(2, width + 1) :] = 0
    results = [
        tf.function(
            lambda inp: beam_search_decode(
                ending_model, inp, START, END, jit_compile=jit, **BEAM_XLA_OPTIONS[options]
            )
        )(tf.constant(source, tf.int32))
        for jit in (False, True)
    ]
    graph, xla = ({name: tensor.numpy() for name, tensor in result.items()} for result in results)
    np.testing.assert_array_equal(xla["tokens"], graph["tokens"])
    np.testing.assert_allclose(xla["scores"], graph["scores"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(xla["alignment"], graph["alignment"], atol=1e-4)
    best = graph["tokens"] if graph["tokens"].ndim == 2 else graph["tokens"][:, 0]
    if batch > 1:
        assert len(set(decode_lengths(best))) > 1, "every sentence ends at one length"


def test_run_loop_compiles_the_batches_up_to_xla_max_batch_only():
    """The bound itself: `search` learns whether it runs compiled, per batch size (that both
    branches find the same is tested through a `--xla_max_batch` export, test_export_xla)."""

    def search(inp, max_decoding_length, slots, compiled):
        rows = tf.shape(inp)[0]
        return {
            "tokens": tf.zeros([rows, slots], tf.int32),
            "scores": tf.fill([rows], 1.0 if compiled else 0.0),
            "alignment": tf.zeros([rows, slots, tf.shape(inp)[1]]),
            "length": tf.constant(1),
        }

    def compiled_rows(rows, **bound):
        inp = tf.ones([rows, 3], tf.int32)
        return run_loop(search, inp, 4, True, 16, **bound)["scores"].numpy().tolist()

    assert [compiled_rows(rows, xla_max_batch=2) for rows in (1, 2, 3)] == [
        [1.0],
        [1.0] * 2,
        [0.0] * 3,
    ]
    assert compiled_rows(3) == [1.0] * 3  # no bound: every batch
    assert run_loop(search, tf.ones([3, 3], tf.int32), 4, False, 16)["scores"].numpy().max() == 0
    with pytest.raises(ValueError, match="xla_max_batch"):
        compiled_rows(1, xla_max_batch=0)


@pytest.mark.parametrize(
    "decode, strategy",
    [(greedy_decode, GreedySearch()), (beam_search_decode, BeamSearch())],
    ids=["greedy", "beam"],
)
def test_eager_xla_decoding_is_traced_once_per_model(
    trained_reverse_model, sources, decode, strategy
):
    """Called eagerly, `jit_compile` reuses one traced function per model and strategy (no
    compile per call) and decodes as the plain graph does."""
    model, _ = trained_reverse_model
    source = tf.constant(sources[0], tf.int32)
    graph = in_graph(decode, model)(source)
    eager = [decode(model, source, START, END, jit_compile=True) for _ in range(2)]
    for result in eager:
        np.testing.assert_array_equal(result["tokens"], graph["tokens"])
        np.testing.assert_allclose(result["scores"], graph["scores"], rtol=1e-4, atol=1e-4)
    (traced,) = (
        function for (baked, _), function in _EAGER_XLA_DECODERS[model].items() if baked == strategy
    )
    assert traced.experimental_get_tracing_count() == 1


def test_eager_xla_greedy_does_not_keep_its_model_alive():
    model = Transformer(1, 16, 2, 32, 20, 20, 40, 40)
    greedy_decode(
        model, tf.constant([[5, 6, 7]]), START, END, max_decoding_length=3, jit_compile=True
    )
    assert model in _EAGER_XLA_DECODERS
    model_ref = weakref.ref(model)
    del model
    gc.collect()
    assert model_ref() is None


def test_trained_model_translates_exactly(trained_reverse_model, sources):
    """Real translations: decoding recovers the reversed sequence followed by [END]."""
    model, _ = trained_reverse_model
    source, labels = sources
    for decoded in (
        in_graph(greedy_decode, model)(source),
        in_graph(beam_search_decode, model, beam_width=4)(source),
    ):
        tokens = decoded["tokens"].numpy()
        width = max(tokens.shape[1], labels.shape[1])
        tokens = np.pad(tokens, ((0, 0), (0, width - tokens.shape[1])))
        expected = np.pad(labels, ((0, 0), (0, width - labels.shape[1])))
        exact = np.mean(np.all(tokens == expected, axis=1))
        assert exact >= 0.9, f"{exact:.2f} of sentences decoded exactly"


def test_beam_width_one_equals_greedy(trained_reverse_model, sources):
    model, _ = trained_reverse_model
    source, _ = sources
    greedy = in_graph(greedy_decode, model)(source)
    beam = in_graph(beam_search_decode, model, beam_width=1, alpha=0.0)(source)
    np.testing.assert_array_equal(beam["tokens"], greedy["tokens"])
    np.testing.assert_allclose(beam["scores"], greedy["scores"], atol=1e-4)


def test_beam_search_without_alignment_finds_the_same_hypotheses(untrained_model):
    """The served beam search skips the alignments; what it finds must not change."""
    source = np.random.default_rng(2).integers(4, 30, size=(5, 8))
    source[1, 5:] = 0
    with_alignment = in_graph(beam_search_decode, untrained_model, max_decoding_length=10)(source)
    without = in_graph(
        beam_search_decode, untrained_model, max_decoding_length=10, with_alignment=False
    )(source)
    np.testing.assert_array_equal(without["tokens"], with_alignment["tokens"])
    np.testing.assert_array_equal(without["scores"], with_alignment["scores"])
    assert with_alignment["alignment"].shape[2] == 8 and without["alignment"].shape[2] == 0


def _count_ops(concrete_function, op_type):
    """How many `op_type` nodes a traced function holds, its loop bodies' included."""
    graph_def = concrete_function.graph.as_graph_def()
    nodes = list(graph_def.node)
    for function in graph_def.library.function:
        nodes.extend(function.node_def)
    return sum(node.op == op_type for node in nodes)


@pytest.mark.parametrize("jit_compile", [False, True], ids=["graph", "xla"])
def test_greedy_without_alignment_computes_none_and_finds_the_same(untrained_model, jit_compile):
    """The served greedy signature discards the alignments: they must not be computed (no
    average of the cross-attention over heads in the loop), and what it finds must not change."""
    source = tf.constant(np.random.default_rng(4).integers(4, 30, size=(3, 7)), tf.int32)
    traced = {
        with_alignment: tf.function(
            functools.partial(
                greedy_decode,
                untrained_model,
                start_id=START,
                end_id=END,
                max_decoding_length=9,
                jit_compile=jit_compile,
                with_alignment=with_alignment,
            )
        ).get_concrete_function(source)
        for with_alignment in (True, False)
    }
    with_alignment, without = traced[True](source), traced[False](source)
    np.testing.assert_array_equal(without["tokens"], with_alignment["tokens"])
    np.testing.assert_allclose(without["scores"], with_alignment["scores"], rtol=1e-6)
    assert with_alignment["alignment"].shape[2] == 7 and without["alignment"].shape[2] == 0
    # The layer norms average too; the alignment is the one more.
    assert _count_ops(traced[False], "Mean") == _count_ops(traced[True], "Mean") - 1


@pytest.fixture(scope="module")
def half_trained_model():
    """The reverse task after 60 training steps: every output ends with [END], but the model is
    unsure enough that beam search and greedy decoding often disagree (an untrained model never
    ends a sentence; a fully trained one is certain)."""
    from tests.reverse_task import train_reverse_model

    keras.utils.set_random_seed(0)
    return train_reverse_model(steps=60)[0]


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_beam_never_scores_below_greedy(half_trained_model, alpha):
    """Under beam search's own score (log P / length penalty), checked by teacher forcing, on
    outputs that end with [END] at several lengths."""
    source, _, _ = reverse_task(np.random.default_rng(1), 30)
    # Sources of at most 6 tokens leave room to end below the positional encodings' cap.
    source = source[np.sum(source != 0, axis=1) <= 6][:, :6]
    model = half_trained_model
    greedy = in_graph(greedy_decode, model)(source)
    beam = in_graph(beam_search_decode, model, beam_width=4, alpha=alpha)(source)
    width = max(greedy["tokens"].shape[1], beam["tokens"].shape[1])
    greedy_tokens, beam_tokens = (
        np.pad(tokens.numpy(), ((0, 0), (0, width - tokens.shape[1])))
        for tokens in (greedy["tokens"], beam["tokens"])
    )
    for tokens in (greedy_tokens, beam_tokens):
        assert np.all(np.any(tokens == END, axis=1)), "an output did not end"
        assert len(set(decode_lengths(tokens))) > 2, "outputs of too few lengths"
    assert np.any(beam_tokens != greedy_tokens), "beam search found only greedy's outputs"

    def own_score(tokens):
        log_prob = sequence_log_prob(model, source, tokens, START)
        return log_prob / length_penalty(decode_lengths(tokens.numpy()), alpha)

    np.testing.assert_allclose(beam["scores"], own_score(beam["tokens"]), atol=1e-3)
    assert np.all(beam["scores"].numpy() >= own_score(greedy["tokens"]).numpy() - 1e-4)


@pytest.mark.parametrize("decode", [greedy_decode, beam_search_decode], ids=["greedy", "beam"])
def test_batch_equals_one_by_one(trained_reverse_model, sources, decode):
    model, _ = trained_reverse_model
    source, _ = sources
    source = source[:6]
    decode = in_graph(decode, model)
    batched = decode(source)
    for row in range(len(source)):
        single = decode(source[row : row + 1])
        length = single["tokens"].shape[1]
        np.testing.assert_array_equal(batched["tokens"][row, :length], single["tokens"][0])
        assert np.all(batched["tokens"].numpy()[row, length:] == 0)
        np.testing.assert_allclose(batched["scores"][row], single["scores"][0], atol=1e-4)
        np.testing.assert_allclose(
            batched["alignment"][row, :length], single["alignment"][0], atol=1e-5
        )


class DecoderRowCounter:
    """A model that counts the rows its decoder steps: `Transformer.decode` calls by batch size."""

    def __init__(self, model):
        self.model = model
        self.rows = tf.Variable(0)

    def __getattr__(self, name):
        return getattr(self.model, name)

    def decode(self, tar, *args, **kwargs):
        outputs = self.model.decode(tar, *args, **kwargs)
        with tf.control_dependencies([self.rows.assign_add(tf.shape(tar)[0])]):
            return tf.nest.map_structure(tf.identity, outputs)


@pytest.mark.parametrize("decode", [greedy_decode, beam_search_decode], ids=["greedy", "beam"])
def test_each_sentence_of_a_batch_steps_only_as_long_as_alone(
    trained_reverse_model, sources, decode
):
    """A sentence leaves the batch's loop once its decoding is over: the decoder steps as many
    rows for the batch as for its sentences one by one, not the longest one's steps each."""
    model, _ = trained_reverse_model
    source, _ = sources
    counter = DecoderRowCounter(model)
    translate = tf.function(
        lambda inp: decode(counter, inp, START, END)["tokens"], reduce_retracing=True
    )

    def decoder_rows(inp):
        counter.rows.assign(0)
        tokens = translate(tf.constant(inp)).numpy()
        return int(counter.rows.numpy()), tokens.shape[1]

    batch_rows, batch_steps = decoder_rows(source)
    one_by_one = [decoder_rows(source[row : row + 1])[0] for row in range(len(source))]
    assert batch_rows == sum(one_by_one)
    rows_per_step = max(one_by_one) // batch_steps  # 1, or the beam width
    assert batch_rows < len(source) * batch_steps * rows_per_step, "no sentence ended early"


def test_finished_rows_leave_the_decoding_batch():
    alive = {
        "rows": tf.constant([0, 2, 3]),
        "cache": {"key": tf.reshape(tf.range(3 * 2 * 4, dtype=tf.float32), [3, 2, 4, 1])},
    }
    kept = _drop_finished_rows(alive, tf.constant([False, True, False]))
    np.testing.assert_array_equal(kept["rows"], [0, 3])
    np.testing.assert_array_equal(kept["cache"]["key"], alive["cache"]["key"].numpy()[[0, 2]])

    unchanged = _drop_finished_rows(alive, tf.zeros([3], tf.bool))
    np.testing.assert_array_equal(unchanged["rows"], alive["rows"])


def test_alignment_is_a_distribution_over_real_source_tokens(trained_reverse_model, sources):
    """Alignment rows sum to 1 up to [END] and are 0 after it, ignore padding, and on this task
    point at the mirrored position."""
    model, _ = trained_reverse_model
    source, labels = sources
    decoded = in_graph(greedy_decode, model)(source)
    alignment = decoded["alignment"].numpy()
    assert alignment.shape == decoded["tokens"].shape + (source.shape[1],)
    is_output_token = decoded["tokens"].numpy() != 0
    assert not is_output_token.all(), "sources of one length: no row ends early to check"
    np.testing.assert_allclose(alignment.sum(-1), is_output_token.astype(float), atol=1e-5)
    assert np.all(alignment[np.broadcast_to(source[:, None, :] == 0, alignment.shape)] == 0)

    hits, total = 0, 0
    for row, length in enumerate(np.sum(source != 0, axis=1)):
        for i in range(length):
            hits += int(np.argmax(alignment[row, i]) == length - 1 - i)
            total += 1
    assert hits / total >= 0.6, f"{hits}/{total} output tokens aligned to their mirrored source"


def test_forced_length_and_padding_after_end():
    tokens = tf.constant([[5, 3, 7, 8], [5, 6, 7, 3], [3, 3, 1, 2]])
    np.testing.assert_array_equal(
        mask_after_end(tokens, 3), [[5, 3, 0, 0], [5, 6, 7, 3], [3, 0, 0, 0]]
    )
    inp = tf.constant([[4, 5, 6, 0], [4, 0, 0, 0]])
    assert int(max_decoding_length_for(inp, 1.5, 10)) == 15
    assert int(max_decoding_length_for(inp, 1.5, 10, limit=12)) == 12


def test_decoders_run_in_a_graph_with_dynamic_shapes(trained_reverse_model, sources):
    model, _ = trained_reverse_model
    source, _ = sources

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def translate(inp):
        return (
            greedy_decode(model, inp, START, END)["tokens"],
            beam_search_decode(model, inp, START, END, beam_width=3)["tokens"],
        )

    greedy_tokens, beam_tokens = translate(tf.constant(source[:5]))
    expected = in_graph(greedy_decode, model)(source[:5])["tokens"]
    np.testing.assert_array_equal(greedy_tokens, expected)
    expected_beam = in_graph(beam_search_decode, model, beam_width=3)(source[:5])["tokens"]
    np.testing.assert_array_equal(beam_tokens, expected_beam)
    translate(tf.constant(source[:2, :5]))  # a second shape reuses the same graph
    assert translate.experimental_get_tracing_count() == 1


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


def nth_hypotheses(found, n):
    """The n-th hypothesis of every sentence of an n-best search's outputs, as a 1-best dict."""
    return {name: found[name][:, n] for name in ("tokens", "scores", "alignment")}


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


@pytest.mark.parametrize("min_length", [0, 3])
@pytest.mark.parametrize("fixed_shape", [False, True], ids=["rows-leave", "fixed-shape"])
def test_greedy_search_follows_the_table(fixed_shape, min_length):
    sentences = 12
    table = FakeTable(np.random.default_rng(5), sentences)
    found = fake_search(
        greedy_search,
        table,
        sentences,
        max_decoding_length=8,
        min_length=min_length,
        fixed_shape=fixed_shape,
    )
    assert found["length"] <= FAKE_LONGEST
    assert_outputs_equal(
        found,
        table,
        [greedy_reference(table, sentence, min_length) for sentence in range(sentences)],
    )


def random_prefixes(rng, sentences, longest=FAKE_LONGEST - 1):
    """A word prefix of 0 to `longest` words per sentence: `(list of tuples, (sentences, P) ids
    padded with 0)`."""
    prefixes = [
        tuple(int(word) for word in rng.choice(FAKE_WORDS, size=rng.integers(0, longest + 1)))
        for _ in range(sentences)
    ]
    ids = np.zeros((sentences, longest), np.int32)
    for sentence, prefix in enumerate(prefixes):
        ids[sentence, : len(prefix)] = prefix
    return prefixes, ids


@pytest.mark.parametrize("min_length", [0, 3])
@pytest.mark.parametrize("fixed_shape", [False, True], ids=["rows-leave", "fixed-shape"])
def test_greedy_search_continues_each_rows_prefix(fixed_shape, min_length):
    """Rows of prefixes of 0 to 3 words in one batch: each output is its prefix, then greedy
    search over the table from there, scored after the prefix, with the alignment of every
    token (forced ones too); `min_length` counts the prefix."""
    sentences = 24
    table = FakeTable(np.random.default_rng(5), sentences)
    prefixes, ids = random_prefixes(np.random.default_rng(6), sentences)
    assert {len(prefix) for prefix in prefixes} == {0, 1, 2, 3}
    found = fake_search(
        greedy_search,
        table,
        sentences,
        max_decoding_length=8,
        min_length=min_length,
        fixed_shape=fixed_shape,
        prefix=ids,
    )
    expected = [
        greedy_reference(table, sentence, min_length, prefix)
        for sentence, prefix in enumerate(prefixes)
    ]
    assert_outputs_equal(found, table, expected)
    free = fake_search(
        greedy_search, table, sentences, max_decoding_length=8, min_length=min_length
    )
    assert any(
        tuple(found["tokens"][sentence]) != tuple(free["tokens"][sentence])
        for sentence, prefix in enumerate(prefixes)
        if prefix
    ), "every prefix is the greedy output's: the test tests little"


@pytest.mark.parametrize("search", [greedy_search, beam_search], ids=["greedy", "beam"])
def test_a_prefix_longer_than_max_decoding_length_is_cut_there_unscored(search):
    sentences = 4
    table = FakeTable(np.random.default_rng(5), sentences)
    ids = np.tile(np.int32([[3, 4, 5]]), [sentences, 1])
    found = fake_search(search, table, sentences, max_decoding_length=2, prefix=ids)
    np.testing.assert_array_equal(found["tokens"], ids[:, :2])
    np.testing.assert_array_equal(found["scores"], 0.0)


def exhaustive_prefix_ranking(table, sentence, alpha, prefix, min_length=0, bar_ends=True):
    """Every output that continues `prefix` (words), scored after it with the length penalty of
    the whole output, best first; with `bar_ends`, without `prefix + [END]` where [END] is not
    the most probable token after the prefix (CTranslate2 kills such candidates)."""
    outputs = []
    for length in range(max(min_length, 1, len(prefix) + 1), FAKE_LONGEST + 1):
        for words in itertools.product(FAKE_WORDS, repeat=length - 1 - len(prefix)):
            tokens = (*prefix, *words, FAKE_END)
            path = table.path_log_probs(sentence, tokens)
            log_prob = sum(path[i, tokens[i]] for i in range(len(prefix), length))
            outputs.append((tokens, gnmt_score(log_prob, length, alpha)))
    after_prefix = table.path_log_probs(sentence, (*prefix, FAKE_END))[-1][1:]
    if bar_ends and np.argmax(after_prefix) + 1 != FAKE_END:
        outputs = [output for output in outputs if output[0] != (*prefix, FAKE_END)]
    return sorted(outputs, key=lambda output: -output[1])


@pytest.mark.parametrize("fixed_shape", [False, True], ids=["rows-leave", "fixed-shape"])
@pytest.mark.parametrize("min_length", [0, 3])
@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_wide_beam_with_prefixes_equals_the_exhaustive_continuations(
    alpha, min_length, fixed_shape
):
    """Rows of prefixes of 0 to 2 words in one batch, `num_hypotheses` 3 of a beam as wide as
    every prefix: each sentence's 3 best continuations of its prefix, scored after it, and
    [END] right after the prefix only where it is the most probable token there."""
    sentences, count = 40, 3
    table = FakeTable(np.random.default_rng(11), sentences)
    prefixes, ids = random_prefixes(np.random.default_rng(12), sentences, longest=2)
    found = fake_search(
        beam_search,
        table,
        sentences,
        max_decoding_length=8,
        beam_width=32,
        alpha=alpha,
        min_length=min_length,
        num_hypotheses=count,
        prefix=ids,
        fixed_shape=fixed_shape,
    )
    rankings = [
        exhaustive_prefix_ranking(table, sentence, alpha, prefix, min_length)
        for sentence, prefix in enumerate(prefixes)
    ]
    for n in range(count):
        expected = [ranking[n] for ranking in rankings]
        assert_outputs_equal(nth_hypotheses(found, n), table, expected, lengths_vary=False)
    if min_length == 0:
        # The rule matters: some barred prefix + [END] would rank among the 3 best.
        unbarred = [
            exhaustive_prefix_ranking(table, sentence, alpha, prefix, bar_ends=False)
            for sentence, prefix in enumerate(prefixes)
        ]
        assert any(ranking[:count] != barred[:count] for ranking, barred in zip(unbarred, rankings))


@pytest.mark.parametrize("decode", [greedy_decode, beam_search_decode], ids=["greedy", "beam"])
def test_min_length_above_the_true_length_delays_end(trained_reverse_model, decode):
    """Sources of 4 tokens translate to 4 tokens + [END]; with min_length 7 no [END] comes
    before the 7th token, and one comes then or later."""
    model, _ = trained_reverse_model
    source, _, labels = reverse_task(np.random.default_rng(3), 40)
    source = source[np.sum(source != 0, axis=1) == 4][:, :4]
    assert len(source) >= 3
    free = in_graph(decode, model)(source)["tokens"].numpy()
    np.testing.assert_array_equal(np.argmax(free == END, axis=1), 4)
    forced = in_graph(decode, model, min_length=7)(source)["tokens"].numpy()
    assert not np.any(forced[:, :6] == END)
    assert np.all(np.any(forced[:, 6:] == END, axis=1))


def ctranslate2_banned_tokens(sequence, ngram_size):
    """CTranslate2's `NoRepeatNgram::apply` (src/decoding_utils.cc) written out for one row: the
    tokens that followed each earlier occurrence of the last `ngram_size - 1` tokens."""
    if len(sequence) < ngram_size:
        return set()
    context = sequence[len(sequence) - ngram_size + 1 :]
    return {
        sequence[start + ngram_size - 1]
        for start in range(len(sequence) - ngram_size + 1)
        if sequence[start : start + ngram_size - 1] == context
    }


@pytest.mark.parametrize("ngram_size", [1, 2, 3, 4])
def test_banned_ngrams_equal_ctranslate2s_rule_on_every_short_sequence(ngram_size):
    """Every sequence of up to 6 tokens over 3 words, read from a buffer wider than it (pad
    after it, as the searches' buffers are)."""
    vocab, width = 6, 9
    sequences = [
        list(words) for length in range(7) for words in itertools.product((3, 4, 5), repeat=length)
    ]
    generated = np.zeros((len(sequences), width), np.int32)
    for row, sequence in enumerate(sequences):
        generated[row, : len(sequence)] = sequence
    logits = tf.zeros([len(sequences), vocab])
    for length in range(7):
        rows = [row for row, sequence in enumerate(sequences) if len(sequence) == length]
        banned = ban_repeated_ngrams(
            tf.gather(logits, rows), generated[rows], tf.constant(length), ngram_size
        ).numpy()
        for row, row_logits in zip(rows, banned):
            expected = ctranslate2_banned_tokens(sequences[row], ngram_size)
            found = {token for token in range(1, vocab) if row_logits[token] <= NEG_INF / 2}
            assert found == expected, (sequences[row], ngram_size)


def test_repetition_penalty_is_ctranslate2s_rule():
    """Each token already generated, once whatever its count: positive logits divided by the
    penalty, negative ones multiplied (CTranslate2's `penalize_previous_tokens`); others kept."""
    logits = np.float32([[2.0, -1.0, 0.5, -3.0, 4.0, 0.0], [1.0, 1.0, -2.0, 2.0, -1.0, 3.0]])
    generated = np.int32([[4, 1, 4, 0], [3, 2, 0, 0]])
    penalized = penalize_repetitions(tf.constant(logits), tf.constant(generated), 2.0).numpy()
    expected = logits.copy()
    for row, tokens in enumerate(generated):
        for token in set(tokens[tokens != 0].tolist()):
            score = logits[row, token]
            expected[row, token] = score * 2.0 if score < 0 else score / 2.0
    np.testing.assert_array_equal(penalized[:, 1:], expected[:, 1:])  # pad: never an output


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_no_output_repeats_a_banned_ngram(half_trained_model, search):
    """Whatever the model prefers, no output of a search with `no_repeat_ngram_size` 2 holds a
    bigram twice."""
    source, _, _ = reverse_task(np.random.default_rng(4), 16)
    # Sources of one repeated token invite repeated outputs.
    source[:8] = np.where(source[:8] != 0, source[:8, :1], 0)
    options = {"beam_width": 3} if search == "beam" else {}
    decode = beam_search_decode if search == "beam" else greedy_decode
    plain = decode(half_trained_model, source, START, END, **options)["tokens"].numpy()
    controlled = decode(half_trained_model, source, START, END, no_repeat_ngram_size=2, **options)[
        "tokens"
    ].numpy()

    def repeats_a_bigram(row):
        tokens = [int(token) for token in row if token != 0]
        bigrams = list(zip(tokens, tokens[1:]))
        return len(bigrams) != len(set(bigrams))

    assert any(repeats_a_bigram(row) for row in plain), "no repetition to prevent"
    assert not any(repeats_a_bigram(row) for row in controlled)


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


# Placeholder limits (`model.decoding.copies`): the fake table's first word plays the
# placeholder piece, and each sentence's source holds it 0 or 1 times.
FAKE_PLACEHOLDER = FAKE_WORDS[0]


def placeholder_counts(sentences):
    return np.arange(sentences, dtype=np.int32) % 2


def placeholder_limits(sentences):
    return PlaceholderLimits(
        (FAKE_PLACEHOLDER,), tf.constant(placeholder_counts(sentences)[:, np.newaxis])
    )


def within_limit(tokens, limit):
    return list(tokens).count(FAKE_PLACEHOLDER) <= limit


@pytest.mark.parametrize("layout", LOOP_LAYOUTS)
@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_wide_beam_search_with_placeholder_limits_equals_the_exhaustive_search(layout, alpha):
    """The best output among those holding the placeholder at most as often as the sentence's
    source, with the table's score; and the limits change some outputs."""
    sentences = 12
    table = FakeTable(np.random.default_rng(23), sentences)
    options = {"beam_width": 32, "alpha": alpha, **LOOP_LAYOUTS[layout]}
    found = fake_search(
        beam_search, table, sentences, 8, placeholders=placeholder_limits(sentences), **options
    )
    limits = placeholder_counts(sentences)
    expected = [
        next(
            output
            for output in exhaustive_ranking(table, sentence, alpha)
            if within_limit(output[0], limits[sentence])
        )
        for sentence in range(sentences)
    ]
    assert_outputs_equal(found, table, expected)
    unlimited = [exhaustive_best(table, s, alpha)[0] for s in range(sentences)]
    assert sum(tokens != best[0] for tokens, best in zip(unlimited, expected)) >= 2, (
        "the table's best outputs are within the limits: the test tests nothing"
    )


def greedy_limited_reference(table, sentence, limit):
    """Greedy search under the placeholder limit, written out: `(tokens, summed
    log-probability)`."""
    tokens, log_prob = [], 0.0
    while not tokens or tokens[-1] != FAKE_END:
        log_probs = table.path_log_probs(sentence, tokens + [FAKE_END])[-1].copy()
        log_probs[0] = -np.inf
        if not within_limit(tokens + [FAKE_PLACEHOLDER], limit):
            log_probs[FAKE_PLACEHOLDER] = -np.inf
        tokens.append(int(np.argmax(log_probs)))
        log_prob += log_probs[tokens[-1]]
    return tokens, log_prob


@pytest.mark.parametrize("layout", LOOP_LAYOUTS)
def test_greedy_search_with_placeholder_limits_follows_the_reference(layout):
    sentences = 12
    table = FakeTable(np.random.default_rng(29), sentences)
    found = fake_search(
        greedy_search,
        table,
        sentences,
        8,
        placeholders=placeholder_limits(sentences),
        **LOOP_LAYOUTS[layout],
    )
    limits = placeholder_counts(sentences)
    expected = [greedy_limited_reference(table, s, limits[s]) for s in range(sentences)]
    assert_outputs_equal(found, table, expected)
    unlimited = [greedy_reference(table, s, 0)[0] for s in range(sentences)]
    assert sum(tokens != best[0] for tokens, best in zip(unlimited, expected)) >= 2, (
        "greedy search is within the limits already: the test tests nothing"
    )


def test_placeholder_limits_count_a_prefix_as_output():
    """A placeholder forced by a prefix counts: a source that holds it once gets it no more."""
    sentences = 12
    table = FakeTable(np.random.default_rng(31), sentences)
    prefix = tf.fill([sentences, 1], FAKE_PLACEHOLDER)
    limits = PlaceholderLimits((FAKE_PLACEHOLDER,), tf.ones([sentences, 1], tf.int32))

    def placeholders_written(**options):
        found = fake_search(greedy_search, table, sentences, 8, prefix=prefix, **options)
        return [list(row).count(FAKE_PLACEHOLDER) for row in found["tokens"]]

    assert placeholders_written(placeholders=limits) == [1] * sentences
    assert max(placeholders_written()) > 1, "no output repeats the prefix's placeholder"


def _variables_transposed_in_loops(graph_def):
    """Names of `Transpose` ops inside `graph_def`'s while-loop bodies whose input is a variable
    read (`ReadVariableOp`) of the same body."""
    found = []
    for function in graph_def.library.function:
        if "while_body" not in function.signature.name:
            continue
        reads = {node.name for node in function.node_def if node.op == "ReadVariableOp"}
        found += [
            f"{function.signature.name}/{node.name}"
            for node in function.node_def
            if node.op == "Transpose" and node.input[0].split(":")[0] in reads
        ]
    return found


@pytest.mark.parametrize("decode", [greedy_decode, beam_search_decode], ids=["greedy", "beam"])
def test_a_tied_output_projection_is_transposed_once_per_call_not_at_each_step(decode):
    """With tied embeddings the logits are `x·Eᵀ + b`: the decoders get Eᵀ once, before their
    loop (`Transformer.pre_softmax_linear`), where the tied layer transposes E at each call,
    and give the same logits (the loop's product by a stored Eᵀ is the faster one)."""
    model = Transformer(1, 16, 2, 32, 20, 20, 40, 40, tie_embeddings=True)
    source = tf.constant([[START, 5, 6, 7, END]], tf.int32)
    traced = tf.function(lambda ids: decode(model, ids, START, END, max_decoding_length=4))
    graph_def = traced.get_concrete_function(source).graph.as_graph_def()
    assert not _variables_transposed_in_loops(graph_def)
    # The test can fail: the output layer itself transposes E in the loop.
    plain_step = tf.function(
        lambda ids: tf.while_loop(
            lambda i, x: i < 2,
            lambda i, x: (i + 1, x + model.final_layer(x)[:, : model.d_model]),
            (0, tf.cast(ids[:, :1], tf.float32) + tf.zeros([1, model.d_model])),
        )
    )
    assert _variables_transposed_in_loops(
        plain_step.get_concrete_function(source).graph.as_graph_def()
    )
    enc_output, padding_mask = model.encode(source)
    cache = model.init_cache(enc_output, padding_mask, 4)
    tar = tf.constant([[START]], tf.int32)
    expected = model.decode(tar, cache, 0).logits
    given = model.decode(tar, cache, 0, pre_softmax_linear=model.pre_softmax_linear()).logits
    np.testing.assert_allclose(given, expected, rtol=1e-5, atol=1e-6)
