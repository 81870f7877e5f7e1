"""The contract between the exported translator and everything that calls it: the registry of the
serving signatures.

Each signature is one `Signature` record of `SIGNATURES`: its name, its inputs and outputs (with
their dtypes), the `model.translator.Translator` method that computes it, the decoding options it
reads and how they derive from the export's, whether `inference.export --jit_compile` compiles it,
its warmup inputs and the `serving.client` flag that calls it. The export (archive, options,
warmup, export info), the client's command line and the signature table of docs/serving.md
iterate over it; `SIGNATURE_NAMES`, `SIGNATURE_INPUTS` and `SIGNATURE_OUTPUTS` and the name
constants are read from it. Adding a signature is one record here and one `Translator` method
(CONTRIBUTING.md, "Adding a serving signature").

Why here, and why names: `common` is below every other package in the import order and imports
nothing of the project (standard library only, so the model server reads it without the model
code), so a record names its `Translator` method (a string `inference.export` looks up) and its
dtypes (TensorFlow dtype names, `tf.as_dtype(name)`), and its options are `DecodingOptions` field
names read from whatever options object the export passes. Nothing here checks those names against
the model: tests/common/test_serving_contract.py does (every method exists and takes the record's inputs,
every option is a field), and tests/inference/test_export.py and tests/inference/test_export_xla.py compare the
records with what an export really serves and what XLA really compiles.

Every input and output has the batch as its first dimension (so TF Serving's request batching can
merge requests of any signature). TF Serving signatures have no optional inputs, so every
decoding option except the sampling seed and the target prefix is fixed when the model is
exported (`inference.export` flags such as `--num_hypotheses`, `--sampling_topk` and
`--num_alternatives`), and recorded per signature in `EXPORT_INFO_PATH` (`"signature_options"`,
`Signature.traced_options`): a deployment that wants other settings exports another version or
model. The `sample` signature takes the seed as an input, as a request must be able to draw anew
or reproduce a draw: one int32 per sentence, not a scalar per request (TF Serving's batching
refuses inputs without a batch dimension), so that a sentence's draws depend only on its own text
and seed, not on its row or on the requests batched with it (`model.decoding.sampling`). The
`prefix` and `alternatives` signatures take one target prefix per sentence, "" for none.
"""

import dataclasses
from collections.abc import Callable, Sequence

# ------------------------------------------------------------------------------ keys

GREEDY_SIGNATURE = "serving_default"  # TF Serving's default signature, for requests naming none
BEAM_SIGNATURE = "beam_search"
ALIGNMENTS_SIGNATURE = "alignments"
N_BEST_SIGNATURE = "n_best"
SCORE_SIGNATURE = "score"
SAMPLE_SIGNATURE = "sample"
PREFIX_SIGNATURE = "prefix"
ALTERNATIVES_SIGNATURE = "alternatives"

TEXT_INPUT = "text"
TARGET_INPUT = "target"
SEED_INPUT = "seed"
TARGET_PREFIX_INPUT = "target_prefix"

TRANSLATION_OUTPUT = "translation"
SCORE_OUTPUT = "score"
SOURCE_TOKENS_OUTPUT = "source_tokens"
TARGET_TOKENS_OUTPUT = "target_tokens"
ALIGNMENT_OUTPUT = "alignment"
TRANSLATIONS_OUTPUT = "translations"
SCORES_OUTPUT = "scores"
TOKEN_SCORES_OUTPUT = "token_scores"


# ---------------------------------------------------------------------- inputs, outputs


@dataclasses.dataclass(frozen=True)
class Input:
    """One input of a signature: one value per sentence, shape `[batch]`.

    Attributes:
        name: its key in a request.
        dtype: its TensorFlow dtype's name (`tf.as_dtype(dtype)`).
        meaning: what a value is, for the docs.
        warmup: `texts -> [value per text]`, its values in a warmup request on `texts` (strings
            as UTF-8 bytes), as `tf.make_tensor_proto` takes them.
        client_flag: the `serving.client` option that supplies it on the command line (None:
            the sentences themselves).
    """

    name: str
    dtype: str
    meaning: str
    warmup: Callable[[Sequence[str]], list]
    client_flag: str | None = None


@dataclasses.dataclass(frozen=True)
class Output:
    """One output of a signature.

    Attributes:
        name: its key in a response.
        dtype: its TensorFlow dtype's name.
        dims: the name of each dimension, "batch" first (its rank is their number).
        meaning: what it holds, for the docs.
    """

    name: str
    dtype: str
    dims: tuple[str, ...]
    meaning: str


def _utf8(texts):
    return [text.encode("utf-8") for text in texts]


def _row_numbers(texts):
    return list(range(len(texts)))


def _empty_or_one_word(texts):
    # No prefix, and one word: both paths of the prefix and alternatives signatures.
    return [b"The" if row % 2 else b"" for row in range(len(texts))]


INPUTS = {
    record.name: record
    for record in (
        Input(TEXT_INPUT, "string", "the source sentences", _utf8),
        Input(
            TARGET_INPUT,
            "string",
            "the translations to score, one per source",
            _utf8,
            "--target_file",
        ),
        Input(SEED_INPUT, "int32", "each sentence's sampling seed", _row_numbers, "--seed"),
        Input(
            TARGET_PREFIX_INPUT,
            "string",
            'the words each translation starts with ("" none), tokenized by the target model',
            _empty_or_one_word,
            "--target_prefix",
        ),
    )
}
OUTPUTS = {
    record.name: record
    for record in (
        Output(TRANSLATION_OUTPUT, "string", ("batch",), "the translations"),
        Output(
            SCORE_OUTPUT,
            "float32",
            ("batch",),
            "log-probability (greedy, sample, score), length-normalized (beam search)",
        ),
        Output(SOURCE_TOKENS_OUTPUT, "string", ("batch", "S"), 'subword pieces, "" padding'),
        Output(TARGET_TOKENS_OUTPUT, "string", ("batch", "T"), 'subword pieces, "" after [END]'),
        Output(
            ALIGNMENT_OUTPUT, "float32", ("batch", "T", "S"), "cross-attention averaged over heads"
        ),
        Output(
            TRANSLATIONS_OUTPUT,
            "string",
            ("batch", "N"),
            'n-best translations, best first; or the alternatives, "" for one dropped',
        ),
        Output(
            SCORES_OUTPUT, "float32", ("batch", "N"), "their (length-normalized) log-probabilities"
        ),
        Output(
            TOKEN_SCORES_OUTPUT,
            "float32",
            ("batch", "T"),
            "log P(target token t | tokens before it, source), 0 after [END]",
        ),
    )
}


def _inputs(*names):
    return tuple(INPUTS[name] for name in names)


def _outputs(*names):
    return tuple(OUTPUTS[name] for name in names)


# ------------------------------------------------------------------------- signatures

# `DecodingOptions` fields, in groups of the decoders that read them. "jit_compile" records
# whether the signature runs under XLA (`Signature.traced_options`).
LOOP_OPTIONS = ("max_length_ratio", "max_length_offset", "jit_compile")
REPETITION_OPTIONS = ("repetition_penalty", "no_repeat_ngram_size")
BEAM_OPTIONS = ("beam_width", "alpha")
SAMPLING_OPTIONS = ("sampling_topk", "sampling_topp", "sampling_temperature")
# Options recorded as the value the signature uses, read from another attribute: n_best's
# `num_hypotheses` is None for "the beam width", and the export records the number it returns.
_EFFECTIVE_OPTIONS = {"num_hypotheses": "n_best_size"}


@dataclasses.dataclass(frozen=True)
class Signature:
    """One serving signature: what it takes, returns and computes.

    Attributes:
        name: the signature's name in the SavedModel and in requests.
        description: what it computes, one line for the docs.
        method: the `model.translator.Translator` method that computes it, called with the
            inputs in order (`text` first) and returning `{output name: tensor}`.
        inputs: its `Input`s, `text` first.
        outputs: its `Output`s.
        decoder: the search it runs, as `export_info.json` records it (`"decoder"`).
        options: the `DecodingOptions` fields it reads, recorded in `export_info.json`
            (`traced_options`).
        jit_compiled: whether `inference.export --jit_compile` compiles its decoding loop with XLA
            (the `Translator` decides; tests/inference/test_export_xla.py checks that it agrees).
        client_flag: the `serving.client` option that calls it (None: `--signature_name`).
    """

    name: str
    description: str
    method: str
    inputs: tuple[Input, ...]
    outputs: tuple[Output, ...]
    decoder: str
    options: tuple[str, ...] = ()
    jit_compiled: bool = False
    client_flag: str | None = None

    def __post_init__(self):
        if not self.inputs or self.inputs[0].name != TEXT_INPUT:
            raise ValueError(f"signature {self.name}: its first input must be {TEXT_INPUT!r}.")
        if self.jit_compiled and "jit_compile" not in self.options:
            raise ValueError(f"signature {self.name}: a compiled signature reads jit_compile.")

    @property
    def input_names(self):
        return tuple(record.name for record in self.inputs)

    @property
    def output_names(self):
        return tuple(record.name for record in self.outputs)

    def traced_options(self, options):
        """`{option: value}` the signature is traced with under the export's `options` (a
        `model.translator.DecodingOptions`), as `export_info.json` records it: `"decoder"`, and
        each of `self.options`, where `"jit_compile"` is whether this signature runs under XLA
        (the export's `jit_compile` if `jit_compiled`, else False), with `"xla_max_batch"` beside
        it when the export bounds XLA's batches, and `"num_hypotheses"` is the number it returns.
        """
        traced = {"decoder": self.decoder}
        for name in self.options:
            traced[name] = getattr(options, _EFFECTIVE_OPTIONS.get(name, name))
        if "jit_compile" in traced:
            traced["jit_compile"] = self.jit_compiled and options.jit_compile
            if traced["jit_compile"] and options.xla_max_batch is not None:
                traced["xla_max_batch"] = options.xla_max_batch
        return traced

    def warmup_inputs(self, texts):
        """`{input: values}` of this signature's warmup request on `texts`."""
        return {record.name: record.warmup(texts) for record in self.inputs}


_TRANSLATION = _outputs(TRANSLATION_OUTPUT, SCORE_OUTPUT)
_N_TRANSLATIONS = _outputs(TRANSLATIONS_OUTPUT, SCORES_OUTPUT)
_BEAM_SEARCH = LOOP_OPTIONS + REPETITION_OPTIONS + BEAM_OPTIONS

# In export order; `inference.export --signatures` exports a subset, in this order.
SIGNATURES = (
    Signature(
        GREEDY_SIGNATURE,
        "greedy decoding with the key/value cache; `score` summed log-probability",
        method="greedy",
        inputs=_inputs(TEXT_INPUT),
        outputs=_TRANSLATION,
        decoder="greedy",
        options=LOOP_OPTIONS + REPETITION_OPTIONS,
        jit_compiled=True,
    ),
    Signature(
        BEAM_SIGNATURE,
        "beam search (GNMT length penalty); `score` length-normalized",
        method="beam_search",
        inputs=_inputs(TEXT_INPUT),
        outputs=_TRANSLATION,
        decoder="beam_search",
        options=_BEAM_SEARCH,
        jit_compiled=True,
    ),
    Signature(
        ALIGNMENTS_SIGNATURE,
        "greedy, plus the subword pieces and the last decoder layer's cross-attention",
        method="alignments",
        inputs=_inputs(TEXT_INPUT),
        outputs=_TRANSLATION
        + _outputs(SOURCE_TOKENS_OUTPUT, TARGET_TOKENS_OUTPUT, ALIGNMENT_OUTPUT),
        decoder="greedy",
        options=LOOP_OPTIONS + REPETITION_OPTIONS,
        jit_compiled=True,
        client_flag="--alignments",
    ),
    Signature(
        N_BEST_SIGNATURE,
        "beam search's `--num_hypotheses` best translations, best first",
        method="n_best",
        inputs=_inputs(TEXT_INPUT),
        outputs=_N_TRANSLATIONS,
        decoder="beam_search",
        options=_BEAM_SEARCH + ("num_hypotheses",),
        jit_compiled=True,
        client_flag="--n_best",
    ),
    Signature(
        SCORE_SIGNATURE,
        "forced decoding: the log-probabilities the model gives `target`, per piece",
        method="score",
        inputs=_inputs(TEXT_INPUT, TARGET_INPUT),
        outputs=_outputs(SCORE_OUTPUT, TARGET_TOKENS_OUTPUT, TOKEN_SCORES_OUTPUT),
        # No search, no repetition controls (CTranslate2's score_batch).
        decoder="forced",
        client_flag="--target_file",
    ),
    Signature(
        SAMPLE_SIGNATURE,
        "random sampling (`--sampling_topk`, `--sampling_topp`, `--sampling_temperature`)",
        method="sample",
        inputs=_inputs(TEXT_INPUT, SEED_INPUT),
        outputs=_TRANSLATION,
        decoder="sampling",
        options=LOOP_OPTIONS + REPETITION_OPTIONS + SAMPLING_OPTIONS,
        client_flag="--sample",
    ),
    Signature(
        PREFIX_SIGNATURE,
        "beam search continuing each target prefix; `score` of the pieces after it",
        method="prefix",
        inputs=_inputs(TEXT_INPUT, TARGET_PREFIX_INPUT),
        outputs=_TRANSLATION,
        # A plain graph: XLA's padded batch would need padded prefixes.
        decoder="beam_search_with_prefix",
        options=_BEAM_SEARCH,
        client_flag="--target_prefix",
    ),
    Signature(
        ALTERNATIVES_SIGNATURE,
        "CTranslate2's return_alternatives: the `--num_alternatives` most probable next pieces "
        "after each prefix, each continued by beam search",
        method="alternatives",
        inputs=_inputs(TEXT_INPUT, TARGET_PREFIX_INPUT),
        outputs=_N_TRANSLATIONS,
        decoder="alternatives",
        options=_BEAM_SEARCH + ("num_alternatives",),
        client_flag="--alternatives",
    ),
)
SIGNATURES_BY_NAME = {record.name: record for record in SIGNATURES}

SIGNATURE_NAMES = tuple(SIGNATURES_BY_NAME)
SIGNATURE_INPUTS = {record.name: record.input_names for record in SIGNATURES}
SIGNATURE_OUTPUTS = {record.name: record.output_names for record in SIGNATURES}
TRANSLATION_OUTPUTS = tuple(record.name for record in _TRANSLATION)
# The dtype name of each input and output key (one per key, whatever the signature).
INPUT_DTYPES = {name: record.dtype for name, record in INPUTS.items()}
OUTPUT_DTYPES = {name: record.dtype for name, record in OUTPUTS.items()}


def signature_table():
    """The Markdown table of the signatures that docs/serving.md holds (tests/test_docs.py
    checks that it is this one)."""

    def shaped(record):
        return f"`{record.name}` {record.dtype} [{', '.join(record.dims)}]"

    rows = [
        "| Signature | Inputs | Outputs | Computes | `Translator` | `--jit_compile` "
        "| `serving.client` |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for record in SIGNATURES:
        inputs = ", ".join(f"`{item.name}` {item.dtype} [batch]" for item in record.inputs)
        outputs = ", ".join(shaped(item) for item in record.outputs)
        compiled = "XLA" if record.jit_compiled else "plain graph"
        client = f"`{record.client_flag or '--signature_name'}`"
        rows.append(
            f"| `{record.name}` | {inputs} | {outputs} | {record.description} "
            f"| `{record.method}` | {compiled} | {client} |"
        )
    return "\n".join(rows) + "\n"


# Relative to an export version: the run config and decoding options the signatures were traced
# with (`inference.export.make_export_info`).
EXPORT_INFO_PATH = "assets/export_info.json"

# Relative to an export version: the PredictionLog records TF Serving replays when it loads the
# version, and how many it reads at most (a version with more fails to load):
# `WarmupConsts::kRequestsFileName` and `kMaxNumRecords` of TF Serving's
# tensorflow_serving/servables/tensorflow/saved_model_warmup_util.h.
WARMUP_PATH = "assets.extra/tf_serving_warmup_requests"
MAX_WARMUP_RECORDS = 1000
