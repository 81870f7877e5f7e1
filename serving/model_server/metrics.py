"""TF Serving's metrics, kept per server and exposed in Prometheus' text format.

Each metric has the name, labels, unit (microseconds) and bucket bounds of its definition in
the TensorFlow Serving or TensorFlow source cited next to it, and its Prometheus name is made
as TF Serving's exporter makes it (tensorflow_serving/util/prometheus_exporter.cc,
GetPrometheusMetricName): every character outside [a-zA-Z0-9_] becomes ':', and a name
starting with a digit gets a '_' in front, so "/tensorflow/serving/request_count" is
":tensorflow:serving:request_count". Label names get '_' for every character outside
[a-zA-Z0-9] (SanatizeLabelName).

The page is written by prometheus_client (`generate_latest`) from a collector in a
CollectorRegistry of the server's own. prometheus_client writes a counter's samples as
NAME_total (OpenMetrics' rule), where TF Serving writes NAME, the name dashboards and alerts
written for TF Serving query: the counters are exposed as untyped metrics under their TF
Serving names instead. The version-state gauge is this server's own: TF Serving exposes
version states only through GetModelStatus.
"""

import dataclasses
import re
import threading
from collections.abc import Callable, Iterable

import grpc
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

# The Content-Type of what `exposition()` returns (Prometheus text format 0.0.4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# PrometheusExporter::kPrometheusPath, the path when the config leaves it empty.
DEFAULT_PROMETHEUS_PATH = "/monitoring/prometheus/metrics"


def prometheus_metric_name(name: str) -> str:
    """TF Serving's Prometheus name of a TensorFlow metric name."""
    sanitized = re.sub(r"[^a-zA-Z0-9_]", ":", name)
    return f"_{sanitized}" if sanitized[:1].isdigit() else sanitized


def prometheus_label_name(name: str) -> str:
    """TF Serving's Prometheus name of a TensorFlow metric label."""
    sanitized = re.sub(r"[^a-zA-Z0-9]", "_", name)
    return f"_{sanitized}" if sanitized[:1].isdigit() else sanitized


def exponential_buckets(scale: float, growth_factor: float, bucket_count: int) -> tuple:
    """TensorFlow's monitoring::Buckets::Exponential: the upper bounds scale * growth^i for
    i < bucket_count (a last, unbounded bucket follows), rounded to the 6 significant digits
    TF Serving's page prints them with."""
    return tuple(float(f"{scale * growth_factor**i:.6g}") for i in range(bucket_count))


@dataclasses.dataclass(frozen=True)
class MetricDefinition:
    """A metric as TensorFlow names it; its Prometheus name is `prometheus_metric_name(name)`."""

    name: str  # TensorFlow's name, "/tensorflow/serving/..."
    help: str
    labels: tuple[str, ...] = ()
    bounds: tuple[float, ...] | None = None  # A histogram's buckets; None for a counter.


# tensorflow_serving/servables/tensorflow/util.cc (recorded by prediction_service_impl.cc and
# http_server.cc: every call counted, the latency of successful calls only).
REQUEST_COUNT = MetricDefinition(
    "/tensorflow/serving/request_count",
    "The total number of requests.",
    ("model_name", "status"),
)
REQUEST_LATENCY = MetricDefinition(
    "/tensorflow/serving/request_latency",
    "Distribution of wall time (in microseconds) for Tensorflow Serving request.",
    ("model_name", "API", "entrypoint"),
    exponential_buckets(10, 1.8, 33),
)
RUNTIME_LATENCY = MetricDefinition(
    "/tensorflow/serving/runtime_latency",
    "Distribution of wall time (in microseconds) for Tensorflow runtime.",
    ("model_name", "API", "runtime"),
    exponential_buckets(10, 1.8, 33),
)
# tensorflow_serving/batching/batching_session.cc.
QUEUING_LATENCY = MetricDefinition(
    "/tensorflow/serving/batching_session/queuing_latency",
    "Distribution of wall time spent (in microseconds) in queuing",
    ("thread_pool_name",),
    exponential_buckets(100, 1.2, 52),
)
WRAPPED_RUN_COUNT = MetricDefinition(
    "/tensorflow/serving/batching_session/wrapped_run_count",
    "Total count of run calls on the wrapped session",
)
# tensorflow_serving/batching/batching_util.h (BatchingSessionTask::Name() is
# "batching_session").
INPUT_BATCH_SIZE = MetricDefinition(
    "/tensorflow/serving/batching_session/input_batch_size",
    "Tracks the batch size distribution on the inputs.",
    bounds=exponential_buckets(1, 2, 14),
)
PROCESSED_BATCH_SIZE = MetricDefinition(
    "/tensorflow/serving/batching_session/processed_batch_size",
    "Tracks the batch size distribution on processing.",
    bounds=exponential_buckets(1, 2, 14),
)
PADDING_SIZE = MetricDefinition(
    "/tensorflow/serving/batching_session/padding_size",
    "Tracks the padding size distribution on batches.",
    ("execution_batch_size",),
    exponential_buckets(1, 2, 14),
)
# tensorflow/cc/saved_model/loader.cc (TensorFlow's SavedModel loader, which TF Serving runs).
LOAD_ATTEMPT_COUNT = MetricDefinition(
    "/tensorflow/cc/saved_model/load_attempt_count",
    "The number of times a SavedModel was successfully loaded.",
    ("model_path", "status"),
)
LOAD_LATENCY = MetricDefinition(
    "/tensorflow/cc/saved_model/load_latency",
    "Latency in microseconds for SavedModels that were successfully loaded.",
    ("model_path",),
)
LOAD_LATENCY_BY_STAGE = MetricDefinition(
    "/tensorflow/cc/saved_model/load_latency_by_stage",
    "Distribution of wall time spent (in microseconds) in each stage (restore graph from "
    "disk, run init graph op, etc) when loading the model",
    ("model_path", "stage"),
    exponential_buckets(10, 1.8, 33),
)
# The model_name label of the requests for a model the server does not serve (its config does
# not name it): a client's every new name made a label for good (six 16 MB names took 229 MB
# and a 96 MiB metrics page).
UNKNOWN_MODEL_LABEL = "(unknown model)"
# This server's own: 1 for the state a version is in, 0 for the others.
VERSION_STATE = MetricDefinition(
    "/local/serving/model_version_state",
    "State of each model version (GetModelStatus' state): 1 for its current state.",
    ("model_name", "version", "state"),
)
VERSION_STATES = ("START", "LOADING", "AVAILABLE", "UNLOADING", "END")
# This server's own: the memory budget of the requests in flight (memory_budget.py), so that a
# readiness probe or an alert sees a server refusing work for want of memory.
MEMORY_BUDGET_BYTES = MetricDefinition(
    "/local/serving/request_memory_budget_bytes",
    "The memory budget of the requests in flight (--request_memory_budget_bytes), in bytes: "
    'its limit (kind="limit", 0: none) and what they hold now (kind="held").',
    ("kind",),
)
MEMORY_BUDGET_REFUSALS = MetricDefinition(
    "/local/serving/request_memory_budget_refusals",
    "Requests refused (RESOURCE_EXHAUSTED, REST 429) because what they would hold (their "
    "inputs, or their REST body bytes, JSON values or answer bytes) did not fit in the memory "
    'budget, by what="inputs", "body bytes", "JSON values" or "answer bytes".',
    ("what",),
)

_COUNTERS = (REQUEST_COUNT, WRAPPED_RUN_COUNT, LOAD_ATTEMPT_COUNT, LOAD_LATENCY)
_HISTOGRAMS = (
    REQUEST_LATENCY,
    RUNTIME_LATENCY,
    QUEUING_LATENCY,
    INPUT_BATCH_SIZE,
    PROCESSED_BATCH_SIZE,
    PADDING_SIZE,
    LOAD_LATENCY_BY_STAGE,
)

# What TF Serving's batching session labels its queuing latency with in the model server
# (CreateBatchingSession passes an empty thread_pool_name).
_BATCHING_THREAD_POOL_NAME = ""


def _microseconds(seconds: float) -> float:
    return max(seconds, 0.0) * 1e6


class _Histogram:
    """One label set's buckets (counts per bound, then the unbounded one) and sum."""

    def __init__(self, bounds: tuple[float, ...]):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # As TensorFlow's Histogram::Add (upper_bound): a bucket holds the values below its
        # bound, so a value equal to a bound is counted in the next bucket.
        index = next((i for i, bound in enumerate(self.bounds) if value < bound), len(self.bounds))
        self.counts[index] += 1
        self.sum += value

    def cumulative_buckets(self) -> list[tuple[str, int]]:
        limits = [repr(bound) if bound % 1 else str(int(bound)) for bound in self.bounds]
        total, buckets = 0, []
        for limit, count in zip([*limits, "+Inf"], self.counts):
            total += count
            buckets.append((limit, total))
        return buckets


class ServerMetrics:
    """The metrics of one server; every method may be called from any thread.

    Args:
        version_states: returns `(model_name, version, state name)` for every version the
            server knows, read at each scrape.
    """

    def __init__(self, version_states: Callable[[], Iterable[tuple[str, int, str]]] | None = None):
        self.version_states = version_states
        # The server's memory_budget.RequestMemoryBudget, read at each scrape (None: none).
        self.memory_budget = None
        # The names of the models served (None: every name is one): the others are counted
        # under UNKNOWN_MODEL_LABEL.
        self.model_names: Callable[[], Iterable[str]] | None = None
        self._lock = threading.Lock()
        self._counters: dict[MetricDefinition, dict[tuple, float]] = {d: {} for d in _COUNTERS}
        self._histograms: dict[MetricDefinition, dict[tuple, _Histogram]] = {
            d: {} for d in _HISTOGRAMS
        }
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    # ---------------------------------------------------------------- recording

    def _add(self, definition: MetricDefinition, labels: tuple, amount: float = 1) -> None:
        with self._lock:
            cells = self._counters[definition]
            cells[labels] = cells.get(labels, 0) + amount

    def _observe(self, definition: MetricDefinition, labels: tuple, value: float) -> None:
        with self._lock:
            cells = self._histograms[definition]
            if labels not in cells:
                cells[labels] = _Histogram(definition.bounds)
            cells[labels].observe(value)

    def record_request(
        self,
        model_name: str,
        code: grpc.StatusCode,
        api: str,
        entrypoint: str,
        seconds: float,
    ) -> None:
        """A Predict/Classify/Regress call (gRPC) or a REST call ended with `code`; a model the
        server does not serve is counted as UNKNOWN_MODEL_LABEL."""
        if model_name and self.model_names is not None and model_name not in self.model_names():
            model_name = UNKNOWN_MODEL_LABEL
        self._add(REQUEST_COUNT, (model_name, code.name))
        if code == grpc.StatusCode.OK:
            self._observe(REQUEST_LATENCY, (model_name, api, entrypoint), _microseconds(seconds))

    def record_runtime(self, model_name: str, api: str, seconds: float) -> None:
        """A successful model run of a request ("TF1": a Session run, as here)."""
        self._observe(RUNTIME_LATENCY, (model_name, api, "TF1"), _microseconds(seconds))

    def record_load(self, model_path: str, succeeded: bool, seconds: float) -> None:
        """One attempt to load the SavedModel at `model_path` (a version directory)."""
        self._add(LOAD_ATTEMPT_COUNT, (model_path, "success" if succeeded else "fail"))
        self._add(LOAD_LATENCY, (model_path,), _microseconds(seconds))

    def record_load_stage(self, model_path: str, stage: str, seconds: float) -> None:
        """A stage of a load: "restore_graph" or "init_graph"."""
        self._observe(LOAD_LATENCY_BY_STAGE, (model_path, stage), _microseconds(seconds))

    def record_input_batch_size(self, size: int) -> None:
        """The rows of one input tensor of a request entering the batch scheduler."""
        self._observe(INPUT_BATCH_SIZE, (), size)

    def record_queuing(self, seconds: float) -> None:
        """How long a request (or a piece of a split one) waited for its batch to run."""
        self._observe(QUEUING_LATENCY, (_BATCHING_THREAD_POOL_NAME,), _microseconds(seconds))

    def record_batch(self, padded_size: int, padding: int) -> None:
        """A merged batch about to run: its size after padding and the padding rows."""
        self._observe(PROCESSED_BATCH_SIZE, (), padded_size)
        self._observe(PADDING_SIZE, (str(padded_size),), padding)

    def record_wrapped_run(self) -> None:
        """A model run of the batch scheduler (a merged batch, or one request re-run alone)."""
        self._add(WRAPPED_RUN_COUNT, ())

    # ---------------------------------------------------------------- exposition

    def collect(self):
        """prometheus_client's Collector interface: the metric families, one per definition."""
        with self._lock:
            counters = {d: dict(cells) for d, cells in self._counters.items()}
            histograms = {
                d: {labels: (h.cumulative_buckets(), h.sum) for labels, h in cells.items()}
                for d, cells in self._histograms.items()
            }
        for definition, cells in counters.items():
            name = prometheus_metric_name(definition.name)
            family = Metric(name, definition.help, "unknown")
            for labels, value in cells.items():
                family.add_sample(name, self._label_dict(definition, labels), value)
            yield family
        for definition, cells in histograms.items():
            family = HistogramMetricFamily(
                prometheus_metric_name(definition.name),
                definition.help,
                labels=[prometheus_label_name(label) for label in definition.labels],
            )
            for labels, (buckets, total) in cells.items():
                family.add_metric(list(labels), buckets=buckets, sum_value=total)
            yield family
        yield self._version_state_family()
        yield from self._memory_budget_families()

    @staticmethod
    def _label_dict(definition: MetricDefinition, labels: tuple) -> dict[str, str]:
        return {prometheus_label_name(n): v for n, v in zip(definition.labels, labels)}

    def _version_state_family(self) -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            prometheus_metric_name(VERSION_STATE.name),
            VERSION_STATE.help,
            labels=list(VERSION_STATE.labels),
        )
        for model_name, version, current in self.version_states() if self.version_states else ():
            for state in VERSION_STATES:
                family.add_metric([model_name, str(version), state], int(state == current))
        return family

    def _memory_budget_families(self):
        budget = self.memory_budget
        if budget is None:
            return
        name = prometheus_metric_name(MEMORY_BUDGET_BYTES.name)
        family = GaugeMetricFamily(name, MEMORY_BUDGET_BYTES.help, labels=["kind"])
        family.add_metric(["limit"], max(budget.limit_bytes, 0))
        family.add_metric(["held"], budget.held_bytes)
        yield family
        name = prometheus_metric_name(MEMORY_BUDGET_REFUSALS.name)
        family = Metric(name, MEMORY_BUDGET_REFUSALS.help, "unknown")
        for what, count in sorted(budget.refusals().items()):
            family.add_sample(name, {"what": what}, count)
        yield family

    def exposition(self) -> bytes:
        """The Prometheus text page of every metric (CONTENT_TYPE)."""
        return generate_latest(self.registry)
