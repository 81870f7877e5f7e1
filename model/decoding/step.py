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


def transformer_step_fn(model, with_alignment=True, compiled=False):
    """The step function of a `Transformer` whose state is its decoding cache (`init_cache`).

    Without alignment, it returns a `(rows, 0)` one, not computed, so a search carries no
    alignment at all. `compiled`: whether XLA compiles the search (`Transformer.decode`).
    """

    def step_fn(ids, step, cache):
        output = model.decode(
            ids[:, tf.newaxis], cache, step, compiled=compiled, with_alignment=with_alignment
        )
        return output.logits[:, 0], output.alignment[:, 0], output.cache

    return step_fn
