"""Decoding strategies: how a search chooses each row's tokens, over a step function.

A strategy is a small frozen object of its own settings (`GreedySearch`, `BeamSearch`,
`Sampling`), as keras-hub's samplers and OpenNMT-tf's `DecodingStrategy`; what every strategy
shares (the [END] id, `min_length`, the repetition controls and placeholder limits) comes with
each call as one `NextTokenRules`. A strategy knows nothing of the model: `search` runs over a
step function (`model.decoding.step` states the contract), and `decode_transformer` runs it over
a `Transformer`.
"""

import abc
from typing import NamedTuple

from model.decoding.common import take_rows
from model.decoding.penalties import NextTokenRules
from model.decoding.prefix import forced_tokens


class SearchLoop(NamedTuple):
    """What a search's loop runs over, and how (`DecodingStrategy.search`'s arguments of those
    names; `slots` filled in)."""

    step_fn: object
    reorder_state: object
    start_ids: object
    state: object
    max_decoding_length: object
    alignment_width: object
    slots: object
    fixed_shape: bool
    compiled: bool


class DecodingStrategy(abc.ABC):
    """How a search extends every row by one token until it has produced [END].

    Subclasses are frozen dataclasses of their settings, hashable unless they hold a tensor:
    called eagerly with XLA, a decoder bakes the strategy into one traced function
    (`baked`, `model.decoding.step.decode_transformer`). They implement `run`.
    """

    def search(
        self,
        step_fn,
        start_ids,
        state,
        max_decoding_length,
        rules,
        alignment_width,
        prefix=None,
        fixed_shape=False,
        compiled=False,
        slots=None,
        reorder_state=take_rows,
    ):
        """Runs the search over `step_fn`.

        Args:
            step_fn, reorder_state: see `model.decoding.step`; `reorder_state` is read only by
                strategies that move rows between hypotheses (beam search).
            start_ids: `(batch,)` int32, the first token fed to `step_fn`.
            state: `step_fn`'s state for the batch, one row per sentence.
            max_decoding_length: int32 scalar, tokens output at most.
            rules: the `NextTokenRules` of each step's choice (bound to the sources).
            alignment_width: the second dimension of `step_fn`'s alignment.
            prefix: None, or the tokens each sentence's output starts with: `(batch, P)` int32
                padded with 0, or a `TargetPrefix` (`model.decoding.prefix` states the
                semantics).
            fixed_shape: every row steps until the last one ends, in buffers of `slots`
                positions (for XLA), instead of rows leaving the loop as they end.
            compiled: whether XLA compiles the search (it needs `fixed_shape`): the buffers are
                then written with XLA's op (`model.buffers.write_slot`).
            slots: positions of the output buffers, ≥ max_decoding_length (default:
                max_decoding_length).

        Returns:
            dict: `tokens` `(batch, slots)` int32, `scores` `(batch,)` float32, `alignment`
            `(batch, slots, alignment_width)` (with N hypotheses per sentence, an axis of N
            after the batch's), and `length`, the positions the loop ran.

        Raises:
            ValueError: `compiled` without `fixed_shape`.
        """
        if compiled and not fixed_shape:
            raise ValueError("a compiled search needs fixed_shape=True: XLA's shapes are fixed.")
        loop = SearchLoop(
            step_fn,
            reorder_state,
            start_ids,
            state,
            max_decoding_length,
            alignment_width,
            max_decoding_length if slots is None else slots,
            fixed_shape,
            compiled,
        )
        return self.run(loop, rules, forced_tokens(prefix))

    @abc.abstractmethod
    def run(self, loop, rules, prefix):
        """`search` over `loop` (a `SearchLoop`) with `rules`; `prefix`: its `ForcedTokens`, or
        None."""

    def baked(self):
        """This strategy as an eager XLA decoder bakes it into its traced function: itself
        (hashable). Raises ValueError for a strategy that needs its caller traced."""
        return self


def keyword_search(
    strategy,
    inputs,
    min_length=0,
    repetition_penalty=1.0,
    no_repeat_ngram_size=0,
    placeholders=None,
    **loop,
):
    """`strategy.search` as keyword arguments, the form of `greedy_search` and `beam_search`.

    Args:
        inputs: `(step_fn, start_ids, end_id, state, max_decoding_length, alignment_width)`.
        min_length, repetition_penalty, no_repeat_ngram_size: with `end_id`, the
            `NextTokenRules` of the search.
        placeholders: its `NextTokenRules`' `PlaceholderLimits`, or None.
        loop: the search's `prefix`, `fixed_shape`, `compiled`, `slots`, `reorder_state`.
    """
    step_fn, start_ids, end_id, state, max_decoding_length, alignment_width = inputs
    rules = NextTokenRules(
        end_id, min_length, repetition_penalty, no_repeat_ngram_size, placeholders=placeholders
    )
    return strategy.search(
        step_fn, start_ids, state, max_decoding_length, rules, alignment_width, **loop
    )
