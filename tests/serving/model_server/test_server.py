"""Tests of serving/model_server/ (the local model server) over real gRPC and HTTP on 127.0.0.1.

Servers run in-process (one module-wide instance per configuration) except the
SIGTERM tests, which run `python -m serving.server` as a subprocess. Every server
binds port 0 and the tests read the port it got. Requests use the official
tensorflow-serving-api stubs, or raw sockets where the HTTP framing itself is under
test; expected outputs come from the plain-Python definitions of the toy model in
tests/serving_fixtures.py. Tests wait on server state (version status, the batch
scheduler, "100 Continue"), never on sleeps.
"""

import concurrent.futures
import ctypes
import os
import re
import shutil
import signal
import socket
import threading
import time

import grpc
import numpy as np
import psutil
import pytest
import tensorflow as tf
import yaml
from google.protobuf import text_format
from grpc_health.v1 import health_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    prediction_log_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from common.serving_contract import MAX_WARMUP_RECORDS, WARMUP_PATH
from serving.model_server import config as config_lib
from serving.model_server import servable as servable_lib
from serving.model_server.errors import ServingError
from serving.model_server.server import ModelServer, ServerOptions, parse_flags
from serving.model_server.session_bundle_config_pb2 import BatchingParameters
from tests.model_server_fixtures import (
    SENTENCES,
    SERVING_DIR,
    Connection,
    http,
    read_until_closed,
    rpc_error,
    start_server,
    strings,
)
from tests.serving_fixtures import (
    ENDLESS_STEPS,
    MODEL_NAME,
    ServerProcess,
    cpu_seconds_during,
    expected_alignment,
    expected_beam,
    expected_beam_score,
    expected_greedy,
    expected_greedy_score,
    install_version,
    loop_model_base,
    loop_request,
    make_model_base,
    texts_request,
    wait_for,
)

# --------------------------------------------------------------------------- helpers


def write_batching_file(path, **values) -> str:
    parameters = BatchingParameters()
    for name, value in values.items():
        getattr(parameters, name).value = value
    path.write_text(text_format.MessageToString(parameters))
    return str(path)


# -------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def batching_server(exports, tmp_path_factory):
    """Batching with serving/batching.config exactly as committed."""
    root = tmp_path_factory.mktemp("batching")
    connection = start_server(
        root,
        model_name=MODEL_NAME,
        model_base_path=make_model_base(exports, str(root)),
        enable_batching=True,
        batching_parameters_file=os.path.join(SERVING_DIR, "batching.config"),
    )
    yield connection
    connection.server.stop()


@pytest.fixture(scope="module")
def strict_server(exports, tmp_path_factory):
    """Small batches, a long batch timeout, a short queue and a 64 KiB request limit."""
    root = tmp_path_factory.mktemp("strict")
    batching_file = write_batching_file(
        root / "batching.config",
        max_batch_size=8,
        batch_timeout_micros=1_000_000,
        num_batch_threads=1,
        max_enqueued_batches=2,
    )
    connection = start_server(
        root,
        model_name=MODEL_NAME,
        model_base_path=make_model_base(exports, str(root)),
        enable_batching=True,
        batching_parameters_file=batching_file,
        rest_api_port=0,
        grpc_channel_arguments="grpc.max_receive_message_length=65536",
    )
    yield connection
    connection.server.stop()


# ----------------------------------------------------------------- config and flags


def test_committed_config_files_parse_and_match_the_deployment():
    config = config_lib.load_model_server_config(os.path.join(SERVING_DIR, "models.config"))
    (model,) = config.model_config_list.config
    assert (model.name, model.base_path, model.model_platform) == (
        "translator",
        "/models/translator",
        "tensorflow",
    )
    assert model.model_version_policy.WhichOneof("policy_choice") == "latest"

    parameters = config_lib.read_text_proto(
        os.path.join(SERVING_DIR, "batching.config"), BatchingParameters
    )
    options = config_lib.BatchingOptions.from_proto(parameters)
    assert options.max_batch_size == parameters.max_batch_size.value > 1
    assert options.batch_timeout_micros == parameters.batch_timeout_micros.value
    assert options.num_batch_threads == parameters.num_batch_threads.value
    assert options.enable_large_batch_splitting == parameters.enable_large_batch_splitting.value
    assert options.execution_batch_size == parameters.max_execution_batch_size.value

    with open(os.path.join(SERVING_DIR, "docker-compose.yml")) as compose_file:
        service = yaml.safe_load(compose_file)["services"]["translator"]
    assert service["image"].startswith("tensorflow/serving:")
    assert {"8500:8500", "8501:8501"} <= set(service["ports"])
    mounts = {volume.split(":")[1]: volume.split(":")[0] for volume in service["volumes"]}
    assert mounts["/models"] == "../exports"
    flags = dict(arg.lstrip("-").split("=", 1) for arg in service["command"])
    assert flags["enable_batching"] == "true"
    # The config files the container reads are the committed ones, at the mounted paths,
    # and the model base path in models.config lies inside the /models mount.
    assert mounts[flags["model_config_file"]] == "./models.config"
    assert mounts[flags["batching_parameters_file"]] == "./batching.config"
    assert mounts[flags["monitoring_config_file"]] == "./monitoring.config"
    assert model.base_path.startswith("/models/")
    # Every flag the compose file passes is one this server accepts too.
    parse_flags(service["command"])


def test_bad_config_files_name_the_file_and_line(tmp_path):
    broken = tmp_path / "models.config"
    broken.write_text('model_config_list {\n  config { name: "x" base_path: "/m" bogus: 1 }\n}\n')
    with pytest.raises(config_lib.ConfigError, match=r"models.config.*2:\d+.*bogus"):
        config_lib.load_model_server_config(str(broken))
    other_platform = tmp_path / "other.config"
    other_platform.write_text(
        'model_config_list { config { name: "x" base_path: "/m" model_platform: "pytorch" } }'
    )
    with pytest.raises(config_lib.ConfigError, match="model_platform 'pytorch' is not supported"):
        config_lib.load_model_server_config(str(other_platform))
    bad_sizes = tmp_path / "batching.config"
    bad_sizes.write_text(
        "max_batch_size { value: 8 } allowed_batch_sizes: 4 allowed_batch_sizes: 6"
    )
    with pytest.raises(config_lib.ConfigError, match="final entry in allowed_batch_sizes"):
        config_lib.load_batching_options(str(bad_sizes))


def test_flags_use_tensorflow_model_server_syntax(capsys):
    options = parse_flags(
        [
            "--port=9000",
            "--rest_api_port=9001",
            "--model_name=m",
            "--model_base_path=/models/m",
            "--enable_batching",
            "--file_system_poll_wait_seconds=5",
            "--grpc_channel_arguments=grpc.max_receive_message_length=1024",
        ]
    )
    assert (options.port, options.rest_api_port, options.model_name) == (9000, 9001, "m")
    assert options.enable_batching is True and options.file_system_poll_wait_seconds == 5
    assert parse_flags(["--model_base_path=/m", "--enable_batching=false"]).enable_batching is False
    assert parse_flags(["--model_base_path=/m", "--rest_api_port=0"]).rest_api_port is None
    assert parse_flags(["--model_base_path=/m", "--rest_api_free_port"]).rest_api_port == 0
    with pytest.raises(SystemExit):
        parse_flags(["--model_base_path=/m", "--rest_api_free_port", "--rest_api_port=8501"])
    assert "exclude each other" in capsys.readouterr().err

    with pytest.raises(SystemExit) as unknown:
        parse_flags(["--model_base_path=/m", "--no_such_flag=1"])
    assert unknown.value.code == 2
    assert "unknown flag or argument: --no_such_flag=1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_flags(["--model_base_path=/m", "--ssl_config_file=/x"])
    assert "--ssl_config_file is a tensorflow_model_server flag" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_flags(["--enable_batching=maybe"])
    assert "expected true or false" in capsys.readouterr().err


def test_batching_parameters_file_requires_enable_batching(tmp_path):
    server = ModelServer(
        ServerOptions(
            port=0,
            model_base_path=str(tmp_path),
            batching_parameters_file=str(tmp_path / "b.config"),
        )
    )
    with pytest.raises(config_lib.ConfigError, match="without setting --enable_batching"):
        server.start()


def test_a_second_server_cannot_bind_a_grpc_port_in_use(rest_server, exports, tmp_path):
    """gRPC's default SO_REUSEPORT let a second server bind the same port and take part of
    the first one's connections."""
    port = rest_server.server.grpc_port
    second = ModelServer(
        ServerOptions(
            port=port,
            model_name=MODEL_NAME,
            model_base_path=make_model_base(exports, str(tmp_path)),
            file_system_poll_wait_seconds=0,
        )
    )
    with pytest.raises(config_lib.ConfigError) as error:
        second.start()
    assert str(error.value) == (
        f"Failed to BuildAndStart gRPC server: cannot bind 127.0.0.1:{port} (is another server "
        "listening on that port?)"
    )
    assert second.grpc_port == 0
    status = rest_server.models.GetModelStatus(
        get_model_status_pb2.GetModelStatusRequest(model_spec={"name": MODEL_NAME}), timeout=10
    )
    assert [row.state for row in status.model_version_status] == [
        get_model_status_pb2.ModelVersionStatus.AVAILABLE
    ]


# ------------------------------------------------------------------------ predict


def test_predict_round_trip_for_every_signature(main_server):
    response = main_server.predict.Predict(texts_request(SENTENCES), timeout=10)
    assert (
        response.model_spec.name,
        response.model_spec.version.value,
        response.model_spec.signature_name,
    ) == (MODEL_NAME, 2, "serving_default")
    assert strings(response.outputs["translation"]) == [expected_greedy(s, 2) for s in SENTENCES]
    np.testing.assert_allclose(
        tf.make_ndarray(response.outputs["score"]), [expected_greedy_score(s) for s in SENTENCES]
    )
    # TF Serving writes Predict outputs in the typed fields (AsProtoField), not tensor_content.
    assert response.outputs["score"].float_val and not response.outputs["score"].tensor_content

    beam = main_server.predict.Predict(texts_request(SENTENCES, "beam_search"), timeout=10)
    assert strings(beam.outputs["translation"]) == [expected_beam(s, 2) for s in SENTENCES]
    np.testing.assert_allclose(
        tf.make_ndarray(beam.outputs["score"]), [expected_beam_score(s) for s in SENTENCES]
    )

    aligned = main_server.predict.Predict(texts_request(SENTENCES, "alignments"), timeout=10)
    longest = max(len(s.split()) for s in SENTENCES)
    source = tf.make_ndarray(aligned.outputs["source_tokens"])
    target = tf.make_ndarray(aligned.outputs["target_tokens"])
    alignment = tf.make_ndarray(aligned.outputs["alignment"])
    assert source.shape == target.shape == (len(SENTENCES), longest)
    assert alignment.shape == (len(SENTENCES), longest, longest)
    for row, sentence in enumerate(SENTENCES):
        n = len(sentence.split())
        assert [t.decode() for t in source[row, :n]] == sentence.split()
        assert [t.decode() for t in target[row, :n]] == [
            w.upper() for w in reversed(sentence.split())
        ]
        np.testing.assert_allclose(alignment[row, :n, :n], expected_alignment(sentence), atol=1e-6)
        assert not alignment[row, n:, :].any() and not alignment[row, :, n:].any()


def test_bench_serve_counts_each_sentences_greedy_output_tokens(main_server):
    """bench-serve's output lengths come from the `alignments` signature over gRPC (the toy
    model gives one target token per source word), and are None when the server cannot
    answer that request."""
    from benchmarks.bench_serve import greedy_output_lengths

    address = f"127.0.0.1:{main_server.server.grpc_port}"
    texts = ["one", "three words here", "a b c d e"]
    assert greedy_output_lengths(address, MODEL_NAME, texts) == [1, 3, 5]
    assert greedy_output_lengths(address, "no_such_model", texts) is None


def test_output_filter_and_version_choice(main_server):
    request = texts_request(["a b"])
    request.output_filter.append("score")
    response = main_server.predict.Predict(request, timeout=10)
    assert list(response.outputs) == ["score"]

    for spec_version, label, expected_version in (
        (1, None, 1),
        (2, None, 2),
        (None, "stable", 1),
        (None, "canary", 2),
    ):
        request = texts_request(["a b"], model_name="translator_all", version=spec_version)
        if label:
            request.model_spec.version_label = label
        response = main_server.predict.Predict(request, timeout=10)
        assert response.model_spec.version.value == expected_version
        assert strings(response.outputs["translation"]) == [
            expected_greedy("a b", expected_version)
        ]


@pytest.mark.parametrize(
    "mutate, code, message",
    [
        (
            lambda r: r.model_spec.__setattr__("name", "nope"),
            grpc.StatusCode.NOT_FOUND,
            "Servable not found for request: Latest(nope)",
        ),
        (
            lambda r: r.model_spec.version.__setattr__("value", 1),
            grpc.StatusCode.NOT_FOUND,
            "Servable not found for request: Specific(translator, 1)",
        ),
        (
            lambda r: r.model_spec.version.__setattr__("value", 99),
            grpc.StatusCode.NOT_FOUND,
            "Servable not found for request: Specific(translator, 99)",
        ),
        (
            lambda r: r.model_spec.__setattr__("version_label", "gold"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "Unrecognized servable version label: gold",
        ),
        (
            lambda r: r.ClearField("model_spec"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "Missing ModelSpec",
        ),
        (
            lambda r: r.model_spec.__setattr__("name", ""),
            grpc.StatusCode.INVALID_ARGUMENT,
            "ModelSpec has no name specified.",
        ),
        (
            lambda r: r.model_spec.__setattr__("signature_name", "greedy"),
            grpc.StatusCode.FAILED_PRECONDITION,
            'Serving signature key "greedy" not found.',
        ),
        (
            lambda r: r.inputs["source"].CopyFrom(r.inputs.pop("text")),
            grpc.StatusCode.INVALID_ARGUMENT,
            "input tensor alias not found in signature: source. Inputs expected to be in the set {text}.",
        ),
        (
            lambda r: r.inputs.pop("text"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "input size does not match signature: 0!=1 len({}) != len({text}). Sent extra: {}. "
            "Missing but required: {text}.",
        ),
        (
            lambda r: r.inputs["extra"].CopyFrom(r.inputs["text"]),
            grpc.StatusCode.INVALID_ARGUMENT,
            "input size does not match signature: 2!=1 len({extra,text}) != len({text}). "
            "Sent extra: {extra}. Missing but required: {}.",
        ),
        (
            lambda r: r.inputs["text"].CopyFrom(tf.make_tensor_proto([1.5, 2.5], dtype=tf.float32)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "Expects arg[0] to be string but float is provided",
        ),
        (
            lambda r: r.inputs["text"].ClearField("dtype"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "tensor parsing error: text",
        ),
        (
            lambda r: r.inputs["text"].tensor_shape.dim[0].__setattr__("size", -2),
            grpc.StatusCode.INVALID_ARGUMENT,
            "tensor parsing error: text",
        ),
        (
            lambda r: r.output_filter.append("translations"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "output tensor alias not found in signature: translations Outputs expected to be in the set "
            "{score,translation}.",
        ),
        (
            lambda r: r.output_filter.extend(["score", "score"]),
            grpc.StatusCode.INVALID_ARGUMENT,
            "duplicate output tensor alias: score",
        ),
        # A 20-byte request for 2^40 strings: TF Serving's Tensor::FromProto fails to allocate.
        (
            lambda r: r.inputs["text"].tensor_shape.dim[0].__setattr__("size", 2**40),
            grpc.StatusCode.INVALID_ARGUMENT,
            "tensor parsing error: text",
        ),
        # The signature's shape is checked first, before anything is allocated.
        (
            lambda r: r.inputs["text"].tensor_shape.dim.add(size=2**40),
            grpc.StatusCode.INVALID_ARGUMENT,
            "input tensor text has shape [2,1099511627776], which the signature does not "
            "accept: it expects [?]",
        ),
        # TF Serving does not check method names by default (--enable_signature_method_name_check).
        (
            lambda r: r.model_spec.__setattr__("signature_name", "__saved_model_init_op"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "input size does not match signature: 1!=0 len({text}) != "
            "len({}). Sent extra: {text}. Missing but required: {}.",
        ),
        (
            lambda r: (
                r.model_spec.__setattr__("signature_name", "__saved_model_init_op"),
                r.inputs.pop("text"),
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            'Signature "__saved_model_init_op" is not a function of the SavedModel and cannot be run by '
            "Predict",
        ),
    ],
)
def test_predict_errors_match_tf_serving(main_server, mutate, code, message):
    request = texts_request(["hello", "world"])
    mutate(request)
    error = rpc_error(main_server.predict.Predict, request)
    assert (error.code(), error.details()) == (code, message)


def test_inputs_that_strain_the_model_get_clear_answers(main_server):
    long_text = "word " * 2000  # 10,000 characters.
    response = main_server.predict.Predict(texts_request(["", long_text]), timeout=30)
    assert strings(response.outputs["translation"]) == [
        expected_greedy("", 2),
        expected_greedy(long_text, 2),
    ]
    np.testing.assert_allclose(tf.make_ndarray(response.outputs["score"]), [0.0, 10_000.0])

    empty_batch = main_server.predict.Predict(texts_request([]), timeout=10)
    assert tf.make_ndarray(empty_batch.outputs["translation"]).shape == (0,)

    invalid_utf8 = rpc_error(main_server.predict.Predict, texts_request([b"ok \xff\xfe"]))
    assert invalid_utf8.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert invalid_utf8.details().startswith("Invalid formatting on input string")

    # A shape the signature ([-1]) does not accept is refused before the model runs.
    scalar = texts_request(["x"])
    scalar.inputs["text"].CopyFrom(tf.make_tensor_proto("just one", dtype=tf.string))
    error = rpc_error(main_server.predict.Predict, scalar)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT

    # The server is still healthy after all of that.
    assert strings(
        main_server.predict.Predict(texts_request(["still up"]), timeout=10).outputs["translation"]
    ) == [expected_greedy("still up", 2)]


def test_unimplemented_apis_say_so(main_server):
    error = rpc_error(main_server.predict.MultiInference, inference_pb2.MultiInferenceRequest())
    assert error.code() == grpc.StatusCode.UNIMPLEMENTED and "use Predict" in error.details()


@pytest.mark.parametrize(
    "api, request_class",
    [
        ("classify", classification_pb2.ClassificationRequest),
        ("regress", regression_pb2.RegressionRequest),
    ],
)
def test_grpc_classify_and_regress_refuse_a_predict_signature_as_rest_does(
    main_server, api, request_class
):
    """TF Serving checks the signature and answers INVALID_ARGUMENT for a predict-only one, over
    gRPC as over REST (this server answered UNIMPLEMENTED over gRPC): the same message."""
    call = getattr(main_server.predict, "Classify" if api == "classify" else "Regress")
    error = rpc_error(call, request_class())
    assert (error.code(), error.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "Missing ModelSpec",
    )
    request = request_class()
    request.model_spec.name = MODEL_NAME
    error = rpc_error(call, request)
    _, body = http("POST", f"{main_server.rest}/v1/models/{MODEL_NAME}:{api}", {"examples": []})
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == body["error"]
    request.model_spec.signature_name = "nope"
    error = rpc_error(call, request)
    assert error.details() == "No signature was found with the name: nope"


# ------------------------------------------------------------------ metadata/status


def test_metadata_is_a_signature_def_map_in_any(main_server):
    request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    request.model_spec.name = MODEL_NAME
    response = main_server.predict.GetModelMetadata(request, timeout=10)
    assert (response.model_spec.name, response.model_spec.version.value) == (MODEL_NAME, 2)
    signature_map = get_model_metadata_pb2.SignatureDefMap()
    assert response.metadata["signature_def"].Unpack(signature_map)
    signatures = signature_map.signature_def
    assert {"serving_default", "beam_search", "alignments"} <= set(signatures)
    assert signatures["serving_default"].method_name == "tensorflow/serving/predict"
    text_input = signatures["serving_default"].inputs["text"]
    assert text_input.dtype == tf.string.as_datatype_enum
    assert [d.size for d in text_input.tensor_shape.dim] == [-1]
    assert set(signatures["alignments"].outputs) == {
        "translation",
        "score",
        "source_tokens",
        "target_tokens",
        "alignment",
    }
    assert [d.size for d in signatures["alignments"].outputs["alignment"].tensor_shape.dim] == [
        -1
    ] * 3

    no_field = get_model_metadata_pb2.GetModelMetadataRequest()
    no_field.model_spec.name = MODEL_NAME
    error = rpc_error(main_server.predict.GetModelMetadata, no_field)
    assert (error.code(), error.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "GetModelMetadataRequest must specify at least one metadata_field",
    )
    no_field.metadata_field.append("graph")
    error = rpc_error(main_server.predict.GetModelMetadata, no_field)
    assert error.details() == "Metadata field graph is not supported"


def test_model_status_lists_versions_newest_first(main_server):
    def status(name, version=None):
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name = name
        if version is not None:
            request.model_spec.version.value = version
        return main_server.models.GetModelStatus(request, timeout=10)

    available = get_model_status_pb2.ModelVersionStatus.AVAILABLE
    rows = status("translator_all").model_version_status
    assert [(row.version, row.state, row.status.error_code) for row in rows] == [
        (2, available, 0),
        (1, available, 0),
    ]
    assert [row.version for row in status(MODEL_NAME).model_version_status] == [2]
    assert status("translator_all", 1).model_version_status[0].state == available

    error = rpc_error(
        main_server.models.GetModelStatus,
        get_model_status_pb2.GetModelStatusRequest(
            model_spec={"name": MODEL_NAME, "version": {"value": 7}}
        ),
    )
    assert (error.code(), error.details()) == (
        grpc.StatusCode.NOT_FOUND,
        "Could not find version 7 of model translator",
    )
    error = rpc_error(
        main_server.models.GetModelStatus,
        get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "nope"}),
    )
    assert error.details() == "Could not find any versions of model nope"
    assert (
        main_server.health.Check(health_pb2.HealthCheckRequest(), timeout=5).status
        == health_pb2.HealthCheckResponse.SERVING
    )


# ----------------------------------------------------------------------- batching


def test_sixteen_clients_two_hundred_requests_each_without_errors(batching_server):
    stub = batching_server.predict
    histogram_before = batching_server.server.batch_stats.histogram()

    def client(worker: int):
        failures = []
        for index in range(200):
            text = f"client {worker} request {index}"
            try:
                response = stub.Predict(texts_request([text]), timeout=30)
                if strings(response.outputs["translation"]) != [expected_greedy(text, 1)]:
                    failures.append(f"wrong answer for {text!r}")
            except grpc.RpcError as error:
                failures.append(f"{error.code()}: {error.details()}")
        return failures

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        failures = [f for result in pool.map(client, range(16)) for f in result]
    assert failures == []

    histogram_after = batching_server.server.batch_stats.histogram()
    new_batches = {
        size: histogram_after.get(size, 0) - histogram_before.get(size, 0)
        for size in histogram_after
    }
    assert sum(size * count for size, count in new_batches.items()) == 16 * 200
    # Concurrent requests were merged: fewer model calls than requests.
    assert sum(new_batches.values()) < 16 * 200
    assert max(size for size, count in new_batches.items() if count) > 1


def test_batching_merges_up_to_max_batch_size_and_isolates_bad_inputs(strict_server):
    stats = strict_server.server.batch_stats
    before = stats.histogram()
    texts = [f"sentence number {i}" for i in range(8)]
    texts[3] = b"bad \xff utf-8"
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        calls = [
            pool.submit(strict_server.predict.Predict, texts_request([text]), timeout=30)
            for text in texts
        ]
        outcomes = []
        for call in calls:
            try:
                outcomes.append(strings(call.result().outputs["translation"])[0])
            except grpc.RpcError as error:
                outcomes.append(error.code())
    expected = [
        expected_greedy(t, 1) if isinstance(t, str) else grpc.StatusCode.INVALID_ARGUMENT
        for t in texts
    ]
    assert outcomes == expected
    after = stats.histogram()
    # The 8 requests filled max_batch_size=8 and ran as one merged batch (which failed
    # because of the bad input; its requests were then re-run one by one).
    assert after.get(8, 0) - before.get(8, 0) == 1


def test_batch_limits_deadlines_and_message_size(strict_server):
    too_big = rpc_error(strict_server.predict.Predict, texts_request([f"s{i}" for i in range(9)]))
    assert (too_big.code(), too_big.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "Task size 9 is larger than maximum input batch size 8",
    )

    stats_before = strict_server.server.batch_stats.histogram()
    with pytest.raises(grpc.RpcError) as late:
        strict_server.predict.Predict(texts_request(["waits 1 s in the queue"]), timeout=0.1)
    assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # Once its batch has been handled, the expired request must not have been run.
    assert strict_server.server.core.batcher.wait_until_idle(timeout=60)
    assert strict_server.server.batch_stats.histogram() == stats_before

    huge = texts_request(["x" * 100_000])
    error = rpc_error(strict_server.predict.Predict, huge)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    status, body = http(
        "POST", f"{strict_server.rest}/v1/models/translator:predict", {"instances": ["x" * 100_000]}
    )
    assert status == 429 and "larger than the limit of 65536 bytes" in body["error"]
    ok = strict_server.predict.Predict(texts_request(["small"]), timeout=10)
    assert strings(ok.outputs["translation"]) == [expected_greedy("small", 1)]


def test_large_batch_splitting_answers_as_one_unbatched_call(exports, main_server, tmp_path):
    """A 7-sentence request on a server whose batches hold 3 runs as pieces and comes back
    identical to the unbatched server's answer, the padded alignments included."""
    batching_file = write_batching_file(
        tmp_path / "batching.config",
        max_batch_size=8,
        batch_timeout_micros=1000,
        num_batch_threads=2,
        enable_large_batch_splitting=True,
        max_execution_batch_size=3,
    )
    connection = start_server(
        tmp_path,
        model_name=MODEL_NAME,
        model_base_path=make_model_base(exports, str(tmp_path), (1, 2)),
        enable_batching=True,
        batching_parameters_file=batching_file,
    )
    texts = [
        "one",
        "a much longer sentence than the others",
        "two words",
        "x y z",
        "the cat sat on the mat",
        "hi",
        "four words in row",
    ]
    try:
        split = connection.predict.Predict(texts_request(texts, "alignments"), timeout=30)
        histogram = connection.server.batch_stats.histogram()
        too_big = rpc_error(connection.predict.Predict, texts_request(["s"] * 9))
    finally:
        connection.server.stop()
    whole = main_server.predict.Predict(texts_request(texts, "alignments"), timeout=30)
    assert set(split.outputs) == set(whole.outputs)
    for name in whole.outputs:
        np.testing.assert_array_equal(
            tf.make_ndarray(split.outputs[name]), tf.make_ndarray(whole.outputs[name]), err_msg=name
        )
    assert max(histogram) <= 3 and sum(size * count for size, count in histogram.items()) == 7
    assert (too_big.code(), too_big.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "Task size 9 is larger than maximum input batch size 8",
    )


# ---------------------------------------------------------------- version swapping


def test_new_version_is_swapped_in_without_failing_requests(exports, tmp_path):
    base_path = make_model_base(exports, str(tmp_path), (1,))
    os.makedirs(os.path.join(base_path, "3"))  # Incomplete: no saved_model.pb yet.
    os.makedirs(os.path.join(base_path, "tmp-export"))  # Not a version number.
    connection = Connection(
        ModelServer(
            ServerOptions(
                port=0,
                model_name=MODEL_NAME,
                model_base_path=base_path,
                file_system_poll_wait_seconds=1,
                max_num_load_retries=0,
            )
        ).start()
    )
    stop = threading.Event()
    failures, served_versions = [], []

    def client(worker):
        index = 0
        while not stop.is_set():
            text = f"w{worker} {index}"
            sent_at = time.monotonic()
            try:
                response = connection.predict.Predict(texts_request([text]), timeout=30)
                version = response.model_spec.version.value
                assert strings(response.outputs["translation"]) == [expected_greedy(text, version)]
                served_versions.append((sent_at, version))
            except (grpc.RpcError, AssertionError) as error:
                failures.append(repr(error))
            index += 1

    def served_after(moment):
        return [version for sent_at, version in list(served_versions) if sent_at > moment]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    try:
        for thread in threads:
            thread.start()
        wait_for(lambda: len(served_versions) >= 8 or failures, "answers from version 1")
        install_version(exports, base_path, 2)
        wait_for(lambda: 2 in served_after(0) or failures, "a first answer from version 2")
        swapped_at = time.monotonic()
        wait_for(
            lambda: len(served_after(swapped_at)) >= 8 or failures,
            "answers to requests sent after the swap",
        )
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    try:
        assert failures == []
        assert {version for _, version in served_versions} == {1, 2}
        # Every request sent after the first answer from version 2 was served by version 2.
        after_swap = [version for sent_at, version in served_versions if sent_at > swapped_at]
        assert after_swap and set(after_swap) == {2}
        request = get_model_status_pb2.GetModelStatusRequest(model_spec={"name": MODEL_NAME})
        states = get_model_status_pb2.ModelVersionStatus

        def version_rows():
            return [
                (row.version, states.State.Name(row.state), row.status)
                for row in connection.models.GetModelStatus(
                    request, timeout=10
                ).model_version_status
            ]

        # Version 1 was unloaded once 2 was available; 3 (incomplete) and tmp-export were ignored.
        assert [row[:2] for row in version_rows()] == [(2, "AVAILABLE"), (1, "END")]

        # A version that fails to load (corrupt warmup file) leaves version 2 serving.
        broken = install_version(exports, str(tmp_path / "staging"), 1, as_version=4)
        with open(
            os.path.join(broken, "assets.extra", "tf_serving_warmup_requests"), "wb"
        ) as warmup:
            warmup.write(b"not a TFRecord file")
        os.rename(broken, os.path.join(base_path, "4"))
        wait_for(lambda: version_rows()[0][:2] == (4, "END"), "version 4 to fail and end")
        (_, state, status), (_, serving_state, _) = version_rows()[:2]
        assert (state, serving_state) == ("END", "AVAILABLE")
        assert status.error_code == grpc.StatusCode.DATA_LOSS.value[0]
        assert "corrupted record" in status.error_message
        assert (
            connection.predict.Predict(texts_request(["x"]), timeout=10).model_spec.version.value
            == 2
        )

        # HandleReloadConfigRequest: roll back by pinning version 1 with a `specific` policy.
        reload = model_management_pb2.ReloadConfigRequest()
        text_format.Parse(
            f"""model_config_list {{ config {{
            name: "{MODEL_NAME}" base_path: "{base_path}" model_platform: "tensorflow"
            model_version_policy {{ specific {{ versions: 1 }} }} }} }}""",
            reload.config,
        )
        assert (
            connection.models.HandleReloadConfigRequest(reload, timeout=60).status.error_code == 0
        )
        response = connection.predict.Predict(texts_request(["back"]), timeout=10)
        assert response.model_spec.version.value == 1
        assert strings(response.outputs["translation"]) == [expected_greedy("back", 1)]
        assert [row[:2] for row in version_rows()][1:] == [(2, "END"), (1, "AVAILABLE")]
    finally:
        connection.server.stop()


# -------------------------------------------------------------------------- deadlines


def _expire_an_endless_call(server):
    """An endless Predict with a 1 s deadline: DEADLINE_EXCEEDED, then the server stops working
    on it (its CPU use settles) and answers the next request. Returns the stub."""
    stub = prediction_service_pb2_grpc.PredictionServiceStub(
        grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    )
    with pytest.raises(grpc.RpcError) as error:
        stub.Predict(loop_request(ENDLESS_STEPS), timeout=1)
    assert error.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    wait_for(
        lambda: cpu_seconds_during(server.process.pid, 0.5) < 0.1,
        "the server to stop working on the expired call",
        timeout=30,
    )
    assert stub.Predict(loop_request(100), timeout=30).outputs["y"].float_val
    return stub


def test_a_request_past_its_deadline_is_aborted_not_run_to_the_end(tmp_path):
    """The deadline is the run's RunOptions.timeout_in_ms, as in TF Serving: REST answered 200
    long after --rest_api_timeout_in_ms, and gRPC calls that had answered DEADLINE_EXCEEDED
    kept the server computing until their run ended."""
    with ServerProcess(
        [
            "--model_name=loop",
            f"--model_base_path={loop_model_base(tmp_path)}",
            "--file_system_poll_wait_seconds=0",
            "--rest_api_timeout_in_ms=1000",
        ],
        rest=True,
    ) as server:
        url = f"http://127.0.0.1:{server.rest_port}/v1/models/loop:predict"
        assert http("POST", url, {"instances": [ENDLESS_STEPS]}) == (
            504,
            {"error": "Timed out waiting for notification"},
        )
        # The answer came once the run had stopped: the server has nothing left to do.
        assert cpu_seconds_during(server.process.pid, 1.0) < 0.2
        status, body = http("POST", url, {"instances": [100]})
        assert status == 200 and len(body["predictions"]) == 1

        # The client stops waiting at the deadline on its own; the server's run stops then too.
        stub = _expire_an_endless_call(server)
        # A call without a deadline runs unbounded (it was an INTERNAL error: gRPC's "no
        # deadline" is a time_remaining() of 292,000 years, too many milliseconds for TF).
        assert stub.Predict(loop_request(100)).outputs["y"].float_val


def test_a_batched_run_past_its_deadline_is_aborted_and_frees_its_thread(tmp_path):
    """A merged batch runs with its requests' latest deadline, as TF Serving's BatchingSession
    sets RunOptions.timeout_in_ms: it ran without one, so an endless batched call kept the
    only batch thread (and a CPU) busy for good after its client had been answered
    DEADLINE_EXCEEDED, and every later request timed out in the queue."""
    batching_file = write_batching_file(
        tmp_path / "batching.config",
        max_batch_size=8,
        batch_timeout_micros=0,
        num_batch_threads=1,
    )
    with ServerProcess(
        [
            "--model_name=loop",
            f"--model_base_path={loop_model_base(tmp_path)}",
            "--file_system_poll_wait_seconds=0",
            "--enable_batching=true",
            f"--batching_parameters_file={batching_file}",
        ]
    ) as server:
        # The batch thread is free again once the expired batch stops.
        _expire_an_endless_call(server)


def test_a_cancelled_batched_call_leaves_the_queue_with_its_pieces_not_yet_run(exports, tmp_path):
    """A gRPC call cancelled by its client ran to the end: every piece of a split request went
    through the model after nobody waited for it. The pieces not yet started now leave.

    The request is long enough (1,024 one-row pieces) that the cancellation lands long before
    the batch thread could run half of them, however busy the machine: with 32 pieces, a CI
    machine under load ran more than half before the cancellation arrived."""
    rows = 1024
    batching_file = write_batching_file(
        tmp_path / "batching.config",
        max_batch_size=rows,
        batch_timeout_micros=0,
        num_batch_threads=1,
        max_enqueued_batches=rows,
        enable_large_batch_splitting=True,
        max_execution_batch_size=1,
    )
    connection = start_server(
        tmp_path,
        model_name=MODEL_NAME,
        model_base_path=make_model_base(exports, str(tmp_path), (1,)),
        enable_batching=True,
        batching_parameters_file=batching_file,
    )
    batcher = connection.server.core.batcher
    texts = [f"fila {i}" for i in range(rows)]
    try:
        call = connection.predict.Predict.future(texts_request(texts), timeout=120)
        # All one-row pieces are queued behind the one batch thread, and the first is under
        # way (its batch recorded): one piece at least runs whenever the cancellation lands.
        assert batcher.wait_until_enqueued(len(texts), timeout=60)
        deadline = time.monotonic() + 60
        while not connection.server.batch_stats.histogram():
            assert time.monotonic() < deadline, "no piece started within 60 s"
            time.sleep(0.001)
        call.cancel()
        assert batcher.wait_until_idle(timeout=120)
        pieces_run = sum(connection.server.batch_stats.histogram().values())
    finally:
        connection.server.stop(grace_seconds=0)
    assert call.cancelled()
    # Those under way when the cancellation arrived ran; without it, all 32 did.
    assert 1 <= pieces_run < len(texts) // 2


def test_an_unload_hands_the_freed_heap_back_to_the_system():
    """A released version's memory went back to malloc, which kept it for the process. The
    manager now calls `release_memory_to_system` after each unload, as TF Serving's
    BasicManager releases memory to the system. Here the heap is fragmented as a freed graph
    leaves it: 160 MB of small blocks freed but the last, which pins the top of the heap, so
    free() cannot shrink it."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    process = psutil.Process()
    blocks = [libc.malloc(4096) for _ in range(40_000)]
    for block in blocks:
        ctypes.memset(block, 1, 4096)
    for block in blocks[:-1]:
        libc.free(block)
    kept = process.memory_info().rss
    assert servable_lib.release_memory_to_system()
    assert kept - process.memory_info().rss > 100 * 2**20
    libc.free(blocks[-1])


# --------------------------------------------------------------------------- SIGTERM


def test_sigterm_lets_requests_in_flight_finish(exports, tmp_path):
    base_path = make_model_base(exports, str(tmp_path), (1,))
    batching_file = write_batching_file(
        tmp_path / "batching.config",
        max_batch_size=64,
        batch_timeout_micros=3_000_000,
        num_batch_threads=1,
    )
    with ServerProcess(
        [
            f"--model_name={MODEL_NAME}",
            f"--model_base_path={base_path}",
            "--enable_batching=true",
            f"--batching_parameters_file={batching_file}",
            "--file_system_poll_wait_seconds=0",
        ]
    ) as server:
        channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        # Connected first, so the calls below go out in the order they are made (calls
        # made while the channel connects wait in a queue that may reorder them).
        grpc.channel_ready_future(channel).result(timeout=60)
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        texts = [f"in flight {i}" for i in range(6)]
        # Each request waits up to 3 s in the batch queue: they are in flight at SIGTERM.
        calls = [stub.Predict.future(texts_request([text]), timeout=30) for text in texts]
        # The server reads the calls of a connection in order: once it has answered a
        # status call sent after them, it has accepted all six.
        model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(
            get_model_status_pb2.GetModelStatusRequest(model_spec={"name": MODEL_NAME}), timeout=30
        )
        assert not any(call.done() for call in calls)
        server.process.send_signal(signal.SIGTERM)
        answers = [strings(call.result().outputs["translation"])[0] for call in calls]
        assert answers == [expected_greedy(text, 1) for text in texts]
        assert server.process.wait(timeout=60) == 0
        output = server.output()
    assert "Received signal 15" in output
    assert "Done unloading servable version {name: translator version: 1}" in output


def test_sigterm_is_not_blocked_by_a_stalled_rest_client(exports, tmp_path):
    """A client that sent half a body and went quiet is cut off once the grace period ends."""
    base_path = make_model_base(exports, str(tmp_path), (1,))
    with ServerProcess(
        [
            f"--model_name={MODEL_NAME}",
            f"--model_base_path={base_path}",
            "--file_system_poll_wait_seconds=0",
            "--shutdown_grace_seconds=1",
        ],
        rest=True,
    ) as server:
        with socket.create_connection(("127.0.0.1", server.rest_port), timeout=60) as stalled:
            stalled.sendall(
                b"POST /v1/models/translator:predict HTTP/1.1\r\nHost: test\r\n"
                b"Content-Length: 50\r\nExpect: 100-continue\r\n\r\n"
            )
            # "100 Continue" comes once a server thread has the headers and waits for the body.
            assert stalled.recv(1024).startswith(b"HTTP/1.1 100 Continue")
            stalled.sendall(b'{"in')
            server.process.send_signal(signal.SIGTERM)
            assert server.process.wait(timeout=60) == 0
            read_until_closed(stalled)  # The server closed the connection.
        output = server.output()
    assert "Done unloading servable version {name: translator version: 1}" in output


def test_sigterm_exits_after_the_grace_period_even_with_a_run_under_way(tmp_path):
    """Runs still under way when the grace period ends are aborted: the server waited for
    them (cheroot's pool and the unload both joined without a timeout), exiting 10.8 s after
    SIGTERM with a 3 s grace period, and never with an endless run."""
    grace_seconds = 2
    with ServerProcess(
        [
            "--model_name=loop",
            f"--model_base_path={loop_model_base(tmp_path)}",
            "--file_system_poll_wait_seconds=0",
            "--rest_api_timeout_in_ms=0",
            f"--shutdown_grace_seconds={grace_seconds}",
        ],
        rest=True,
    ) as server:
        channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        endless_call = stub.Predict.future(loop_request(ENDLESS_STEPS))
        endless_post = concurrent.futures.ThreadPoolExecutor(1).submit(
            http,
            "POST",
            f"http://127.0.0.1:{server.rest_port}/v1/models/loop:predict",
            {"instances": [ENDLESS_STEPS]},
        )
        wait_for(
            lambda: cpu_seconds_during(server.process.pid, 0.3) > 0.1,
            "the server to run the endless requests",
        )
        server.process.send_signal(signal.SIGTERM)
        # The bound is the grace period plus a margin for unloading and exiting; without the
        # cancellation the server never exits.
        assert server.process.wait(timeout=grace_seconds + 15) == 0, server.output()[-3000:]
        # The calls ended, not left hanging: cancelled (REST's 499), or for gRPC cut off with
        # the connection when the server exited before its answer went out.
        assert endless_call.exception(timeout=30).code() in (
            grpc.StatusCode.CANCELLED,
            grpc.StatusCode.UNAVAILABLE,
        )
        status, body = endless_post.result(timeout=30)
        assert status == 499, body
        output = server.output()
    assert "Shutdown grace period is over: cancelling the requests still running" in output
    assert "Done unloading servable version {name: loop version: 1}" in output


# -------------------------------------------------------- model management


def reload_request(text: str) -> model_management_pb2.ReloadConfigRequest:
    request = model_management_pb2.ReloadConfigRequest()
    text_format.Parse(text, request.config)
    return request


def model_config_text(name: str, base_path: str, extra: str = "") -> str:
    return (
        f'config {{ name: "{name}" base_path: "{base_path}" model_platform: "tensorflow" {extra} }}'
    )


def version_states(connection: Connection, name: str = MODEL_NAME) -> list:
    """[(version, state name)] of GetModelStatus, newest first."""
    request = get_model_status_pb2.GetModelStatusRequest(model_spec={"name": name})
    rows = connection.models.GetModelStatus(request, timeout=10).model_version_status
    return [
        (row.version, get_model_status_pb2.ModelVersionStatus.State.Name(row.state)) for row in rows
    ]


def predicted_version(
    connection: Connection, name: str = MODEL_NAME, label: str = None, version: int = None
) -> int:
    request = texts_request(["which version"], model_name=name, version=version)
    if label:
        request.model_spec.version_label = label
    response = connection.predict.Predict(request, timeout=10)
    served = response.model_spec.version.value
    assert strings(response.outputs["translation"]) == [expected_greedy("which version", served)]
    return served


@pytest.fixture
def labeled_server(exports, tmp_path):
    """translator (latest) and translator_all (versions 1 and 2, label stable -> 1)."""
    base_path = make_model_base(exports, str(tmp_path), (1, 2))
    all_base_path = make_model_base(exports, str(tmp_path), (1, 2), "translator_all")
    config_path = tmp_path / "models.config"
    config_path.write_text(
        "model_config_list { "
        + model_config_text(MODEL_NAME, base_path)
        + " "
        + model_config_text(
            "translator_all",
            all_base_path,
            'model_version_policy { all {} } version_labels { key: "stable" value: 1 }',
        )
        + " }"
    )
    connection = start_server(tmp_path, model_config_file=str(config_path))
    connection.base_paths = {MODEL_NAME: base_path, "translator_all": all_base_path}
    yield connection
    connection.server.stop()


def test_empty_reload_request_is_refused_and_unloads_nothing(labeled_server):
    error = rpc_error(
        labeled_server.models.HandleReloadConfigRequest, model_management_pb2.ReloadConfigRequest()
    )
    assert (error.code(), error.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "ServerModelConfig type not supported by HandleReloadConfigRequest. Only ModelConfigList "
        "is currently supported",
    )
    assert predicted_version(labeled_server) == 2
    assert predicted_version(labeled_server, "translator_all", label="stable") == 1


def test_failed_reload_keeps_the_previous_version_labels(labeled_server):
    paths = labeled_server.base_paths
    missing_version = reload_request(
        "model_config_list { "
        + model_config_text(
            "translator_all",
            paths["translator_all"],
            'model_version_policy { all {} } version_labels { key: "stable" value: 7 }',
        )
        + " "
        + model_config_text(MODEL_NAME, paths[MODEL_NAME])
        + " }"
    )
    error = rpc_error(labeled_server.models.HandleReloadConfigRequest, missing_version)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error.details() == (
        "Request to assign label to version 7 of model translator_all, "
        "which is not currently available for inference"
    )
    assert predicted_version(labeled_server, "translator_all", label="stable") == 1

    # A valid reload moves the label and adds one; removing translator unloads it.
    moved = reload_request(
        "model_config_list { "
        + model_config_text(
            "translator_all",
            paths["translator_all"],
            'model_version_policy { all {} } version_labels { key: "stable" value: 2 } '
            'version_labels { key: "canary" value: 1 }',
        )
        + " }"
    )
    assert labeled_server.models.HandleReloadConfigRequest(moved, timeout=60).status.error_code == 0
    assert predicted_version(labeled_server, "translator_all", label="stable") == 2
    assert predicted_version(labeled_server, "translator_all", label="canary") == 1
    assert version_states(labeled_server) == [(2, "END")]
    error = rpc_error(labeled_server.predict.Predict, texts_request(["gone"]))
    assert (error.code(), error.details()) == (
        grpc.StatusCode.NOT_FOUND,
        "Servable not found for request: Latest(translator)",
    )


def test_latest_policy_keeps_the_newest_n_versions(exports, tmp_path):
    base_path = make_model_base(exports, str(tmp_path), (1, 2))
    install_version(exports, base_path, 1, as_version=3)
    config_path = tmp_path / "models.config"
    config_path.write_text(
        "model_config_list { "
        + model_config_text(
            MODEL_NAME, base_path, "model_version_policy { latest { num_versions: 2 } }"
        )
        + " }"
    )
    connection = start_server(tmp_path, model_config_file=str(config_path))
    try:
        assert version_states(connection) == [(3, "AVAILABLE"), (2, "AVAILABLE")]
        latest = connection.predict.Predict(texts_request(["newest"]), timeout=10)
        assert latest.model_spec.version.value == 3
        assert strings(latest.outputs["translation"]) == [
            expected_greedy("newest", 1)
        ]  # 1's export.
        assert predicted_version(connection, version=2) == 2
        error = rpc_error(connection.predict.Predict, texts_request(["x"], version=1))
        assert error.details() == "Servable not found for request: Specific(translator, 1)"
    finally:
        connection.server.stop()


def test_config_file_reloads_and_keeps_the_last_good_config(exports, tmp_path, caplog):
    base_path = make_model_base(exports, str(tmp_path), (1,))
    second_base_path = make_model_base(exports, str(tmp_path), (2,), "second")
    config_path = tmp_path / "models.config"
    one_model = "model_config_list { " + model_config_text(MODEL_NAME, base_path) + " }"
    two_models = (
        "model_config_list { "
        + model_config_text(MODEL_NAME, base_path)
        + " "
        + model_config_text("second", second_base_path)
        + " }"
    )
    config_path.write_text(one_model)
    connection = start_server(
        tmp_path, model_config_file=str(config_path), model_config_file_poll_wait_seconds=1
    )
    try:
        config_path.write_text(two_models)
        wait_for(
            lambda: predicted_version_or_none(connection, "second") == 2,
            "the model added to the config file",
        )
        for broken in ("model_config_list { config { name: ", ""):
            reloads_failed = caplog.text.count("Failed to reload ModelServerConfig file")
            config_path.write_text(broken)
            wait_for(
                lambda: (
                    caplog.text.count("Failed to reload ModelServerConfig file") > reloads_failed
                ),
                f"the poll to reject {broken!r}",
            )
            assert predicted_version(connection, "second") == 2
            assert predicted_version(connection) == 1
        config_path.write_text(one_model)
        wait_for(
            lambda: version_states(connection, "second") == [(2, "END")],
            "the model removed from the config file to be unloaded",
        )
        assert predicted_version(connection) == 1
    finally:
        connection.server.stop()


def predicted_version_or_none(connection: Connection, name: str):
    try:
        return predicted_version(connection, name)
    except grpc.RpcError:
        return None


def test_a_failed_version_that_is_deleted_ends(exports, tmp_path):
    base_path = make_model_base(exports, str(tmp_path), (1,))
    connection = start_server(
        tmp_path,
        model_name=MODEL_NAME,
        model_base_path=base_path,
        file_system_poll_wait_seconds=0.2,
    )
    try:
        broken = tmp_path / "staging" / "3"
        broken.mkdir(parents=True)
        (broken / "saved_model.pb").write_bytes(b"not a SavedModel")
        os.rename(broken, os.path.join(base_path, "3"))
        wait_for(
            lambda: version_states(connection)[0] == (3, "LOADING"),
            "version 3 to fail and wait for a retry",
        )
        shutil.rmtree(os.path.join(base_path, "3"))
        wait_for(
            lambda: version_states(connection)[0] == (3, "END"), "version 3 to end", timeout=30
        )
        assert version_states(connection) == [(3, "END"), (1, "AVAILABLE")]
        assert predicted_version(connection) == 1
    finally:
        connection.server.stop()


def version_errors(connection: Connection, name: str) -> list:
    """(version, state, gRPC code number, error message) of every version of a model."""
    response = connection.models.GetModelStatus(
        get_model_status_pb2.GetModelStatusRequest(model_spec={"name": name}), timeout=10
    )
    return [
        (
            row.version,
            get_model_status_pb2.ModelVersionStatus.State.Name(row.state),
            row.status.error_code,
            row.status.error_message,
        )
        for row in response.model_version_status
    ]


def _warmup_file(export_dir, records):
    path = os.path.join(export_dir, WARMUP_PATH)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)


def _predict_log(texts=("hola",)):
    log = prediction_log_pb2.PredictionLog()
    log.predict_log.request.CopyFrom(texts_request(list(texts)))
    return log.SerializeToString()


@pytest.mark.parametrize(
    "records, code, message",
    [
        ([_predict_log()] * (MAX_WARMUP_RECORDS + 1), grpc.StatusCode.INVALID_ARGUMENT,
         re.escape(f"Number of warmup records exceeds the maximum ({MAX_WARMUP_RECORDS})")),
        ([_predict_log(), b"\xff\xff\xff"], grpc.StatusCode.INVALID_ARGUMENT,
         "Failed to parse warmup record 1"),
        ([prediction_log_pb2.PredictionLog(classify_log={}).SerializeToString()],
         grpc.StatusCode.UNIMPLEMENTED, "Warmup record 0 of .* is a classify_log"),
    ],
    ids=["too many", "unparsable", "not predict"],
)  # fmt: skip
def test_a_bad_warmup_file_fails_with_the_code_tf_serving_gives(tmp_path, records, code, message):
    _warmup_file(str(tmp_path), records)
    with pytest.raises(ServingError, match=message) as info:
        servable_lib.read_warmup_requests(str(tmp_path))
    assert info.value.code == code


def test_load_failures_report_the_loaders_error_code(exports, tmp_path):
    """A SavedModel proto that does not parse is DATA_LOSS and a missing tag set NOT_FOUND,
    as TF's loader reports them to TF Serving; both were UNKNOWN."""
    corrupt = tmp_path / "corrupt" / "1"
    corrupt.mkdir(parents=True)
    (corrupt / "saved_model.pb").write_bytes(b"not a SavedModel")
    untagged = tmp_path / "untagged" / "1"
    shutil.copytree(exports[1], untagged)
    config_path = tmp_path / "models.config"
    config_path.write_text(
        "model_config_list { "
        + model_config_text("corrupt", str(tmp_path / "corrupt"))
        + model_config_text("untagged", str(tmp_path / "untagged"))
        + " }"
    )
    connection = start_server(
        tmp_path,
        model_config_file=str(config_path),
        max_num_load_retries=0,
        saved_model_tags="serve,gpu",
    )
    try:
        [(version, state, code, message)] = version_errors(connection, "corrupt")
        assert (version, state, code) == (1, "END", grpc.StatusCode.DATA_LOSS.value[0])
        assert message.startswith(f"Can't parse the SavedModel proto in {corrupt}: ")
        [(version, state, code, message)] = version_errors(connection, "untagged")
        assert (version, state, code) == (1, "END", grpc.StatusCode.NOT_FOUND.value[0])
        assert message.startswith(
            "Could not find meta graph def matching supplied tags: { gpu serve }."
        )
    finally:
        connection.server.stop()


# Root reads every directory; without these capabilities it obeys the permission bits.
WITHOUT_ROOTS_READ_ALL = (
    ("setpriv", "--bounding-set", "-dac_override,-dac_read_search") if os.geteuid() == 0 else ()
)


@pytest.mark.skipif(
    bool(WITHOUT_ROOTS_READ_ALL) and not shutil.which("setpriv"), reason="needs setpriv as root"
)
def test_an_unreadable_version_directory_is_reported_not_skipped(exports, tmp_path):
    """TF Serving loads every numbered directory and reports why one fails; an unreadable
    one was skipped without a word, and the older version served as if it were the newest."""
    base_path = make_model_base(exports, str(tmp_path), (1, 2))
    unreadable = os.path.join(base_path, "2")
    os.chmod(unreadable, 0)
    try:
        with ServerProcess(
            [
                f"--model_name={MODEL_NAME}",
                f"--model_base_path={base_path}",
                "--file_system_poll_wait_seconds=0",
                "--max_num_load_retries=0",
            ],
            launcher=WITHOUT_ROOTS_READ_ALL,
        ) as server:
            channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
            response = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(
                get_model_status_pb2.GetModelStatusRequest(model_spec={"name": MODEL_NAME}),
                timeout=30,
            )
            [row] = response.model_version_status
            expected_message = f"[Errno 13] Permission denied: '{unreadable}'"
            assert (row.version, row.state, row.status.error_code, row.status.error_message) == (
                2,
                get_model_status_pb2.ModelVersionStatus.END,
                grpc.StatusCode.PERMISSION_DENIED.value[0],
                expected_message,
            )
            assert (
                f"Loading servable: {{name: {MODEL_NAME} version: 2}} failed: PERMISSION_DENIED: "
                f"{expected_message}" in server.output()
            )
    finally:
        os.chmod(unreadable, 0o755)


def test_disabled_warmup_serves_a_version_whose_warmup_file_is_broken(exports, tmp_path):
    base_path = make_model_base(exports, str(tmp_path), (1,))
    with open(
        os.path.join(base_path, "1", "assets.extra", "tf_serving_warmup_requests"), "wb"
    ) as warmup:
        warmup.write(b"not a TFRecord file")
    flags = [
        f"--model_name={MODEL_NAME}",
        f"--model_base_path={base_path}",
        "--port=0",
        "--file_system_poll_wait_seconds=0",
        "--max_num_load_retries=0",
    ]
    for warmup_flag, serves in (
        ("--enable_model_warmup=false", True),
        ("--enable_model_warmup=true", False),
    ):
        connection = Connection(ModelServer(parse_flags(flags + [warmup_flag])).start())
        try:
            if serves:
                assert predicted_version(connection) == 1
            else:  # The broken warmup file fails the load, as in TF Serving.
                assert version_states(connection) == [(1, "END")]
        finally:
            connection.server.stop()


# ------------------------------------------------------ inputs TF Serving runs


class _ElementwiseUpper(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec(None, tf.string, name="text")])
    def upper(self, text):
        return {"upper": tf.strings.upper(text)}


def test_inputs_of_any_shape_reach_a_model_whose_signature_accepts_any_shape(tmp_path):
    """A signature of unknown rank takes a [2, 2] input and an element-wise model answers it
    (a [-1] signature refuses it: tests/serving/model_server/test_server_limits.py)."""
    module = _ElementwiseUpper()
    tf.saved_model.save(
        module, str(tmp_path / "upper" / "1"), signatures={"serving_default": module.upper}
    )
    connection = start_server(tmp_path, model_name="upper", model_base_path=str(tmp_path / "upper"))
    try:
        request = texts_request([], model_name="upper")
        request.inputs["text"].CopyFrom(tf.make_tensor_proto([["a", "b"], ["c", "d"]]))
        response = connection.predict.Predict(request, timeout=10)
        assert tf.make_ndarray(response.outputs["upper"]).tolist() == [[b"A", b"B"], [b"C", b"D"]]
    finally:
        connection.server.stop()
