"""Exports a trained translator as a SavedModel that TF Serving serves, text in and text out.

    python -m serving.export --run_dir runs/NAME [--export_base exports] [--model_name translator]

writes TF Serving's layout

    <export_base>/<model_name>/<version>/
        saved_model.pb, variables/       the graph and the weights
        assets/export_info.json          what was exported: run config, decoding options, versions
        assets.extra/tf_serving_warmup_requests   PredictionLogs TF Serving replays on load

with `version` one higher than the highest existing one. The version is first written to a
hidden staging directory next to it and then renamed, so a server polling `<model_name>/` never
sees a half-written version, and no existing version is ever overwritten.

Signatures (input `text`: tf.string `[batch]`; every output's first dimension is the batch):

    serving_default  greedy decoding with the key/value cache:
                     `translation` string [batch], `score` float32 [batch] (summed log-probability)
    beam_search      beam search (GNMT length penalty): `translation`, `score` (length-normalized)
    alignments       greedy, plus `source_tokens` string [batch, S] (subword pieces as the model saw
                     them, [START]/[END] included, "" padding), `target_tokens` string [batch, T]
                     ("" after [END]) and `alignment` float32 [batch, T, S] (last decoder layer's
                     cross-attention averaged over heads; 0 on padding rows)

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
import uuid

import keras
import tensorflow as tf
from tqdm.auto import tqdm

from model.decoding import beam_search_decode, greedy_decode, max_output_length
from training import artifacts
from model.special_tokens import END_ID, PAD_ID, START_ID

logger = logging.getLogger(__name__)

TEXT_INPUT = "text"
GREEDY_SIGNATURE = "serving_default"
BEAM_SIGNATURE = "beam_search"
ALIGNMENTS_SIGNATURE = "alignments"
SIGNATURE_NAMES = (GREEDY_SIGNATURE, BEAM_SIGNATURE, ALIGNMENTS_SIGNATURE)

EXPORT_INFO_FILE = "export_info.json"
WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
# Spanish sentences of different lengths (punctuation, accents, an inverted question mark), so
# warmup exercises the whole tokenizer and a few loop lengths.
WARMUP_TEXTS = (
    "Hola.",
    "¿Dónde está la estación de tren?",
    "El libro que me prestaste ayer es muy interesante.",
)

_VERSION_NAME = re.compile(r"^[0-9]+$")
_STAGING_PREFIX = ".staging-"
# Concurrent exporters may race for the same version number; each lost race retries with the next.
_MAX_VERSION_ATTEMPTS = 100


@dataclasses.dataclass(frozen=True)
class DecodingOptions:
    """Decoding settings baked into the exported graph.

    Attributes:
        beam_width: hypotheses kept per sentence by the `beam_search` signature.
        alpha: GNMT length-penalty exponent of beam search (0 disables it).
        max_length_ratio, max_length_offset: at most `ceil(ratio * S) + offset` output tokens for
            a batch whose longest source has S tokens, capped by the model's positional encodings.
    """

    beam_width: int = 4
    alpha: float = 0.6
    max_length_ratio: float = 1.5
    max_length_offset: int = 10

    def __post_init__(self):
        if not isinstance(self.beam_width, int) or self.beam_width < 1:
            raise ValueError(f"beam_width must be an int >= 1, got {self.beam_width!r}.")
        if not self.alpha >= 0:
            raise ValueError(f"alpha must be >= 0, got {self.alpha!r}.")
        if not self.max_length_ratio >= 0:
            raise ValueError(f"max_length_ratio must be >= 0, got {self.max_length_ratio!r}.")
        if not isinstance(self.max_length_offset, int) or self.max_length_offset < 1:
            raise ValueError(
                f"max_length_offset must be an int >= 1, got {self.max_length_offset!r}."
            )


def truncate_source_ids(ids, max_tokens):
    """Pads tokenized sources into a batch, cutting each to `max_tokens` tokens.

    Args:
        ids: `tf.RaggedTensor` `[batch, (tokens)]` of `[START] ... [END]` ids.
        max_tokens: int, the model's longest source (its `pe_input`).

    Returns:
        int32 `[batch, min(longest row, max_tokens)]`, `PAD_ID` padding. A cut row ends with
        [END] in place of its last kept token: the model was trained on [END]-terminated sources.
    """
    if max_tokens < 2:
        raise ValueError(f"max_tokens must leave room for [START] and [END], got {max_tokens}.")
    was_cut = ids.row_lengths() > max_tokens
    dense = tf.cast(ids[:, :max_tokens].to_tensor(default_value=PAD_ID), tf.int32)
    is_last_column = tf.equal(tf.range(tf.shape(dense)[1]), max_tokens - 1)
    return tf.where(was_cut[:, tf.newaxis] & is_last_column[tf.newaxis, :], END_ID, dense)


class TranslatorEndpoints:
    """The three signatures' functions: strings in, strings out, everything in the graph.

    A plain Python object on purpose: the `ExportArchive` tracks the Keras model's variables,
    and the tokenizers (whose SentencePiece ops hold the model as a resource), and these methods
    only close over them.

    Args:
        model: a built `model.Transformer`.
        source_tokenizer, target_tokenizer: `model.tokenizer.Tokenizer`s of the run.
        options: `DecodingOptions`.
    """

    def __init__(self, model, source_tokenizer, target_tokenizer, options=DecodingOptions()):
        if source_tokenizer.vocab_size != model.input_vocab_size:
            raise ValueError(
                f"The source tokenizer has {source_tokenizer.vocab_size} tokens but the model "
                f"expects {model.input_vocab_size}: they come from different runs."
            )
        if target_tokenizer.vocab_size != model.target_vocab_size:
            raise ValueError(
                f"The target tokenizer has {target_tokenizer.vocab_size} tokens but the model "
                f"expects {model.target_vocab_size}: they come from different runs."
            )
        self.model = model
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self.options = options

    def source_ids(self, text):
        """`[batch]` strings → int32 `[batch, S]` source ids, cut to the model's length."""
        return truncate_source_ids(self.source_tokenizer.tokenize(text), self.model.pe_input)

    @staticmethod
    def _on_nonempty_batch(translate, text):
        """Runs `translate(text)`, feeding it one "" when the batch is empty.

        The model's attention cannot run on a `[0, 0]` batch, and a `tf.cond` around it would
        need a hand-written empty output per signature; decoding one empty string and keeping
        none of its rows gives every output the right dtype and rank for free.
        """
        batch_size = tf.shape(text)[0]
        nonempty_text = tf.cond(
            batch_size > 0, lambda: text, lambda: tf.constant([""], tf.string)
        )
        return {name: output[:batch_size] for name, output in translate(nonempty_text).items()}

    def _max_output_length(self, source_ids):
        return max_output_length(
            source_ids,
            self.options.max_length_ratio,
            self.options.max_length_offset,
            limit=self.model.pe_target - 1,
        )

    def _greedy_decode(self, text):
        source_ids = self.source_ids(text)
        decoded = greedy_decode(
            self.model, source_ids, START_ID, END_ID, max_length=self._max_output_length(source_ids)
        )
        return source_ids, decoded

    def _translate_greedy(self, text):
        _, decoded = self._greedy_decode(text)
        return {
            "translation": self.target_tokenizer.detokenize(decoded["tokens"]),
            "score": decoded["scores"],
        }

    def _translate_beam_search(self, text):
        source_ids = self.source_ids(text)
        decoded = beam_search_decode(
            self.model,
            source_ids,
            START_ID,
            END_ID,
            beam_width=self.options.beam_width,
            alpha=self.options.alpha,
            max_length=self._max_output_length(source_ids),
        )
        return {
            "translation": self.target_tokenizer.detokenize(decoded["tokens"]),
            "score": decoded["scores"],
        }

    def _translate_with_alignments(self, text):
        source_ids, decoded = self._greedy_decode(text)
        target_ids = decoded["tokens"]
        return {
            "translation": self.target_tokenizer.detokenize(target_ids),
            "score": decoded["scores"],
            "source_tokens": _pieces_or_empty(self.source_tokenizer, source_ids),
            "target_tokens": _pieces_or_empty(self.target_tokenizer, target_ids),
            "alignment": decoded["alignment"],
        }

    def greedy(self, text):
        """`serving_default`: `text` `[batch]` → `translation` `[batch]`, `score` `[batch]`
        (summed log-probability of the tokens up to [END])."""
        return self._on_nonempty_batch(self._translate_greedy, text)

    def beam_search(self, text):
        """`beam_search`: as `greedy` with beam search; `score` is length-normalized."""
        return self._on_nonempty_batch(self._translate_beam_search, text)

    def alignments(self, text):
        """`alignments`: `greedy`'s outputs plus `source_tokens` `[batch, S]`, `target_tokens`
        `[batch, T]` and `alignment` `[batch, T, S]`."""
        return self._on_nonempty_batch(self._translate_with_alignments, text)


def _pieces_or_empty(tokenizer, ids):
    """Subword pieces of `ids`, "" where `ids` is padding."""
    return tf.where(tf.not_equal(ids, PAD_ID), tokenizer.lookup(ids), "")


def build_export_archive(model, source_tokenizer, target_tokenizer, options=DecodingOptions()):
    """Traces the three signatures into a `keras.export.ExportArchive`.

    Tracing is the slow part of an export (seconds per signature); the returned archive can be
    written out any number of times with `write_version`.

    Returns:
        `keras.export.ExportArchive` with endpoints `SIGNATURE_NAMES`.
    """
    if not model.built:
        model.build(((None, None), (None, None)))
    endpoints = TranslatorEndpoints(model, source_tokenizer, target_tokenizer, options)
    archive = keras.export.ExportArchive()
    archive.track(model)
    # The SentencePiece op's model is a resource: untracked, `write_out` fails with "references
    # an 'untracked' resource".
    archive.track(source_tokenizer)
    if target_tokenizer is not source_tokenizer:
        archive.track(target_tokenizer)
    text_spec = [tf.TensorSpec([None], tf.string, name=TEXT_INPUT)]
    functions = {
        GREEDY_SIGNATURE: endpoints.greedy,
        BEAM_SIGNATURE: endpoints.beam_search,
        ALIGNMENTS_SIGNATURE: endpoints.alignments,
    }
    for name in tqdm(SIGNATURE_NAMES, desc="tracing signatures", unit=" signature"):
        endpoint = archive.add_endpoint(name, functions[name], input_signature=text_spec)
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


def write_warmup_requests(version_dir, model_name, texts=WARMUP_TEXTS, signatures=SIGNATURE_NAMES):
    """Writes `assets.extra/tf_serving_warmup_requests`: one PredictRequest per signature.

    TF Serving replays these records when it loads the version, so the first real request does
    not pay for graph optimization.

    Returns:
        the file's path.
    """
    from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

    path = os.path.join(version_dir, WARMUP_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for signature_name in signatures:
            request = predict_pb2.PredictRequest()
            request.model_spec.name = model_name
            request.model_spec.signature_name = signature_name
            request.inputs[TEXT_INPUT].CopyFrom(
                tf.make_tensor_proto([text.encode("utf-8") for text in texts], dtype=tf.string)
            )
            log = prediction_log_pb2.PredictionLog()
            log.predict_log.request.CopyFrom(request)
            writer.write(log.SerializeToString())
    return path


def write_version(archive, export_base, model_name="translator", export_info=None,
                  warmup_texts=WARMUP_TEXTS):
    """Writes `archive` as the next version of `<export_base>/<model_name>/`, atomically.

    Args:
        archive: from `build_export_archive`.
        export_base: str or os.PathLike, the directory holding one folder per model.
        model_name: the model's folder name (TF Serving's model name).
        export_info: JSON-serializable dict written to `assets/export_info.json`.
        warmup_texts: sentences of the warmup requests.

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
            with open(os.path.join(staging_dir, "assets", EXPORT_INFO_FILE), "w",
                      encoding="utf-8") as info_file:
                json.dump(export_info, info_file, indent=2, sort_keys=True)
                info_file.write("\n")
        write_warmup_requests(staging_dir, model_name, warmup_texts)
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


def make_export_info(model, source_tokenizer, target_tokenizer, options, run_config=None):
    """The metadata written to `assets/export_info.json`."""
    return {
        "signatures": list(SIGNATURE_NAMES),
        "decoding": dataclasses.asdict(options),
        "max_source_tokens": int(model.pe_input),
        "max_output_tokens": int(model.pe_target) - 1,
        "source_vocab_size": source_tokenizer.vocab_size,
        "target_vocab_size": target_tokenizer.vocab_size,
        "run_config": run_config,
        "tensorflow_version": tf.__version__,
        "keras_version": keras.__version__,
        "exported_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def export_translator(model, source_tokenizer, target_tokenizer, export_base,
                      model_name="translator", options=DecodingOptions(), run_config=None):
    """Exports a translator in memory as the next version under `<export_base>/<model_name>`.

    Returns:
        str, the new version directory.
    """
    archive = build_export_archive(model, source_tokenizer, target_tokenizer, options)
    info = make_export_info(model, source_tokenizer, target_tokenizer, options, run_config)
    return write_version(archive, export_base, model_name, info)


def export_run(run_dir, export_base="exports", model_name="translator", options=DecodingOptions()):
    """Loads a training run (`training.artifacts.load_trained`) and exports it.

    Returns:
        str, the new version directory.
    """
    model, source_tokenizer, target_tokenizer, config = artifacts.load_trained(run_dir)
    return export_translator(
        model, source_tokenizer, target_tokenizer, export_base, model_name, options, config
    )


def main(argv=None):
    defaults = DecodingOptions()
    parser = argparse.ArgumentParser(
        description=(
            "Export a trained translator (a training run directory) as a TF Serving SavedModel "
            "<export_base>/<model_name>/<version>/ with signatures serving_default (greedy), "
            "beam_search and alignments, text in and text out. The version is one higher than "
            "the highest existing one; existing versions are never overwritten."
        )
    )
    parser.add_argument("--run_dir", required=True,
                        help="training run directory (config.json, tokenizer/, model.keras)")
    parser.add_argument("--export_base", default="exports",
                        help="directory holding one folder per served model (default: exports)")
    parser.add_argument("--model_name", default="translator",
                        help="model name, i.e. folder under export_base (default: translator)")
    parser.add_argument("--beam_width", type=int, default=defaults.beam_width,
                        help=f"beam width of the beam_search signature (default: {defaults.beam_width})")
    parser.add_argument("--alpha", type=float, default=defaults.alpha,
                        help=f"beam search length-penalty exponent (default: {defaults.alpha})")
    parser.add_argument("--max_length_ratio", type=float, default=defaults.max_length_ratio,
                        help="output tokens at most ratio * source tokens + offset "
                             f"(default: {defaults.max_length_ratio})")
    parser.add_argument("--max_length_offset", type=int, default=defaults.max_length_offset,
                        help=f"see --max_length_ratio (default: {defaults.max_length_offset})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    try:
        options = DecodingOptions(args.beam_width, args.alpha, args.max_length_ratio,
                                  args.max_length_offset)
    except ValueError as error:
        parser.error(str(error))
    version_dir = export_run(args.run_dir, args.export_base, args.model_name, options)
    print(version_dir)


if __name__ == "__main__":
    main()
