"""The contract between the exported translator and everything that calls it.

One home for the names the export writes and the client, the evaluation of an export, the
benchmarks, the REST examples and the tests read: each signature takes `TEXT_INPUT`, a tf.string
`[batch]`, and returns the outputs listed in `SIGNATURE_OUTPUTS`, each with the batch as its first
dimension. `model.translator.Translator` computes them; `serving.export` maps its methods to the
signature names.
"""

# Greedy decoding; TF Serving's default signature, used when a request names none.
GREEDY_SIGNATURE = "serving_default"
BEAM_SIGNATURE = "beam_search"
# Greedy decoding plus the subword pieces and the cross-attention alignment.
ALIGNMENTS_SIGNATURE = "alignments"
SIGNATURE_NAMES = (GREEDY_SIGNATURE, BEAM_SIGNATURE, ALIGNMENTS_SIGNATURE)

TEXT_INPUT = "text"  # string [batch]: the source sentences

TRANSLATION_OUTPUT = "translation"  # string [batch]
SCORE_OUTPUT = "score"  # float32 [batch]: log-probability (greedy), length-normalized (beam)
SOURCE_TOKENS_OUTPUT = "source_tokens"  # string [batch, S]: subword pieces, "" padding
TARGET_TOKENS_OUTPUT = "target_tokens"  # string [batch, T]: subword pieces, "" after [END]
ALIGNMENT_OUTPUT = "alignment"  # float32 [batch, T, S]: cross-attention averaged over heads

TRANSLATION_OUTPUTS = (TRANSLATION_OUTPUT, SCORE_OUTPUT)
SIGNATURE_OUTPUTS = {
    GREEDY_SIGNATURE: TRANSLATION_OUTPUTS,
    BEAM_SIGNATURE: TRANSLATION_OUTPUTS,
    ALIGNMENTS_SIGNATURE: TRANSLATION_OUTPUTS
    + (SOURCE_TOKENS_OUTPUT, TARGET_TOKENS_OUTPUT, ALIGNMENT_OUTPUT),
}

# Relative to an export version: the run config and decoding options the signatures were traced
# with (`serving.export.make_export_info`).
EXPORT_INFO_PATH = "assets/export_info.json"
