"""The tf.data input pipeline: tokenize once, bound lengths, bucket by length, batch by tokens.

Each example becomes `((source, decoder_input), labels)` with decoder_input = target[:-1]
([START] ...) and labels = target[1:] (... [END]), the target shifted by one.

Batches group sequences of similar length and hold about `batch_tokens` tokens each, so short
sentences get large batches and little compute goes to padding (the classic tutorial pads
random batches of a fixed size: measure both with `make bench-train`).
"""

import logging

import numpy as np
import tensorflow as tf
from tqdm import tqdm

from model.special_tokens import END_ID

logger = logging.getLogger(__name__)

LONG_EXAMPLE_POLICIES = ("drop", "truncate")


def tokenize_pairs(pairs, source_tokenizer, target_tokenizer, chunk_size=4096, show_progress=True):
    """Tokenizes `(source, target)` string pairs in chunks.

    Returns:
        `(source_ids, target_ids)`: lists of int32 numpy arrays, each `[START] ... [END]`.
    """
    source_ids, target_ids = [], []
    chunks = range(0, len(pairs), chunk_size)
    for start in tqdm(chunks, desc="tokenizing", unit="chunk", disable=not show_progress):
        chunk = pairs[start : start + chunk_size]
        for tokenizer, texts, out in (
            (source_tokenizer, [source for source, _ in chunk], source_ids),
            (target_tokenizer, [target for _, target in chunk], target_ids),
        ):
            ragged = tokenizer.tokenize(tf.constant(texts))
            out.extend(row.astype(np.int32) for row in ragged.numpy())
    return source_ids, target_ids


def truncate(ids, max_length):
    """Cuts an id sequence to `max_length` tokens, keeping [END] last."""
    if len(ids) <= max_length:
        return ids
    return np.append(ids[: max_length - 1], END_ID).astype(np.int32)


def bound_lengths(source_ids, target_ids, max_length, policy="drop"):
    """Keeps sequences within `max_length` tokens (the model's positional encodings).

    Args:
        policy: "drop" removes pairs with a side longer than `max_length`; "truncate" cuts them to
            `max_length` tokens ending in [END].

    Returns:
        `(source_ids, target_ids, dropped_count)`.
    """
    if policy not in LONG_EXAMPLE_POLICIES:
        raise ValueError(
            f"long-example policy must be one of {LONG_EXAMPLE_POLICIES}, got {policy!r}"
        )
    kept_source, kept_target, dropped = [], [], 0
    for source, target in zip(source_ids, target_ids):
        if max(len(source), len(target)) > max_length:
            if policy == "drop":
                dropped += 1
                continue
            source, target = truncate(source, max_length), truncate(target, max_length)
        kept_source.append(source)
        kept_target.append(target)
    return kept_source, kept_target, dropped


def bucket_boundaries(max_length, smallest=8, growth=1.25):
    """Upper length bounds of the buckets: geometric steps from `smallest` to `max_length + 1`."""
    boundaries, bound = [], smallest
    while bound <= max_length:
        boundaries.append(bound)
        bound = max(bound + 1, int(bound * growth))
    return boundaries + [max_length + 1]


def _example_indices(source_ids, target_ids):
    """A dataset of example indices, and a map from an index to its `(source, target)` ids.

    Shuffling indices rather than sequences keeps the shuffle buffer, and so every iterator
    checkpoint, a few bytes per example.
    """
    sides = []
    for ids in (source_ids, target_ids):
        lengths = np.array([len(row) for row in ids], np.int64)
        splits = tf.constant(np.concatenate([[0], np.cumsum(lengths)]))
        flat = tf.constant(np.concatenate(ids).astype(np.int32))
        sides.append((flat, splits))

    def lookup(index):
        return tuple(flat[splits[index] : splits[index + 1]] for flat, splits in sides)

    return tf.data.Dataset.range(len(source_ids)), lookup


def _shift_target(source, target):
    return (source, target[:, :-1]), target[:, 1:]


def make_dataset(
    source_ids,
    target_ids,
    max_length,
    batch_tokens,
    shuffle=True,
    seed=0,
    shuffle_buffer=20_000,
    repeat=True,
    pad_to_bucket=False,
):
    """Length-bucketed batches of about `batch_tokens` tokens (the larger side counts).

    Args:
        source_ids, target_ids: token id arrays from `tokenize_pairs` (already length-bounded).
        max_length: longest sequence, in tokens.
        batch_tokens: token budget per batch; a bucket of sequences up to length L gets
            batch_tokens // L sequences.
        shuffle, seed, shuffle_buffer: example order, deterministic for a seed.
        repeat: loop forever (training counts steps, not epochs).
        pad_to_bucket: pad each batch to its bucket's longest length (the bound minus one)
            rather than to its own longest sequence, so every batch of a bucket has one shape.
            For XLA (`--jit_compile`), which compiles the training step once per input shape:
            unpadded, each (source length, target length) pair of a bucket is a new shape and
            a new compilation. Costs the padding up to the bucket bound.

    Returns:
        `tf.data.Dataset` of `((source, decoder_input), labels)` int32 batches.
    """
    if not source_ids:
        raise ValueError("no examples to batch: the corpus is empty after length filtering")
    boundaries = bucket_boundaries(max_length)
    batch_sizes = [max(1, batch_tokens // bound) for bound in boundaries] + [1]
    if batch_tokens < max_length:
        raise ValueError(
            f"batch_tokens ({batch_tokens}) must be at least max_length ({max_length}) so the "
            "longest sequence fits in a batch"
        )
    dataset, lookup = _example_indices(source_ids, target_ids)
    if shuffle:
        dataset = dataset.shuffle(
            min(shuffle_buffer, len(source_ids)), seed=seed, reshuffle_each_iteration=True
        )
    if repeat:
        dataset = dataset.repeat()
    dataset = dataset.map(lookup, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    dataset = dataset.bucket_by_sequence_length(
        element_length_func=lambda source, target: tf.maximum(
            tf.shape(source)[0], tf.shape(target)[0]
        ),
        bucket_boundaries=boundaries,
        bucket_batch_sizes=batch_sizes,
        pad_to_bucket_boundary=pad_to_bucket,
        drop_remainder=False,
    )
    return dataset.map(_shift_target, num_parallel_calls=tf.data.AUTOTUNE).prefetch(
        tf.data.AUTOTUNE
    )
