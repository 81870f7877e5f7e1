"""The training input pipeline: length bounds, bucket boundaries, token-budget batches."""

import numpy as np
import pytest
import tensorflow as tf

from model.special_tokens import END_ID, START_ID
from training.pipeline import (
    bound_lengths,
    bucket_boundaries,
    make_dataset,
    make_text_dataset,
    tokenize_pairs,
)

MAX_LENGTH, BATCH_TOKENS = 40, 256


def random_examples(count, seed, max_sequence_length=MAX_LENGTH):
    """`(source_ids, target_ids)`: `[START] ids [END]` of independent random lengths 3..max."""
    rng = np.random.default_rng(seed)

    def sequence():
        middle = rng.integers(4, 100, rng.integers(1, max_sequence_length - 1))
        return np.concatenate([[START_ID], middle, [END_ID]]).astype(np.int32)

    return [sequence() for _ in range(count)], [sequence() for _ in range(count)]


def unpadded(row):
    return tuple(int(token) for token in row if token != 0)


def batches(dataset):
    return [
        (source.numpy(), decoder_input.numpy(), labels.numpy())
        for (source, decoder_input), labels in dataset
    ]


def batch_examples(source, decoder_input, labels):
    """The `(source, target)` id tuples of a batch, checking that each row is its target shifted:
    decoder input = target[:-1], labels = target[1:] then padding. (A row shorter than the
    batch's longest keeps [END] in its decoder input, at a position whose label is padding,
    so the loss never sees it.)"""
    examples = []
    for source_row, input_row, label_row in zip(source, decoder_input, labels):
        target = (int(input_row[0]),) + unpadded(label_row)
        assert tuple(input_row[: len(target) - 1].tolist()) == target[:-1]
        assert not label_row[len(target) - 1 :].any()
        examples.append((unpadded(source_row), target))
    return examples


@pytest.mark.parametrize("max_sequence_length", [8, 9, 40, 256])
def test_bucket_boundaries_grow_geometrically_up_to_max_sequence_length(max_sequence_length):
    boundaries = bucket_boundaries(max_sequence_length)
    assert boundaries[-1] == max_sequence_length + 1
    assert all(later > earlier for earlier, later in zip(boundaries, boundaries[1:]))
    inner = boundaries[:-1]
    assert all(bound <= max_sequence_length for bound in inner)
    assert all(
        later <= max(earlier + 1, earlier * 1.25) for earlier, later in zip(inner, inner[1:])
    )


def test_bound_lengths_drops_or_truncates_long_pairs_keeping_end():
    source, target = random_examples(50, seed=0)
    limit = 12
    kept_source, kept_target, dropped = bound_lengths(source, target, limit, "drop")
    long_pairs = sum(max(len(s), len(t)) > limit for s, t in zip(source, target))
    assert dropped == long_pairs > 0
    assert len(kept_source) == len(kept_target) == 50 - long_pairs
    cut_source, cut_target, none_dropped = bound_lengths(source, target, limit, "truncate")
    assert none_dropped == 0
    for original, cut in zip(source + target, cut_source + cut_target):
        assert len(cut) == min(len(original), limit)
        assert cut[-1] == END_ID
        np.testing.assert_array_equal(cut[:-1], original[: len(cut) - 1])
    with pytest.raises(ValueError, match="long-example policy"):
        bound_lengths(source, target, limit, "wrap")


def test_batches_hold_every_example_once_shifted_and_within_the_token_budget():
    source, target = random_examples(300, seed=1)
    seen = []
    for source_batch, decoder_input, labels in batches(
        make_dataset(source, target, MAX_LENGTH, BATCH_TOKENS, shuffle=False, repeat=False)
    ):
        # The larger side counts: decoder input and labels are the target minus one token.
        assert len(source_batch) * max(source_batch.shape[1], labels.shape[1] + 1) <= BATCH_TOKENS
        assert decoder_input.shape == labels.shape
        seen += batch_examples(source_batch, decoder_input, labels)
    expected = [(tuple(s.tolist()), tuple(t.tolist())) for s, t in zip(source, target)]
    assert sorted(seen) == sorted(expected)


def test_pad_to_bucket_changes_only_the_padding():
    source, target = random_examples(300, seed=2)
    options = dict(
        max_sequence_length=MAX_LENGTH, batch_tokens=BATCH_TOKENS, shuffle=False, repeat=False
    )
    plain = batches(make_dataset(source, target, **options))
    padded = batches(make_dataset(source, target, pad_to_bucket=True, **options))
    assert len(plain) == len(padded)
    widths = {bound - 1 for bound in bucket_boundaries(MAX_LENGTH)}
    for plain_batch, padded_batch in zip(plain, padded):
        padded_source = padded_batch[0]
        assert padded_source.shape[1] in widths
        assert padded_source.shape[1] >= plain_batch[0].shape[1]
        assert batch_examples(*padded_batch) == batch_examples(*plain_batch)


def test_pad_to_bucket_gives_one_batch_shape_per_bucket():
    """What XLA compiles for: the shapes of a long shuffled stream of training batches."""
    source, target = random_examples(2_000, seed=3)

    def shapes(pad_to_bucket):
        dataset = make_dataset(
            source, target, MAX_LENGTH, BATCH_TOKENS, pad_to_bucket=pad_to_bucket
        ).take(300)
        return {(src.shape, dec.shape) for (src, dec), _ in dataset}

    buckets = len(bucket_boundaries(MAX_LENGTH))
    assert len(shapes(pad_to_bucket=True)) <= buckets < len(shapes(pad_to_bucket=False))


@pytest.fixture(scope="module")
def toy_tokenizer(tiny_corpus, tmp_path_factory):
    """A SentencePiece tokenizer learned from the toy corpus (tiny preset's 400 pieces)."""
    from training.corpus.tsv import read_tsv
    from training.vocabulary import build_tokenizers

    pairs = read_tsv(f"{tiny_corpus}/train.tsv")
    tokenizer, _ = build_tokenizers(pairs, 400, str(tmp_path_factory.mktemp("vocab")))
    return tokenizer, pairs


def text_batches(dataset, count):
    return [batch for batch in batches(dataset.take(count))]


def test_text_dataset_tokenizes_in_the_pipeline_as_tokenize_pairs_does(toy_tokenizer):
    """Without noise or sampling, every example is a pair's `tokenize_pairs` ids, shifted."""
    tokenizer, pairs = toy_tokenizer
    pairs = pairs[:100]
    expected = {
        (tuple(s.tolist()), tuple(t.tolist()))
        for s, t in zip(*tokenize_pairs(pairs, tokenizer, tokenizer, show_progress=False))
    }
    dataset = make_text_dataset(pairs, tokenizer.tokenize, tokenizer.tokenize, 40, 256)
    seen = [example for batch in text_batches(dataset, 30) for example in batch_examples(*batch)]
    assert len(seen) > 100 and set(seen) <= expected and len(set(seen)) > 90


def test_text_dataset_noises_sources_only_anew_each_epoch_and_reproducibly(toy_tokenizer):
    """Half the sources uppercased: targets never; a pair seen several times is noised in some
    passes and not in others; the same seed gives the same stream."""
    tokenizer, pairs = toy_tokenizer
    pairs = pairs[:40]
    clean_sources, targets = tokenize_pairs(pairs, tokenizer, tokenizer, show_progress=False)
    upper_sources = tokenizer.tokenize(tf.constant([s.upper() for s, _ in pairs])).numpy()
    by_target = {}
    for clean, upper, target in zip(clean_sources, upper_sources, targets):
        by_target[tuple(target.tolist())] = (tuple(clean.tolist()), tuple(upper.tolist()))

    def noised(seed):
        dataset = make_text_dataset(
            pairs,
            tokenizer.tokenize,
            tokenizer.tokenize,
            40,
            256,
            seed=seed,
            source_noise=0.5,
            noise_kinds=("uppercase",),
            chunk_size=16,
        )
        return [
            example for batch in text_batches(dataset, 40) for example in batch_examples(*batch)
        ]

    first = noised(seed=5)
    assert {target for _, target in first} <= set(by_target)
    seen = {}
    for source, target in first:
        clean, upper = by_target[target]
        assert source in (clean, upper)
        seen.setdefault(target, set()).add(source == upper)
    assert 0.3 < np.mean([source == by_target[t][1] for source, t in first]) < 0.7
    assert sum(len(noised_or_not) == 2 for noised_or_not in seen.values()) > 10
    assert noised(seed=5) == first


@pytest.mark.parametrize("rate", [1.0, 0.5])
def test_text_dataset_gives_names_fresh_values_on_both_sides(toy_tokenizer, rate):
    """Every pair ends with the name "Zorro" on both sides: each example carries one name on
    both sides, a fresh one in the share `rate` of them, anew each pass."""
    tokenizer, pairs = toy_tokenizer
    pairs = [(f"{source} Zorro", f"{target} Zorro") for source, target in pairs[:40]]
    dataset = make_text_dataset(
        pairs, tokenizer.tokenize, tokenizer.tokenize, 40, 256, copy_substitution=rate
    )
    names = []
    for source_ids, target_ids in (
        example for batch in text_batches(dataset, 40) for example in batch_examples(*batch)
    ):
        source_text, target_text = (
            tokenizer.detokenize(tf.constant([ids])).numpy()[0].decode()
            for ids in (source_ids, target_ids)
        )
        assert target_text.split()[-1] == source_text.split()[-1]
        names.append(source_text.split()[-1])
    fresh = np.mean([name != "Zorro" for name in names])
    assert fresh == 1.0 if rate == 1.0 else 0.35 < fresh < 0.65
    fresh_names = [name for name in names if name != "Zorro"]
    assert len(set(fresh_names)) > 0.9 * len(fresh_names)


def test_text_dataset_truncates_or_drops_pairs_long_after_tokenizing(toy_tokenizer):
    tokenizer, pairs = toy_tokenizer
    limit = 7
    options = dict(max_sequence_length=limit, batch_tokens=64)
    cut = make_text_dataset(
        pairs, tokenizer.tokenize, tokenizer.tokenize, **options, long_examples="truncate"
    )
    examples = [e for batch in text_batches(cut, 30) for e in batch_examples(*batch)]
    assert max(len(s) for s, _ in examples) == limit
    assert all(side[-1] == END_ID and len(side) <= limit for e in examples for side in e)
    dropped = make_text_dataset(pairs, tokenizer.tokenize, tokenizer.tokenize, **options)
    kept = [e for batch in text_batches(dropped, 30) for e in batch_examples(*batch)]
    whole = {
        (tuple(s.tolist()), tuple(t.tolist()))
        for s, t in zip(*tokenize_pairs(pairs, tokenizer, tokenizer, show_progress=False))
        if max(len(s), len(t)) <= limit
    }
    assert kept and set(kept) <= whole


def test_sampling_tokenize_varies_the_segmentation_but_never_the_text(toy_tokenizer):
    tokenizer, _ = toy_tokenizer
    sentence = tf.constant(["el perro grande come pan y bebe agua azul"])
    sample = tokenizer.sampling_tokenize(nbest_size=-1, alpha=0.1)
    draws = [sample(sentence) for _ in range(30)]
    segmentations = {tuple(ids.numpy()[0].tolist()) for ids in draws}
    assert len(segmentations) > 3
    for ids in draws:
        row = ids.numpy()[0]
        assert (row[0], row[-1]) == (START_ID, END_ID)
        assert tokenizer.detokenize(ids).numpy()[0] == sentence.numpy()[0]
    deterministic = tokenizer.sampling_tokenize(nbest_size=0, alpha=0.1)
    assert {tuple(deterministic(sentence).numpy()[0].tolist()) for _ in range(10)} == {
        tuple(tokenizer.tokenize(sentence).numpy()[0].tolist())
    }
