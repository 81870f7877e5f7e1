"""Decoding loops under XLA: buffers and inputs rounded up to a few bucket shapes, so that a
server compiles a handful of programs rather than one per request shape."""

import weakref

import tensorflow as tf

from model.masks import PAD_ID

# With XLA, loop buffers are sized in multiples of this many positions (see `run_loop`).
SLOT_GRANULARITY = 16


def run_loop(search, inp, max_decoding_length, jit_compile, max_source_length, xla_max_batch=None):
    """Runs `search(inp, max_decoding_length, slots, compiled)`, whose buffers hold `slots`
    output positions, compiled by XLA or not as `compiled` (a Python bool) says.

    `search` returns a dict: `tokens` `(batch, ..., slots)`, `scores` `(batch, ...)`,
    `alignment` `(batch, ..., slots, width)` (the `...` one axis of hypotheses, or none) and
    `length`, an int32 scalar; `run_loop` returns the same of `inp`'s rows and columns.

    Every buffer of the loop (key/value caches, tokens, alignments) has a fixed size, so that each
    step has the same shapes. In a plain graph that size is `max_decoding_length` itself. XLA
    compiles one program per set of static sizes, so with `jit_compile` the loop runs as one XLA
    function on sizes rounded up to a few buckets: `slots` is `xla_slots(max_decoding_length)`
    (XLA reads such size arguments at run time and compiles per value), and `inp` is padded as
    `pad_to_xla_buckets` says; the padding is cut off the outputs again, so they equal the plain
    graph's. `max_decoding_length` itself only bounds the loop: it is no part of the program.
    `xla_buckets` lists the programs a range of batch sizes and source lengths compiles.

    With `xla_max_batch` (an int), only batches of at most that many rows run under XLA, and
    larger ones in the plain graph (`tf.cond` on the batch size): XLA's loop wins where a step's
    ops are small and its dispatch costs dominate (a few sentences), the plain graph's oneDNN
    matrix products where they are large (BENCHMARKS.md, "Decoding"). Both branches give the
    same outputs.
    """
    if not jit_compile:
        return search(inp, max_decoding_length, max_decoding_length, False)

    def compiled():
        slots = xla_slots(max_decoding_length)
        batch_size, width = tf.shape(inp)[0], tf.shape(inp)[1]
        padded = pad_to_xla_buckets(inp, max_source_length)
        outputs = tf.function(
            lambda *arguments: search(*arguments, True), jit_compile=True, autograph=False
        )(padded, max_decoding_length, slots)
        return {
            "tokens": outputs["tokens"][:batch_size],
            "scores": outputs["scores"][:batch_size],
            "alignment": outputs["alignment"][:batch_size, ..., :width],
            "length": outputs["length"],
        }

    if xla_max_batch is None:
        return compiled()
    if not isinstance(xla_max_batch, int) or xla_max_batch < 1:
        raise ValueError(f"xla_max_batch must be an int >= 1 or None, got {xla_max_batch!r}.")
    return tf.cond(
        tf.shape(inp)[0] <= xla_max_batch,
        compiled,
        lambda: search(inp, max_decoding_length, max_decoding_length, False),
    )


def _round_up(value, multiple):
    return (value + multiple - 1) // multiple * multiple


def xla_batch_size(batch_size):
    """The rows XLA decodes a batch of `batch_size` (int or int32 scalar, at least 1) in: the next
    power of two (int32 scalar)."""
    powers_of_two = tf.bitwise.left_shift(1, tf.range(31))
    return tf.reduce_min(tf.boolean_mask(powers_of_two, powers_of_two >= batch_size))


def xla_source_width(width, max_source_length):
    """The columns XLA decodes sources `width` tokens wide in (ints or int32 scalars; int32
    scalar): `width` rounded up to a multiple of `SLOT_GRANULARITY`, at most `max_source_length`
    (the model's positional encodings), and never less than `width`."""
    return tf.maximum(tf.minimum(_round_up(width, SLOT_GRANULARITY), max_source_length), width)


def xla_slots(max_decoding_length):
    """The output positions of XLA's loop buffers for `max_decoding_length` (int or int32
    scalar): rounded up to a multiple of `SLOT_GRANULARITY` (int32 scalar)."""
    return tf.convert_to_tensor(_round_up(max_decoding_length, SLOT_GRANULARITY), tf.int32)


def pad_to_xla_buckets(inp, max_source_length):
    """`inp` `(batch, width)` padded for XLA to one of a few shapes, so that a server compiles
    a handful of programs rather than one per request shape.

    Columns: padding (masked out everywhere) up to `xla_source_width`. Rows: copies of the first
    row up to `xla_batch_size`; copies of a real sentence end when it ends, where rows of padding
    might never produce [END] and keep the fixed-shape loop running to `max_decoding_length`.
    """
    batch_size, width = tf.shape(inp)[0], tf.shape(inp)[1]
    padded_width = xla_source_width(width, max_source_length)
    rows = tf.range(xla_batch_size(batch_size))
    inp = tf.gather(inp, tf.where(rows < batch_size, rows, 0))
    return tf.pad(inp, [[0, 0], [0, padded_width - width]], constant_values=PAD_ID)


def xla_buckets(max_batch, source_lengths, max_source_length, max_decoding_length):
    """The programs `run_loop` compiles for batches of 1 to `max_batch` sources whose longest is
    one of `source_lengths` tokens long, each with the smallest batch and source length that
    compile it (the cheapest request that does).

    A program is one shape of XLA's inputs: `(xla_batch_size, xla_source_width, xla_slots)`.
    The batch alone sets the first; the longest source alone sets the others, as it sets both the
    width of the source ids and the `max_decoding_length` of the batch.

    Args:
        max_batch: int, at least 1.
        source_lengths: iterable of ints, tokens of the longest source ([START] and [END]
            included, at most `max_source_length`).
        max_source_length: int, the model's positional encodings (`pe_input`).
        max_decoding_length: `source_length -> ` the `max_decoding_length` (int or int32 scalar)
            the decoder is given for a batch whose longest source is that long.

    Returns:
        dict `{(batch, width, slots): (batch_size, source_length)}` of ints.
    """
    if max_batch < 1:
        raise ValueError(f"max_batch must be at least 1, got {max_batch!r}.")
    batches = {}
    for batch_size in range(1, max_batch + 1):
        batches.setdefault(int(xla_batch_size(batch_size)), batch_size)
    lengths = {}
    for length in sorted(source_lengths):
        shape = (
            int(xla_source_width(length, max_source_length)),
            int(xla_slots(max_decoding_length(length))),
        )
        lengths.setdefault(shape, length)
    return {
        (batch, width, slots): (batch_size, length)
        for batch, batch_size in batches.items()
        for (width, slots), length in lengths.items()
    }


# model -> {key: its traced XLA decoder}. Weak keys: a model that is gone takes its entries along.
_EAGER_XLA_DECODERS = weakref.WeakKeyDictionary()


def eager_xla_decoder(model, key, decode):
    """`decode(model, *arguments)`, which decodes with XLA (`jit_compile`), as one `tf.function`
    per model and `key` (hashable: the settings `decode` bakes into the trace); call it with
    the remaining arguments.

    Eagerly, `run_loop` would wrap a fresh closure in a fresh XLA function at each call and
    compile it again (seconds). Traced once, the inner XLA function persists, and XLA's cache
    compiles only shapes it has not seen. The function reaches the model through a weak
    reference, or the cache entry would keep its own key alive; `decode` must not hold it.
    """
    decoders = _EAGER_XLA_DECODERS.setdefault(model, {})
    if key not in decoders:
        model_ref = weakref.ref(model)
        decoders[key] = tf.function(
            lambda *arguments: decode(model_ref(), *arguments), reduce_retracing=True
        )
    return decoders[key]
