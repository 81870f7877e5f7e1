"""Decoding: greedy search, beam search, sampling and scoring, graph-friendly, over a step function.

Everything here runs inside `tf.function` / a SavedModel: loops are `tf.while_loop`s bounded by
`maximum_iterations`, batched, and stop early once every sequence has produced `end_id`.

One strategy a file, as keras-hub's `samplers/`:

| module | what |
| --- | --- |
| `strategy` | `DecodingStrategy`: the base of the strategies, a `search` over a step function |
| `step` | the step-function contract, `transformer_step_fn` over a `Transformer`'s cache, and `decode_transformer`: a strategy over a `Transformer`, as `SearchOptions` say |
| `common` | output-length bound, length penalty, the log-probabilities a decoder chooses from |
| `greedy` | `GreedySearch`; `greedy_search`, `greedy_decode` (keyword forms), `naive_greedy_decode` |
| `beam` | `BeamSearch`: the best hypothesis or the n best (`num_hypotheses`); `beam_search`, `beam_search_decode` |
| `prefix` | target prefixes (`TargetPrefix`): the tokens the searches force first, CTranslate2's `target_prefix` |
| `alternatives` | `Alternatives`: the top next tokens after a prefix, each continued by a strategy, CTranslate2's `return_alternatives`; `alternatives_decode` |
| `sampling` | `Sampling`: random sampling (top-k, top-p, temperature, a seed), CTranslate2's semantics; `sampling_search`, `sampling_decode` |
| `penalties` | repetition controls with CTranslate2's semantics, and `NextTokenRules`, the rules of each step's choice |
| `copies` | placeholder limits: no output holds a placeholder more often than its source (`PlaceholderLimits`) |
| `scoring` | `token_log_probs`, `sequence_log_prob`, `teacher_forced_logits`: teacher-forced (forced-decoding) log-probabilities of given outputs, per token and summed |
| `xla` | the bucket shapes XLA-compiled decoding runs on |

A strategy (`GreedySearch`, `BeamSearch`, `Sampling`) is a small frozen object of its own
settings, as keras-hub's samplers and OpenNMT-tf's `DecodingStrategy`s; its `search` knows nothing
of the model: it calls a step function (`model.decoding.step` states the contract), and applies
one `NextTokenRules` ([END], `min_length`, repetition controls, placeholder limits), built once
and carried whole. `decode_transformer(strategy, model, inp, start_id, SearchOptions(rules,
...))` runs it over a `Transformer` (`encode`, `init_cache`, `decode`, `reorder_cache`):

    decode_transformer(BeamSearch(beam_width=4), model, inp, START_ID, SearchOptions(NextTokenRules(END_ID)))

A target prefix is an option of any strategy (`SearchOptions.prefix`; beam search with a prefix
is the `prefix` signature); `Alternatives` continues each alternative after a prefix with a
strategy. The functions `greedy_search`, `beam_search`, `sampling_search` (over a step function)
and `greedy_decode`, `beam_search_decode`, `sampling_decode`, `alternatives_decode` (over a
`Transformer`) are the same as keyword arguments.

Shared conventions:
    inp: source token ids `(batch, inp_len)`, 0 = padding.
    prefix (optional): `(batch, P)` int32 target tokens each output starts with, then 0s.
    Returned tokens: `(batch, out_len)` int32, without [START], including the prefix and
        [END], then 0s.
    alignment: last decoder layer's cross-attention averaged over heads, `(batch, out_len, inp_len)`:
        for each output token, how much it attended to each source token; 0 after [END].
"""

from model.decoding.alternatives import Alternatives, alternatives_decode, first_alternatives
from model.decoding.beam import BeamSearch, BeamState, beam_search, beam_search_decode
from model.decoding.common import (
    NEG_INF,
    length_penalty,
    mask_after_end,
    max_decoding_length_for,
    output_log_probs,
)
from model.decoding.greedy import GreedySearch, greedy_decode, greedy_search, naive_greedy_decode
from model.decoding.penalties import NextTokenRules, ban_repeated_ngrams, penalize_repetitions
from model.decoding.prefix import TargetPrefix
from model.decoding.sampling import (
    Sampling,
    keep_top_p,
    row_seeds,
    sampling_decode,
    sampling_search,
    token_sampler,
)
from model.decoding.scoring import sequence_log_prob, teacher_forced_logits, token_log_probs
from model.decoding.step import SearchOptions, decode_transformer, transformer_step_fn
from model.decoding.strategy import DecodingStrategy
from model.decoding.xla import SLOT_GRANULARITY

__all__ = [
    "NEG_INF",
    "SLOT_GRANULARITY",
    "Alternatives",
    "BeamSearch",
    "BeamState",
    "DecodingStrategy",
    "GreedySearch",
    "NextTokenRules",
    "Sampling",
    "SearchOptions",
    "TargetPrefix",
    "alternatives_decode",
    "ban_repeated_ngrams",
    "beam_search",
    "beam_search_decode",
    "decode_transformer",
    "first_alternatives",
    "greedy_decode",
    "greedy_search",
    "keep_top_p",
    "length_penalty",
    "mask_after_end",
    "max_decoding_length_for",
    "naive_greedy_decode",
    "output_log_probs",
    "penalize_repetitions",
    "row_seeds",
    "sampling_decode",
    "sampling_search",
    "sequence_log_prob",
    "teacher_forced_logits",
    "token_log_probs",
    "token_sampler",
    "transformer_step_fn",
]
