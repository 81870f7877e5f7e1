"""The step function of a `Transformer`: what the searches call to extend every row by one token.

The contract (the searches know nothing else of the model):

    step_fn(ids, step, state) -> (logits, alignment, state)
        ids: `(rows,)` int32, each row's last token; step: int32 scalar, that token's position.
        logits: `(rows, vocab)` float32, the next token's unnormalized log-probabilities.
        alignment: `(rows, alignment_width)` float32, recorded with the token chosen.
        state: a nest of tensors whose first dimension is the row: the searches drop, repeat and
            gather rows of it as a whole.

and, in beam search, `reorder_state(state, indices)`: the rows `indices` of `state`, each among
the rows of its own sentence (default: every tensor gathered; a `Transformer`'s is
`reorder_cache`).

`decode_transformer` runs a strategy (`model.decoding.strategy`) over a `Transformer`'s step
function, as one `SearchOptions` says.
"""

import dataclasses

import tensorflow as tf

from model.decoding.common import max_decoding_length_for, trim
from model.decoding.penalties import NextTokenRules
from model.decoding.xla import eager_xla_decoder, run_loop


def transformer_step_fn(model, with_alignment=True, compiled=False):
    """The step function of a `Transformer` whose state is its decoding cache (`init_cache`).

    Without alignment, it returns a `(rows, 0)` one, not computed, so a search carries no
    alignment at all. `compiled`: whether XLA compiles the search (`Transformer.decode`).
    Call it where the search runs, outside its loop: it gets the model's pre-softmax weights
    there, once (`Transformer.pre_softmax_linear`).
    """
    # Read once here, so that no step reads a variable (the bfloat16 decoding step rounds b).
    pre_softmax_linear = {
        name: tf.convert_to_tensor(value) for name, value in model.pre_softmax_linear().items()
    }

    def step_fn(ids, step, cache):
        output = model.decode(
            ids[:, tf.newaxis],
            cache,
            step,
            compiled=compiled,
            with_alignment=with_alignment,
            pre_softmax_linear=pre_softmax_linear,
        )
        return output.logits[:, 0], output.alignment[:, 0], output.cache

    return step_fn


@dataclasses.dataclass(frozen=True)
class SearchOptions:
    """How one search runs over a `Transformer`, besides its strategy.

    Attributes:
        rules: the `NextTokenRules` of each step's choice ([END], `min_length`, the repetition
            controls, the placeholder pieces), carried whole into the search.
        max_decoding_length: output-token bound (int or int32 scalar), or None for
            `max_decoding_length_for(inp)` capped by the model's positional encodings.
        prefix: None, or the tokens each output starts with (`DecodingStrategy.search`).
        with_alignment: False: no alignment computed, a zero-width one returned.
        jit_compile: compile the encoder and the whole search with XLA, on the bucket shapes of
            `model.decoding.xla.run_loop`. TF Serving runs a graph holding it only with
            `--xla_cpu_compilation_enabled` (`inference.export --jit_compile`). Called eagerly,
            it runs through one traced function per model, strategy and options
            (`eager_xla_decoder`), so only new shapes compile again.
        xla_max_batch: with `jit_compile`, None (every batch under XLA), or the largest batch
            that runs under XLA, larger ones in the plain graph (`run_loop`).

    Raises:
        ValueError: a prefix with `jit_compile` (XLA's padded batch would need padded prefixes).
    """

    rules: NextTokenRules
    max_decoding_length: object = None
    prefix: object = None
    with_alignment: bool = True
    jit_compile: bool = False
    xla_max_batch: int | None = None

    def __post_init__(self):
        if self.jit_compile and self.prefix is not None:
            raise ValueError("prefix is not supported with jit_compile: decode it without XLA.")

    def with_lengths(self, max_decoding_length, min_length):
        """These options with the output-length bounds `max_decoding_length` and
        `rules.min_length` replaced."""
        return dataclasses.replace(
            self,
            max_decoding_length=max_decoding_length,
            rules=dataclasses.replace(self.rules, min_length=min_length),
        )


def decode_transformer(strategy, model, inp, start_id, options):
    """Runs `strategy` (a `DecodingStrategy`) over a `Transformer`: encodes `inp` `(batch,
    inp_len)`, starts its cache and every row at `start_id`, and decodes through
    `model.decoding.xla.run_loop` as `options` (`SearchOptions`) say, trimmed to the longest
    output. The rules are bound to the sources (`NextTokenRules.for_sources`); beam search
    moves rows with the model's `reorder_cache`.

    Returns:
        the strategy's outputs, trimmed (`model.decoding.common.trim`): `tokens`
        `(batch, out_len)`, `scores` `(batch,)` and `alignment` `(batch, out_len, inp_len)`,
        with an axis of hypotheses after the batch's for a strategy that returns several.
    """
    if options.jit_compile and tf.executing_eagerly():
        return _eager_xla_decode(strategy, model, inp, start_id, options)
    max_decoding_length = options.max_decoding_length
    if max_decoding_length is None:
        max_decoding_length = max_decoding_length_for(inp, limit=model.pe_target - 1)

    def run(inp, max_decoding_length, slots, compiled):
        cache = model.init_cache(*model.encode(inp, training=False), slots, compiled=compiled)
        return strategy.search(
            transformer_step_fn(model, options.with_alignment, compiled=compiled),
            tf.fill([tf.shape(inp)[0]], tf.cast(start_id, tf.int32)),
            cache,
            max_decoding_length,
            options.rules.for_sources(inp),
            alignment_width=tf.shape(inp)[1] if options.with_alignment else 0,
            prefix=options.prefix,
            fixed_shape=compiled,
            compiled=compiled,
            slots=slots,
            reorder_state=model.reorder_cache,
        )

    return trim(
        run_loop(
            run,
            inp,
            max_decoding_length,
            options.jit_compile,
            model.pe_input,
            options.xla_max_batch,
        )
    )


def _eager_xla_decode(strategy, model, inp, start_id, options):
    """`decode_transformer` called eagerly with `jit_compile`: through the model's traced
    function for this strategy and these options (`eager_xla_decoder`), the length bounds
    given as arguments so that they do not trace it anew."""
    strategy, baked = strategy.baked(), options.with_lengths(None, 0)

    def decode(model, inp, start_id, max_decoding_length, min_length):
        return decode_transformer(
            strategy, model, inp, start_id, baked.with_lengths(max_decoding_length, min_length)
        )

    return eager_xla_decoder(model, (strategy, baked), decode)(
        inp, start_id, options.max_decoding_length, options.rules.min_length
    )
