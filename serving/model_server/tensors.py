"""TensorProto <-> numpy conversion with TF Serving's conventions.

Requests are decoded like `tensorflow::Tensor::FromProto` (typed value fields
or `tensor_content`; a short value list is padded with its last value; a
malformed proto is the INVALID_ARGUMENT "tensor parsing error: <alias>").
Responses are encoded like `Tensor::AsProtoField`, which TF Serving uses for
Predict: values in the typed repeated fields (`string_val`, `float_val`, ...),
never in `tensor_content`.
"""

import itertools
import math
import sys

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2
from tensorflow.core.protobuf import meta_graph_pb2

from serving.model_server import errors
from serving.model_server.memory_budget import available_memory_bytes

# numpy dtype -> (DataType, TensorProto field that AsProtoField writes).
_FIELD_FOR_NUMPY_DTYPE = {
    np.dtype(np.float32): (types_pb2.DT_FLOAT, "float_val"),
    np.dtype(np.float64): (types_pb2.DT_DOUBLE, "double_val"),
    np.dtype(np.int32): (types_pb2.DT_INT32, "int_val"),
    np.dtype(np.int16): (types_pb2.DT_INT16, "int_val"),
    np.dtype(np.int8): (types_pb2.DT_INT8, "int_val"),
    np.dtype(np.uint8): (types_pb2.DT_UINT8, "int_val"),
    np.dtype(np.uint16): (types_pb2.DT_UINT16, "int_val"),
    np.dtype(np.int64): (types_pb2.DT_INT64, "int64_val"),
    np.dtype(np.uint32): (types_pb2.DT_UINT32, "uint32_val"),
    np.dtype(np.uint64): (types_pb2.DT_UINT64, "uint64_val"),
    np.dtype(np.bool_): (types_pb2.DT_BOOL, "bool_val"),
}


def dtype_name(dtype: int) -> str:
    """TF's DataTypeString: DT_FLOAT -> "float", DT_STRING -> "string"."""
    try:
        return types_pb2.DataType.Name(dtype)[len("DT_") :].lower()
    except ValueError:
        return f"unknown dtype {dtype}"


# TensorShape's limit: a shape whose element count overflows int64 is invalid.
_MAX_NUM_ELEMENTS = 2**63 - 1
# Decoded tensors up to this size skip the free-memory check.
_CHECK_MEMORY_ABOVE_BYTES = 64 * 2**20

# DataType -> (typed value field, numpy dtype of the decoded array).
_FIELD_FOR_DATATYPE = {
    types_pb2.DT_STRING: ("string_val", object),
    types_pb2.DT_FLOAT: ("float_val", np.float32),
    types_pb2.DT_DOUBLE: ("double_val", np.float64),
    types_pb2.DT_INT32: ("int_val", np.int32),
    types_pb2.DT_INT16: ("int_val", np.int16),
    types_pb2.DT_INT8: ("int_val", np.int8),
    types_pb2.DT_UINT8: ("int_val", np.uint8),
    types_pb2.DT_UINT16: ("int_val", np.uint16),
    types_pb2.DT_INT64: ("int64_val", np.int64),
    types_pb2.DT_UINT32: ("uint32_val", np.uint32),
    types_pb2.DT_UINT64: ("uint64_val", np.uint64),
    types_pb2.DT_BOOL: ("bool_val", np.bool_),
}


# Most dimensions a fed tensor may have: TensorFlow's Python binding converts a feed with
# numpy's former NPY_MAXDIMS of 32, and a feed of 33 or more dimensions crashes the process
# (SIGSEGV) inside Session.run, whatever the signature declares.
MAX_FEED_RANK = 32


def _shape_text(sizes) -> str:
    """TensorShape::DebugString style: [2,?,3]."""
    return "[" + ",".join("?" if size < 0 else str(size) for size in sizes) + "]"


def check_input_shape(
    alias: str, proto: tensor_pb2.TensorProto, signature_input: meta_graph_pb2.TensorInfo
) -> None:
    """Refuses, before anything is decoded, an input shape the signature does not accept.

    The signature's TensorInfo shape is the contract: its rank, when known, and each of its
    dimensions of known size must match; at most `MAX_FEED_RANK` dimensions in any case.

    Raises:
        ServingError: INVALID_ARGUMENT naming the input, its shape and the accepted one.
    """
    sizes = [dim.size for dim in proto.tensor_shape.dim]
    if len(sizes) > MAX_FEED_RANK:
        raise errors.invalid_argument(
            f"input tensor {alias} has {len(sizes)} dimensions; at most {MAX_FEED_RANK} "
            "are supported"
        )
    declared = signature_input.tensor_shape
    if declared.unknown_rank:
        return
    expected = [dim.size for dim in declared.dim]
    if len(sizes) != len(expected) or any(
        want >= 0 and got != want for got, want in zip(sizes, expected)
    ):
        raise errors.invalid_argument(
            f"input tensor {alias} has shape {_shape_text(sizes)}, which the signature does "
            f"not accept: it expects {_shape_text(expected)}"
        )


def _parse_error(alias: str) -> errors.ServingError:
    return errors.invalid_argument(f"tensor parsing error: {alias}")


def tensor_num_elements(proto: tensor_pb2.TensorProto, alias: str) -> int:
    """The element count of a request tensor's shape, checked as Tensor::FromProto checks a
    proto before it allocates: a set dtype, no negative dimension, a count within int64.

    Raises:
        ServingError: INVALID_ARGUMENT "tensor parsing error: <alias>" where it fails.
    """
    shape = [dim.size for dim in proto.tensor_shape.dim]
    if proto.dtype == types_pb2.DT_INVALID or any(size < 0 for size in shape):
        raise _parse_error(alias)
    num_elements = math.prod(shape)  # Python ints: a huge shape must not wrap around.
    if num_elements > _MAX_NUM_ELEMENTS:
        raise _parse_error(alias)
    return num_elements


# What one element of a string array holds beside its payload: the array's pointer and the
# bytes object's header (`memory_budget.request_bytes` counts the same).
_STRING_ELEMENT_BYTES = np.dtype(object).itemsize + sys.getsizeof(b"")


def decoded_bytes(proto: tensor_pb2.TensorProto, alias: str) -> int:
    """The memory `tensor_proto_to_ndarray(proto)` will take, as `memory_budget.request_bytes`
    counts it, from the proto alone: nothing is made, so a few bytes announcing billions of
    elements cost nothing to count. Its elements times their type's size, the padding of a short
    value list included; for strings each element's pointer and bytes object (header and
    payload: a padded element counts its repeated value's).

    Raises:
        ServingError: INVALID_ARGUMENT "tensor parsing error: <alias>" as
            `tensor_num_elements`, or for a dtype that has no numpy type.
    """
    num_elements = tensor_num_elements(proto, alias)
    if proto.dtype != types_pb2.DT_STRING:
        try:
            itemsize = np.dtype(tf.as_dtype(proto.dtype).as_numpy_dtype).itemsize
        except (TypeError, ValueError):  # DT_RESOURCE, DT_VARIANT, an unknown number.
            raise _parse_error(alias) from None
        return num_elements * itemsize
    values = proto.string_val
    count = min(len(values), num_elements)
    payload = sum(map(len, itertools.islice(values, count)))
    if count:
        payload += (num_elements - count) * len(values[count - 1])
    return num_elements * _STRING_ELEMENT_BYTES + payload


def check_allocatable(proto: tensor_pb2.TensorProto, alias: str) -> int:
    """`decoded_bytes(proto)`, refused where the memory the process can still take
    (`memory_budget.available_memory_bytes`, which a cgroup or address-space limit bounds)
    cannot hold it.

    A short value list is padded to the shape, so a few bytes can ask for terabytes: this
    refuses what memory cannot hold instead of relying on the allocator to fail (with
    overcommit it would not, and filling the array would exhaust memory; under a cgroup limit
    the kernel kills the process instead).

    Raises:
        ServingError: INVALID_ARGUMENT "tensor parsing error: <alias>", as Tensor::FromProto
            fails when its allocation fails, and as `decoded_bytes`.
    """
    num_bytes = decoded_bytes(proto, alias)
    if num_bytes > _CHECK_MEMORY_ABOVE_BYTES and num_bytes > available_memory_bytes():
        raise _parse_error(alias)
    return num_bytes


def tensor_proto_to_ndarray(proto: tensor_pb2.TensorProto, alias: str) -> np.ndarray:
    """Decodes a request tensor like tensorflow::Tensor::FromProto.

    Typed value fields shorter than the shape are padded with their last value,
    longer ones are truncated, and empty ones give zeros (or empty strings).

    Args:
        proto: the TensorProto of one request input.
        alias: the input's alias, used in the error message.

    Returns:
        A numpy array of the proto's shape; DT_STRING becomes an object array of
        `bytes`.

    Raises:
        ServingError: INVALID_ARGUMENT "tensor parsing error: <alias>" for an
            unset dtype, negative dimensions, a tensor_content of the wrong size,
            or a tensor larger than the memory the process can still take
            (`memory_budget.available_memory_bytes`, which a cgroup or address-space
            limit bounds).
    """
    check_allocatable(proto, alias)
    shape = tuple(dim.size for dim in proto.tensor_shape.dim)
    try:
        return _decode_tensor(proto, shape, math.prod(shape), _parse_error(alias))
    except (MemoryError, ValueError):  # numpy cannot allocate it ("array is too big").
        # Tensor::FromProto fails the same way when its allocation fails.
        raise _parse_error(alias) from None


def _decode_tensor(
    proto: tensor_pb2.TensorProto, shape, num_elements: int, parse_error: errors.ServingError
) -> np.ndarray:
    if proto.tensor_content or proto.dtype not in _FIELD_FOR_DATATYPE:
        try:
            array = tf.make_ndarray(proto)
        except Exception:  # make_ndarray raises ValueError/TypeError on bad protos.
            raise parse_error from None
        if array.shape != shape:
            raise parse_error
        return array
    field, numpy_dtype = _FIELD_FOR_DATATYPE[proto.dtype]
    values = getattr(proto, field)
    if num_elements == 0 or not values:
        array = np.full(num_elements, b"" if numpy_dtype is object else 0, dtype=numpy_dtype)
    else:
        array = np.empty(num_elements, dtype=numpy_dtype)
        count = min(len(values), num_elements)
        array[:count] = values[:count]
        array[count:] = values[count - 1]
    return array.reshape(shape)


def ndarray_to_tensor_proto(array: np.ndarray) -> tensor_pb2.TensorProto:
    """Encodes a response tensor the way TF Serving's Predict does (AsProtoField).

    Args:
        array: a numpy array; object/bytes arrays are DT_STRING.

    Returns:
        A TensorProto with dtype, shape and the typed value field filled.
    """
    array = np.asarray(array)
    proto = tensor_pb2.TensorProto()
    proto.tensor_shape.dim.extend(
        tensor_shape_pb2.TensorShapeProto.Dim(size=size) for size in array.shape
    )
    flat = array.reshape(-1)
    if array.dtype.kind in ("O", "S", "U"):
        proto.dtype = types_pb2.DT_STRING
        proto.string_val.extend(
            value if isinstance(value, bytes) else str(value).encode("utf-8") for value in flat
        )
    elif array.dtype == np.float16:
        proto.dtype = types_pb2.DT_HALF
        proto.half_val.extend(flat.view(np.uint16).tolist())
    elif array.dtype in _FIELD_FOR_NUMPY_DTYPE:
        proto.dtype, field = _FIELD_FOR_NUMPY_DTYPE[array.dtype]
        getattr(proto, field).extend(flat.tolist())
    else:
        # Rare dtypes (bfloat16, complex, ...) fall back to TF's own encoder.
        proto.CopyFrom(tf.make_tensor_proto(array))
    return proto
