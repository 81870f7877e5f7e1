"""`tensorflow.serving.MonitoringConfig`, the message of `--monitoring_config_file`.

The tensorflow-serving-api wheel does not ship tensorflow_serving/config/monitoring_config.proto;
this module registers its two messages under upstream's file, package, names and field numbers
(checked against the proto in tensorflow/serving), so a file parsed here parses the same in
tensorflow_model_server:

    message PrometheusConfig { bool enable = 1; string path = 2; }
    message MonitoringConfig { PrometheusConfig prometheus_config = 1; }
"""

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

_FILE_DESCRIPTOR = """
name: "tensorflow_serving/config/monitoring_config.proto"
package: "tensorflow.serving"
syntax: "proto3"
message_type {
  name: "PrometheusConfig"
  field { name: "enable" number: 1 label: LABEL_OPTIONAL type: TYPE_BOOL json_name: "enable" }
  field { name: "path" number: 2 label: LABEL_OPTIONAL type: TYPE_STRING json_name: "path" }
}
message_type {
  name: "MonitoringConfig"
  field {
    name: "prometheus_config" number: 1 label: LABEL_OPTIONAL type: TYPE_MESSAGE
    type_name: ".tensorflow.serving.PrometheusConfig" json_name: "prometheusConfig"
  }
}
"""


def _file_descriptor():
    file_proto = text_format.Parse(_FILE_DESCRIPTOR, descriptor_pb2.FileDescriptorProto())
    pool = descriptor_pool.Default()
    try:  # Registered already (the module imported under another name).
        return pool.FindFileByName(file_proto.name)
    except KeyError:
        return pool.Add(file_proto)


DESCRIPTOR = _file_descriptor()
PrometheusConfig = message_factory.GetMessageClass(
    DESCRIPTOR.message_types_by_name["PrometheusConfig"]
)
MonitoringConfig = message_factory.GetMessageClass(
    DESCRIPTOR.message_types_by_name["MonitoringConfig"]
)
