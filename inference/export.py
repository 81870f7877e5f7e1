"""Exports a trained translator as a SavedModel that TF Serving serves, text in and text out.

    python -m inference.export --run_dir runs/NAME [--export_base exports] [--model_name translator]

writes TF Serving's layout

    <export_base>/<model_name>/<version>/
        saved_model.pb, variables/       the graph and the weights
        assets/export_info.json          what was exported: run config, decoding options, versions
        assets.extra/tf_serving_warmup_requests   PredictionLogs TF Serving replays on load

with `version` one higher than the highest existing one. The version is first written to a
hidden staging directory next to it and then renamed, so a server polling `<model_name>/` never
sees a half-written version, and no existing version is ever overwritten.

Signatures: the records of `common.serving_contract.SIGNATURES` (docs/serving.md tables them),
each traced from the `Translator` method its record names, with the decoding options its record
derives from the export's (`signature_options`). Input `text`: tf.string `[batch]`; every
output's first dimension is the batch. `serving_default` is greedy decoding, the signature of
requests that name none. With `--jit_compile`, the records marked `jit_compiled` run as one XLA
function each, which TF Serving runs only with --xla_cpu_compilation_enabled.

`assets/export_info.json` records, under "signature_options", the decoding options each signature
was traced with.

The warmup requests TF Serving replays when it loads the version (`warmup_requests`): one per
signature on `WARMUP_TEXTS`, enough for a plain graph, which runs any shape once optimized. With
`--jit_compile`, XLA compiles one program per bucket of batch size and source length
(`model.decoding.xla`) on its first use, seconds each, so every compiled signature gets one
request per bucket that batches of 1 to `--warmup_max_batch` sentences of up to
`--warmup_max_source_tokens` tokens fall in (by default single sentences of up to 32 tokens; what
larger bounds cost at load: serving/DEPLOY.md, "XLA"); a request outside those bounds still
compiles its bucket when it first comes.

Tokenization and detokenization run inside the graph (`model.tokenizer`: keras-hub's SentencePiece
or WordPiece tokenizer, TensorFlow and tensorflow-text ops only, both linked into TF Serving's model
server). A source longer than the
model's positional encodings is cut to that many tokens, its last one replaced by [END]; an empty
string is `[START] [END]` and translates like any other input; a batch of 0 gives empty outputs.

The archive is built with `keras.export.ExportArchive`, which tracks the Keras 3 variables so the
TF1 Session loader used by TF Serving and `saved_model_cli run` can restore them (a Keras 3 model
inside a plain `tf.Module` saved with `tf.saved_model.save` fails there with "Could not find
variable ...").
"""

import argparse
import dataclasses
import datetime
import json
import logging
import os
import re
import shutil
import sys
import uuid

import keras
import tensorflow as tf
from tqdm.auto import tqdm

from common import cpu
from common.serving_contract import (
    EXPORT_INFO_PATH,
    GREEDY_SIGNATURE,
    MAX_WARMUP_RECORDS,
    SIGNATURE_NAMES,
    SIGNATURES,
    SIGNATURES_BY_NAME,
    WARMUP_PATH,
)
from common.serving_contract import INPUT_DTYPES as INPUT_DTYPE_NAMES
from model.translator import MIN_SOURCE_TOKENS, DecodingOptions, Translator, input_signature
from run_directory import artifacts
from training import decoding_flags

logger = logging.getLogger(__name__)

EXPORT_INFO_FILE = os.path.basename(EXPORT_INFO_PATH)
# Spanish sentences of different lengths (punctuation, accents, an inverted question mark), so
# warmup exercises the whole tokenizer and a few loop lengths.
WARMUP_TEXTS = (
    "Hola.",
    "¿Dónde está la estación de tren?",
    "El libro que me prestaste ayer es muy interesante.",
)
# The default --warmup_max_batch and --warmup_max_source_tokens: single sentences of up to 32
# tokens, 5 programs of each compiled signature for the bundled model. The batches of
# serving/batching.config (up to 16 sentences) of every length are 55 of each: far longer to
# load, and more than the server's memory maps held (measured in serving/DEPLOY.md, "XLA").
WARMUP_MAX_BATCH = 1
WARMUP_MAX_SOURCE_TOKENS = 32

_VERSION_NAME = re.compile(r"^[0-9]+$")
_STAGING_PREFIX = ".staging-"
# Concurrent exporters may race for the same version number; each lost race retries with the next.
_MAX_VERSION_ATTEMPTS = 100


# The dtype of each signature input (`common.serving_contract.INPUTS`), every one `[batch]`.
INPUT_DTYPES = {name: tf.as_dtype(dtype) for name, dtype in INPUT_DTYPE_NAMES.items()}


def signature_options(options):
    """`{signature: {option: value}}`: the decoding options each signature is traced with under
    the export's `options` (`common.serving_contract.Signature.traced_options`)."""
    return {record.name: record.traced_options(options) for record in SIGNATURES}


def build_export_archive(
    model,
    source_tokenizer,
    target_tokenizer,
    options=DecodingOptions(),
    signatures=SIGNATURE_NAMES,
):
    """Traces `signatures` (names of `SIGNATURE_NAMES`, default all) into a
    `keras.export.ExportArchive`.

    Tracing is the slow part of an export (seconds per signature); the returned archive can be
    written out any number of times with `write_version`.

    Returns:
        `keras.export.ExportArchive` with an endpoint for each of `signatures`, in
        `SIGNATURE_NAMES` order.

    Raises:
        ValueError: a name of `signatures` that is no signature (`require_signature_names`).
    """
    signatures = exported_signatures(signatures)
    if not model.built:
        model.build(((None, None), (None, None)))
    translator = Translator(model, source_tokenizer, target_tokenizer, options)
    archive = keras.export.ExportArchive()
    archive.track(model)
    # The SentencePiece op's model is a resource: untracked, `write_out` fails with "references
    # an 'untracked' resource".
    archive.track(source_tokenizer)
    if target_tokenizer is not source_tokenizer:
        archive.track(target_tokenizer)
    for name in tqdm(signatures, desc="tracing signatures", unit=" signature"):
        method = getattr(translator, SIGNATURES_BY_NAME[name].method)
        endpoint = archive.add_endpoint(name, method, input_signature=input_signature(name))
        endpoint.get_concrete_function()
    return archive


def existing_versions(model_dir):
    """Sorted integer versions under `model_dir` (names TF Serving would load); [] if absent."""
    if not os.path.isdir(model_dir):
        return []
    return sorted(
        int(name)
        for name in os.listdir(model_dir)
        if _VERSION_NAME.match(name) and os.path.isdir(os.path.join(model_dir, name))
    )


def next_version(model_dir):
    """One more than the highest existing version of `model_dir`, 1 for the first."""
    versions = existing_versions(model_dir)
    return versions[-1] + 1 if versions else 1


def warmup_inputs(signature_name, texts):
    """`{input: values}` of a signature's warmup request on `texts`
    (`common.serving_contract.Signature.warmup_inputs`)."""
    return SIGNATURES_BY_NAME[signature_name].warmup_inputs(texts)


def compiled_signatures(options):
    """The signatures XLA compiles under `options` (those whose record is `jit_compiled`, when
    `options.jit_compile`), in `SIGNATURE_NAMES` order."""
    return [record.name for record in SIGNATURES if record.jit_compiled and options.jit_compile]


def warmup_requests(
    translator,
    max_batch=WARMUP_MAX_BATCH,
    max_source_tokens=WARMUP_MAX_SOURCE_TOKENS,
    signatures=None,
    exported=SIGNATURE_NAMES,
):
    """The `(signature, texts)` requests of a version's warmup file, for the `exported`
    signatures only.

    Each signature not compiled by XLA gets one request on `WARMUP_TEXTS`. Each compiled one
    (`translator.options.jit_compile`) among `signatures` (default: every compiled one) gets one
    request per XLA program (`Translator.xla_buckets(max_batch, max_source_tokens)`): the
    smallest batch of that program, each row a text as many tokens long as the program's
    shortest source (`texts_of_lengths`). A compiled signature left out of `signatures` gets the
    one request of a plain one: its other programs compile when their first request comes.

    Raises:
        ValueError: bounds `Translator.xla_buckets` refuses, a name in `signatures` that is no
            signature, or more requests than TF Serving replays (`MAX_WARMUP_RECORDS`).
    """
    require_signature_names(signatures or ())
    exported = exported_signatures(exported)
    compiled = [
        name
        for name in compiled_signatures(translator.options)
        if name in exported and (signatures is None or name in signatures)
    ]
    buckets = (
        sorted(translator.xla_buckets(max_batch, max_source_tokens).values()) if compiled else []
    )
    texts = texts_of_lengths(translator, {length for _, length in buckets})
    requests = []
    for name in exported:
        if name in compiled:
            requests.extend((name, [texts[length]] * batch_size) for batch_size, length in buckets)
        else:
            requests.append((name, list(WARMUP_TEXTS)))
    _require_loadable_warmup(len(requests))
    return requests


def exported_signatures(names):
    """`names` (any iterable of signature names) in `SIGNATURE_NAMES` order, each once.

    Raises:
        ValueError: an unknown name (`require_signature_names`), or none at all.
    """
    names = set(names)
    require_signature_names(names)
    if not names:
        raise ValueError("an export needs at least one signature.")
    return tuple(name for name in SIGNATURE_NAMES if name in names)


def require_signature_names(names):
    """Raises ValueError naming each of `names` that is no signature of an export."""
    unknown = sorted(set(names) - set(SIGNATURE_NAMES))
    if unknown:
        raise ValueError(
            f"no signature named {', '.join(unknown)}; the signatures are "
            f"{', '.join(SIGNATURE_NAMES)}."
        )


def _require_loadable_warmup(count):
    if count > MAX_WARMUP_RECORDS:
        raise ValueError(
            f"{count} warmup requests, more than the {MAX_WARMUP_RECORDS} TF Serving replays (it "
            "would not load the version): lower --warmup_max_batch or "
            "--warmup_max_source_tokens."
        )


def texts_of_lengths(translator, lengths):
    """`{length: text}`: for each length, a text the signatures decode as exactly that many
    tokens (`Translator.source_lengths`).

    Each text is the longest run of the words of `WARMUP_TEXTS` (repeated as needed) that fits,
    topped up with a word the source tokenizer keeps as one token; a text where the tokenizer
    does not add up (a word that splits differently next to others) is that word alone, repeated.

    Args:
        translator: a `Translator`.
        lengths: ints from `MIN_SOURCE_TOKENS` to the model's `pe_input`.

    Raises:
        ValueError: a length outside those bounds, or a length no such text has (no word of
            `WARMUP_TEXTS` is one token for the source tokenizer, or repeated it is not).
    """
    lengths = sorted(set(lengths))
    if not lengths:
        return {}
    if lengths[0] < MIN_SOURCE_TOKENS or lengths[-1] > translator.model.pe_input:
        raise ValueError(
            f"source lengths must be {MIN_SOURCE_TOKENS} to {translator.model.pe_input} tokens, "
            f"got {lengths[0]} to {lengths[-1]}."
        )

    def token_counts(texts):
        return translator.source_lengths(tf.constant(texts, tf.string)).numpy().tolist()

    words = " ".join(WARMUP_TEXTS).split()
    # One token alone, and one token each when repeated.
    filler = next(
        (
            word
            for word, alone, thrice in zip(
                words,
                token_counts(words),
                token_counts([f"{word} {word} {word}" for word in words]),
            )
            if (alone, thrice) == (MIN_SOURCE_TOKENS + 1, MIN_SOURCE_TOKENS + 3)
        ),
        None,
    )
    if filler is None:
        raise ValueError(f"No word of {WARMUP_TEXTS} is one token for the source tokenizer.")
    # Every word adds a token or more, so prefixes of the longest length's words reach it.
    prefixes = [
        " ".join(words[i % len(words)] for i in range(count)) for count in range(lengths[-1])
    ]
    prefix_lengths = token_counts(prefixes)

    def topped_up(length):
        count = max(i for i, prefix_length in enumerate(prefix_lengths) if prefix_length <= length)
        return " ".join([prefixes[count], *[filler] * (length - prefix_lengths[count])]).strip()

    def repeated_filler(length):
        return " ".join([filler] * (length - MIN_SOURCE_TOKENS))

    texts = {}
    for make_text in (topped_up, repeated_filler):
        missing = [length for length in lengths if length not in texts]
        candidates = [make_text(length) for length in missing]
        for length, text, actual in zip(missing, candidates, token_counts(candidates)):
            if actual == length:
                texts[length] = text
        if len(texts) == len(lengths):
            return texts
    raise ValueError(
        f"No text of {min(set(lengths) - set(texts))} tokens found for the source tokenizer."
    )


def write_warmup_requests(version_dir, model_name, requests=None):
    """Writes `assets.extra/tf_serving_warmup_requests`: one PredictRequest (a PredictionLog
    record) per `(signature, texts)` of `requests` (default: one per signature on
    `WARMUP_TEXTS`; `warmup_requests` gives an export's).

    TF Serving replays these records when it loads the version, so the first real request does
    not pay for graph optimization (nor, with XLA, for compiling its bucket).

    Returns:
        the file's path.

    Raises:
        ValueError: more requests than TF Serving replays (`MAX_WARMUP_RECORDS`).
    """
    from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

    if requests is None:
        requests = [(name, list(WARMUP_TEXTS)) for name in SIGNATURE_NAMES]
    _require_loadable_warmup(len(requests))
    path = os.path.join(version_dir, WARMUP_PATH)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for signature_name, texts in requests:
            request = predict_pb2.PredictRequest()
            request.model_spec.name = model_name
            request.model_spec.signature_name = signature_name
            for name, values in warmup_inputs(signature_name, texts).items():
                request.inputs[name].CopyFrom(tf.make_tensor_proto(values, INPUT_DTYPES[name]))
            log = prediction_log_pb2.PredictionLog()
            log.predict_log.request.CopyFrom(request)
            writer.write(log.SerializeToString())
    return path


def write_version(archive, export_base, model_name="translator", export_info=None, warmup=None):
    """Writes `archive` as the next version of `<export_base>/<model_name>/`, atomically.

    Args:
        archive: from `build_export_archive`.
        export_base: str or os.PathLike, the directory holding one folder per model.
        model_name: the model's folder name (TF Serving's model name).
        export_info: JSON-serializable dict written to `assets/export_info.json`.
        warmup: the `(signature, texts)` warmup requests (`warmup_requests`); default one per
            signature on `WARMUP_TEXTS`.

    Returns:
        str, the new version directory.
    """
    if not model_name or os.sep in model_name or model_name.startswith("."):
        raise ValueError(f"model_name must be a plain directory name, got {model_name!r}.")
    model_dir = os.path.join(os.fspath(export_base), model_name)
    os.makedirs(model_dir, exist_ok=True)
    # Staging inside model_dir keeps the final rename on one file system; TF Serving ignores
    # names that are not integers. A plain mkdir (not mkdtemp, which makes it 0700) leaves the
    # version readable by a server running as another user, as the umask allows.
    staging_dir = os.path.join(model_dir, f"{_STAGING_PREFIX}{uuid.uuid4().hex}")
    os.mkdir(staging_dir)
    try:
        archive.write_out(staging_dir, verbose=False)
        if export_info is not None:
            with open(
                os.path.join(staging_dir, EXPORT_INFO_PATH), "w", encoding="utf-8"
            ) as info_file:
                json.dump(export_info, info_file, indent=2, sort_keys=True)
                info_file.write("\n")
        write_warmup_requests(staging_dir, model_name, warmup)
        return _publish(staging_dir, model_dir)
    except BaseException:
        shutil.rmtree(staging_dir, ignore_errors=True)
        raise


def _publish(staging_dir, model_dir):
    """Renames `staging_dir` to the next free version of `model_dir`; returns the new path."""
    for _ in range(_MAX_VERSION_ATTEMPTS):
        version_dir = os.path.join(model_dir, str(next_version(model_dir)))
        if os.path.exists(version_dir):
            continue  # another exporter just created it (or a file has that name)
        try:
            # POSIX rename replaces an *empty* target directory; a version directory that
            # appeared in the meantime is never empty, so this fails instead of overwriting.
            os.rename(staging_dir, version_dir)
            return version_dir
        except OSError:
            if not os.path.exists(version_dir):
                raise
    raise RuntimeError(
        f"Could not claim a new version under {model_dir} after {_MAX_VERSION_ATTEMPTS} tries."
    )


def make_export_info(
    model, source_tokenizer, target_tokenizer, options, run_config=None, signatures=SIGNATURE_NAMES
):
    """The metadata written to `assets/export_info.json`."""
    return {
        "signatures": list(signatures),
        "decoding": dataclasses.asdict(options),
        "signature_options": {
            name: traced
            for name, traced in signature_options(options).items()
            if name in signatures
        },
        "max_source_tokens": int(model.pe_input),
        "max_output_tokens": int(model.pe_target) - 1,
        "source_vocab_size": source_tokenizer.vocab_size,
        "target_vocab_size": target_tokenizer.vocab_size,
        # What the source tokenizer reads: evaluation shows the corpus in this spelling.
        "source_spelling": source_tokenizer.spelling,
        "compute_dtype": model.compute_dtype,
        "run_config": run_config,
        "tensorflow_version": tf.__version__,
        "keras_version": keras.__version__,
        "exported_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def export_translator(
    model,
    source_tokenizer,
    target_tokenizer,
    export_base,
    model_name="translator",
    options=DecodingOptions(),
    run_config=None,
    warmup_max_batch=WARMUP_MAX_BATCH,
    warmup_max_source_tokens=WARMUP_MAX_SOURCE_TOKENS,
    warmup_signatures=None,
    signatures=SIGNATURE_NAMES,
):
    """Exports a translator in memory as the next version under `<export_base>/<model_name>`,
    with the `signatures` named (default: all of `SIGNATURE_NAMES`) and the warmup requests of
    `warmup_requests(..., warmup_max_batch, warmup_max_source_tokens, warmup_signatures)` for
    them.

    Returns:
        str, the new version directory.

    Raises:
        ValueError: as `warmup_requests`, before the (slow) tracing.
    """
    signatures = exported_signatures(signatures)
    warmup = warmup_requests(
        Translator(model, source_tokenizer, target_tokenizer, options),
        warmup_max_batch,
        warmup_max_source_tokens,
        warmup_signatures,
        signatures,
    )
    archive = build_export_archive(model, source_tokenizer, target_tokenizer, options, signatures)
    info = make_export_info(
        model, source_tokenizer, target_tokenizer, options, run_config, signatures
    )
    return write_version(archive, export_base, model_name, info, warmup)


def export_run(
    run_dir,
    export_base="exports",
    model_name="translator",
    options=None,
    compute_dtype=None,
    **warmup_bounds,
):
    """Loads a training run (`run_directory.artifacts.load_trained`, computing in `compute_dtype`, or
    as trained when None) and exports it, decoding with `options` (default: the run's own,
    `run_directory.artifacts.decoding_options`); `warmup_bounds` are `export_translator`'s
    `warmup_max_batch`, `warmup_max_source_tokens`, `warmup_signatures` and `signatures`.

    Returns:
        str, the new version directory.
    """
    if options is None:
        options = artifacts.decoding_options(run_dir)
    model, source_tokenizer, target_tokenizer, config = artifacts.load_trained(
        run_dir, compute_dtype
    )
    return export_translator(
        model,
        source_tokenizer,
        target_tokenizer,
        export_base,
        model_name,
        options,
        config,
        **warmup_bounds,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=(
            "Export a trained translator (a training run directory) as a TF Serving SavedModel "
            "<export_base>/<model_name>/<version>/ with signatures serving_default (greedy), "
            f"{', '.join(SIGNATURE_NAMES[1:])}, text in and text out. The version is one higher "
            "than the highest existing one; existing versions are never overwritten."
        )
    )
    parser.add_argument(
        "--run_dir",
        required=True,
        help="training run directory (config.json, tokenizer/, model.keras)",
    )
    parser.add_argument(
        "--export_base",
        default="exports",
        help="directory holding one folder per served model (default: exports)",
    )
    parser.add_argument(
        "--model_name",
        default="translator",
        help="model name, i.e. folder under export_base (default: translator)",
    )
    # Every decoding flag; a run's decoding.json sets those not given, except these.
    as_given = ("max_length_ratio", "max_length_offset", "jit_compile")
    decoding_flags.add_decoding_arguments(
        parser, [name for name in decoding_flags.DECODING_FLAGS if name not in as_given]
    )
    decoding_flags.add_decoding_arguments(parser, as_given, decoding_flags.FIELD_DEFAULTS)
    parser.add_argument(
        "--compute_dtype",
        choices=list(artifacts.COMPUTE_DTYPES),
        help="bfloat16: the matrix products in bfloat16, their weights stored in bfloat16 "
        "(layer norms, embeddings, the attention softmax and the logits in float32), for CPUs "
        "with bfloat16 instructions (AVX-512 BF16, AMX); slower than float32 on others, where "
        "this command and the server warn (serving/DEPLOY.md, 'Choosing an export for the "
        "CPU'; default: as the run was trained)",
    )
    parser.add_argument(
        "--warmup_max_batch",
        type=int,
        default=WARMUP_MAX_BATCH,
        help="with --jit_compile, the warmup requests compile every XLA program that batches of "
        "1 to this many sentences run (default: %(default)s; a server with "
        "serving/batching.config runs batches of up to 16, and each bucket more costs seconds "
        "of load: serving/DEPLOY.md, 'XLA')",
    )
    parser.add_argument(
        "--warmup_max_source_tokens",
        type=int,
        default=WARMUP_MAX_SOURCE_TOKENS,
        help="with --jit_compile, the warmup requests compile every XLA program that sources of "
        "up to this many tokens run, [START] and [END] included (default: %(default)s; at most "
        "the model's longest source, so a larger value means every length)",
    )
    parser.add_argument(
        "--signatures",
        type=lambda value: tuple(name for name in value.split(",") if name),
        default=SIGNATURE_NAMES,
        help="the comma-separated signatures to export (default: all of "
        f"{', '.join(SIGNATURE_NAMES)}); each costs seconds of tracing and a warmup request at "
        f"load. Requests that name no signature call {GREEDY_SIGNATURE}: keep it unless every "
        "client names one",
    )
    parser.add_argument(
        "--warmup_signatures",
        type=lambda value: tuple(name for name in value.split(",") if name),
        help="with --jit_compile, the comma-separated signatures whose XLA programs the warmup "
        "requests compile within the bounds above (default: every compiled one); the others "
        f"get one request (a server whose clients call {GREEDY_SIGNATURE} only compiles one "
        "compiled signature's programs at load instead of four's)",
    )
    args = parser.parse_args(argv)
    if args.warmup_max_batch < 1:
        parser.error(f"--warmup_max_batch must be at least 1, got {args.warmup_max_batch}")
    if args.warmup_max_source_tokens < MIN_SOURCE_TOKENS:
        parser.error(
            f"--warmup_max_source_tokens must be at least {MIN_SOURCE_TOKENS} ([START] and "
            f"[END]), got {args.warmup_max_source_tokens}"
        )
    try:
        require_signature_names(args.warmup_signatures or ())
    except ValueError as error:
        parser.error(f"--warmup_signatures: {error}")
    try:
        args.signatures = exported_signatures(args.signatures)
    except ValueError as error:
        parser.error(f"--signatures: {error}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    artifacts.require_trained_run(args.run_dir)
    try:
        options = artifacts.decoding_options(
            args.run_dir, **decoding_flags.decoding_overrides(args)
        )
    except ValueError as error:
        parser.error(str(error))
    if args.compute_dtype == "bfloat16" and (warning := cpu.bfloat16_slow_warning()):
        print(f"warning: {warning}", file=sys.stderr)
    version_dir = export_run(
        args.run_dir,
        args.export_base,
        args.model_name,
        options,
        args.compute_dtype,
        warmup_max_batch=args.warmup_max_batch,
        warmup_max_source_tokens=args.warmup_max_source_tokens,
        warmup_signatures=args.warmup_signatures,
        signatures=args.signatures,
    )
    print(version_dir)


if __name__ == "__main__":
    main()
