"""serving/model_server/grpc_service.py and core.py over gRPC: Predict for every signature, output
filters and versions, TF Serving's errors, Classify and Regress, metadata and status.

Servers run in-process (one module-wide instance per configuration) or, where the process
itself is under test, as `python -m serving.server`; every server binds port 0 and the tests
read the port it got. Requests use the official tensorflow-serving-api stubs; expected outputs
come from the plain-Python definitions of the toy model in tests/serving_fixtures.py. Tests wait
on server state, never on sleeps.
"""

import urllib.parse

import grpc
import numpy as np
import pytest
import tensorflow as tf
from grpc_health.v1 import health_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    regression_pb2,
)

from serving.model_server.errors import MAX_QUOTED_CHARS
from serving.model_server.metrics import UNKNOWN_MODEL_LABEL
from tests.model_server_fixtures import (
    SENTENCES,
    http,
    rpc_error,
    strings,
)
from tests.serving_fixtures import (
    MODEL_NAME,
    expected_alignment,
    expected_beam,
    expected_beam_score,
    expected_greedy,
    expected_greedy_score,
    texts_request,
)

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


# ------------------------------------------------------------ client-chosen strings


def test_an_unknown_name_of_any_length_is_not_found_and_leaves_no_lasting_state(main_server):
    """An unknown model name of 16 KiB or more was echoed whole in the error, so the client got
    RESOURCE_EXHAUSTED ("metadata size exceeds hard limit") instead of NOT_FOUND (Predict,
    status, metadata; a 1 MB metadata_field too), and every unknown name became a metric label
    for good (six 16 MB names: 229 MB, a 96 MiB metrics page). An error now quotes at most
    MAX_QUOTED_CHARS characters of what the client sent, and the names of models that are not
    served count under one label."""
    names = [f"{letter}{'n' * 20_000}-ñ" for letter in "abc"]

    def quoted(name):
        return f"{name[:MAX_QUOTED_CHARS]}... ({len(name)} characters)"

    for name in names:
        error = rpc_error(main_server.predict.Predict, texts_request(["hola"], model_name=name))
        assert error.code() == grpc.StatusCode.NOT_FOUND, error.details()[:200]
    assert error.details() == f"Servable not found for request: Latest({quoted(names[-1])})"
    spec = {"model_spec": {"name": names[0]}}
    status = rpc_error(
        main_server.models.GetModelStatus, get_model_status_pb2.GetModelStatusRequest(**spec)
    )
    assert (status.code(), status.details()) == (
        grpc.StatusCode.NOT_FOUND,
        f"Could not find any versions of model {quoted(names[0])}",
    )
    metadata = rpc_error(
        main_server.predict.GetModelMetadata,
        get_model_metadata_pb2.GetModelMetadataRequest(**spec, metadata_field=["signature_def"]),
    )
    assert metadata.code() == grpc.StatusCode.NOT_FOUND
    field = rpc_error(
        main_server.predict.GetModelMetadata,
        get_model_metadata_pb2.GetModelMetadataRequest(
            model_spec={"name": MODEL_NAME}, metadata_field=["f" * 1_000_000]
        ),
    )
    assert field.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field.details() == (
        f"Metadata field {'f' * MAX_QUOTED_CHARS}... (1000000 characters) is not supported"
    )
    rest_status, body = http("GET", f"{main_server.rest}/v1/models/{urllib.parse.quote(names[1])}")
    assert rest_status == 404 and len(body["error"]) < 2 * MAX_QUOTED_CHARS, body

    page = main_server.server.metrics.exposition().decode()
    assert "nnnnnnnnnn" not in page
    assert f'model_name="{UNKNOWN_MODEL_LABEL}",status="NOT_FOUND"' in page
