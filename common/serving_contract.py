"""The contract between the exported translator and everything that calls it.

One home for the names the export writes and the client, the evaluation of an export, the
benchmarks, the REST examples and the tests read: each signature takes the inputs listed in
`SIGNATURE_INPUTS` and returns the outputs listed in `SIGNATURE_OUTPUTS`, every input and output
with the batch as its first dimension (so TF Serving's request batching can merge requests of
any signature). `model.translator.Translator` computes them; `serving.export` maps its methods to
the signature names and records each signature's decoding options in `EXPORT_INFO_PATH`
(`"signature_options"`).

TF Serving signatures have no optional inputs, so every decoding option except the sampling seed
and the target prefix is fixed when the model is exported (`serving.export` flags such as
`--num_hypotheses`, `--sampling_topk` and `--num_alternatives`): a deployment that wants other
settings exports another version or model. The `sample` signature takes the seed as an input, as
a request must be able to draw anew or reproduce a draw: one int32 per sentence, not a scalar per
request (TF Serving's batching refuses inputs without a batch dimension), so that a sentence's
draws depend only on its own text and seed, not on its row or on the requests batched with it
(`model.decoding.sampling`). The `prefix` and `alternatives` signatures take one target prefix
per sentence, "" for none.
"""

# Greedy decoding; TF Serving's default signature, used when a request names none.
GREEDY_SIGNATURE = "serving_default"
BEAM_SIGNATURE = "beam_search"
# Greedy decoding plus the subword pieces and the cross-attention alignment.
ALIGNMENTS_SIGNATURE = "alignments"
# Beam search's `num_hypotheses` best translations of each source, best first.
N_BEST_SIGNATURE = "n_best"
# Forced decoding: the log-probabilities the model gives a given translation, per token.
SCORE_SIGNATURE = "score"
# Random sampling (the export's top-k, top-p and temperature), one seed per sentence.
SAMPLE_SIGNATURE = "sample"
# Beam search (the export's beam width) continuing each sentence's target prefix.
PREFIX_SIGNATURE = "prefix"
# CTranslate2's return_alternatives: the most probable next pieces after each prefix, each
# continued by the export's beam search.
ALTERNATIVES_SIGNATURE = "alternatives"
SIGNATURE_NAMES = (
    GREEDY_SIGNATURE,
    BEAM_SIGNATURE,
    ALIGNMENTS_SIGNATURE,
    N_BEST_SIGNATURE,
    SCORE_SIGNATURE,
    SAMPLE_SIGNATURE,
    PREFIX_SIGNATURE,
    ALTERNATIVES_SIGNATURE,
)

TEXT_INPUT = "text"  # string [batch]: the source sentences
TARGET_INPUT = "target"  # string [batch]: the translations to score, one per source
SEED_INPUT = "seed"  # int32 [batch]: each sentence's sampling seed
# string [batch]: the words each translation starts with ("" none), tokenized by the target model
TARGET_PREFIX_INPUT = "target_prefix"

TRANSLATION_OUTPUT = "translation"  # string [batch]
# float32 [batch]: log-probability (greedy, sample, score), length-normalized (beam)
SCORE_OUTPUT = "score"
SOURCE_TOKENS_OUTPUT = "source_tokens"  # string [batch, S]: subword pieces, "" padding
TARGET_TOKENS_OUTPUT = "target_tokens"  # string [batch, T]: subword pieces, "" after [END]
ALIGNMENT_OUTPUT = "alignment"  # float32 [batch, T, S]: cross-attention averaged over heads
# string [batch, N]: n-best translations, best first; or the alternatives, "" for one dropped
TRANSLATIONS_OUTPUT = "translations"
SCORES_OUTPUT = "scores"  # float32 [batch, N]: their (length-normalized) log-probabilities
# float32 [batch, T]: log P(target token t | tokens before it, source), 0 after [END]
TOKEN_SCORES_OUTPUT = "token_scores"

TRANSLATION_OUTPUTS = (TRANSLATION_OUTPUT, SCORE_OUTPUT)
SIGNATURE_OUTPUTS = {
    GREEDY_SIGNATURE: TRANSLATION_OUTPUTS,
    BEAM_SIGNATURE: TRANSLATION_OUTPUTS,
    ALIGNMENTS_SIGNATURE: TRANSLATION_OUTPUTS
    + (SOURCE_TOKENS_OUTPUT, TARGET_TOKENS_OUTPUT, ALIGNMENT_OUTPUT),
    N_BEST_SIGNATURE: (TRANSLATIONS_OUTPUT, SCORES_OUTPUT),
    SCORE_SIGNATURE: (SCORE_OUTPUT, TARGET_TOKENS_OUTPUT, TOKEN_SCORES_OUTPUT),
    SAMPLE_SIGNATURE: TRANSLATION_OUTPUTS,
    PREFIX_SIGNATURE: TRANSLATION_OUTPUTS,
    ALTERNATIVES_SIGNATURE: (TRANSLATIONS_OUTPUT, SCORES_OUTPUT),
}
SIGNATURE_INPUTS = {
    **{name: (TEXT_INPUT,) for name in SIGNATURE_NAMES},
    SCORE_SIGNATURE: (TEXT_INPUT, TARGET_INPUT),
    SAMPLE_SIGNATURE: (TEXT_INPUT, SEED_INPUT),
    PREFIX_SIGNATURE: (TEXT_INPUT, TARGET_PREFIX_INPUT),
    ALTERNATIVES_SIGNATURE: (TEXT_INPUT, TARGET_PREFIX_INPUT),
}

# Relative to an export version: the run config and decoding options the signatures were traced
# with (`serving.export.make_export_info`).
EXPORT_INFO_PATH = "assets/export_info.json"

# Relative to an export version: the PredictionLog records TF Serving replays when it loads the
# version, and how many it reads at most (a version with more fails to load):
# `WarmupConsts::kRequestsFileName` and `kMaxNumRecords` of TF Serving's
# tensorflow_serving/servables/tensorflow/saved_model_warmup_util.h.
WARMUP_PATH = "assets.extra/tf_serving_warmup_requests"
MAX_WARMUP_RECORDS = 1000
