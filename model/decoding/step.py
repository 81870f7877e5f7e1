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
"""

import tensorflow as tf

from model.decoding.common import max_decoding_length_for, trim
from model.decoding.copies import PlaceholderLimits
from model.decoding.xla import run_loop


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


def decode_transformer(
    search,
    model,
    inp,
    start_id,
    max_decoding_length,
    jit_compile,
    with_alignment,
    xla_max_batch=None,
    **options,
):
    """Runs `search` (`greedy_search`, `beam_search`) over a `Transformer`: encodes `inp`, starts
    its cache and every row at `start_id`, and decodes through `model.decoding.xla.run_loop`
    (on XLA's bucket shapes when `jit_compile`, for batches of at most `xla_max_batch` rows when
    given), trimmed to the longest output.

    Args:
        search: called as `search(step_fn, start_ids, end_id, cache, max_decoding_length,
            alignment_width=, fixed_shape=, compiled=, slots=, **options)`; `options` holds
            `end_id` and the search's own settings.
        max_decoding_length: output-token bound, or None for `max_decoding_length_for(inp)`
            capped by the model's positional encodings.
        with_alignment: False: no alignment computed, a zero-width one returned.
        options: besides `search`'s own, `placeholder_ids` (`greedy_decode`'s), given to
            `search` as the `placeholders` of the sources.

    Returns:
        `search`'s outputs, trimmed (`model.decoding.common.trim`).
    """
    if max_decoding_length is None:
        max_decoding_length = max_decoding_length_for(inp, limit=model.pe_target - 1)
    end_id = options.pop("end_id")
    placeholder_ids = options.pop("placeholder_ids", ())

    def run(inp, max_decoding_length, slots, compiled):
        cache = model.init_cache(*model.encode(inp, training=False), slots, compiled=compiled)
        start_ids = tf.fill([tf.shape(inp)[0]], tf.cast(start_id, tf.int32))
        placeholders = (
            PlaceholderLimits.of_sources(inp, placeholder_ids) if placeholder_ids else None
        )
        return search(
            transformer_step_fn(model, with_alignment, compiled=compiled),
            start_ids,
            end_id,
            cache,
            max_decoding_length,
            alignment_width=tf.shape(inp)[1] if with_alignment else 0,
            fixed_shape=compiled,
            compiled=compiled,
            slots=slots,
            placeholders=placeholders,
            **options,
        )

    return trim(run_loop(run, inp, max_decoding_length, jit_compile, model.pe_input, xla_max_batch))
