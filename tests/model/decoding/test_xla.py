"""model/decoding/xla.py: decoding compiled by XLA (padded shapes, buckets, programs) equals the
graph decoding."""

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
    beam_search_decode,
    greedy_decode,
)
from model.decoding.xla import (
    _EAGER_XLA_DECODERS,
    pad_to_xla_buckets,
    run_loop,
    xla_buckets,
    xla_slots,
)
from tests.model.decoding.decoding_helpers import (
    decode_lengths,
    in_graph,
)
from tests.reverse_task import END, START


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


@pytest.mark.large
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


@pytest.mark.large
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
