"""Reading and checking the server's text-format configuration files.

`--model_config_file` is a `tensorflow.serving.ModelServerConfig`,
`--batching_parameters_file` a `tensorflow.serving.BatchingParameters` and
`--monitoring_config_file` a `tensorflow.serving.MonitoringConfig`, all in
protobuf text format exactly as `tensorflow_model_server` reads them, so the
same files drive this server and the real one.
"""

import dataclasses
import os

from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from serving.model_server.metrics import DEFAULT_PROMETHEUS_PATH
from serving.model_server.monitoring_config_pb2 import MonitoringConfig
from serving.model_server.session_bundle_config_pb2 import BatchingParameters

TENSORFLOW_PLATFORM = "tensorflow"

# Defaults of TF Serving's SharedBatchScheduler::QueueOptions, used for any
# BatchingParameters field the file leaves out.
DEFAULT_MAX_BATCH_SIZE = 1000
DEFAULT_BATCH_TIMEOUT_MICROS = 0
DEFAULT_MAX_ENQUEUED_BATCHES = 10


class ConfigError(ValueError):
    """A configuration file or flag combination the server cannot start with."""


def read_text_proto(path: str, message_class):
    """Parses a protobuf text-format file.

    Args:
        path: file to read.
        message_class: the generated message class to parse into.

    Returns:
        The parsed message.

    Raises:
        ConfigError: the file is missing or not valid text format; the message
            names the file and, for parse errors, the line and column.
    """
    try:
        with open(path, encoding="utf-8") as config_file:
            text = config_file.read()
    except OSError as error:
        raise ConfigError(
            f"Cannot read {message_class.DESCRIPTOR.name} file '{path}': {error.strerror}"
        ) from None
    try:
        return text_format.Parse(text, message_class())
    except text_format.ParseError as error:
        # ParseError's text starts with "line:column :".
        raise ConfigError(f"Invalid protobuf file: '{path}': {error}") from None


def single_model_config(
    model_name: str, base_path: str
) -> model_server_config_pb2.ModelServerConfig:
    """The config TF Serving builds from `--model_name` and `--model_base_path`."""
    config = model_server_config_pb2.ModelServerConfig()
    model = config.model_config_list.config.add()
    model.name = model_name
    model.base_path = base_path
    model.model_platform = TENSORFLOW_PLATFORM
    return config


def validate_model_server_config(config: model_server_config_pb2.ModelServerConfig) -> None:
    """Rejects configs this server cannot serve, naming the model at fault.

    Raises:
        ConfigError: custom model configs, missing names or base paths,
            duplicate names, non-TensorFlow platforms, or an empty `specific`
            version policy.
    """
    if config.WhichOneof("config") == "custom_model_config":
        raise ConfigError("ModelServer does not yet support custom model config.")
    seen_names = set()
    for index, model in enumerate(config.model_config_list.config):
        where = f"model_config_list.config[{index}]"
        if not model.name:
            raise ConfigError(f"{where} has no name")
        where = f"{where} (model '{model.name}')"
        if model.name in seen_names:
            raise ConfigError(f"{where}: model name '{model.name}' is used twice")
        seen_names.add(model.name)
        if not model.base_path:
            raise ConfigError(f"{where} has no base_path")
        platform = model.model_platform or TENSORFLOW_PLATFORM
        if platform != TENSORFLOW_PLATFORM:
            raise ConfigError(
                f"{where}: model_platform '{platform}' is not supported; "
                f"only '{TENSORFLOW_PLATFORM}' is"
            )
        policy = model.model_version_policy
        if policy.WhichOneof("policy_choice") == "specific" and not policy.specific.versions:
            raise ConfigError(f"{where}: model_version_policy.specific lists no versions")
        if policy.WhichOneof("policy_choice") == "latest" and policy.latest.num_versions < 0:
            raise ConfigError(f"{where}: model_version_policy.latest.num_versions must be >= 1")


def load_model_server_config(path: str) -> model_server_config_pb2.ModelServerConfig:
    """Reads and validates a `--model_config_file`."""
    config = read_text_proto(path, model_server_config_pb2.ModelServerConfig)
    try:
        validate_model_server_config(config)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None
    return config


@dataclasses.dataclass(frozen=True)
class BatchingOptions:
    """Effective batching settings, after TF Serving's defaults are applied.

    Attributes:
        max_batch_size: largest single request; also the largest merged batch
            unless large batch splitting is on.
        batch_timeout_micros: longest time the first request of a batch waits
            for others to join it.
        max_enqueued_batches: queue length (in batches) beyond which requests
            are refused with UNAVAILABLE.
        num_batch_threads: threads running merged batches concurrently.
        allowed_batch_sizes: if not empty, batches are padded up to the next
            allowed size (TF Serving pads with copies of a real row).
        enable_large_batch_splitting: a request that does not fit the open
            batch is split: its first rows fill that batch, the rest go to new
            batches, and its answer is put back together from the pieces.
        max_execution_batch_size: with splitting, the largest merged batch
            (default: max_batch_size); so requests of up to max_batch_size rows
            run as several smaller batches on several threads.
    """

    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    batch_timeout_micros: int = DEFAULT_BATCH_TIMEOUT_MICROS
    max_enqueued_batches: int = DEFAULT_MAX_ENQUEUED_BATCHES
    num_batch_threads: int = dataclasses.field(default_factory=lambda: os.cpu_count() or 1)
    allowed_batch_sizes: tuple[int, ...] = ()
    enable_large_batch_splitting: bool = False
    max_execution_batch_size: int | None = None

    @property
    def execution_batch_size(self) -> int:
        """The most rows one model call runs."""
        if self.enable_large_batch_splitting and self.max_execution_batch_size is not None:
            return self.max_execution_batch_size
        return self.max_batch_size

    @classmethod
    def from_proto(cls, parameters: BatchingParameters | None, source: str = "batching parameters"):
        """Applies defaults to a BatchingParameters message and checks the result.

        Raises:
            ConfigError: non-positive sizes or an invalid allowed_batch_sizes list,
                with TF Serving's wording where it has one.
        """
        parameters = parameters or BatchingParameters()

        def value_or(field: str, default):
            return getattr(parameters, field).value if parameters.HasField(field) else default

        options = cls(
            max_batch_size=value_or("max_batch_size", DEFAULT_MAX_BATCH_SIZE),
            batch_timeout_micros=value_or("batch_timeout_micros", DEFAULT_BATCH_TIMEOUT_MICROS),
            max_enqueued_batches=value_or("max_enqueued_batches", DEFAULT_MAX_ENQUEUED_BATCHES),
            num_batch_threads=value_or("num_batch_threads", os.cpu_count() or 1),
            allowed_batch_sizes=tuple(parameters.allowed_batch_sizes),
            enable_large_batch_splitting=value_or("enable_large_batch_splitting", False),
            max_execution_batch_size=value_or("max_execution_batch_size", None),
        )
        must_be_positive = {
            "max_batch_size": options.max_batch_size,
            "max_enqueued_batches": options.max_enqueued_batches,
            "num_batch_threads": options.num_batch_threads,
            "max_execution_batch_size": options.execution_batch_size,
        }
        for name, value in must_be_positive.items():
            if value <= 0:
                raise ConfigError(f"{source}: {name} must be positive, got {value}")
        if options.batch_timeout_micros < 0:
            raise ConfigError(f"{source}: batch_timeout_micros must be >= 0")
        sizes = options.allowed_batch_sizes
        if sizes:
            if any(later <= earlier for earlier, later in zip(sizes, sizes[1:])):
                raise ConfigError(
                    f"{source}: allowed_batch_sizes entries must be monotonically increasing"
                )
            if options.enable_large_batch_splitting:
                if sizes[-1] != options.execution_batch_size:
                    raise ConfigError(
                        f"{source}: final entry in allowed_batch_sizes must equal "
                        "max_execution_batch_size when enable_large_batch_splitting "
                        "is True"
                    )
            elif sizes[-1] != options.max_batch_size:
                raise ConfigError(
                    f"{source}: final entry in allowed_batch_sizes must equal "
                    "max_batch_size when enable_large_batch_splitting is False"
                )
        return options


def load_batching_options(path: str | None) -> BatchingOptions:
    """Reads a `--batching_parameters_file` (or returns the defaults when None)."""
    if not path:
        return BatchingOptions.from_proto(None)
    return BatchingOptions.from_proto(read_text_proto(path, BatchingParameters), source=path)


def load_prometheus_path(path: str) -> str | None:
    """Reads a `--monitoring_config_file` (a MonitoringConfig).

    Returns:
        The path the REST port serves the Prometheus page at (PrometheusExporter's default
        when `prometheus_config.path` is empty), or None when `prometheus_config.enable` is
        not set.

    Raises:
        ConfigError: the file is missing or not a valid MonitoringConfig, or its path does
            not start with '/' (no request could reach it).
    """
    config = read_text_proto(path, MonitoringConfig)
    if not config.prometheus_config.enable:
        return None
    metrics_path = config.prometheus_config.path or DEFAULT_PROMETHEUS_PATH
    if not metrics_path.startswith("/"):
        raise ConfigError(
            f"{path}: prometheus_config.path must start with '/', got '{metrics_path}'"
        )
    return metrics_path
