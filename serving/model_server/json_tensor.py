"""JSON <-> tensor conversion of the REST API, as tensorflow_serving/util/json_tensor.cc does it.

Row format ("instances", answered with "predictions") and columnar format ("inputs",
answered with "outputs"); strings may be sent as {"b64": "..."}; an output whose alias
ends in "_bytes" is returned base64-encoded. Every refusal is INVALID_ARGUMENT with
json_tensor.cc's message, JSON values echoed as rapidjson's PrettyWriter writes them.
"""

import base64
import decimal
import json
import math
import re
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import predict_pb2

from serving.model_server import errors
from serving.model_server.tensors import dtype_name, tensor_proto_to_ndarray

INT_RANGES = {
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
    if dtype in INT_RANGES:
        low, high = INT_RANGES[dtype]
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
            raise errors.invalid_argument(
                f"JSON object: does not have named input: {errors.quote(name)}"
            )
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
                        f"Failed to process element: {index} key: {errors.quote(name)} of 'instances' list. "
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
        if INT_RANGES[types_pb2.DT_INT64][0] <= value <= INT_RANGES[types_pb2.DT_UINT64][1]:
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


# What one JSON item (a value after a comma, an array, an object) may take in memory once
# parsed and converted to its rows' arrays, and what each byte of the text may take (strings
# are held as str, then bytes): 1 MiB of `[]` items took 160 MiB; 481 bytes an empty array,
# 400 a short string, 584 an object of one string were measured (tracemalloc's peak).
JSON_ITEM_BYTES = 512
_JSON_BYTES_PER_TEXT_BYTE = 4


def parsed_bytes_bound(body: bytes) -> int:
    """An upper bound of the memory `parse_predict_body` and `tensors_from_predict_document`
    take for `body` (decompressed), counted before it is parsed, in a pass of C speed:
    JSON_ITEM_BYTES for each comma, `[` and `{` (those inside strings too, so it may count
    more), and a few bytes for each byte of text."""
    items = body.count(b",") + body.count(b"[") + body.count(b"{") + 1
    return items * JSON_ITEM_BYTES + len(body) * _JSON_BYTES_PER_TEXT_BYTE


def _first_member_wins(pairs: list[tuple[str, Any]]) -> dict:
    """A JSON object whose duplicate keys keep their first value, as rapidjson's FindMember
    (which TF Serving looks keys up with) finds the first member of a name."""
    members: dict = {}
    for key, value in pairs:
        members.setdefault(key, value)
    return members


def parse_predict_body(body: bytes) -> tuple[dict, str | None]:
    """Parses the JSON document and its optional signature_name, refusing what
    rapidjson refuses: bytes that are not UTF-8 (after an optional BOM), unpaired
    surrogate escapes and numbers beyond double's range. A key given twice in an object
    keeps its first value, as in TF Serving (Python's json keeps the last).

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
        document = json.loads(
            text,
            parse_int=_parse_json_int,
            parse_float=_parse_json_float,
            object_pairs_hook=_first_member_wins,
        )
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


def tensors_from_predict_document(
    document: dict, input_dtypes: dict[str, int]
) -> tuple[dict[str, np.ndarray], bool]:
    """The input tensors of a parsed predict document (FillPredictRequestFromJson).

    Args:
        document: the JSON object `parse_predict_body` returned.
        input_dtypes: the signature's input aliases and their DataType enums.

    Returns:
        (alias -> array, whether the document used the row format "instances").

    Raises:
        ServingError: INVALID_ARGUMENT with json_tensor.cc's message.
    """
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
        return _tensors_from_instances(instances, input_dtypes), True
    if has_inputs:
        return _tensors_from_inputs(document["inputs"], input_dtypes), False
    raise errors.invalid_argument("Missing 'inputs' or 'instances' key")
