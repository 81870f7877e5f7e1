"""Tests of model/translator.py's cut of a source to the words the model can read, on the
bundled model (`pretrained/`): what the model reads of a long row is unchanged, and a long row
costs what its cut does."""

import os
import time

import numpy as np
import pytest
import tensorflow as tf

from benchmarks.bench_long_rows import CUT, LONG, LONG_ROWS, batches
from model.special_tokens import PAD_ID
from model.translator import READ_WORDS_PER_TOKEN, DecodingOptions, Translator, cut_to_words
from run_directory import artifacts
from tests.paths import REPO_ROOT

PRETRAINED = os.path.join(REPO_ROOT, artifacts.PRETRAINED_RUN)


def _strings(tensor) -> list[str]:
    return [value.decode("utf-8") for value in tensor.numpy().tolist()]


def test_a_row_is_cut_after_its_words_and_tokens_and_kept_whole_within_them():
    rows = tf.constant(
        [
            "uno, dos  tres",
            "uno dos tres cuatro",
            "¿Dónde  está... él?",
            "- - - uno",
            "",
            "a b c, d",
        ]
    )
    assert _strings(cut_to_words(rows, 3)) == [
        "uno, dos  tres",
        "uno dos tres ",  # The whitespace after the last token kept is kept.
        "¿Dónde  está... él?",  # Three words and three tokens: whole.
        "- - - ",  # Three tokens, none a word: each is a piece of its own.
        "",
        "a b c, ",
    ]
    assert _strings(cut_to_words(tf.constant(["a" * 100 + ",b", "a,b,c,d"]), 3)) == [
        "a" * 100 + ",b",
        "a,b,c",
    ]


@pytest.fixture(scope="module")
def bundle():
    """The bundled run's model and tokenizers, its decoding cut to one output token: what a
    source costs before the decoder is then most of a call's cost."""
    from run_directory.artifacts import load_trained

    model, source_tokenizer, target_tokenizer, _ = load_trained(PRETRAINED)
    options = DecodingOptions(max_length_ratio=0, max_length_offset=1)
    return Translator(model, source_tokenizer, target_tokenizer, options)


def test_the_model_reads_the_same_pieces_of_a_long_row_cut_or_whole(bundle):
    """The cut keeps every piece the model reads: the source ids of each long row, renamed and
    protected whole (as before the cut), are those of the row cut, and the signatures' path
    reads as many."""
    source_tokenizer = bundle.source_tokenizer

    def read_ids(text):
        text = source_tokenizer.restoration.rename(text)
        return bundle.source_ids(source_tokenizer.placeholders.protect(text)[0]).numpy()

    rows = tf.constant(list(LONG_ROWS))
    cut = cut_to_words(rows, READ_WORDS_PER_TOKEN * bundle.model.pe_input)
    # Each row but the one word ("a" * 16382) is cut.
    assert [len(row) < len(whole) for row, whole in zip(_strings(cut), LONG_ROWS)] == [
        "a" * 16382 != whole for whole in LONG_ROWS
    ]
    whole = read_ids(rows)
    np.testing.assert_array_equal(read_ids(cut), whole)
    # The signatures' own path (`source_lengths`, cut first) reads as many tokens as before.
    np.testing.assert_array_equal(
        bundle.source_lengths(rows).numpy(), np.sum(whole != PAD_ID, axis=1)
    )


@pytest.mark.large
def test_a_long_row_costs_what_the_model_reads_of_it(bundle):
    """64 rows of 16 KiB cost the steps before the model's cut (renaming, placeholders,
    tokenization) ten times what the same rows cut to the words the model reads cost; cut
    first, they cost about the same (CPU time of the path from text to the ids the model reads,
    the least of three interleaved calls)."""
    read = tf.function(bundle.source_lengths, input_signature=[tf.TensorSpec([None], tf.string)])
    rows = batches(bundle)
    costs = {LONG: [], CUT: []}
    for _ in range(3):
        for name in costs:
            texts = rows[name]
            batch = tf.constant(texts)
            started = time.process_time()
            read(batch)
            costs[name].append(time.process_time() - started)
    long_cost, cut_cost = min(costs[LONG]), min(costs[CUT])
    assert long_cost < 3 * cut_cost + 0.2, (long_cost, cut_cost)
