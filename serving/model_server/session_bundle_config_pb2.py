"""`tensorflow.serving.BatchingParameters`, the message of `--batching_parameters_file`.

The tensorflow-serving-api wheel ships the request/response protos and
`model_server_config_pb2`, but not
`tensorflow_serving/servables/tensorflow/session_bundle_config.proto`, which
defines the batching parameters that `tensorflow_model_server` reads. This
module registers that message with upstream's full name and package (and its
field numbers, as far as they could be checked), so a text-format file parsed
here parses identically in the real server.

Declared: the fields stable since TF Serving 1.x (`max_batch_size` ..
`pad_variable_length_inputs`, numbers 1-7) and the two of large batch splitting,
`enable_large_batch_splitting` (a BoolValue) and `max_execution_batch_size` (an
Int64Value), with the wrapper types that TF Serving's bundle_factory_util reads
them through (`has_...()`, `.value()`). Their numbers, 8 and 9, could not be
checked against upstream here (the copies at hand predate them); the batching
file is text format, which matches fields by name, so it reads the same either
way. A file using any other upstream field (e.g.
`batch_padding_policy`) fails to parse here with a `text_format.ParseError`
naming the field, rather than being silently ignored.
"""

from google.protobuf import descriptor_pb2
from google.protobuf import descriptor_pool
from google.protobuf import message_factory
from google.protobuf import wrappers_pb2  # registers google/protobuf/wrappers.proto

_FILE_NAME = "tensorflow_serving/servables/tensorflow/session_bundle_config.proto"
_PACKAGE = "tensorflow.serving"

_FieldProto = descriptor_pb2.FieldDescriptorProto

# (name, number, label, type, type_name); type_name only for message fields.
_BATCHING_PARAMETERS_FIELDS = (
    (
        "max_batch_size",
        1,
        _FieldProto.LABEL_OPTIONAL,
        _FieldProto.TYPE_MESSAGE,
        ".google.protobuf.Int64Value",
    ),
    (
        "batch_timeout_micros",
        2,
        _FieldProto.LABEL_OPTIONAL,
        _FieldProto.TYPE_MESSAGE,
        ".google.protobuf.Int64Value",
    ),
    (
        "max_enqueued_batches",
        3,
        _FieldProto.LABEL_OPTIONAL,
        _FieldProto.TYPE_MESSAGE,
        ".google.protobuf.Int64Value",
    ),
    (
        "num_batch_threads",
        4,
        _FieldProto.LABEL_OPTIONAL,
        _FieldProto.TYPE_MESSAGE,
        ".google.protobuf.Int64Value",
    ),
    (
        "thread_pool_name",
        5,
        _FieldProto.LABEL_OPTIONAL,
        _FieldProto.TYPE_MESSAGE,
        ".google.protobuf.StringValue",
    ),
    ("allowed_batch_sizes", 6, _FieldProto.LABEL_REPEATED, _FieldProto.TYPE_INT64, None),
    ("pad_variable_length_inputs", 7, _FieldProto.LABEL_OPTIONAL, _FieldProto.TYPE_BOOL, None),
    (
        "enable_large_batch_splitting",
        8,
        _FieldProto.LABEL_OPTIONAL,
        _FieldProto.TYPE_MESSAGE,
        ".google.protobuf.BoolValue",
    ),
    (
        "max_execution_batch_size",
        9,
        _FieldProto.LABEL_OPTIONAL,
        _FieldProto.TYPE_MESSAGE,
        ".google.protobuf.Int64Value",
    ),
)


def _build_file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    file_proto = descriptor_pb2.FileDescriptorProto(
        name=_FILE_NAME,
        package=_PACKAGE,
        syntax="proto3",
        dependency=[wrappers_pb2.DESCRIPTOR.name],
    )
    message = file_proto.message_type.add(name="BatchingParameters")
    for name, number, label, field_type, type_name in _BATCHING_PARAMETERS_FIELDS:
        field = message.field.add(name=name, number=number, label=label, type=field_type)
        if type_name:
            field.type_name = type_name
    return file_proto


def _register():
    pool = descriptor_pool.Default()
    try:
        file_descriptor = pool.FindFileByName(_FILE_NAME)
    except KeyError:
        file_descriptor = pool.Add(_build_file_descriptor())
    return file_descriptor


DESCRIPTOR = _register()
BatchingParameters = message_factory.GetMessageClass(
    DESCRIPTOR.message_types_by_name["BatchingParameters"]
)

__all__ = ["BatchingParameters", "DESCRIPTOR"]
