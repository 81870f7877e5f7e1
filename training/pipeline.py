"""The tf.data input pipeline: tokenize, bound lengths, bucket by length, batch by tokens.

`make_dataset` batches pairs tokenized once up front (`tokenize_pairs`). `make_text_dataset`
tokenizes inside tf.data instead, so that each epoch sees each pair anew: its source noised
(`training.noise`) and its segmentation sampled (subword regularization); the training run uses
it only when one of those is on.

Each example becomes `((source, decoder_input), labels)` with decoder_input = target[:-1]
([START] ...) and labels = target[1:] (... [END]), the target shifted by one.

Batches group sequences of similar length and hold about `batch_tokens` tokens each, so short
sentences get large batches and little compute goes to padding (the classic tutorial pads
random batches of a fixed size: measure both with `make bench-train`).
"""

import logging
from functools import partial

import numpy as np
import tensorflow as tf
from tqdm import tqdm

from model.placeholders import CAPITALIZED, MARKERS, NOT_WORD, protect_target
from model.special_tokens import END_ID
from training.copying import fill_copy_slots, template_tensors
from training.noise import perturb_sources

logger = logging.getLogger(__name__)

LONG_EXAMPLE_POLICIES = ("drop", "truncate")


def tokenize_pairs(pairs, source_tokenizer, target_tokenizer, chunk_size=4096, show_progress=True):
    """Tokenizes `(source, target)` string pairs in chunks, protected as the source tokenizer's
    run protects them (`Tokenizer.placeholders`, `protect_pairs`).

    Returns:
        `(source_ids, target_ids)`: lists of int32 numpy arrays, each `[START] ... [END]`.
    """
    source_ids, target_ids = [], []
    chunks = range(0, len(pairs), chunk_size)
    for start in tqdm(chunks, desc="tokenizing", unit="chunk", disable=not show_progress):
        chunk = pairs[start : start + chunk_size]
        sources, targets = protect_pairs(
            source_tokenizer.placeholders,
            tf.constant([source for source, _ in chunk], tf.string),
            tf.constant([target for _, target in chunk], tf.string),
        )
        for tokenizer, texts, out in (
            (source_tokenizer, sources, source_ids),
            (target_tokenizer, targets, target_ids),
        ):
            ragged = tokenizer.tokenize(texts)
            out.extend(row.astype(np.int32) for row in ragged.numpy())
    return source_ids, target_ids


def protect_pairs(placeholders, sources, targets, seed=None, shared_names=0.0):
    """`(sources, targets)` (`[batch]` tf.string) with numbers and unknown names replaced by
    markers (`model.placeholders`), the same word by the same marker on both sides; as they are
    when `placeholders` is None.

    Args:
        seed: optional int `[2]`, for training: number each source's markers from a random
            first one (so that every marker is learned), and draw the `shared_names`; None
            numbers them from the first, as translation does.
        shared_names: for training, the share of the capitalized source words that the target
            writes the same ("David", "Gezer"), known or not, that become markers too, so that
            the model also sees sources with several markers.
    """
    if placeholders is None:
        return sources, targets
    first_slot = also = None
    if seed is not None:
        seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=2)
        first_slot = tf.random.stateless_uniform(
            tf.shape(sources), seed=seeds[0], maxval=len(MARKERS), dtype=tf.int32
        )
        if shared_names > 0:
            also = partial(_shared_names, targets, shared_names, seeds[1])
    sources, values = placeholders.protect(sources, first_slot, also)
    return sources, protect_target(targets, values)


def _shared_names(targets, share, seed, pieces):
    """A share `share` of the capitalized words of `pieces` (a source's words and separators)
    that its target also holds as a word: a ragged bool mask like `pieces`."""
    target_words = tf.strings.split(tf.strings.regex_replace(targets, NOT_WORD, " ")).to_tensor("")
    words = pieces.flat_values
    in_target = tf.reduce_any(
        tf.equal(words[:, None], tf.gather(target_words, pieces.value_rowids())), axis=1
    )
    capitalized = tf.strings.regex_full_match(words, CAPITALIZED)
    drawn = tf.random.stateless_uniform(tf.shape(words), seed=seed) < share
    return pieces.with_flat_values(in_target & capitalized & drawn)


def truncate(ids, max_sequence_length):
    """Cuts an id sequence to `max_sequence_length` tokens, keeping [END] last."""
    if len(ids) <= max_sequence_length:
        return ids
    return np.append(ids[: max_sequence_length - 1], END_ID).astype(np.int32)


def bound_lengths(source_ids, target_ids, max_sequence_length, policy="drop"):
    """Keeps sequences within `max_sequence_length` tokens (the model's positional encodings).

    Args:
        policy: "drop" removes pairs with a side longer than `max_sequence_length`; "truncate" cuts them to
            `max_sequence_length` tokens ending in [END].

    Returns:
        `(source_ids, target_ids, dropped_count)`.
    """
    kept = kept_indices(source_ids, target_ids, max_sequence_length, policy)
    return (
        [truncate(source_ids[index], max_sequence_length) for index in kept],
        [truncate(target_ids[index], max_sequence_length) for index in kept],
        len(source_ids) - len(kept),
    )


def kept_indices(source_ids, target_ids, max_sequence_length, policy="drop"):
    """The indices of the pairs `bound_lengths` keeps (every pair under "truncate")."""
    if policy not in LONG_EXAMPLE_POLICIES:
        raise ValueError(
            f"long-example policy must be one of {LONG_EXAMPLE_POLICIES}, got {policy!r}"
        )
    return [
        index
        for index, (source, target) in enumerate(zip(source_ids, target_ids))
        if policy == "truncate" or max(len(source), len(target)) <= max_sequence_length
    ]


def bucket_boundaries(max_sequence_length, smallest=8, growth=1.25):
    """Upper length bounds of the buckets: geometric steps from `smallest` to `max_sequence_length + 1`."""
    boundaries, bound = [], smallest
    while bound <= max_sequence_length:
        boundaries.append(bound)
        bound = max(bound + 1, int(bound * growth))
    return boundaries + [max_sequence_length + 1]


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


def example_stream(
    source_ids, target_ids, shuffle=True, seed=0, shuffle_buffer=20_000, repeat=True
):
    """The `(source, target)` id sequences of one corpus, one example each, unbatched.

    Args:
        source_ids, target_ids: token id arrays from `tokenize_pairs` (already length-bounded).
        shuffle, seed, shuffle_buffer: example order, deterministic for a seed.
        repeat: loop forever (training counts steps, not epochs).

    Raises:
        ValueError: no examples.
    """
    if not source_ids:
        raise ValueError("no examples to batch: the corpus is empty after length filtering")
    dataset, lookup = _example_indices(source_ids, target_ids)
    dataset = _ordered(dataset, len(source_ids), shuffle, seed, shuffle_buffer, repeat)
    return dataset.map(lookup, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def make_dataset(
    source_ids,
    target_ids,
    max_sequence_length,
    batch_tokens,
    shuffle=True,
    seed=0,
    shuffle_buffer=20_000,
    repeat=True,
    pad_to_bucket=False,
):
    """Length-bucketed batches of about `batch_tokens` tokens (the larger side counts) of
    `example_stream(source_ids, target_ids, shuffle, seed, shuffle_buffer, repeat)`
    (`batch_examples`).

    Returns:
        `tf.data.Dataset` of `((source, decoder_input), labels)` int32 batches.
    """
    _check_batch_tokens(max_sequence_length, batch_tokens)
    examples = example_stream(source_ids, target_ids, shuffle, seed, shuffle_buffer, repeat)
    return batch_examples(examples, max_sequence_length, batch_tokens, pad_to_bucket)


def mix_examples(streams, shares, seed=0):
    """One stream of examples drawn from `streams` (each endless, as `example_stream` or
    `text_example_stream` give them) with probabilities `shares`, OpenNMT-tf's weighted datasets
    (`tf.data.Dataset.sample_from_datasets`): each draw picks stream i with probability
    shares[i] / sum(shares), seeded by `seed` (reproducible, and checkpointed with the
    iterator). One stream is returned as it is.

    Raises:
        ValueError: no stream, a share that is not positive, or as many shares as streams.
    """
    if not streams or len(streams) != len(shares):
        raise ValueError(f"{len(streams)} streams and {len(shares)} shares: one share a stream")
    if any(not share > 0 for share in shares):
        raise ValueError(f"every share must be positive, got {list(shares)}")
    if len(streams) == 1:
        return streams[0]
    total = float(sum(shares))
    return tf.data.Dataset.sample_from_datasets(
        streams, weights=[share / total for share in shares], seed=seed
    )


def _check_batch_tokens(max_sequence_length, batch_tokens):
    if batch_tokens < max_sequence_length:
        raise ValueError(
            f"batch_tokens ({batch_tokens}) must be at least max_sequence_length ({max_sequence_length}) so the "
            "longest sequence fits in a batch"
        )


def _ordered(dataset, size, shuffle, seed, shuffle_buffer, repeat):
    if shuffle:
        dataset = dataset.shuffle(
            min(shuffle_buffer, size), seed=seed, reshuffle_each_iteration=True
        )
    return dataset.repeat() if repeat else dataset


def batch_examples(dataset, max_sequence_length, batch_tokens, pad_to_bucket=False):
    """`(source, target)` id sequences → length-bucketed `((source, decoder_input), labels)`.

    Args:
        max_sequence_length: longest sequence, in tokens.
        batch_tokens: token budget per batch; a bucket of sequences up to length L gets
            batch_tokens // L sequences.
        pad_to_bucket: pad each batch to its bucket's longest length (the bound minus one)
            rather than to its own longest sequence, so every batch of a bucket has one shape.
            For XLA (`--jit_compile`), which compiles the training step once per input shape:
            unpadded, each (source length, target length) pair of a bucket is a new shape and
            a new compilation. Costs the padding up to the bucket bound.
    """
    boundaries = bucket_boundaries(max_sequence_length)
    batch_sizes = [max(1, batch_tokens // bound) for bound in boundaries] + [1]
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


def _bound_in_graph(max_sequence_length, policy):
    """`bound_lengths` for one tokenized pair inside tf.data: `(keep, cut)` functions."""

    def within(source, target):
        return tf.maximum(tf.size(source), tf.size(target)) <= max_sequence_length

    def cut(source, target):
        def one(ids):
            too_long = tf.size(ids) > max_sequence_length
            shortened = tf.concat(
                [ids[: max_sequence_length - 1], tf.constant([END_ID], ids.dtype)], 0
            )
            return tf.cond(too_long, lambda: shortened, lambda: ids)

        return one(source), one(target)

    if policy not in LONG_EXAMPLE_POLICIES:
        raise ValueError(
            f"long-example policy must be one of {LONG_EXAMPLE_POLICIES}, got {policy!r}"
        )
    return (None, cut) if policy == "truncate" else (within, None)


def make_text_dataset(
    pairs, source_tokenize, target_tokenize, max_sequence_length, batch_tokens, **options
):
    """`make_dataset`'s batches, tokenized inside tf.data: each pass over the data anew
    (`text_example_stream(pairs, source_tokenize, target_tokenize, max_sequence_length,
    **options)` batched by `batch_examples`, `options` may hold its `pad_to_bucket`).

    Returns:
        `tf.data.Dataset` of `((source, decoder_input), labels)` int32 batches.
    """
    _check_batch_tokens(max_sequence_length, batch_tokens)
    pad_to_bucket = options.pop("pad_to_bucket", False)
    examples = text_example_stream(
        pairs, source_tokenize, target_tokenize, max_sequence_length, **options
    )
    return batch_examples(examples, max_sequence_length, batch_tokens, pad_to_bucket)


def text_example_stream(
    pairs,
    source_tokenize,
    target_tokenize,
    max_sequence_length,
    long_examples="drop",
    seed=0,
    shuffle_buffer=20_000,
    source_noise=0.0,
    noise_kinds=(),
    copy_substitution=0.0,
    copy_figure_share=0.0,
    placeholders=None,
    placeholder_names=0.0,
    chunk_size=256,
):
    """One corpus's `(source, target)` id sequences, tokenized inside tf.data, unbatched: each
    pass over the data anew.

    Training only (it shuffles and repeats forever). Chunks of `chunk_size` pairs, in shuffled
    order, get their sources noised (`training.noise.perturb_sources`, seeded with `(seed,
    chunk position)`: reproducible, and a resumed iterator noises as an uninterrupted one), after
    a share of their copy slots got fresh names and numbers (`training.copying`), then
    both sides tokenized by `source_tokenize`/`target_tokenize` (`Tokenizer.tokenize`, or
    `Tokenizer.sampling_tokenize` for subword regularization). Pairs that come out longer than
    `max_sequence_length` are dropped or truncated per `long_examples`, as `bound_lengths` does.
    With `placeholders` (`model.placeholders.Placeholders`), the noised pairs' numbers and
    unknown names (the fresh ones, mostly) become markers before tokenizing (`protect_pairs`),
    and a share `placeholder_names` of the names written the same on both sides.

    Args:
        pairs: list of `(source, target)` str, non-empty. Give the pairs `bound_lengths` keeps
            (under "drop", a pair too long as written is too long when noised, mostly).
        source_tokenize, target_tokenize: `[batch]` tf.string → ragged `[START] ids [END]`.
        source_noise, noise_kinds: the share of sources noised, and by which perturbations.
        copy_substitution: the share of the pairs with a copy slot (a name or number on both
            sides) that get a fresh one (`training.copying.fill_copy_slots`), and the share of
            those name slots that get a figure (`copy_figure_share`).

    Returns:
        `tf.data.Dataset` of `(source, target)` int32 id sequences.
    """
    if not pairs:
        raise ValueError("no examples to batch: the corpus is empty after length filtering")
    sources = tf.constant([source for source, _ in pairs], tf.string)
    targets = tf.constant([target for _, target in pairs], tf.string)
    fill_slots = _copy_slot_filler(pairs, copy_substitution, copy_figure_share)
    keep, cut = _bound_in_graph(max_sequence_length, long_examples)

    def tokenize_chunk(position, indices):
        chunk_seed = tf.stack([tf.constant(seed, tf.int64), position])
        chunk_sources, chunk_targets = tf.gather(sources, indices), tf.gather(targets, indices)
        if fill_slots:
            chunk_sources, chunk_targets = fill_slots(
                chunk_sources, chunk_targets, indices, chunk_seed
            )
        chunk_sources, _ = perturb_sources(chunk_sources, source_noise, noise_kinds, chunk_seed)
        chunk_sources, chunk_targets = protect_pairs(
            placeholders,
            chunk_sources,
            chunk_targets,
            chunk_seed + tf.constant([0, 2 << 40], tf.int64),
            placeholder_names,
        )
        return (
            tf.cast(source_tokenize(chunk_sources), tf.int32),
            tf.cast(target_tokenize(chunk_targets), tf.int32),
        )

    dataset = _ordered(
        tf.data.Dataset.range(len(pairs)), len(pairs), True, seed, shuffle_buffer, True
    )
    dataset = dataset.batch(chunk_size).enumerate()
    dataset = dataset.map(tokenize_chunk, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    # Unbatched rows of a ragged chunk are rank-1 ragged values: plain tensors from here on.
    dataset = dataset.unbatch().map(lambda source, target: (_dense(source), _dense(target)))
    return _position_is_the_state(dataset.filter(keep) if keep else dataset.map(cut))


def _position_is_the_state(dataset):
    """`dataset` checkpointed by its position alone.

    The iterator is checkpointed (resume), and the tokenizers' ops read a resource, the
    SentencePiece model, which tf.data counts as state it cannot save. The model never changes
    and the noise draws are stateless (seeded by position), so the position alone is the state.
    """
    options = tf.data.Options()
    options.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    return dataset.with_options(options)


def _copy_slot_filler(pairs, copy_substitution, copy_figure_share):
    """None without `copy_substitution`; else `fill(sources, targets, indices, chunk_seed)`:
    the chunk of `pairs` at `indices` with a share of their copy slots given fresh names and
    numbers (`training.copying.fill_copy_slots`)."""
    if copy_substitution <= 0:
        return None
    source_templates, target_templates, slot_kinds = (
        tf.constant(column) for column in template_tensors(pairs)
    )

    def fill(sources, targets, indices, chunk_seed):
        return fill_copy_slots(
            sources,
            targets,
            tf.gather(source_templates, indices),
            tf.gather(target_templates, indices),
            tf.gather(slot_kinds, indices),
            copy_substitution,
            # A stream of draws apart from the noise's (which uses the chunk seed as is).
            chunk_seed + tf.constant([0, 1 << 40], tf.int64),
            copy_figure_share,
        )

    return fill


def _dense(ids):
    return ids.to_tensor() if isinstance(ids, tf.RaggedTensor) else ids
