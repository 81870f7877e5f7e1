"""The model server's Prometheus metrics (--monitoring_config_file), scraped over real HTTP
from in-process servers on free ports after real gRPC and REST calls, and read back with
prometheus_client's parser. Names and labels are TF Serving's (serving/model_server/metrics.py
cites the source of each)."""

import json
import os
import re
import urllib.error
import urllib.request

import grpc
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from tensorflow_serving.apis import prediction_service_pb2_grpc

from serving.model_server import config as config_lib
from serving.model_server import metrics as metrics_lib
from serving.model_server.metrics import (
    CONTENT_TYPE,
    DEFAULT_PROMETHEUS_PATH,
    VERSION_STATES,
    _Histogram,
    exponential_buckets,
    prometheus_label_name,
    prometheus_metric_name,
)
from serving.model_server.server import ModelServer, ServerOptions
from tests.serving_fixtures import MODEL_NAME, REPO_ROOT, make_model_base, texts_request

REQUEST_COUNT = ":tensorflow:serving:request_count"
REQUEST_LATENCY = ":tensorflow:serving:request_latency"
RUNTIME_LATENCY = ":tensorflow:serving:runtime_latency"


def write_monitoring_config(tmp_path, text: str) -> str:
    path = tmp_path / "monitoring.config"
    path.write_text(text)
    return str(path)


def start(tmp_path, exports, **options) -> ModelServer:
    base_path = make_model_base(exports, str(tmp_path), (1,))
    return ModelServer(
        ServerOptions(
            **{
                "port": 0,
                "rest_api_port": 0,
                "model_name": MODEL_NAME,
                "model_base_path": base_path,
                "file_system_poll_wait_seconds": 0,
                **options,
            }
        )
    ).start()


def get(url: str) -> tuple[int, str, str]:
    """(HTTP status, Content-Type, body) of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def post_json(url: str, document) -> int:
    request = urllib.request.Request(url, data=json.dumps(document).encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def scrape(server: ModelServer, path: str = DEFAULT_PROMETHEUS_PATH) -> list:
    """Every sample of the server's metrics page, parsed by prometheus_client."""
    status, content_type, text = get(f"http://127.0.0.1:{server.rest_port}{path}")
    assert (status, content_type) == (200, CONTENT_TYPE), text
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def value(samples: list, name: str, **labels) -> float:
    """The value of the one sample with this name and exactly these labels."""
    found = [s.value for s in samples if s.name == name and s.labels == labels]
    assert len(found) == 1, f"{len(found)} samples {name}{labels} in {samples}"
    return found[0]


@pytest.fixture(scope="module")
def monitored(exports, tmp_path_factory):
    """A server without batching whose REST port serves metrics at the default path, serving
    every version of the translator: 1, and 2 that fails to load (not a SavedModel proto)."""
    tmp_path = tmp_path_factory.mktemp("monitored")
    base_path = make_model_base(exports, str(tmp_path), (1,))
    os.makedirs(os.path.join(base_path, "2"))
    with open(os.path.join(base_path, "2", "saved_model.pb"), "wb") as corrupt:
        corrupt.write(b"not a SavedModel")
    model_config = tmp_path / "models.config"
    model_config.write_text(
        f'model_config_list {{ config {{ name: "{MODEL_NAME}" base_path: "{base_path}" '
        'model_platform: "tensorflow" model_version_policy { all {} } } }'
    )
    server = ModelServer(
        ServerOptions(
            port=0,
            rest_api_port=0,
            model_config_file=str(model_config),
            file_system_poll_wait_seconds=0,
            max_num_load_retries=0,
            monitoring_config_file=write_monitoring_config(
                tmp_path, "prometheus_config { enable: true }"
            ),
        )
    ).start()
    server.base_path = base_path
    yield server
    server.stop(grace_seconds=0)


def test_metric_names_are_sanitized_as_tf_serving_does():
    """The cases of TF Serving's prometheus_exporter_test.cc."""
    assert prometheus_metric_name("/test/path/total") == ":test:path:total"
    assert prometheus_metric_name("0/path-total_count") == "_0:path:total_count"
    assert prometheus_label_name("my-name+1") == "my_name_1"
    assert prometheus_label_name("API") == "API"


def test_histograms_are_bucketed_as_tf_serving_does():
    """The case of TF Serving's prometheus_exporter_test.cc: Exponential(1, 2, 10) buckets
    holding 2, 20 and 200 (a bucket counts the values below its bound)."""
    histogram = _Histogram(exponential_buckets(1, 2, 10))
    for observation in (2, 20, 200):
        histogram.observe(observation)
    assert histogram.cumulative_buckets() == [
        ("1", 0), ("2", 0), ("4", 1), ("8", 1), ("16", 1), ("32", 2), ("64", 2), ("128", 2),
        ("256", 3), ("512", 3), ("+Inf", 3),
    ]  # fmt: skip
    assert histogram.sum == 222
    assert exponential_buckets(10, 1.8, 3) == (10, 18, 32.4)


def test_request_counts_and_latencies_by_status(monitored):
    """N good and M bad calls over each front end give the counts by status, and latency
    histograms with as many observations as successful calls (TF Serving times those only)."""
    good_grpc, bad_grpc, good_rest, bad_rest = 3, 2, 2, 4
    stub = prediction_service_pb2_grpc.PredictionServiceStub(
        grpc.insecure_channel(f"127.0.0.1:{monitored.grpc_port}")
    )
    for index in range(good_grpc):
        stub.Predict(texts_request([f"good {index}"]), timeout=30)
    for _ in range(bad_grpc):
        request = texts_request(["bad"])
        request.inputs["no_such_input"].CopyFrom(request.inputs["text"])
        with pytest.raises(grpc.RpcError) as error:
            stub.Predict(request, timeout=30)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    url = f"http://127.0.0.1:{monitored.rest_port}/v1/models/{MODEL_NAME}:predict"
    for index in range(good_rest):
        assert post_json(url, {"instances": [f"good rest {index}"]}) == 200
    for _ in range(bad_rest):
        assert post_json(url, {"instances": "not a list"}) == 400

    samples = scrape(monitored)
    assert value(samples, REQUEST_COUNT, model_name=MODEL_NAME, status="OK") == (
        good_grpc + good_rest
    )
    assert value(samples, REQUEST_COUNT, model_name=MODEL_NAME, status="INVALID_ARGUMENT") == (
        bad_grpc + bad_rest
    )
    for api, entrypoint, calls in (("Predict", "GRPC", good_grpc), ("predict", "REST", good_rest)):
        labels = {"model_name": MODEL_NAME, "API": api, "entrypoint": entrypoint}
        assert value(samples, f"{REQUEST_LATENCY}_count", **labels) == calls
        assert value(samples, f"{REQUEST_LATENCY}_bucket", le="+Inf", **labels) == calls
        assert value(samples, f"{REQUEST_LATENCY}_sum", **labels) > 0
    runtime = {"model_name": MODEL_NAME, "API": "Predict", "runtime": "TF1"}
    assert value(samples, f"{RUNTIME_LATENCY}_count", **runtime) == good_grpc + good_rest


def test_load_latency_and_version_states(monitored):
    samples = scrape(monitored)
    model_path = os.path.join(monitored.base_path, "1")
    assert (
        value(
            samples,
            ":tensorflow:cc:saved_model:load_attempt_count",
            model_path=model_path,
            status="success",
        )
        == 1
    )
    assert value(samples, ":tensorflow:cc:saved_model:load_latency", model_path=model_path) > 0
    for stage in ("restore_graph", "init_graph"):
        assert (
            value(
                samples,
                ":tensorflow:cc:saved_model:load_latency_by_stage_count",
                model_path=model_path,
                stage=stage,
            )
            == 1
        )
    failed_path = os.path.join(monitored.base_path, "2")
    assert (
        value(
            samples,
            ":tensorflow:cc:saved_model:load_attempt_count",
            model_path=failed_path,
            status="fail",
        )
        == 1
    )
    for version, current in ((1, "AVAILABLE"), (2, "END")):
        states = {
            state: value(
                samples,
                ":local:serving:model_version_state",
                model_name=MODEL_NAME,
                version=str(version),
                state=state,
            )
            for state in VERSION_STATES
        }
        assert states == {state: int(state == current) for state in VERSION_STATES}


def test_batched_requests_record_batch_sizes(exports, tmp_path):
    batching_file = tmp_path / "batching.config"
    batching_file.write_text(
        "max_batch_size { value: 8 } batch_timeout_micros { value: 0 } "
        "num_batch_threads { value: 1 } allowed_batch_sizes: 4 allowed_batch_sizes: 8"
    )
    config = write_monitoring_config(
        tmp_path, 'prometheus_config { enable: true path: "/metrics" }'
    )
    server = start(
        tmp_path,
        exports,
        enable_batching=True,
        batching_parameters_file=str(batching_file),
        monitoring_config_file=config,
    )
    try:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(
            grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        )
        request_rows = (1, 3, 5)
        for rows in request_rows:
            stub.Predict(texts_request([f"row {i}" for i in range(rows)]), timeout=30)
        samples = scrape(server, "/metrics")
        batching = ":tensorflow:serving:batching_session"
        # Each request ran alone, padded to an allowed size.
        assert server.batch_stats.histogram() == {4: 2, 8: 1}
        # TF's buckets hold the values below their bound: le="4" counts no batch of 4.
        for bound, batches in (("2", 0), ("4", 0), ("8", 2), ("16", 3), ("+Inf", 3)):
            assert value(samples, f"{batching}:processed_batch_size_bucket", le=bound) == batches
        assert value(samples, f"{batching}:processed_batch_size_sum") == 4 + 4 + 8
        assert value(samples, f"{batching}:input_batch_size_count") == len(request_rows)
        assert value(samples, f"{batching}:input_batch_size_sum") == sum(request_rows)
        assert value(samples, f"{batching}:padding_size_sum", execution_batch_size="4") == 3 + 1
        assert value(samples, f"{batching}:padding_size_sum", execution_batch_size="8") == 3
        assert value(samples, f"{batching}:queuing_latency_count", thread_pool_name="") == 3
        assert value(samples, f"{batching}:wrapped_run_count") == 3
    finally:
        server.stop(grace_seconds=0)


def test_no_metrics_without_a_monitoring_config(exports, tmp_path):
    server = start(tmp_path, exports)
    try:
        status, _, _ = get(f"http://127.0.0.1:{server.rest_port}{DEFAULT_PROMETHEUS_PATH}")
        assert status == 404
    finally:
        server.stop(grace_seconds=0)


def test_a_disabled_prometheus_config_serves_no_metrics(tmp_path):
    config = write_monitoring_config(tmp_path, 'prometheus_config { path: "/metrics" }')
    assert config_lib.load_prometheus_path(config) is None


@pytest.mark.parametrize(
    "text, message",
    [
        ("prometheus_config { enable: yes }", "1:29 : "),
        ("prometheus_config { enable: true path: 'metrics' }", "must start with '/'"),
        ("prometheus { enable: true }", 'has no field named "prometheus"'),
    ],
)
def test_a_bad_monitoring_config_is_a_startup_error(exports, tmp_path, text, message):
    config = write_monitoring_config(tmp_path, text)
    with pytest.raises(config_lib.ConfigError) as error:
        start(tmp_path, exports, monitoring_config_file=config).stop(grace_seconds=0)
    assert config in str(error.value) and message in str(error.value)


def test_the_example_monitoring_config_serves_the_default_path():
    path = os.path.join(REPO_ROOT, "serving", "monitoring.config")
    assert config_lib.load_prometheus_path(path) == DEFAULT_PROMETHEUS_PATH


def test_the_example_scrape_config_scrapes_that_path():
    with open(os.path.join(REPO_ROOT, "serving", "prometheus.yml")) as scrape_config:
        (job,) = yaml.safe_load(scrape_config)["scrape_configs"]
    assert job["metrics_path"] == DEFAULT_PROMETHEUS_PATH


def test_the_grafana_dashboard_queries_the_metrics_and_labels_the_server_exposes():
    with open(os.path.join(REPO_ROOT, "serving", "grafana_dashboard.json")) as dashboard_file:
        dashboard = json.load(dashboard_file)
    definitions = [
        value for value in vars(metrics_lib).values() if isinstance(value, metrics_lib.MetricDefinition)
    ]  # fmt: skip
    labels = {}
    for definition in definitions:
        name = prometheus_metric_name(definition.name)
        suffixes = ("_bucket", "_sum", "_count") if definition.bounds is not None else ("",)
        for suffix in suffixes:
            labels[name + suffix] = {*definition.labels, *(["le"] if suffix == "_bucket" else [])}
    expressions = [
        target["expr"] for panel in dashboard["panels"] for target in panel["targets"]
    ] + [variable["query"] for variable in dashboard["templating"]["list"] if variable["type"] == "query"]  # fmt: skip
    queried = set()
    for expression in expressions:
        for name, selector in re.findall(r"(:[\w:]+)(\{[^}]*\})?", expression):
            assert name in labels, f"{name} in {expression!r} is not a metric the server exposes"
            queried.add(name)
            used = re.findall(r"(\w+)\s*=~?", selector)
            assert set(used) <= labels[name], f"{expression!r} selects labels {used}"
        for grouped in re.findall(r"by \(([^)]*)\)", expression):
            names_in = re.findall(r"(:[\w:]+)", expression)
            allowed = set().union(*(labels[name] for name in names_in))
            assert {label.strip() for label in grouped.split(",")} <= allowed, expression
    # Requests, latency, batching and versions each have a panel.
    assert {":tensorflow:serving:request_count", ":tensorflow:serving:request_latency_bucket",
            ":tensorflow:serving:batching_session:queuing_latency_bucket",
            ":local:serving:model_version_state"} <= queried  # fmt: skip
