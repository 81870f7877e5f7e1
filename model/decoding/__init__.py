"""Decoding: greedy search, beam search and scoring as graph-friendly functions over a step function.

Everything here runs inside `tf.function` / a SavedModel: loops are `tf.while_loop`s bounded by
`maximum_iterations`, batched, and stop early once every sequence has produced `end_id`.

One strategy a file, as keras-hub's `samplers/`:

| module | what |
| --- | --- |
| `step` | the step-function contract, and `transformer_step_fn` over a `Transformer`'s cache |
| `common` | output-length bound, length penalty, the log-probabilities a decoder chooses from |
| `greedy` | `greedy_search` over a step function, `greedy_decode`, `naive_greedy_decode` |
| `beam` | `beam_search` over a step function, `beam_search_decode`; the best hypothesis or the n best (`num_hypotheses`) |
| `prefix` | target prefixes (`TargetPrefix`): the tokens the searches force first, CTranslate2's `target_prefix` |
| `alternatives` | `alternatives_decode`: the top next tokens after a prefix, each continued, CTranslate2's `return_alternatives` |
| `sampling` | `sampling_search` / `sampling_decode`: random sampling (top-k, top-p, temperature, a seed), CTranslate2's semantics |
| `penalties` | repetition controls with CTranslate2's semantics, and the rules of each step's choice |
| `copies` | placeholder limits: no output holds a placeholder more often than its source (`PlaceholderLimits`) |
| `scoring` | `token_log_probs`, `sequence_log_prob`, `teacher_forced_logits`: teacher-forced (forced-decoding) log-probabilities of given outputs, per token and summed |
| `xla` | the bucket shapes XLA-compiled decoding runs on |

The searches (`greedy_search`, `beam_search`, `sampling_search`) know nothing of the model: they
call a step function (`model.decoding.step` states the contract). `greedy_decode`,
`beam_search_decode` and `sampling_decode` run them over a `Transformer` (`encode`,
`init_cache`, `decode`, `reorder_cache`).

Shared conventions:
    inp: source token ids `(batch, inp_len)`, 0 = padding.
    prefix (optional): `(batch, P)` int32 target tokens each output starts with, then 0s.
    Returned tokens: `(batch, out_len)` int32, without [START], including the prefix and
        [END], then 0s.
    alignment: last decoder layer's cross-attention averaged over heads, `(batch, out_len, inp_len)`:
        for each output token, how much it attended to each source token; 0 after [END].
"""

from model.decoding.alternatives import alternatives_decode, first_alternatives
from model.decoding.beam import BeamState, beam_search, beam_search_decode
from model.decoding.common import (
    NEG_INF,
    length_penalty,
    mask_after_end,
    max_decoding_length_for,
    output_log_probs,
)
from model.decoding.greedy import greedy_decode, greedy_search, naive_greedy_decode
from model.decoding.penalties import ban_repeated_ngrams, penalize_repetitions
from model.decoding.prefix import TargetPrefix
from model.decoding.sampling import keep_top_p, sampling_decode, sampling_search, token_sampler
from model.decoding.scoring import sequence_log_prob, teacher_forced_logits, token_log_probs
from model.decoding.step import transformer_step_fn
from model.decoding.xla import SLOT_GRANULARITY

__all__ = [
    "NEG_INF",
    "SLOT_GRANULARITY",
    "BeamState",
    "TargetPrefix",
    "alternatives_decode",
    "ban_repeated_ngrams",
    "beam_search",
    "beam_search_decode",
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
    "sampling_decode",
    "sampling_search",
    "sequence_log_prob",
    "teacher_forced_logits",
    "token_log_probs",
    "token_sampler",
    "transformer_step_fn",
]
