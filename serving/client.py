"""gRPC client for the translator served by TF Serving (or by `python -m serving.server`).

Python API:

    from serving.client import TranslationClient
    with TranslationClient("127.0.0.1:8500") as client:
        client.translate(["hello world"])                      # -> ["..."]
        client.translate_with_details(["hello world"], signature_name="alignments")
        client.translate_n_best(["hello world"], 3)             # -> [[Translation] * 3]
        client.score(["hola"], ["hello"])                        # -> [Score]
        client.sample(["hola"], seeds=[7])                       # -> [Translation]
        client.translate_with_prefix(["hola"], ["Hello"])        # -> [Translation]
        client.alternatives(["hola"], ["Hello"])                 # -> [[Translation] * N]

Command line:

    python -m serving.client "hello world" "good morning"
    python -m serving.client --input_file source.txt --batch_size 64 --signature_name beam_search
    echo "hello world" | python -m serving.client --alignments
    python -m serving.client --n_best 3 "hello world"          # i ||| translation ||| score
    python -m serving.client --input_file src.txt --target_file tgt.txt   # score per line
    python -m serving.client --sample --seed 7 "hello world"  # sentence i drawn with seed 7 + i
    python -m serving.client --target_prefix "The" "hello world"
    python -m serving.client --alternatives --target_prefix "The" "hello world"  # i ||| ... ||| score

Only the official tensorflow-serving-api stubs are used, so the client works
unchanged against the real tensorflow_model_server. UNAVAILABLE (server not up
yet, restarting, connection reset) is retried with exponential backoff; every
other status is final and reported with its gRPC code and message.
"""

import argparse
import contextlib
import dataclasses
import json
import random
import sys
import time
from collections.abc import Iterable, Iterator, Sequence

import grpc
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)
from tqdm import tqdm

from common.serving_contract import (
    ALIGNMENT_OUTPUT,
    ALIGNMENTS_SIGNATURE,
    ALTERNATIVES_SIGNATURE,
    GREEDY_SIGNATURE,
    INPUT_DTYPES,
    INPUTS,
    N_BEST_SIGNATURE,
    PREFIX_SIGNATURE,
    SAMPLE_SIGNATURE,
    SCORE_OUTPUT,
    SCORE_SIGNATURE,
    SCORES_OUTPUT,
    SEED_INPUT,
    SIGNATURE_NAMES,
    SIGNATURE_OUTPUTS,
    SIGNATURES,
    SIGNATURES_BY_NAME,
    SOURCE_TOKENS_OUTPUT,
    TARGET_INPUT,
    TARGET_PREFIX_INPUT,
    TARGET_TOKENS_OUTPUT,
    TEXT_INPUT,
    TOKEN_SCORES_OUTPUT,
    TRANSLATION_OUTPUT,
    TRANSLATION_OUTPUTS,
    TRANSLATIONS_OUTPUT,
)

_MAX_MESSAGE_BYTES = 2**31 - 1
_INT32_LIMIT = 2**31


def backoff_delay(backoff: float, attempt: int) -> float:
    """Seconds to wait before retrying after failed attempt `attempt` (0 for the first):
    `backoff` doubled per attempt, times a random jitter factor in [0.5, 1.5)."""
    return backoff * (2**attempt) * random.uniform(0.5, 1.5)


def reconnect_options(backoff: float) -> list[tuple[str, int]]:
    """gRPC channel options that reconnect to a server gone down every `backoff` to
    16 × `backoff` seconds. gRPC's own reconnect backoff starts at 1 s and grows to 120 s: a
    call after a server restart would find the channel still waiting to reconnect."""
    milliseconds = max(int(backoff * 1000), 1)
    return [
        ("grpc.initial_reconnect_backoff_ms", milliseconds),
        ("grpc.min_reconnect_backoff_ms", milliseconds),
        ("grpc.max_reconnect_backoff_ms", milliseconds * 16),
    ]


class TranslationError(RuntimeError):
    """A request failed; `code` is the grpc.StatusCode and `details` the server's message."""

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


@dataclasses.dataclass
class Translation:
    """One translated sentence.

    Attributes:
        source: the input sentence.
        translation: the translated sentence.
        score: the model's score for it.
        source_tokens: [S] source tokens (alignments signature only).
        target_tokens: [T] target tokens (alignments signature only).
        alignment: [T, S] float32 attention weights (alignments signature only);
            row t is how much target token t attends to each source token.
    """

    source: str
    translation: str
    score: float
    source_tokens: list[str] | None = None
    target_tokens: list[str] | None = None
    alignment: np.ndarray | None = None

    def most_attended(self) -> list[tuple]:
        """[(target_token, source_token, weight)] with each target's most-attended source token."""
        if self.alignment is None or not self.source_tokens:
            return []
        best = self.alignment.argmax(axis=1)
        return [
            (target, self.source_tokens[s], float(self.alignment[t, s]))
            for t, (target, s) in enumerate(zip(self.target_tokens, best))
        ]


@dataclasses.dataclass
class Score:
    """The model's log-probabilities of a given translation (the `score` signature).

    Attributes:
        source, target: the pair scored.
        score: log P(target | source), the sum of `token_scores`.
        tokens: the target's subword pieces, [END] last.
        token_scores: each piece's log-probability given the source and the pieces before it.
    """

    source: str
    target: str
    score: float
    tokens: list[str]
    token_scores: list[float]


def _string_tensor(texts: Sequence[str]) -> tensor_pb2.TensorProto:
    proto = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING)
    proto.tensor_shape.dim.append(tensor_shape_pb2.TensorShapeProto.Dim(size=len(texts)))
    proto.string_val.extend(text.encode("utf-8") for text in texts)
    return proto


def _int32_tensor(values: Sequence[int]) -> tensor_pb2.TensorProto:
    proto = tensor_pb2.TensorProto(dtype=types_pb2.DT_INT32)
    proto.tensor_shape.dim.append(tensor_shape_pb2.TensorShapeProto.Dim(size=len(values)))
    proto.int_val.extend(values)
    return proto


# Each input's encoder, by its dtype in the contract (`common.serving_contract.INPUTS`).
_ENCODERS = {"string": _string_tensor, "int32": _int32_tensor}


def _tensor(input_name: str, values: Sequence) -> tensor_pb2.TensorProto:
    """`values` (one per sentence) as the `[batch]` tensor of the signature input `input_name`."""
    return _ENCODERS[INPUT_DTYPES[input_name]](values)


def _check_texts(texts) -> None:
    if isinstance(texts, str) or not all(isinstance(text, str) for text in texts):
        raise TypeError("texts must be a list of str")


def _decode(value: bytes) -> str:
    return value.decode("utf-8", errors="replace")


def _strip_padding(tokens: np.ndarray) -> list[str]:
    """Token rows are padded with "" to the batch's longest row."""
    decoded = [_decode(token) for token in tokens]
    while decoded and decoded[-1] == "":
        decoded.pop()
    return decoded


class TranslationClient:
    """Translates with a served translator over gRPC.

    Args:
        server: "host:port" of the gRPC API.
        model_name: served model name.
        signature_name: default signature (`serving_default` = greedy,
            `beam_search`, or `alignments`).
        timeout: seconds per attempt.
        retries: extra attempts after UNAVAILABLE (0 = no retry).
        backoff: first retry delay in seconds; doubled each retry, with jitter.
        version: serve from this model version instead of the latest.
    """

    def __init__(
        self,
        server: str = "127.0.0.1:8500",
        model_name: str = "translator",
        signature_name: str = GREEDY_SIGNATURE,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.1,
        version: int | None = None,
    ):
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.server = server
        self.model_name = model_name
        self.signature_name = signature_name
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.version = version
        self._channel = grpc.insecure_channel(
            server,
            options=[
                ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
                *reconnect_options(backoff),
            ],
        )
        self._predict_stub = prediction_service_pb2_grpc.PredictionServiceStub(self._channel)
        self._model_stub = model_service_pb2_grpc.ModelServiceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "TranslationClient":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _call(self, method, request):
        """Calls a stub method, retrying UNAVAILABLE with exponential backoff and jitter."""
        for attempt in range(self.retries + 1):
            try:
                return method(request, timeout=self.timeout)
            except grpc.RpcError as error:
                if error.code() != grpc.StatusCode.UNAVAILABLE or attempt == self.retries:
                    raise TranslationError(error.code(), error.details() or "") from None
                time.sleep(backoff_delay(self.backoff, attempt))
        raise AssertionError("unreachable")

    def _fill_model_spec(self, model_spec, signature_name: str | None = None) -> None:
        model_spec.name = self.model_name
        if signature_name is not None:
            model_spec.signature_name = signature_name
        if self.version is not None:
            model_spec.version.value = self.version

    def predict(self, signature_name: str, inputs: dict[str, Sequence]) -> dict[str, np.ndarray]:
        """Runs any signature on plain values: `inputs` maps each of its input names
        (`common.serving_contract.SIGNATURE_INPUTS`) to one value per sentence, encoded with the
        contract's dtype.

        Returns:
            `{output name: array}`, the batch first; at least the outputs the contract lists
            (`SIGNATURE_OUTPUTS`; a signature it does not name: `translation` and `score`).

        Raises:
            KeyError: an input name the contract does not know.
            TranslationError: the server's status (after retries for UNAVAILABLE), or an
                output missing.
        """
        return self._predict(
            signature_name,
            {name: _tensor(name, values) for name, values in inputs.items()},
            SIGNATURE_OUTPUTS.get(signature_name, TRANSLATION_OUTPUTS),
        )

    def _predict(
        self, signature: str, inputs: dict[str, tensor_pb2.TensorProto], outputs: Sequence[str]
    ) -> dict[str, np.ndarray]:
        """Runs `signature` on `inputs`; returns its outputs as arrays, at least `outputs`."""
        request = predict_pb2.PredictRequest()
        self._fill_model_spec(request.model_spec, signature)
        for alias, proto in inputs.items():
            request.inputs[alias].CopyFrom(proto)
        response = self._call(self._predict_stub.Predict, request)
        arrays = {alias: tf.make_ndarray(proto) for alias, proto in response.outputs.items()}
        missing = set(outputs) - set(arrays)
        if missing:
            raise TranslationError(
                grpc.StatusCode.INTERNAL, f"signature {signature} returned no {sorted(missing)}"
            )
        return arrays

    def translate_n_best(
        self, texts: Sequence[str], n: int | None = None
    ) -> list[list[Translation]]:
        """The `n` best translations of each sentence, best first (the `n_best` signature).

        Args:
            texts: [batch] sentences (str).
            n: translations per sentence, at most the export's `num_hypotheses`; None: all.

        Returns:
            [batch] lists of `n` Translation, their `score` length-normalized.

        Raises:
            TypeError: `texts` is not a sequence of str.
            ValueError: `n` is below 1 or above what the export returns.
            TranslationError: the server's status (after retries for UNAVAILABLE).
        """
        _check_texts(texts)
        if n is not None and n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if not texts:
            return []
        outputs = self.predict(N_BEST_SIGNATURE, {TEXT_INPUT: texts})
        return _translation_lists(texts, outputs, n)

    def sample(self, texts: Sequence[str], seeds: Sequence[int]) -> list[Translation]:
        """Random translations (the `sample` signature: the export's top-k, top-p and
        temperature), sentence i drawn with `seeds[i]`: the same text and seed, the same
        translation, whatever else the request holds.

        Raises:
            TypeError: `texts` is not a sequence of str.
            ValueError: `seeds` is not one int32 per text.
            TranslationError: the server's status (after retries for UNAVAILABLE).
        """
        _check_texts(texts)
        if len(seeds) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(seeds)} seeds")
        if not all(-_INT32_LIMIT <= seed < _INT32_LIMIT for seed in seeds):
            raise ValueError(f"seeds must be int32, got {list(seeds)}")
        return self.translate_with_details(
            texts, SAMPLE_SIGNATURE, {SEED_INPUT: _tensor(SEED_INPUT, seeds)}
        )

    def translate_with_prefix(
        self, texts: Sequence[str], target_prefixes: Sequence[str]
    ) -> list[Translation]:
        """Translations starting with `target_prefixes[i]` ("" none), by the export's beam
        search (the `prefix` signature); `score` covers the pieces after the prefix."""
        return self.translate_with_details(
            texts, PREFIX_SIGNATURE, self._prefix_inputs(texts, target_prefixes)
        )

    def alternatives(
        self, texts: Sequence[str], target_prefixes: Sequence[str]
    ) -> list[list[Translation]]:
        """CTranslate2's return_alternatives (the `alternatives` signature): per sentence the
        export's `num_alternatives` most probable next pieces after its prefix, best first, each
        continued by beam search, as translations with their scores."""
        inputs = self._prefix_inputs(texts, target_prefixes)
        if not texts:
            return []
        outputs = self._predict(
            ALTERNATIVES_SIGNATURE,
            {TEXT_INPUT: _tensor(TEXT_INPUT, texts), **inputs},
            SIGNATURE_OUTPUTS[ALTERNATIVES_SIGNATURE],
        )
        return _translation_lists(texts, outputs)

    @staticmethod
    def _prefix_inputs(texts, target_prefixes) -> dict[str, tensor_pb2.TensorProto]:
        _check_texts(texts)
        _check_texts(target_prefixes)
        if len(texts) != len(target_prefixes):
            raise ValueError(f"{len(texts)} texts but {len(target_prefixes)} target prefixes")
        return {TARGET_PREFIX_INPUT: _tensor(TARGET_PREFIX_INPUT, target_prefixes)}

    def score(self, texts: Sequence[str], targets: Sequence[str]) -> list[Score]:
        """Scores `targets[i]` as the translation of `texts[i]` (the `score` signature).

        Raises:
            TypeError: `texts` or `targets` is not a sequence of str.
            ValueError: they differ in length.
            TranslationError: the server's status (after retries for UNAVAILABLE).
        """
        _check_texts(texts)
        _check_texts(targets)
        if len(texts) != len(targets):
            raise ValueError(f"{len(texts)} texts but {len(targets)} targets")
        if not texts:
            return []
        outputs = self.predict(SCORE_SIGNATURE, {TEXT_INPUT: texts, TARGET_INPUT: targets})
        return _scores(texts, targets, outputs)

    def translate_with_details(
        self,
        texts: Sequence[str],
        signature_name: str | None = None,
        extra_inputs: dict[str, tensor_pb2.TensorProto] | None = None,
    ) -> list[Translation]:
        """Translates a batch of sentences.

        Args:
            texts: [batch] sentences (str).
            signature_name: overrides the client's default signature.
            extra_inputs: the signature's inputs besides `text`, each [batch].

        Returns:
            [batch] Translation; tokens and alignment are filled when the
            `alignments` signature is used.

        Raises:
            TypeError: `texts` is not a sequence of str.
            TranslationError: the server's status (after retries for UNAVAILABLE).
        """
        _check_texts(texts)
        if not texts:
            return []
        signature = signature_name or self.signature_name
        outputs = self._predict(
            signature,
            {TEXT_INPUT: _tensor(TEXT_INPUT, texts), **(extra_inputs or {})},
            TRANSLATION_OUTPUTS,
        )
        return _translations(texts, outputs)

    def translate(self, texts: Sequence[str], signature_name: str | None = None) -> list[str]:
        """Translates a batch of sentences; returns [batch] translations."""
        return [result.translation for result in self.translate_with_details(texts, signature_name)]

    def metadata(self) -> dict:
        """Signatures of the served version.

        Returns:
            {"version": int, "signatures": {name: {"inputs": {alias: (dtype, shape)},
            "outputs": {...}}}} with dtypes like "DT_STRING" and shapes as lists
            (-1 = any size).
        """
        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        self._fill_model_spec(request.model_spec)
        response = self._call(self._predict_stub.GetModelMetadata, request)
        signature_map = get_model_metadata_pb2.SignatureDefMap()
        response.metadata["signature_def"].Unpack(signature_map)

        def describe(tensors):
            return {
                alias: (
                    types_pb2.DataType.Name(info.dtype),
                    None
                    if info.tensor_shape.unknown_rank
                    else [dim.size for dim in info.tensor_shape.dim],
                )
                for alias, info in sorted(tensors.items())
            }

        return {
            "version": response.model_spec.version.value,
            "signatures": {
                name: {"inputs": describe(sig.inputs), "outputs": describe(sig.outputs)}
                for name, sig in sorted(signature_map.signature_def.items())
                if not name.startswith("__")
            },
        }

    def status(self) -> list[dict]:
        """[{"version", "state", "error_code", "error_message"}] for every version, newest first."""
        request = get_model_status_pb2.GetModelStatusRequest()
        self._fill_model_spec(request.model_spec)
        response = self._call(self._model_stub.GetModelStatus, request)
        state_name = get_model_status_pb2.ModelVersionStatus.State.Name
        return [
            {
                "version": row.version,
                "state": state_name(row.state),
                "error_code": row.status.error_code,
                "error_message": row.status.error_message,
            }
            for row in response.model_version_status
        ]


def _translations(texts, outputs) -> list[Translation]:
    """[batch] Translation of `translation` and `score` outputs, with the tokens and alignment
    of `alignments`'s outputs when they are there."""
    results = []
    for row, source in enumerate(texts):
        result = Translation(
            source=source,
            translation=_decode(outputs[TRANSLATION_OUTPUT][row]),
            score=float(outputs[SCORE_OUTPUT][row]),
        )
        if ALIGNMENT_OUTPUT in outputs:
            result.source_tokens = _strip_padding(outputs[SOURCE_TOKENS_OUTPUT][row])
            result.target_tokens = _strip_padding(outputs[TARGET_TOKENS_OUTPUT][row])
            result.alignment = outputs[ALIGNMENT_OUTPUT][row][
                : len(result.target_tokens), : len(result.source_tokens)
            ]
        results.append(result)
    return results


def _scores(texts, targets, outputs) -> list[Score]:
    """[batch] Score of the `score` signature's outputs for `targets` of `texts`."""
    results = []
    for row, (source, target) in enumerate(zip(texts, targets)):
        tokens = _strip_padding(outputs[TARGET_TOKENS_OUTPUT][row])
        results.append(
            Score(
                source=source,
                target=target,
                score=float(outputs[SCORE_OUTPUT][row]),
                tokens=tokens,
                token_scores=[float(v) for v in outputs[TOKEN_SCORES_OUTPUT][row][: len(tokens)]],
            )
        )
    return results


def _translation_lists(texts, outputs, n=None) -> list[list[Translation]]:
    """[batch] lists of the first `n` (None: all) Translation of `translations` and `scores`
    `[batch, N]` outputs.

    Raises:
        ValueError: `n` is more than the N the outputs hold.
    """
    exported = outputs[TRANSLATIONS_OUTPUT].shape[1]
    if n is not None and n > exported:
        raise ValueError(
            f"n is {n}, but the served model returns {exported} translations per sentence: "
            "re-export it with a larger --num_hypotheses (and --beam_width)."
        )
    return [
        [
            Translation(source=source, translation=_decode(translation), score=float(score))
            for translation, score in zip(translations[:n], scores[:n])
        ]
        for source, translations, scores in zip(
            texts, outputs[TRANSLATIONS_OUTPUT], outputs[SCORES_OUTPUT]
        )
    ]


# -------------------------------------------------------------------- command line


def _batches(lines: Iterable[str], batch_size: int) -> Iterator[list[str]]:
    batch = []
    for line in lines:
        batch.append(line.rstrip("\n"))
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


def _print_translation(result: Translation, show_alignment: bool, out) -> None:
    print(result.translation, file=out)
    if show_alignment:
        for target, source, weight in result.most_attended():
            print(f"  {target} <- {source} ({weight:.2f})", file=out)


def _print_n_best(index: int, hypotheses: list[Translation], out) -> None:
    """Moses's n-best format: `sentence index ||| translation ||| score`, best first."""
    for hypothesis in hypotheses:
        print(f"{index} ||| {hypothesis.translation} ||| {hypothesis.score:.6f}", file=out)


def _print_score(result: Score, out) -> None:
    pieces = " ".join(
        f"{token}:{value:.4f}" for token, value in zip(result.tokens, result.token_scores)
    )
    print(f"{result.score:.6f}\t{pieces}", file=out)


def _flag_given(args, flag: str) -> bool:
    value = getattr(args, flag.removeprefix("--"))
    return value is not None and value is not False


def _signature_inputs(signature_name: str):
    """The contract's inputs of `signature_name` (a signature it does not name: `text`)."""
    record = SIGNATURES_BY_NAME.get(signature_name)
    return record.inputs if record is not None else (INPUTS[TEXT_INPUT],)


def _chosen_signature(args) -> str:
    """The signature the command line calls: the one whose `client_flag`
    (`common.serving_contract.SIGNATURES`) is given, else `--signature_name`.

    A flag that supplies an input of another chosen signature chooses nothing itself
    (`--target_prefix` with `--alternatives`).

    Raises:
        ValueError: the flags of two signatures, or an input's flag (`--seed`) given without a
            signature that takes it.
    """
    given = [
        record
        for record in SIGNATURES
        if record.client_flag and _flag_given(args, record.client_flag)
    ]
    chosen = [
        record
        for record in given
        if not any(
            record.client_flag in {item.client_flag for item in other.inputs}
            for other in given
            if other is not record
        )
    ]
    if len(chosen) > 1:
        raise ValueError(
            f"{' and '.join(record.client_flag for record in chosen)} cannot go together"
        )
    signature = chosen[0].name if chosen else args.signature_name
    for record in INPUTS.values():
        if (
            record.client_flag
            and _flag_given(args, record.client_flag)
            and record not in _signature_inputs(signature)
        ):
            takers = [
                item.client_flag
                for item in SIGNATURES
                if record in item.inputs and item.client_flag
            ]
            raise ValueError(f"{record.client_flag} goes with {' or '.join(takers)}")
    return signature


class _CommandLineInputs:
    """The values of a signature's inputs for a batch of the command line's sentences: `text`
    the sentences, `target` the same lines of `--target_file`, `seed` each sentence's seed
    (`--seed` + its index over the whole input), `target_prefix` `--target_prefix` ("" none)."""

    def __init__(self, args, targets, first_seed: int):
        self.args = args
        self.targets = targets
        self.first_seed = first_seed

    def values(self, inputs, batch: list[str], index: int) -> dict[str, list]:
        """`{input name: values}` of `inputs` (contract `Input`s) for `batch`, whose first
        sentence is sentence `index` of the whole input.

        Raises:
            ValueError: an input the command line cannot supply, or too few target lines.
        """
        sources = {
            TEXT_INPUT: lambda: batch,
            TARGET_INPUT: lambda: self._targets(len(batch)),
            # Wrapped into int32: sentence i's seed whatever the batches.
            SEED_INPUT: lambda: [
                (self.first_seed + index + row + _INT32_LIMIT) % (2 * _INT32_LIMIT) - _INT32_LIMIT
                for row in range(len(batch))
            ],
            TARGET_PREFIX_INPUT: lambda: [self.args.target_prefix or ""] * len(batch),
        }
        missing = [record.name for record in inputs if record.name not in sources]
        if missing:
            raise ValueError(f"the command line cannot supply the input(s) {', '.join(missing)}")
        return {record.name: sources[record.name]() for record in inputs}

    def _targets(self, count: int) -> list[str]:
        if self.targets is None:
            flag = INPUTS[TARGET_INPUT].client_flag
            raise ValueError(f"the input {TARGET_INPUT} is read from {flag}: give one")
        lines = [self.targets.readline() for _ in range(count)]
        if not all(lines):
            raise ValueError(f"{self.args.target_file} has fewer lines than the input")
        return [line.rstrip("\n") for line in lines]


def _print_outputs(values: dict, outputs: dict, index: int, args, out) -> None:
    """Prints a batch's outputs by what the signature returns: n-best lines for `translations`
    (the first `--n_best`), score lines for `token_scores`, the translations for `translation`
    (with `--alignments`, each target token's most-attended source token), else one JSON object
    per sentence holding its row of every output."""
    texts = values[TEXT_INPUT]
    if TRANSLATIONS_OUTPUT in outputs:
        for row, hypotheses in enumerate(_translation_lists(texts, outputs, args.n_best)):
            _print_n_best(index + row, hypotheses, out)
    elif TOKEN_SCORES_OUTPUT in outputs:
        for result in _scores(texts, values[TARGET_INPUT], outputs):
            _print_score(result, out)
    elif TRANSLATION_OUTPUT in outputs:
        for result in _translations(texts, outputs):
            _print_translation(result, args.alignments, out)
    else:
        for row in range(len(texts)):
            fields = {name: _json_value(value[row]) for name, value in outputs.items()}
            print(json.dumps(fields, ensure_ascii=False), file=out)


def _json_value(array: np.ndarray):
    """One output row as JSON values: strings decoded, numbers as Python numbers."""
    if array.dtype == object:
        return np.vectorize(_decode, otypes=[object])(array).tolist()
    return array.tolist()


def build_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m serving.client",
        description="Translate sentences with a model served by TF Serving (gRPC). Sentences come "
        "from the arguments, --input_file, or standard input (one per line); "
        "translations are printed one per line.",
    )
    parser.add_argument("texts", nargs="*", help="sentences to translate")
    parser.add_argument("--input_file", help="file with one sentence per line")
    parser.add_argument(
        "--batch_size",
        type=int,
        default=32,
        help="sentences per request for file/stdin input (default 32)",
    )
    parser.add_argument(
        "--server", default="127.0.0.1:8500", help="gRPC host:port (default %(default)s)"
    )
    parser.add_argument(
        "--model_name", default="translator", help="served model (default %(default)s)"
    )
    parser.add_argument(
        "--signature_name",
        default=GREEDY_SIGNATURE,
        help="the signature to call unless a flag below chooses one: "
        f"{', '.join(SIGNATURE_NAMES)} (default %(default)s, greedy decoding)",
    )
    parser.add_argument("--version", type=int, help="model version (default: latest)")
    parser.add_argument(
        "--timeout", type=float, default=10.0, help="seconds per request (default 10)"
    )
    parser.add_argument("--retries", type=int, default=3, help="retries on UNAVAILABLE (default 3)")
    parser.add_argument(
        "--alignments",
        action="store_true",
        help=f"use the {ALIGNMENTS_SIGNATURE} signature and print, under each translation, "
        "every target token with its most-attended source token",
    )
    parser.add_argument(
        "--n_best",
        type=int,
        metavar="N",
        help=f"use the {N_BEST_SIGNATURE} signature and print the N best translations of each "
        "sentence, best first, as `index ||| translation ||| score` lines (index counts the "
        "sentences from 0; N at most the export's --num_hypotheses)",
    )
    parser.add_argument(
        "--target_file",
        help=f"use the {SCORE_SIGNATURE} signature: score line i of this file as the translation "
        "of sentence i, printing `score<TAB>piece:log-probability ...` lines",
    )
    parser.add_argument(
        "--sample",
        action="store_true",
        help=f"use the {SAMPLE_SIGNATURE} signature: random translations with the export's "
        "top-k, top-p and temperature",
    )
    parser.add_argument(
        "--seed",
        type=int,
        help="with --sample, sentence i (counted from 0 over the whole input) is drawn with seed "
        "SEED + i, so a run is reproducible whatever --batch_size (default: a random SEED)",
    )
    parser.add_argument(
        "--target_prefix",
        help=f"use the {PREFIX_SIGNATURE} signature: every translation starts with these words "
        "(tokenized by the target model), continued by the export's beam search",
    )
    parser.add_argument(
        "--alternatives",
        action="store_true",
        help=f"use the {ALTERNATIVES_SIGNATURE} signature: the export's --num_alternatives most "
        "probable next pieces after --target_prefix (default: none), each continued, printed as "
        "`index ||| translation ||| score` lines",
    )
    parser.add_argument(
        "--metadata", action="store_true", help="print the served signatures and exit"
    )
    parser.add_argument(
        "--status", action="store_true", help="print the model's version states and exit"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_arg_parser().parse_args(argv)
    if args.batch_size <= 0:
        print("error: --batch_size must be positive", file=sys.stderr)
        return 2
    if args.n_best is not None and args.n_best < 1:
        print("error: --n_best must be >= 1", file=sys.stderr)
        return 2
    try:
        signature = _chosen_signature(args)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    first_seed = random.randrange(_INT32_LIMIT) if args.seed is None else args.seed
    try:
        client = TranslationClient(
            args.server,
            args.model_name,
            signature,
            args.timeout,
            args.retries,
            version=args.version,
        )
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        with client:
            if args.metadata or args.status:
                if args.status:
                    for row in client.status():
                        print(
                            f"version {row['version']}: {row['state']}"
                            + (f" ({row['error_message']})" if row["error_message"] else "")
                        )
                if args.metadata:
                    info = client.metadata()
                    print(f"version {info['version']}")
                    for name, signature_info in info["signatures"].items():
                        print(
                            f"{name}: inputs {signature_info['inputs']} -> "
                            f"outputs {signature_info['outputs']}"
                        )
                return 0
            with contextlib.ExitStack() as stack:
                if args.texts:
                    batches: Iterable[list[str]] = [list(args.texts)]
                elif args.input_file:
                    batches = _batches(
                        stack.enter_context(open(args.input_file, encoding="utf-8")),
                        args.batch_size,
                    )
                else:
                    batches = _batches(sys.stdin, args.batch_size)
                targets = (
                    stack.enter_context(open(args.target_file, encoding="utf-8"))
                    if args.target_file
                    else None
                )
                inputs = _CommandLineInputs(args, targets, first_seed)
                index = 0
                # Progress goes to stderr, and only for a person watching a terminal.
                for batch in tqdm(
                    batches,
                    unit="batch",
                    file=sys.stderr,
                    disable=bool(args.texts) or not sys.stderr.isatty(),
                ):
                    values = inputs.values(_signature_inputs(signature), batch, index)
                    outputs = client.predict(signature, values)
                    _print_outputs(values, outputs, index, args, sys.stdout)
                    index += len(batch)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except TranslationError as error:
        print(f"error: {error.code.name}: {error.details}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
