"""Decoding a Transformer: cached greedy vs the naive decoder, beam search properties, batching,
alignments, graphs with dynamic shapes."""

import functools

import numpy as np
import pytest
import tensorflow as tf

from model import Transformer
from model.decoding import (
    beam_search_decode,
    greedy_decode,
    length_penalty,
    mask_after_end,
    max_decoding_length_for,
    naive_greedy_decode,
    sequence_log_prob,
)
from tests.model.decoding.decoding_helpers import (
    decode_lengths,
    in_graph,
)
from tests.reverse_task import END, START, reverse_task


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
