"""REST front end with TF Serving's URLs, JSON formats, error bodies and HTTP codes.

    POST /v1/models/NAME[/versions/N | /labels/L]:predict   {"instances": [...]} or {"inputs": ...}
    GET  /v1/models/NAME[/versions/N | /labels/L]            model status
    GET  /v1/models/NAME[/versions/N | /labels/L]/metadata   signature defs

The JSON <-> tensor rules and messages follow tensorflow_serving/util/json_tensor.cc:
row format ("instances", answered with "predictions") and columnar format
("inputs", answered with "outputs"); strings may be sent as {"b64": "..."}; an
output whose alias ends in "_bytes" is returned base64-encoded. Errors are
`{"error": "<message>"}` with the HTTP status TF Serving maps the gRPC code to.

`RestApi` is the transport-free part; `RestServer` serves it over cheroot's
HTTP/1.1 server (see its docstring for timeouts, limits and shutdown).
"""

import base64
import decimal
import http
import io
import json
import logging
import math
import os
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import cheroot.errors
import cheroot.makefile
import cheroot.server
import grpc
import numpy as np
import tensorflow as tf
from google.protobuf import json_format
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_pb2,
    predict_pb2,
)

from serving.model_server import errors, metrics
from serving.model_server.core import SIGNATURE_DEF_FIELD, ServingCore
from serving.model_server.predict import DEFAULT_SERVING_SIGNATURE_DEF_KEY
from serving.model_server.tensors import (
    dtype_name,
    ndarray_to_tensor_proto,
    tensor_proto_to_ndarray,
)

logger = logging.getLogger("serving.rest")

# The regexes of http_rest_api_util.cc.
_DISPATCH_PATH = re.compile(r"/v1/.*", re.IGNORECASE)
_PREDICTION_PATH = re.compile(
    r"/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?:(classify|regress|predict)",
    re.IGNORECASE,
)
_STATUS_PATH = re.compile(
    r"/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?(?:/(metadata))?",
    re.IGNORECASE,
)

_INT_RANGES = {
    types_pb2.DT_INT8: (-(2**7), 2**7 - 1),
    types_pb2.DT_UINT8: (0, 2**8 - 1),
    types_pb2.DT_INT16: (-(2**15), 2**15 - 1),
    types_pb2.DT_INT32: (-(2**31), 2**31 - 1),
    types_pb2.DT_INT64: (-(2**63), 2**63 - 1),
    types_pb2.DT_UINT32: (0, 2**32 - 1),
    types_pb2.DT_UINT64: (0, 2**64 - 1),
}


# ----------------------------------------------------------------- JSON -> tensors

# kMaxJsonDebugStringBytes: longer values are cut in error messages.
_MAX_JSON_DEBUG_STRING_BYTES = 256
# A tensor has at most 254 dimensions (TensorShape's limit), and a predict document
# wraps it in at most 4 more levels (document, instances, row object, b64 object).
# Deeper documents are refused before the recursive JSON -> tensor conversion sees them.
MAX_JSON_NESTING = 254 + 4
# numpy's NPY_MAXDIMS: arrays (and so the tensors this server builds) have at most
# this many dimensions, where TF Serving's TensorShape allows 254.
MAX_TENSOR_DIMENSIONS = 64
_RAPIDJSON_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}
_CONTROL_CHARACTER = re.compile(r'["\\\x00-\x1f]')
_UTF8_BOM = b"\xef\xbb\xbf"  # rapidjson's UTF-8 input stream skips it.
_JSON_STRING_OR_NUMBER = re.compile(
    r'"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?', re.DOTALL
)
_JSON_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|.)", re.DOTALL)


def _rapidjson_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return (
            '"'
            + _CONTROL_CHARACTER.sub(
                lambda match: _RAPIDJSON_ESCAPES.get(match[0], f"\\u{ord(match[0]):04X}"), value
            )
            + '"'
        )
    if isinstance(value, float):
        return _rapidjson_double(value)
    return str(value)


def _rapidjson_double(value: float) -> str:
    """rapidjson's Writer::Double: the shortest round-trip digits (as Python's repr),
    laid out by its Prettify (1.0, 1e30, 1e-7, 0.001, 1.5e-9)."""
    if not math.isfinite(value):
        return json.dumps(value)  # NaN, Infinity, -Infinity (kWriteNanAndInfFlag's text).
    sign, digits, exponent = decimal.Decimal(repr(value)).normalize().as_tuple()
    if not any(digits):
        return "-0.0" if sign else "0.0"
    text, length = "".join(map(str, digits)), len(digits)
    point = length + exponent  # Where the decimal point falls in `text`.
    if 0 <= exponent and point <= 21:
        body = text + "0" * exponent + ".0"
    elif 0 < point <= 21:
        body = text[:point] + "." + text[point:]
    elif -6 < point <= 0:
        body = "0." + "0" * -point + text
    elif length == 1:
        body = f"{text}e{point - 1}"
    else:
        body = f"{text[0]}.{text[1:]}e{point - 1}"
    return ("-" if sign else "") + body


def _rapidjson_events(value: Any, prefix: str, depth: int):
    """The text rapidjson's PrettyWriter (kFormatSingleLineArray) writes for each handler
    event of `value`; `prefix` is what precedes its first event, `depth` the number of
    enclosing containers."""
    if isinstance(value, list):
        yield prefix + "["
        for index, item in enumerate(value):
            yield from _rapidjson_events(item, ", " if index else "", depth + 1)
        yield "]"
    elif isinstance(value, dict):
        yield prefix + "{"
        indent = " " * 4 * (depth + 1)
        for index, (key, item) in enumerate(value.items()):
            yield (",\n" if index else "\n") + indent + _rapidjson_scalar(key)
            yield from _rapidjson_events(item, ": ", depth + 1)
        yield ("\n" + " " * 4 * depth if value else "") + "}"
    else:
        yield prefix + _rapidjson_scalar(value)


def _json_text(value: Any) -> str:
    """A JSON value as TF Serving's JsonValueToDebugString writes it in error messages:
    pretty-printed, and cut after the event that reaches 256 bytes (no ellipsis)."""
    pieces, size = [], 0
    for piece in _rapidjson_events(value, "", 0):
        if size >= _MAX_JSON_DEBUG_STRING_BYTES:
            break
        pieces.append(piece)
        size += len(piece.encode("utf-8"))
    return "".join(pieces)


def _json_type(value: Any) -> str:
    if value is None:
        return "Null"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, dict):
        return "Object"
    if isinstance(value, list):
        return "Array"
    if isinstance(value, str):
        return "String"
    return "Number"


def _is_base64_object(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str)


_BASE64_ALPHABET = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
_BASE64_PADDING_FOR_REMAINDER = {0: 0, 2: 2, 3: 1}


def _absl_base64_unescape(text: str) -> bytes | None:
    """absl::Base64Unescape: ASCII whitespace is skipped, the padding ('=' or '.') may
    be left out but must be complete when present; None where absl fails."""
    data = text.encode("utf-8").translate(None, b" \t\n\v\f\r")
    stripped = data.rstrip(b"=.")
    padding, remainder = len(data) - len(stripped), len(stripped) % 4
    if (
        not _BASE64_ALPHABET.issuperset(stripped)
        or remainder not in _BASE64_PADDING_FOR_REMAINDER
        or padding not in (0, _BASE64_PADDING_FOR_REMAINDER[remainder])
    ):
        return None
    return base64.b64decode(stripped + b"=" * _BASE64_PADDING_FOR_REMAINDER[remainder])


def _type_error(value: Any, dtype: int) -> errors.ServingError:
    return errors.invalid_argument(
        f"JSON Value: {_json_text(value)} Type: {_json_type(value)} "
        f"is not of expected type: {dtype_name(dtype)}"
    )


def _convert_scalar(value: Any, dtype: int):
    """One JSON leaf -> Python value of the tensor dtype (AddValueToTensor)."""
    if dtype == types_pb2.DT_STRING:
        if isinstance(value, str):
            return value.encode("utf-8")
        if isinstance(value, dict):
            if not _is_base64_object(value):
                raise errors.invalid_argument(
                    f"JSON Value: {_json_text(value)} not formatted correctly for base64 data"
                )
            decoded = _absl_base64_unescape(value["b64"])
            if decoded is None:
                raise errors.invalid_argument("Unable to base64 decode")
            return decoded
        raise _type_error(value, dtype)
    if dtype == types_pb2.DT_BOOL:
        if not isinstance(value, bool):
            raise _type_error(value, dtype)
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _type_error(value, dtype)
    if dtype in (types_pb2.DT_FLOAT, types_pb2.DT_DOUBLE):
        # Any number, rounded (GetFloat/GetDouble): TF Serving 2.5 dropped its precision check.
        return float(value)
    if dtype in _INT_RANGES:
        low, high = _INT_RANGES[dtype]
        if not isinstance(value, int) or not low <= value <= high:
            raise _type_error(value, dtype)
        return value
    raise errors.unimplemented(
        f"Conversion of JSON Value: {_json_text(value)} to type: {dtype_name(dtype)}"
    )


def _dense_shape(value: Any) -> list[int]:
    """Shape of nested lists, following first elements (GetDenseTensorShape)."""
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return shape


def _fill_values(value: Any, level: int, shape: list[int], dtype: int, out: list) -> None:
    """Flattens nested JSON lists into `out`, checking they are dense (FillTensorProto)."""
    rank = len(shape)
    if not isinstance(value, list):
        if level != rank:
            raise errors.invalid_argument(
                f"JSON Value: {_json_text(value)} found at incorrect level: {level + 1} in the "
                f"JSON DOM. Expected at level: {rank}"
            )
        if isinstance(value, dict) and dtype != types_pb2.DT_STRING:
            raise _type_error(value, dtype)
        out.append(_convert_scalar(value, dtype))
        return
    if level >= rank:
        raise errors.invalid_argument(
            f"Encountered list at unexpected level: {level} expected < {rank}"
        )
    if len(value) != shape[level]:
        raise errors.invalid_argument(
            f"Encountered list at unexpected size: {len(value)} at level: {level} "
            f"expected size: {shape[level]}"
        )
    for element in value:
        _fill_values(element, level + 1, shape, dtype, out)


def _json_to_array(value: Any, dtype: int, batched: bool = False) -> np.ndarray:
    """The tensor of one JSON value; `batched` when it is one row of a larger tensor."""
    shape = _dense_shape(value)
    if len(shape) + batched > MAX_TENSOR_DIMENSIONS:
        raise errors.invalid_argument(
            f"JSON Value: {_json_text(value)} nests lists {len(shape)} deep: its tensor would "
            f"have {len(shape) + batched} dimensions, more than the {MAX_TENSOR_DIMENSIONS} "
            "this server supports"
        )
    values: list = []
    _fill_values(value, 0, shape, dtype, values)
    numpy_dtype = object if dtype == types_pb2.DT_STRING else tf.as_dtype(dtype).as_numpy_dtype
    array = np.empty(len(values), dtype=numpy_dtype)
    array[:] = values
    return array.reshape(shape)


def _tensors_from_instances(instances: list, input_dtypes: dict[str, int]) -> dict[str, np.ndarray]:
    """Row format: one element per batch row (FillTensorMapFromInstancesList)."""
    names = sorted(input_dtypes)
    # A {"b64": ...} first element passes this check (IsObject), as in TF Serving.
    if not isinstance(instances[0], dict) and len(names) > 1:
        raise errors.invalid_argument(
            "instances is a plain list, but expecting list of objects as multiple input tensors "
            "required as per tensorinfo_map"
        )
    elements_are_objects = isinstance(instances[0], dict) and not _is_base64_object(instances[0])
    rows: dict[str, list[np.ndarray]] = {name: [] for name in names}

    def add_item(item: Any, name: str) -> None:
        if name not in input_dtypes:
            raise errors.invalid_argument(f"JSON object: does not have named input: {name}")
        array = _json_to_array(item, input_dtypes[name], batched=True)
        if rows[name]:
            first = rows[name][0]
            if first.size != array.size:
                raise errors.invalid_argument(
                    f"Expecting tensor size: {first.size} but got: {array.size}"
                )
            if first.shape != array.shape:
                raise errors.invalid_argument(
                    f"Expecting shape {_shape_text(first.shape)} but got: {_shape_text(array.shape)}"
                )
        rows[name].append(array)

    for index, element in enumerate(instances):
        is_object = isinstance(element, dict) and not _is_base64_object(element)
        if elements_are_objects:
            if not is_object:
                raise errors.invalid_argument(
                    f"Expecting object but got list at item {index} of input list"
                )
            for name, item in element.items():
                try:
                    add_item(item, name)
                except errors.ServingError as error:
                    raise errors.invalid_argument(
                        f"Failed to process element: {index} key: {name} of 'instances' list. "
                        f"Error: {error}"
                    ) from None
            if set(element) != set(names):
                raise errors.invalid_argument(
                    f"Failed to process element: {index} of 'instances' list. JSON object: "
                    f"{_json_text(element)} keys must be equal to: {','.join(names)}"
                )
        else:
            if is_object:
                raise errors.invalid_argument(
                    f"Expecting value/list but got object at item {index} of input list"
                )
            try:
                add_item(element, names[0])
            except errors.ServingError as error:
                raise errors.invalid_argument(
                    f"Failed to process element: {index} of 'instances' list. Error: {error}"
                ) from None
    return {name: np.stack(arrays) for name, arrays in rows.items()}


def _shape_text(shape) -> str:
    return "[" + ",".join(str(size) for size in shape) + "]"


def _tensors_from_inputs(inputs: Any, input_dtypes: dict[str, int]) -> dict[str, np.ndarray]:
    """Columnar format: whole tensors by name (FillTensorMapFromInputsMap)."""
    names = sorted(input_dtypes)
    if not isinstance(inputs, dict) or _is_base64_object(inputs):
        if len(names) > 1:
            raise errors.invalid_argument(
                "inputs is a plain value/list, but expecting an object as multiple input tensors "
                "required as per tensorinfo_map"
            )
        return {names[0]: _json_to_array(inputs, input_dtypes[names[0]])}
    tensors = {}
    for name in names:
        if name not in inputs:
            raise errors.invalid_argument(f"Missing named input: {name} in 'inputs' object.")
        tensors[name] = _json_to_array(inputs[name], input_dtypes[name])
    return tensors


def _nesting_depth(document: Any) -> int:
    """Levels of nested arrays/objects (0 for a scalar), counted without recursion."""
    depth = 0
    containers = [document] if isinstance(document, (list, dict)) else []
    while containers:
        depth += 1
        children = (
            child
            for container in containers
            for child in (container.values() if isinstance(container, dict) else container)
        )
        containers = [child for child in children if isinstance(child, (list, dict))]
    return depth


class _NumberTooBig(Exception):
    """A JSON number beyond double's range, which rapidjson refuses."""


def _parse_json_int(text: str) -> int | float:
    # rapidjson keeps integers that fit int64/uint64 and reads the others as doubles.
    if len(text.lstrip("-")) <= 20:
        value = int(text)
        if _INT_RANGES[types_pb2.DT_INT64][0] <= value <= _INT_RANGES[types_pb2.DT_UINT64][1]:
            return value
    return _parse_json_float(text)


def _parse_json_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _NumberTooBig
    return value


def _first_number_too_big(text: str) -> int:
    """Offset in `text` (JSON that parses) of its first number beyond double's range."""
    for match in _JSON_STRING_OR_NUMBER.finditer(text):
        if not match[0].startswith('"') and math.isinf(float(match[0])):
            return match.start()
    raise AssertionError("no number too big in the document")


def _first_invalid_surrogate(text: str, end: int) -> int | None:
    """Offset of the first \\uD800-\\uDFFF escape before `end` that is not half of a
    high-low pair (rapidjson refuses those, Python's json lets them through)."""
    pending_high = None
    for match in _JSON_ESCAPE.finditer(text, 0, end):
        code = int(match[1], 16) if match[1] else None
        if pending_high is not None:
            if match.start() != pending_high.end() or code is None or not 0xDC00 <= code <= 0xDFFF:
                return pending_high.start()
            pending_high = None
        elif code is not None and 0xD800 <= code <= 0xDBFF:
            pending_high = match
        elif code is not None and 0xDC00 <= code <= 0xDFFF:
            return match.start()
    return None if pending_high is None else pending_high.start()


def parse_predict_body(body: bytes) -> tuple[dict, str | None]:
    """Parses the JSON document and its optional signature_name, refusing what
    rapidjson refuses: bytes that are not UTF-8 (after an optional BOM), unpaired
    surrogate escapes and numbers beyond double's range.

    Returns:
        (document, signature_name or None).
    """
    if not body.strip():
        raise errors.invalid_argument("JSON Parse error: The document is empty")
    bom = len(_UTF8_BOM) if body.startswith(_UTF8_BOM) else 0
    try:
        text = body[bom:].decode("utf-8")
    except UnicodeDecodeError as error:
        raise errors.invalid_argument(
            f"JSON Parse error: Invalid encoding in string. at offset: {bom + error.start}"
        ) from None
    failure = None
    try:
        document = json.loads(text, parse_int=_parse_json_int, parse_float=_parse_json_float)
    except RecursionError:
        raise errors.invalid_argument(
            f"JSON Parse error: The document is nested deeper than {MAX_JSON_NESTING} levels"
        ) from None
    except _NumberTooBig:
        failure = (_first_number_too_big(text), "Number too big to be stored in double.")
    except json.JSONDecodeError as error:
        failure = (error.pos, error.msg)
    surrogate = (
        _first_invalid_surrogate(text, failure[0] if failure else len(text))
        if "\\u" in text
        else None
    )
    if surrogate is not None:
        failure = (surrogate, "The surrogate pair in string is invalid.")
    if failure:
        offset = bom + len(text[: failure[0]].encode("utf-8"))
        raise errors.invalid_argument(f"JSON Parse error: {failure[1]} at offset: {offset}")
    if _nesting_depth(document) > MAX_JSON_NESTING:
        raise errors.invalid_argument(
            f"JSON Parse error: The document is nested deeper than {MAX_JSON_NESTING} levels"
        )
    if not isinstance(document, dict):
        raise errors.invalid_argument(f"JSON Value: {_json_text(document)} Is not object")
    signature_name = document.get("signature_name")
    if signature_name is not None and not isinstance(signature_name, str):
        raise errors.invalid_argument(
            f"JSON Value: {_json_text(document)} not formatted correctly. 'signature_name' key "
            "must be a string value."
        )
    return document, signature_name


# ----------------------------------------------------------------- tensors -> JSON


def _jsonable(array: np.ndarray, as_base64: bool):
    """Nested Python lists of JSON-ready leaves for one tensor (or one row of it)."""
    if array.dtype == object:

        def leaf(value: bytes):
            if as_base64:
                return {"b64": base64.b64encode(value).decode("ascii")}
            return value.decode("utf-8", errors="replace")
    elif array.dtype.kind == "f":

        def leaf(value):
            # Shortest text that round-trips in the tensor's own precision (0.1, not
            # 0.10000000149011612), as TF Serving writes floats.
            return float(str(value)) if np.isfinite(value) else float(value)
    else:

        def leaf(value):
            return value.item()

    def nest(part: np.ndarray):
        if part.ndim == 0:
            return leaf(part[()])
        return [nest(part[index, ...]) for index in range(part.shape[0])]

    return nest(array)


def _is_bytes_alias(alias: str, array: np.ndarray) -> bool:
    return array.dtype == object and alias.endswith("_bytes")


def predict_response_to_json(response: predict_pb2.PredictResponse, row_format: bool) -> dict:
    """MakeRowFormatJsonFromTensors / MakeColumnarFormatJsonFromTensors."""
    if not response.outputs:
        raise errors.invalid_argument("Cannot convert empty tensor map to JSON")
    outputs = {
        alias: tensor_proto_to_ndarray(response.outputs[alias], alias)
        for alias in sorted(response.outputs)
    }
    if not row_format:
        columns = {
            alias: _jsonable(array, _is_bytes_alias(alias, array))
            for alias, array in outputs.items()
        }
        return {"outputs": columns if len(columns) > 1 else next(iter(columns.values()))}
    batch_size = None
    for alias, array in outputs.items():
        if array.ndim == 0:
            raise errors.invalid_argument(f"Tensor name: {alias} has no shape information ")
        if batch_size is not None and array.shape[0] != batch_size:
            raise errors.invalid_argument(
                f"Tensor name: {alias} has inconsistent batch size: {array.shape[0]} "
                f"expecting: {batch_size}"
            )
        batch_size = array.shape[0]
    predictions = []
    for row in range(batch_size):
        values = {
            alias: _jsonable(array[row, ...], _is_bytes_alias(alias, array))
            for alias, array in outputs.items()
        }
        predictions.append(values if len(values) > 1 else next(iter(values.values())))
    return {"predictions": predictions}


# ------------------------------------------------------------------ request handling


class RestApi:
    """Transport-independent REST handling: (method, path, body) -> (HTTP status, JSON body).

    Args:
        core: the ServingCore.
        timeout_seconds: deadline of each predict call (`--rest_api_timeout_in_ms`).
    """

    def __init__(self, core: ServingCore, timeout_seconds: float | None = 30.0):
        self._core = core
        self._timeout = timeout_seconds

    def handles(self, path: str) -> bool:
        return bool(_DISPATCH_PATH.fullmatch(path))

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, str]:
        """Answers one /v1/ request, recorded in the request metrics as TF Serving's
        http_server.cc records it: counted by model and status, and the latency of a
        successful one under its API, the URL's verb ("predict"; "" for GET)."""
        start, code = time.monotonic(), grpc.StatusCode.OK
        try:
            payload = self._dispatch(method, path, body)
            return 200, json.dumps(payload, indent=1, ensure_ascii=False)
        except errors.ServingError as error:
            code = error.code
            logger.debug("REST %s %s failed: %s", method, path, error)
            return error.http_status, json.dumps({"error": error.message}, ensure_ascii=False)
        except Exception as error:  # A bug must fail the request, not the connection.
            code = grpc.StatusCode.INTERNAL
            logger.exception("REST %s %s failed unexpectedly", method, path)
            return 500, json.dumps({"error": f"{type(error).__name__}: {error}"})
        finally:
            model_name, api = self._metric_labels(method, path)
            self._core.metrics.record_request(
                model_name, code, api, "REST", time.monotonic() - start
            )

    @staticmethod
    def _metric_labels(method: str, path: str) -> tuple[str, str]:
        """(model name, API) of a request path, as TF Serving's ParseModelInfo reads them."""
        pattern = {"POST": _PREDICTION_PATH, "GET": _STATUS_PATH}.get(method)
        match = pattern.fullmatch(path) if pattern else None
        if match is None:
            return "", ""
        name = urllib.parse.unquote(match.group(1) or "")
        return name, match.group(4) if method == "POST" else ""

    def _dispatch(self, method: str, path: str, body: bytes) -> dict:
        malformed = errors.invalid_argument(f"Malformed request: {method} {path}")
        pattern = {"POST": _PREDICTION_PATH, "GET": _STATUS_PATH}.get(method)
        match = pattern.fullmatch(path) if pattern else None
        if match is None:
            raise malformed
        name, version, label, action = match.groups()
        model_spec = self._model_spec(name, version, label)
        if method == "POST":
            action = action.lower()
            if action != "predict":
                raise errors.unimplemented(
                    f"The {action} API is not implemented by this model server; use :predict"
                )
            return self._predict(model_spec, body)
        if not model_spec.name:
            raise errors.invalid_argument("Missing model name in request.")
        if action:
            return self._metadata(model_spec)
        return self._status(model_spec)

    @staticmethod
    def _model_spec(name, version, label) -> model_pb2.ModelSpec:
        spec = model_pb2.ModelSpec()
        spec.name = urllib.parse.unquote(name or "")
        if version is not None:
            if int(version) > _INT_RANGES[types_pb2.DT_INT64][1]:  # absl::SimpleAtoi to int64.
                raise errors.invalid_argument(f"Failed to convert version: {version} to numeric.")
            spec.version.value = int(version)
        if label is not None:
            spec.version_label = urllib.parse.unquote(label)
        return spec

    def _predict(self, model_spec, body: bytes) -> dict:
        request = predict_pb2.PredictRequest()
        request.model_spec.CopyFrom(model_spec)
        document, signature_name = parse_predict_body(body)
        if signature_name is not None:
            request.model_spec.signature_name = signature_name
        key = signature_name or DEFAULT_SERVING_SIGNATURE_DEF_KEY
        with self._core.manager.servable(request.model_spec) as servable:
            signature = servable.signature_defs.get(key)
            if signature is None:
                raise errors.invalid_argument(
                    f'Serving signature name: "{key}" not found in signature def'
                )
            input_dtypes = {alias: info.dtype for alias, info in signature.inputs.items()}
        if not input_dtypes:
            raise errors.invalid_argument(
                f"Failed to get input map for signature: {signature_name or 'DEFAULT'}"
            )
        has_instances, has_inputs = "instances" in document, "inputs" in document
        if has_instances and has_inputs:
            raise errors.invalid_argument(
                f"JSON Value: {_json_text(document)} Not formatted correctly expecting only one "
                "of 'inputs' or 'instances' keys to exist "
            )
        if has_instances:
            instances = document["instances"]
            if not isinstance(instances, list):
                raise errors.invalid_argument(
                    f"JSON Value: {_json_text(document)} Expecting 'instances' to be an list/array"
                )
            if not instances:
                raise errors.invalid_argument(
                    f"JSON Value: {_json_text(document)} No values in 'instances' array"
                )
            tensors = _tensors_from_instances(instances, input_dtypes)
        elif has_inputs:
            tensors = _tensors_from_inputs(document["inputs"], input_dtypes)
        else:
            raise errors.invalid_argument("Missing 'inputs' or 'instances' key")
        for alias, array in tensors.items():
            request.inputs[alias].CopyFrom(ndarray_to_tensor_proto(array))
            request.inputs[alias].dtype = input_dtypes[alias]
        deadline = None if not self._timeout else time.monotonic() + self._timeout
        response = self._core.predict(request, deadline=deadline)
        return predict_response_to_json(response, row_format=has_instances)

    def _status(self, model_spec) -> dict:
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.CopyFrom(model_spec)
        response = self._core.get_model_status(request)
        return json_format.MessageToDict(response, always_print_fields_with_no_presence=True)

    def _metadata(self, model_spec) -> dict:
        request = get_model_metadata_pb2.GetModelMetadataRequest(
            metadata_field=[SIGNATURE_DEF_FIELD]
        )
        request.model_spec.CopyFrom(model_spec)
        response = self._core.get_model_metadata(request)
        signature_def_map = get_model_metadata_pb2.SignatureDefMap()
        response.metadata[SIGNATURE_DEF_FIELD].Unpack(signature_def_map)

        def to_dict(message):
            return json_format.MessageToDict(
                message, always_print_fields_with_no_presence=True, preserving_proto_field_name=True
            )

        return {
            "model_spec": to_dict(response.model_spec),
            "metadata": {SIGNATURE_DEF_FIELD: to_dict(signature_def_map)},
        }


# The request line and headers together: TF Serving (libevent) sets no limit, which lets
# one client make the server buffer gigabytes of headers.
MAX_REQUEST_HEAD_BYTES = 64 * 1024
# Bodies are read in pieces of this size, so memory follows the bytes that arrive, not
# the Content-Length a client announces.
_BODY_PIECE_BYTES = 1 << 20
_HEAD_PIECE_BYTES = 1 << 16  # What the selector thread reads of a request head at a time.
_MAX_CHUNK_LINE_BYTES = 4096  # A chunk-size line with its extensions, or a trailer.
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]+")


class _HeaderFields(dict):
    """cheroot's header dict, refusing a Content-Length repeated with another value: which
    one frames the body is ambiguous (request smuggling). cheroot answers its ValueError
    with 400."""

    def __setitem__(self, name: bytes, value: bytes) -> None:
        if name == b"Content-Length" and self.get(name, value) != value:
            raise ValueError(
                f"Content-Length is given twice, as {self[name].decode('latin-1')!r} and "
                f"{value.decode('latin-1')!r}"
            )
        super().__setitem__(name, value)


class _Request(cheroot.server.HTTPRequest):
    """cheroot's request with the REST API's error bodies: the refusals cheroot makes
    itself (malformed requests, oversized heads, timeouts) answer `{"error": ...}`, an
    oversized request head is 431, and no answer to HEAD carries a body."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.inheaders = _HeaderFields()

    def simple_response(self, status, msg="") -> None:
        status = str(status)
        if status.startswith("413"):  # Only the request head is size-checked by cheroot.
            status = "431 Request Header Fields Too Large"
            msg = (
                f"The request line and headers are larger than the limit of "
                f"{MAX_REQUEST_HEAD_BYTES} bytes"
            )
        # Every refusal of cheroot's ends the connection (the request was not read whole).
        self.close_connection = True
        payload = json.dumps({"error": msg or status[4:]}).encode("utf-8")
        head = (
            f"{self.server.protocol} {status}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
        ).encode("latin-1")
        try:
            self.conn.wfile.write(head if self.method == b"HEAD" else head + payload)
        except OSError as error:
            if error.args[0] not in cheroot.errors.socket_errors_to_ignore:
                raise


class _ReadAheadSocketIO(socket.SocketIO):
    """A socket's raw reader that first returns the bytes read ahead of the request parser
    (the request head the selector thread collected)."""

    def __init__(self, sock: socket.socket, mode: str):
        super().__init__(sock, mode)
        self.ahead = bytearray()

    def readinto(self, buffer) -> int:
        if not self.ahead:
            return super().readinto(buffer)
        size = min(len(buffer), len(self.ahead))
        buffer[:size] = self.ahead[:size]
        del self.ahead[:size]
        return size


class _SocketReader(cheroot.makefile.StreamReader):
    """cheroot's buffered socket reader over a `_ReadAheadSocketIO`."""

    def __init__(
        self, sock: socket.socket, mode: str = "rb", bufsize: int = io.DEFAULT_BUFFER_SIZE
    ):
        self.source = _ReadAheadSocketIO(sock, mode)
        # StreamReader's own __init__ would wrap the socket in a plain SocketIO.
        super(cheroot.makefile.StreamReader, self).__init__(self.source, bufsize)
        self.bytes_read = 0

    def has_data(self) -> bool:
        """True when a request can be parsed without waiting for the client (cheroot hands
        such a connection to a request thread at once): bytes are buffered, or the
        read-ahead holds a whole request head."""
        return super().has_data() or _head_is_complete(self.source.ahead)


def _head_is_complete(data: bytes) -> bool:
    """The request line and headers are all there (or more bytes than a head may have)."""
    head = data.lstrip(b"\r\n")  # Empty lines before a request are ignored (RFC 9112 2.2).
    return b"\n\r\n" in head or b"\n\n" in head or len(head) > MAX_REQUEST_HEAD_BYTES


class _Connection(cheroot.server.HTTPConnection):
    """cheroot's connection, whose request head is collected by the selector thread."""

    RequestHandlerClass = _Request

    def __init__(self, server, sock, makefile=cheroot.makefile.MakeFile):
        super().__init__(server, sock, makefile)
        self.rfile = _SocketReader(sock, "rb", self.rbufsize)
        # When the connection began waiting for its next request head (None: not waiting).
        self.head_wait_started: float | None = None

    def read_ahead(self) -> bool:
        """Moves what the client has sent so far into the read-ahead, without blocking.

        Returns:
            False when the client has closed the connection.
        """
        ahead = self.rfile.source.ahead
        if cheroot.makefile.StreamReader.has_data(self.rfile):  # Left over from a request.
            ahead[:0] = self.rfile.read1(io.DEFAULT_BUFFER_SIZE)
        while not _head_is_complete(ahead):
            try:
                # The socket has a timeout, so it is non-blocking at the system level.
                data = os.read(self.socket.fileno(), _HEAD_PIECE_BYTES)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            ahead += data
        return True


class _HTTPServer(cheroot.server.HTTPServer):
    """cheroot's server, handing a connection to a request thread only once its request head
    has arrived whole.

    cheroot gives every new connection a request thread, which then blocks reading the
    head: silent clients, or clients sending a byte at a time, held all the threads. Here
    the selector thread reads what arrives into the connection's read-ahead and keeps the
    connection in the selector until the head is complete; a head not complete `timeout`
    seconds after the connection began waiting for it closes the connection.
    """

    @classmethod
    def prepare_socket(cls, *args, **kwargs) -> socket.socket:
        sock = super().prepare_socket(*args, **kwargs)
        # cheroot leaves SO_REUSEADDR off for a free port (port 0). The connections a stopped
        # or killed server leaves behind inherit that, and Linux then refuses a restart on the
        # same port for as long as they linger.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        return sock

    def process_conn(self, conn: _Connection) -> None:
        now = time.time()
        if conn.head_wait_started is None:
            conn.head_wait_started = now
        if not conn.read_ahead() or now - conn.head_wait_started > self.timeout:
            conn.close()
            return
        if _head_is_complete(conn.rfile.source.ahead):
            conn.head_wait_started = None
            super().process_conn(conn)
            return
        self._connections.put(conn)  # Back to the selector until more bytes arrive.
        # put() restarts the idle clock; the head's deadline counts from its start.
        conn.last_used = conn.head_wait_started


class _RequestError(Exception):
    """A request the transport refuses before the API sees it: (HTTP status, JSON body)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.text = json.dumps({"error": message})


def _reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:  # 499, TF Serving's CANCELLED.
        return "Client Closed Request"


class _Exchange(cheroot.server.Gateway):
    """One HTTP request on a cheroot connection: checks and reads the body, answers JSON.

    cheroot has parsed the request line and headers (with the read timeout) and
    handles keep-alive, chunked framing and errors of the HTTP syntax itself.
    """

    def __init__(self, request: cheroot.server.HTTPRequest, rest_server: "RestServer"):
        super().__init__(request)
        self._rest_server = rest_server

    def respond(self) -> None:
        request, rest_server = self.req, self._rest_server
        method = request.method.decode("latin-1")
        # The raw target: cheroot's `path` is already percent-decoded, and the REST
        # API decodes model names and labels itself, as TF Serving does.
        path = urllib.parse.urlsplit(request.uri.decode("latin-1")).path
        try:
            if path == rest_server.metrics_path:
                # TF Serving answers the metrics path whatever the method; a body is read
                # and ignored so the connection stays in step.
                self._read_body(rest_server.max_body_bytes)
                self._send(200, rest_server.metrics_page(), metrics.CONTENT_TYPE)
                return
            if not rest_server.api.handles(path):
                raise _RequestError(404, "Not Found")
            body = self._read_body(rest_server.max_body_bytes)
        except _RequestError as refusal:
            # The rest of the body was not read: the connection cannot carry another request.
            request.close_connection = True
            self._send(refusal.status, refusal.text)
            return
        with rest_server.slots:
            status, text = rest_server.api.handle(method, path, body)
        self._send(status, text)

    def _read_body(self, limit: int) -> bytes:
        request = self.req
        length_header = request.inheaders.get(b"Content-Length")
        if request.chunked_read:
            if length_header is not None:
                raise _RequestError(
                    400, "Both Content-Length and Transfer-Encoding: chunked are set"
                )
            return self._read_chunked(limit)
        if length_header is None:
            return b""
        if not length_header.isdigit():  # "-1", "abc", "+5", "1_0" are all refused.
            raise _RequestError(
                400, f"Content-Length: {length_header.decode('latin-1')!r} is not a byte count"
            )
        length = int(length_header)
        if length > limit:
            raise _RequestError(
                errors.HTTP_STATUS_FOR_CODE[grpc.StatusCode.RESOURCE_EXHAUSTED],
                f"Request body of {length} bytes is larger than the limit of {limit} bytes",
            )
        return self._read_exactly(request.rfile, length)

    def _read_chunked(self, limit: int) -> bytes:
        """Decodes a chunked body, refusing a chunk that would pass `limit` before reading
        (or allocating) it, and reading the chunks in pieces."""
        stream, pieces, size = self.req.conn.rfile, [], 0
        while True:
            line = self._read_line(stream, "chunk-size line")
            size_text = line.split(b";", 1)[0].strip(b" \t")
            # libevent reads chunk sizes as int64: longer ones are malformed, not large.
            if not _CHUNK_SIZE.fullmatch(size_text) or int(size_text, 16) >= 2**63:
                raise _RequestError(
                    400, f"Malformed chunked request body: bad chunk size {size_text[:40]!r}"
                )
            chunk_size = int(size_text, 16)
            if chunk_size == 0:
                while self._read_line(stream, "trailer"):  # Trailers are read and ignored.
                    pass
                return b"".join(pieces)
            if size + chunk_size > limit:
                raise _RequestError(
                    errors.HTTP_STATUS_FOR_CODE[grpc.StatusCode.RESOURCE_EXHAUSTED],
                    f"Request body of more than {limit} bytes is larger than the limit of "
                    f"{limit} bytes",
                )
            pieces.append(self._read_exactly(stream, chunk_size))
            size += chunk_size
            if stream.read(2) != b"\r\n":
                raise _RequestError(400, "Malformed chunked request body: no CRLF after a chunk")

    @staticmethod
    def _read_line(stream, what: str) -> bytes:
        """One CRLF-terminated line of chunked framing, without its CRLF."""
        line = stream.readline(_MAX_CHUNK_LINE_BYTES + 1)
        if not line.endswith(b"\r\n"):
            problem = "is too long" if len(line) > _MAX_CHUNK_LINE_BYTES else "ended early"
            raise _RequestError(400, f"Malformed chunked request body: a {what} {problem}")
        return line[:-2]

    @staticmethod
    def _read_exactly(stream, length: int) -> bytes:
        """`length` bytes, read in pieces so memory follows what arrives."""
        pieces, received = [], 0
        while received < length:
            piece = stream.read(min(length - received, _BODY_PIECE_BYTES))
            if not piece:  # The client closed, or the server is stopping.
                raise _RequestError(400, f"Request body ended after {received} of {length} bytes")
            pieces.append(piece)
            received += len(piece)
        return b"".join(pieces)

    def _send(self, status: int, text: str | bytes, content_type: str = "application/json") -> None:
        """Answers `text` (JSON unless told); to HEAD, the headers alone (its Content-Length is
        the body's)."""
        request = self.req
        payload = text.encode("utf-8") if isinstance(text, str) else text
        request.status = f"{status} {_reason(status)}".encode("ascii")
        request.outheaders.extend(
            [
                (b"Content-Type", content_type.encode("ascii")),
                (b"Content-Length", str(len(payload)).encode("ascii")),
            ]
        )
        if self._rest_server.enable_cors:
            request.outheaders.extend(
                [
                    (b"Access-Control-Allow-Origin", b"*"),
                    (b"Access-Control-Allow-Methods", b"POST, GET"),
                    (b"Access-Control-Allow-Headers", b"Content-Type"),
                ]
            )
        request.ensure_headers_sent()
        if request.method != b"HEAD":
            request.write(payload)


class RestServer:
    """The REST API over cheroot's HTTP/1.1 server.

    cheroot parses requests (keep-alive, chunked bodies, malformed headers),
    closes connections idle or stalled for `read_timeout_seconds` (408 when a
    request was under way), and listens with the system's largest backlog.
    Request bodies are checked and read here, so the size limit and the error
    bodies stay TF Serving's; request heads (line and headers) over
    MAX_REQUEST_HEAD_BYTES are refused with 431, a Content-Length given twice with
    different values with 400. Idle connections and request heads still arriving
    wait in cheroot's selector thread, which gives a connection to one of
    `num_io_threads` request threads only once its head is complete; a head must be
    complete within `read_timeout_seconds` of its start, however slowly it trickles
    in. The request threads read bodies and write answers; at most `num_threads`
    requests run the model at once.

    Args:
        address: (host, port); port 0 picks a free port. The socket is bound and
            listening when the constructor returns.
        api: the RestApi.
        num_threads: requests processed at once (`--rest_api_num_threads`).
        max_body_bytes: largest accepted request body.
        enable_cors: add CORS headers (`--rest_api_enable_cors_support`).
        read_timeout_seconds: longest wait for a client's next bytes, and longest time
            a request head may take to arrive.
        num_io_threads: connections read or written at once.
        metrics_path: the path answered with `metrics_page()` (Prometheus' text format), as
            TF Serving's --monitoring_config_file sets it; None serves no metrics.
        metrics_page: returns the metrics page.
    """

    def __init__(
        self,
        address: tuple[str, int],
        api: RestApi,
        num_threads: int,
        max_body_bytes: int,
        enable_cors: bool = False,
        read_timeout_seconds: float = 30.0,
        num_io_threads: int = 64,
        metrics_path: str | None = None,
        metrics_page: Callable[[], bytes] | None = None,
    ):
        self.api = api
        self.metrics_path = metrics_path
        self.metrics_page = metrics_page
        self.slots = threading.BoundedSemaphore(max(num_threads, 1))
        self.max_body_bytes = max_body_bytes
        self.enable_cors = enable_cors
        io_threads = max(num_io_threads, num_threads, 1)
        self._http = _HTTPServer(
            address,
            gateway=lambda request: _Exchange(request, self),
            minthreads=io_threads,
            maxthreads=io_threads,
            server_name="TensorFlow Serving",
        )
        self._http.ConnectionClass = _Connection
        self._http.max_request_header_size = MAX_REQUEST_HEAD_BYTES
        self._http.request_queue_size = socket.SOMAXCONN
        self._http.timeout = read_timeout_seconds
        self._http.prepare()

    @property
    def server_address(self) -> tuple[str, int]:
        """The bound (host, port)."""
        return self._http.bind_addr[:2]

    def serve_forever(self) -> None:
        """Serves until `stop` (run it in a thread)."""
        self._http.serve()

    def stop(self, grace_seconds: float) -> None:
        """Stops accepting, lets requests finish for up to `grace_seconds`, then closes
        the connections still open (stalled clients included) and joins the threads."""
        self._http.shutdown_timeout = grace_seconds
        self._http.stop()
