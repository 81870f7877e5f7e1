"""A local model server speaking TensorFlow Serving's gRPC and REST APIs.

    python -m serving.server --port=8500 --rest_api_port=8501 \\
        --model_name=translator --model_base_path=exports/translator
    python -m serving.server --model_config_file=serving/models.config \\
        --enable_batching --batching_parameters_file=serving/batching.config

Flags are tensorflow_model_server's (same names, `--flag=value` syntax, same
defaults), so a command line or config file that works here works with the real
binary. Local additions: `--grpc_bind_address` / `--rest_api_bind_address`
(default 127.0.0.1; the real server listens on all interfaces),
`--shutdown_grace_seconds` (SIGTERM lets requests in flight finish for up to this
long; then model runs still under way are aborted, CANCELLED, and connections still
open are closed, stalled clients included; the process exits at the latest
EXIT_MARGIN_SECONDS later), `--max_rows_per_run` (without batching, a request runs in
pieces of at most this many rows, and none starts past its deadline),
`--max_input_string_bytes` (longer strings are refused before any run),
`--max_rows_per_request` (a request of more rows is refused before its tensors are made;
default 65536),
`--request_memory_budget_bytes` (a request whose decoded inputs, counted before they are
made, would take those of the requests in flight past it is refused before any run; left out:
1 GiB, or a quarter of the process's cgroup memory limit, or of what its address-space limit
leaves it, when smaller),
`--rest_api_read_timeout_seconds` (a REST client silent this long, or whose request
head takes longer to arrive, is disconnected), `--rest_api_body_timeout_seconds` (a REST body
not complete this long after its head is refused, however steadily it arrives; default 120)
and `--rest_api_free_port` (REST on a free port: `--rest_api_port=0` disables REST,
as for the real server). `--port=0` binds a free gRPC port. Both bound ports are
logged: "Running gRPC ModelServer at HOST:PORT ..." and "Exporting HTTP/REST API
at:HOST:PORT ...", the last line before the server is ready. The largest accepted request is
set like the real server's, with
`--grpc_channel_arguments=grpc.max_receive_message_length=BYTES` (default
2147483647, TF Serving's); the same limit applies to REST bodies.

Memory follows the largest batch one model run gets, and the allocator keeps what a
run took. Without `--enable_batching` a request runs in pieces of `--max_rows_per_run`
rows; with batching, `max_batch_size` bounds a request and, with
`enable_large_batch_splitting`, `max_execution_batch_size` bounds a run
(serving/batching.config), as in TF Serving: a deployment open to large requests
sets them.
"""

import argparse
import dataclasses
import functools
import logging
import math
import os
import re
import signal
import sys
import threading
import time
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from common.flags import parse_bool
from serving.model_server import config as config_lib
from serving.model_server.batching import BatchScheduler, BatchStats
from serving.model_server.core import ServingCore
from serving.model_server.grpc_service import add_services
from serving.model_server.http_server import HttpServer
from serving.model_server.manager import ManagerOptions, ServableManager
from serving.model_server.memory_budget import default_budget_bytes
from serving.model_server.metrics import ServerMetrics
from serving.model_server.predict import run_warmup
from serving.model_server.rest_api import RestApi
from serving.model_server.servable import load_servable

# The lines that say where the server listens (TF Serving's wording): with --port=0 and
# --rest_api_free_port, whoever started the server reads the ports it picked from them.
GRPC_PORT_LOG_LINE = re.compile(r"Running gRPC ModelServer at [^ ]+:(\d+) \.\.\.")
REST_PORT_LOG_LINE = re.compile(r"Exporting HTTP/REST API at:[^ ]+:(\d+) \.\.\.")

logger = logging.getLogger("serving.server")

VERSION = "local-1.0 (TensorFlow Serving API compatible)"
KINT32MAX = 2**31 - 1
SERVICE_NAMES = ("tensorflow.serving.PredictionService", "tensorflow.serving.ModelService")

# Real tensorflow_model_server flags that this server does not implement: naming
# them gets a precise error instead of "unrecognized argument".
UNSUPPORTED_REAL_FLAGS = (
    "grpc_socket_path",
    "ssl_config_file",
    "platform_config_file",
    "use_alts_credentials",
    "prefer_tflite_model",
    "num_tflite_pools",
    "num_tflite_interpreters_per_pool",
    "enable_per_model_batching_parameters",
    "tensorflow_session_config_file",
    "num_load_threads",
    "num_unload_threads",
    "remove_unused_fields_from_bundle_metagraph",
    "enable_signature_method_name_check",
    "enable_profiler",
    "thread_pool_factory_config_file",
    "mixed_precision",
    "skip_initialize_tpu",
    "use_tflite_model",
)
# Real flags that are accepted and have no effect here.
IGNORED_REAL_FLAGS = ("flush_filesystem_caches", "per_process_gpu_memory_fraction")


@dataclasses.dataclass
class ServerOptions:
    """Everything the server is configured with (the flags, parsed).

    `port=0` binds a free gRPC port; `rest_api_port=None` disables REST and
    `rest_api_port=0` binds a free port (the CLI maps `--rest_api_port=0` to None,
    as 0 means "off" for tensorflow_model_server, and `--rest_api_free_port` to 0;
    `rest_api_free_port` itself is read by the CLI only).
    """

    port: int = 8500
    grpc_bind_address: str = "127.0.0.1"
    rest_api_port: int | None = None
    rest_api_bind_address: str = "127.0.0.1"
    rest_api_num_threads: int = 4 * (os.cpu_count() or 1)
    rest_api_timeout_in_ms: int = 30000
    rest_api_enable_cors_support: bool = False
    rest_api_read_timeout_seconds: float = 30.0
    rest_api_body_timeout_seconds: float = 120.0
    rest_api_free_port: bool = False
    model_name: str = "default"
    model_base_path: str = ""
    model_config_file: str = ""
    model_config_file_poll_wait_seconds: int = 0
    enable_batching: bool = False
    batching_parameters_file: str = ""
    file_system_poll_wait_seconds: float = 1
    max_num_load_retries: int = 5
    load_retry_interval_micros: int = 60_000_000
    saved_model_tags: str = "serve"
    enable_model_warmup: bool = True
    num_request_iterations_for_warmup: int = 1
    allow_version_labels_for_unavailable_models: bool = False
    grpc_channel_arguments: str = ""
    grpc_max_threads: int = 64
    monitoring_config_file: str = ""
    tensorflow_session_parallelism: int = 0
    tensorflow_intra_op_parallelism: int = 0
    tensorflow_inter_op_parallelism: int = 0
    shutdown_grace_seconds: float = 10.0
    xla_cpu_compilation_enabled: bool = False
    max_rows_per_run: int = 64
    max_input_string_bytes: int = 16384
    max_rows_per_request: int = 65536
    # None: `memory_budget.default_budget_bytes()` (1 GiB, less under a smaller cgroup or
    # address-space limit).
    request_memory_budget_bytes: int | None = None


def parse_grpc_channel_arguments(text: str) -> list[tuple[str, object]]:
    """`k=v,k2=v2` -> gRPC options; integer values become ints (as the real server does)."""
    arguments = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, separator, value = item.partition("=")
        if not separator or not key:
            raise config_lib.ConfigError(
                f"--grpc_channel_arguments: '{item}' is not of the form key=value"
            )
        try:
            arguments.append((key, int(value)))
        except ValueError:
            arguments.append((key, value))
    return arguments


def configure_tensorflow_threads(options: ServerOptions) -> None:
    """Applies the --tensorflow_*_parallelism flags to this process (before TF starts)."""
    import tensorflow as tf

    intra = options.tensorflow_intra_op_parallelism or options.tensorflow_session_parallelism
    inter = options.tensorflow_inter_op_parallelism or options.tensorflow_session_parallelism
    try:
        if intra:
            tf.config.threading.set_intra_op_parallelism_threads(intra)
        if inter:
            tf.config.threading.set_inter_op_parallelism_threads(inter)
    except RuntimeError as error:  # TF already initialized (another server in this process).
        logger.warning("TensorFlow thread settings not applied: %s", error)


class ModelServer:
    """The server: model manager, optional batching, gRPC (+ health) and REST front ends.

    Args:
        options: ServerOptions.

    Raises (from start()):
        ConfigError: bad flags or config files, with the file and reason.
    """

    def __init__(self, options: ServerOptions):
        self.options = options
        self.grpc_port: int | None = None
        self.rest_port: int | None = None
        self.core: ServingCore | None = None
        self._grpc_server: grpc.Server | None = None
        self._rest_server: HttpServer | None = None
        self._rest_thread: threading.Thread | None = None
        self._health = health.HealthServicer()
        self._config_poll_stop = threading.Event()
        self._config_poll_thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self.metrics = ServerMetrics()

    @property
    def batch_stats(self) -> BatchStats | None:
        """Processed batch sizes when batching is enabled, else None."""
        return self.core.batcher.stats if self.core and self.core.batcher else None

    # ---------------------------------------------------------------- startup

    def _model_server_config(self):
        options = self.options
        if options.model_config_file:
            if options.model_base_path:
                logger.warning(
                    "--model_config_file is set: --model_name and --model_base_path are ignored"
                )
            return config_lib.load_model_server_config(options.model_config_file)
        if not options.model_base_path:
            raise config_lib.ConfigError(
                "Both --model_base_path and --model_config_file are empty: give one of them"
            )
        logger.info(
            "Building single TensorFlow model file config:  model_name: %s model_base_path: %s",
            options.model_name,
            options.model_base_path,
        )
        return config_lib.single_model_config(options.model_name, options.model_base_path)

    def _batch_scheduler(self) -> BatchScheduler | None:
        options = self.options
        if not options.enable_batching:
            if options.batching_parameters_file:
                raise config_lib.ConfigError(
                    "--batching_parameters_file is set without setting --enable_batching to true."
                )
            return None
        batching = config_lib.load_batching_options(options.batching_parameters_file or None)
        logger.info("Batching enabled: %s", batching)
        return BatchScheduler(batching, self.metrics)

    def _grpc_options(self) -> list[tuple[str, object]]:
        # TF Serving calls SetMaxMessageSize(kint32max), then applies the user's arguments.
        # gRPC sets SO_REUSEPORT by default, which let a second server bind a port already in
        # use and take half of its connections: binding fails instead (grpc.so_reuseport=1
        # brings the sharing back).
        merged = {
            "grpc.max_receive_message_length": KINT32MAX,
            "grpc.max_send_message_length": KINT32MAX,
            "grpc.so_reuseport": 0,
        }
        merged.update(parse_grpc_channel_arguments(self.options.grpc_channel_arguments))
        return list(merged.items())

    def start(self) -> "ModelServer":
        """Loads the models (blocking, as TF Serving does) and starts serving."""
        options = self.options
        model_server_config = self._model_server_config()
        grpc_options = self._grpc_options()
        metrics_path = (
            config_lib.load_prometheus_path(options.monitoring_config_file)
            if options.monitoring_config_file
            else None
        )
        batcher = self._batch_scheduler()
        configure_tensorflow_threads(options)
        manager = self._servable_manager()
        self.metrics.version_states = manager.version_states
        self.metrics.model_names = manager.model_names
        budget = options.request_memory_budget_bytes
        if budget is None:
            budget = default_budget_bytes()
            logger.info("Memory budget of the requests in flight: %d bytes", budget)
        self.core = ServingCore(
            manager,
            batcher,
            self.metrics,
            max_rows_per_run=options.max_rows_per_run,
            max_input_string_bytes=options.max_input_string_bytes,
            max_rows_per_request=options.max_rows_per_request,
            request_memory_budget_bytes=budget,
        )
        self.metrics.memory_budget = self.core.memory_budget
        try:
            manager.set_config(model_server_config)
        except Exception:
            self._stop_core()
            raise

        self._start_grpc(grpc_options)

        if options.rest_api_port is not None:
            if options.rest_api_port and options.rest_api_port == self.grpc_port:
                logger.error(
                    "--rest_api_port cannot be same as --port. Please use a different "
                    "port for HTTP/REST API. Skipped exporting HTTP/REST API."
                )
            else:
                self._start_rest(
                    dict(grpc_options)["grpc.max_receive_message_length"], metrics_path
                )
        elif metrics_path is not None:
            logger.warning(
                "--monitoring_config_file enables Prometheus metrics, which are served on the "
                "REST port: set --rest_api_port to serve them"
            )

        manager.start_polling()
        if options.model_config_file and options.model_config_file_poll_wait_seconds > 0:
            self._config_poll_thread = threading.Thread(
                target=self._poll_config_file, name="config_poll", daemon=True
            )
            self._config_poll_thread.start()
        return self

    def _servable_manager(self) -> ServableManager:
        """The manager that loads, warms up and unloads the versions as the flags say."""
        options = self.options
        return ServableManager(
            ManagerOptions(
                file_system_poll_wait_seconds=options.file_system_poll_wait_seconds,
                max_num_load_retries=options.max_num_load_retries,
                load_retry_interval_seconds=options.load_retry_interval_micros / 1e6,
                saved_model_tags=tuple(t for t in options.saved_model_tags.split(",") if t),
                allow_version_labels_for_unavailable_models=(
                    options.allow_version_labels_for_unavailable_models
                ),
            ),
            warmup_fn=(
                lambda servable: run_warmup(servable, options.num_request_iterations_for_warmup)
            )
            if options.enable_model_warmup
            else None,
            on_availability_change=self._set_health,
            load_fn=functools.partial(
                load_servable,
                xla_compilation_enabled=options.xla_cpu_compilation_enabled,
                metrics=self.metrics,
            ),
        )

    def _start_grpc(self, grpc_options) -> None:
        """Binds and starts the gRPC server on `--grpc_bind_address:--port` (0: a free port,
        `self.grpc_port`), stopping the core if it cannot bind."""
        options = self.options
        self._grpc_server = grpc.server(
            futures.ThreadPoolExecutor(
                max_workers=options.grpc_max_threads, thread_name_prefix="grpc"
            ),
            options=grpc_options,
        )
        add_services(self._grpc_server, self.core)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._grpc_server)
        address = f"{options.grpc_bind_address}:{options.port}"
        try:
            self.grpc_port = self._grpc_server.add_insecure_port(address)
        except RuntimeError:  # grpcio raises where older versions returned 0.
            self.grpc_port = 0
        if not self.grpc_port:
            self._stop_core()
            raise config_lib.ConfigError(
                f"Failed to BuildAndStart gRPC server: cannot bind {address} (is another "
                "server listening on that port?)"
            )
        self._grpc_server.start()
        logger.info(
            "Running gRPC ModelServer at %s:%d ...", options.grpc_bind_address, self.grpc_port
        )

    def _start_rest(self, max_body_bytes: int, metrics_path: str | None) -> None:
        options = self.options
        timeout_seconds = (
            options.rest_api_timeout_in_ms / 1000 if options.rest_api_timeout_in_ms > 0 else None
        )
        api = RestApi(
            self.core,
            timeout_seconds=timeout_seconds,
            metrics_path=metrics_path,
            metrics_page=self.metrics.exposition,
        )
        self._rest_server = HttpServer(
            (options.rest_api_bind_address, options.rest_api_port),
            api,
            num_threads=options.rest_api_num_threads,
            max_body_bytes=max_body_bytes,
            enable_cors=options.rest_api_enable_cors_support,
            read_timeout_seconds=options.rest_api_read_timeout_seconds,
            body_timeout_seconds=options.rest_api_body_timeout_seconds
            if options.rest_api_body_timeout_seconds > 0
            else math.inf,
            memory_budget=self.core.memory_budget,
            answer_timeout_seconds=timeout_seconds,
        )
        self.rest_port = self._rest_server.server_address[1]
        self._rest_thread = threading.Thread(
            target=self._rest_server.serve_forever, name="rest", daemon=True
        )
        self._rest_thread.start()
        logger.info(
            "Exporting HTTP/REST API at:%s:%d ...", options.rest_api_bind_address, self.rest_port
        )

    def _set_health(self, all_available: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if all_available
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for service in ("",) + SERVICE_NAMES:
            self._health.set(service, status)

    def _poll_config_file(self) -> None:
        path = self.options.model_config_file
        current = None
        while not self._config_poll_stop.wait(self.options.model_config_file_poll_wait_seconds):
            try:
                new_config = config_lib.load_model_server_config(path)
                if new_config.WhichOneof("config") != "model_config_list":
                    # An emptied or half-written file must not unload every model.
                    raise config_lib.ConfigError(f"{path} has no model_config_list")
                if current is not None and new_config == current:
                    continue
                current = new_config
                self.core.manager.set_config(new_config)
            except Exception as error:  # Keep serving the last good config.
                logger.error("Failed to reload ModelServerConfig file %s: %s", path, error)

    # --------------------------------------------------------------- shutdown

    def stop(self, grace_seconds: float | None = None) -> None:
        """Stops accepting requests, lets requests in flight finish, then unloads the models.

        Args:
            grace_seconds: longest wait for requests in flight (default
                `shutdown_grace_seconds`); then their model runs are aborted and their
                connections closed.
        """
        if self._stopped.is_set():
            return
        self._stopped.set()
        grace = self.options.shutdown_grace_seconds if grace_seconds is None else grace_seconds
        self._health.enter_graceful_shutdown()
        # Both front ends wait for their request threads, which may be inside a model run:
        # at the end of the grace period the runs still under way are aborted.
        cancel_runs = threading.Timer(grace, self._cancel_runs)
        cancel_runs.daemon = True
        cancel_runs.start()
        grpc_done = self._grpc_server.stop(grace) if self._grpc_server else None
        if self._rest_server is not None:
            self._rest_server.stop(grace)
        if grpc_done is not None:
            grpc_done.wait()
        cancel_runs.cancel()
        self._stop_core()
        logger.info("Server stopped.")

    def _cancel_runs(self) -> None:
        logger.warning("Shutdown grace period is over: cancelling the requests still running")
        if self.core is not None:
            self.core.manager.cancel_runs()

    def _stop_core(self) -> None:
        self._config_poll_stop.set()
        if self._config_poll_thread is not None:
            self._config_poll_thread.join()
        if self.core is not None:
            if self.core.batcher is not None:
                self.core.batcher.close()
            self.core.manager.stop()

    def wait(self) -> None:
        self._stopped.wait()


# -------------------------------------------------------------------- command line


def build_arg_parser() -> argparse.ArgumentParser:
    defaults = ServerOptions()
    parser = argparse.ArgumentParser(
        prog="python -m serving.server",
        allow_abbrev=False,
        description="Serve SavedModels over TensorFlow Serving's gRPC (PredictionService, "
        "ModelService, health) and REST APIs. Flags are tensorflow_model_server's.",
    )

    def flag(name, kind, help_text, default=None):
        default = getattr(defaults, name) if default is None else default
        if kind is bool:
            parser.add_argument(
                f"--{name}",
                type=parse_bool,
                nargs="?",
                const=True,
                default=default,
                metavar="true|false",
                help=f"{help_text} (default {str(default).lower()})",
            )
        else:
            parser.add_argument(
                f"--{name}", type=kind, default=default, help=f"{help_text} (default {default!r})"
            )

    flag("port", int, "gRPC port; 0 binds a free port and logs it")
    flag("grpc_bind_address", str, "[local] address the gRPC server binds")
    flag("rest_api_port", int, "HTTP/REST port; 0 disables REST", default=0)
    flag("rest_api_bind_address", str, "[local] address the REST server binds")
    flag("rest_api_num_threads", int, "REST requests processed at once")
    flag("rest_api_timeout_in_ms", int, "deadline of REST predict calls; <=0 for none")
    flag("rest_api_enable_cors_support", bool, "add CORS headers to REST responses")
    flag(
        "rest_api_read_timeout_seconds",
        float,
        "[local] a REST connection whose client sends nothing for this long, or whose "
        "request head takes longer to arrive, is closed",
    )
    flag(
        "rest_api_body_timeout_seconds",
        float,
        "[local] a REST request body not complete this long after its head is refused 408, "
        "however steadily it arrives; <=0 for none",
    )
    flag(
        "rest_api_free_port",
        bool,
        "[local] serve REST on a free port, logged in the "
        "'Exporting HTTP/REST API at:HOST:PORT' line (for tests; --rest_api_port=0 disables "
        "REST, as for tensorflow_model_server)",
    )
    flag("model_name", str, "model name (ignored with --model_config_file)")
    flag(
        "model_base_path",
        str,
        "directory holding the numbered versions of the model (ignored with --model_config_file)",
    )
    flag("model_config_file", str, "text-format ModelServerConfig serving one or more models")
    flag(
        "model_config_file_poll_wait_seconds",
        int,
        "seconds between re-reads of --model_config_file; 0 reads it once",
    )
    flag("enable_batching", bool, "merge concurrent requests into batches")
    flag("batching_parameters_file", str, "text-format BatchingParameters")
    flag(
        "file_system_poll_wait_seconds",
        float,
        "seconds between polls of the base paths for new versions; 0 polls once",
    )
    flag("max_num_load_retries", int, "retries after a failed version load")
    flag("load_retry_interval_micros", int, "wait between load retries")
    flag("saved_model_tags", str, "comma-separated MetaGraphDef tags to load")
    flag(
        "enable_model_warmup",
        bool,
        "replay assets.extra/tf_serving_warmup_requests before serving a version",
    )
    flag("num_request_iterations_for_warmup", int, "replays of each warmup request")
    flag(
        "allow_version_labels_for_unavailable_models",
        bool,
        "allow version labels pointing at versions that are not loaded",
    )
    flag(
        "grpc_channel_arguments",
        str,
        "comma-separated gRPC server arguments, e.g. grpc.max_receive_message_length=4194304",
    )
    flag("grpc_max_threads", int, "gRPC handler threads (requests processed at once)")
    flag(
        "monitoring_config_file",
        str,
        "text-format MonitoringConfig; with prometheus_config { enable: true }, the REST port "
        "serves Prometheus metrics at prometheus_config.path "
        "(default /monitoring/prometheus/metrics)",
    )
    flag("tensorflow_session_parallelism", int, "TF intra- and inter-op threads; 0 = auto")
    flag("tensorflow_intra_op_parallelism", int, "TF intra-op threads; 0 = auto")
    flag("tensorflow_inter_op_parallelism", int, "TF inter-op threads; 0 = auto")
    flag(
        "xla_cpu_compilation_enabled",
        bool,
        "run XLA-compiled functions (an export with --jit_compile); without it their signatures "
        "fail with INTERNAL 'XLA compilation disabled', and so does their warmup",
    )
    flag(
        "max_rows_per_run",
        int,
        "[local] without --enable_batching, a request runs in pieces of at most this many rows "
        "(rows must be independent), and stops between them once its deadline has passed or its "
        "caller has gone; 0 runs it whole, as tensorflow_model_server does",
    )
    flag(
        "max_input_string_bytes",
        int,
        "[local] a request holding a longer string is refused (INVALID_ARGUMENT, REST 400) "
        "before any run: a model's memory can grow with the square of a string's length; 0 "
        "accepts any",
    )
    flag(
        "max_rows_per_request",
        int,
        "[local] a request of more rows (its inputs' 0th dimension) is refused "
        "(INVALID_ARGUMENT, REST 400) before its tensors are made, as batching's max_batch_size "
        "refuses one; 0 accepts any",
    )
    flag(
        "request_memory_budget_bytes",
        int,
        "[local] the most the decoded inputs of the requests in flight may hold together, "
        "counted from each request before its tensors are made; a request that does not fit is "
        "refused (RESOURCE_EXHAUSTED, REST 429) before any run; 0: no budget; left out: 1 GiB, or "
        "a quarter of the process's cgroup memory limit, or of what its address-space limit "
        "(RLIMIT_AS) leaves it, when that is smaller",
    )
    flag(
        "shutdown_grace_seconds",
        float,
        "[local] on SIGTERM, how long requests in flight may take to finish before their "
        "model runs are aborted",
    )
    for name in IGNORED_REAL_FLAGS:
        parser.add_argument(f"--{name}", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    return parser


def parse_flags(argv: list[str] | None = None) -> ServerOptions:
    """Parses tensorflow_model_server-style flags into ServerOptions (exits on errors)."""
    parser = build_arg_parser()
    namespace, unknown = parser.parse_known_args(argv)
    for argument in unknown:
        name = argument.lstrip("-").split("=", 1)[0]
        if argument.startswith("--") and name in UNSUPPORTED_REAL_FLAGS:
            parser.error(
                f"--{name} is a tensorflow_model_server flag that this local server "
                "does not implement"
            )
        parser.error(f"unknown flag or argument: {argument} (see --help)")
    if namespace.version:
        print(f"TensorFlow ModelServer: {VERSION}")
        sys.exit(0)
    for name in IGNORED_REAL_FLAGS:
        if getattr(namespace, name) is not None:
            logger.warning("--%s has no effect on this server", name)
    values = {
        field.name: getattr(namespace, field.name) for field in dataclasses.fields(ServerOptions)
    }
    if values["rest_api_free_port"]:
        if values["rest_api_port"]:
            parser.error("--rest_api_free_port and a non-zero --rest_api_port exclude each other")
        values["rest_api_port"] = 0
    else:
        values["rest_api_port"] = values["rest_api_port"] or None
    if values["port"] < 0 or (values["rest_api_port"] or 0) < 0:
        parser.error("ports must be >= 0")
    return ServerOptions(**values)


class _GlogFormatter(logging.Formatter):
    """TF Serving's log line shape: `I0612 10:11:12.123456 4242 file.py:42] message`."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%m%d %H:%M:%S", time.localtime(record.created))
        micros = int((record.created % 1) * 1e6)
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        return (
            f"{record.levelname[0]}{stamp}.{micros:06d} {record.thread % 100000} "
            f"{record.filename}:{record.lineno}] {message}"
        )


def configure_logging(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(_GlogFormatter())
    root = logging.getLogger("serving")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


# How long after its grace period a stopping server may still take before it exits anyway.
EXIT_MARGIN_SECONDS = 1.0


def exit_now(forced: bool) -> None:
    """Flushes the logs and ends the process at once, with status 0.

    Once the servers have stopped nothing is left to save, and the interpreter's teardown
    (TensorFlow's and gRPC's finalizers) took 5 to 9 s more; `forced` when the stop itself
    outlasted the grace period and its margin.
    """
    if forced:
        logger.warning(
            "Shutdown took longer than the grace period and %.0f s: exiting now",
            EXIT_MARGIN_SECONDS,
        )
    else:
        logger.info("Exiting.")
    for handler in logging.getLogger("serving").handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    options = parse_flags(argv)
    server = ModelServer(options)
    stop_requested = threading.Event()

    def on_signal(signum, _frame):
        logger.info(
            "Received signal %d: shutting down, letting requests in flight finish (up to %.0f s)",
            signum,
            options.shutdown_grace_seconds,
        )
        stop_requested.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        server.start()
    except Exception as error:  # Config errors, unbindable ports, unavailable labeled versions.
        logger.error("Failed to start server. Error: %s", error)
        return 1
    while not stop_requested.wait(1.0):
        pass
    # Kubernetes kills the process at terminationGracePeriodSeconds: whatever still runs once
    # the grace period and a margin are over (a model run deaf to its Session's close, an
    # unload waiting for it) is abandoned, and the process ends.
    deadline_exit = threading.Timer(
        options.shutdown_grace_seconds + EXIT_MARGIN_SECONDS, exit_now, args=(True,)
    )
    deadline_exit.daemon = True
    deadline_exit.start()
    server.stop()
    exit_now(forced=False)
    return 0  # Not reached.


if __name__ == "__main__":
    sys.exit(main())
