"""Tests of serving/model_server/rest_api.py, the REST API's routing: URL to handler, and the
handlers' errors as TF Serving's http_rest_api_handler.cc gives them (status and message),
over HTTP on 127.0.0.1 against a server running the toy model of tests/serving_fixtures.py.
"""

import gzip
import json
import urllib.error
import urllib.request

import numpy as np
import pytest

from serving.model_server.json_tensor import JSON_ITEM_BYTES
from tests.model_server_fixtures import SENTENCES, assert_rest_error, http, start_server
from tests.serving_fixtures import (
    MODEL_NAME,
    expected_alignment,
    expected_beam,
    expected_greedy,
    expected_greedy_score,
    make_model_base,
    wait_for,
)


def test_rest_predict_row_and_columnar_formats(main_server):
    url = f"{main_server.rest}/v1/models/translator"
    status, body = http("POST", f"{url}:predict", {"instances": SENTENCES[:2]})
    assert status == 200
    assert body == {
        "predictions": [
            {"score": expected_greedy_score(s), "translation": expected_greedy(s, 2)}
            for s in SENTENCES[:2]
        ]
    }

    status, body = http(
        "POST",
        f"{url}/versions/2:predict",
        {"signature_name": "beam_search", "inputs": {"text": ["a b c"]}},
    )
    assert (status, body) == (
        200,
        {"outputs": {"score": [3.0], "translation": [expected_beam("a b c", 2)]}},
    )

    status, body = http(
        "POST",
        f"{main_server.rest}/v1/models/translator_all/labels/stable:predict",
        {"instances": [{"b64": "aGkgdGhlcmU="}]},
    )  # base64 of "hi there"
    assert body["predictions"][0]["translation"] == expected_greedy("hi there", 1)

    status, body = http(
        "POST", f"{url}:predict", {"signature_name": "alignments", "instances": ["one two"]}
    )
    prediction = body["predictions"][0]
    assert prediction["source_tokens"] == ["one", "two"]
    assert prediction["target_tokens"] == ["TWO", "ONE"]
    np.testing.assert_allclose(prediction["alignment"], expected_alignment("one two"))


def test_rest_status_and_metadata(main_server):
    status, body = http("GET", f"{main_server.rest}/v1/models/translator")
    assert (status, body) == (
        200,
        {
            "model_version_status": [
                {
                    "version": "2",
                    "state": "AVAILABLE",
                    "status": {"error_code": "OK", "error_message": ""},
                }
            ]
        },
    )
    status, body = http("GET", f"{main_server.rest}/v1/models/translator_all/versions/1")
    assert [row["version"] for row in body["model_version_status"]] == ["1"]
    status, body = http("GET", f"{main_server.rest}/v1/models/translator/metadata")
    assert status == 200 and body["model_spec"]["version"] == "2"
    signature = body["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert signature["inputs"]["text"]["dtype"] == "DT_STRING"


@pytest.mark.parametrize(
    "method, path, body, status, message",
    [
        (
            "POST",
            "/v1/models/nope:predict",
            {"instances": ["a"]},
            404,
            "Servable not found for request: Latest(nope)",
        ),
        (
            "GET",
            "/v1/models/translator/versions/5",
            None,
            404,
            "Could not find version 5 of model translator",
        ),
        (
            "POST",
            "/v1/models/translator:predict",
            {"signature_name": "greedy", "instances": ["a"]},
            400,
            'Serving signature name: "greedy" not found in signature def',
        ),
        (
            "GET",
            "/v1/models/translator:predict",
            None,
            400,
            "Malformed request: GET /v1/models/translator:predict",
        ),
        (
            "GET",
            "/v1/models/translator/versions/99999999999999999999999",
            None,
            400,
            "Failed to convert version: 99999999999999999999999 to numeric.",
        ),
        (
            "POST",
            "/v1/models/translator/versions/9223372036854775808:predict",
            {"instances": ["a"]},
            400,
            "Failed to convert version: 9223372036854775808 to numeric.",
        ),
    ],
)
def test_rest_errors_match_tf_serving(main_server, method, path, body, status, message):
    assert_rest_error(main_server, method, path, body, status, message)


def test_rest_unknown_paths_are_404(main_server):
    status, _ = http("GET", f"{main_server.rest}/metrics")
    assert status == 404


@pytest.mark.parametrize(
    "action, message",
    [
        ("classify", "No classification inputs found in SignatureDef: "),
        ("regress", "Expected one output Tensor."),
    ],
)
def test_rest_classify_and_regress_refuse_a_predict_signature_as_tf_serving(
    main_server, action, message
):
    """TF Serving checks the signature (classifier.cc, regressor.cc) and answers
    INVALID_ARGUMENT, so 400, for a predict-only signature (this server answered 501);
    an unknown model is still 404, an unknown signature 400."""
    url = f"{main_server.rest}/v1/models/translator"
    status, body = http("POST", f"{url}:{action}", {"examples": [{"text": "a"}]})
    assert status == 400 and body["error"].startswith(message), body
    if action == "classify":  # The signature is shown as TF Serving's DebugString shows it.
        assert 'inputs {\n  key: "text"' in body["error"]
    status, body = http(
        "POST", f"{url}:{action}", {"signature_name": "nope", "examples": [{"text": "a"}]}
    )
    assert (status, body) == (400, {"error": "No signature was found with the name: nope"})
    status, body = http(
        "POST", f"{main_server.rest}/v1/models/nope:{action}", {"examples": [{"text": "a"}]}
    )
    assert status == 404


def test_a_duplicate_json_key_keeps_its_first_value_as_tf_servings_parser(main_server):
    """rapidjson's FindMember, which TF Serving looks a document's keys up with, finds a key's
    first member; Python's json kept the last, so `{"instances":["hola"],"instances":[5]}` was
    400 here and 200 from TF Serving. The first value is now the one read, at every level."""
    body = (
        b'{"instances": ["hola mundo"], "instances": [5], '
        b'"signature_name": "serving_default", "signature_name": "nope"}'
    )
    status, answer = http("POST", f"{main_server.rest}/v1/models/{MODEL_NAME}:predict", body)
    assert status == 200, answer
    assert answer["predictions"][0]["translation"] == expected_greedy("hola mundo", 2)
    status, answer = http(
        "POST",
        f"{main_server.rest}/v1/models/{MODEL_NAME}:predict",
        b'{"inputs": {"text": ["a b"], "text": 7}}',
    )
    assert status == 200, answer
    assert answer["outputs"]["translation"] == [expected_greedy("a b", 2)]


def test_a_json_body_is_counted_in_the_budget_as_parsed_before_it_is_parsed(exports, tmp_path):
    """14.3 MiB of `[]` items took 2.73 GB (191 times their size) and 31 s of CPU, uncounted by
    the budget, and 9,970 bytes of gzip took 1.87 GB: a REST body's JSON values are now held in
    the budget at a bound of what parsing and converting them takes (JSON_ITEM_BYTES an item)
    before they are parsed, gzip bodies as decompressed, and refused when that does not fit."""
    connection = start_server(
        tmp_path,
        model_name=MODEL_NAME,
        model_base_path=make_model_base(exports, str(tmp_path)),
        rest_api_port=0,
        request_memory_budget_bytes=8 * 2**20,
    )
    url = f"http://127.0.0.1:{connection.server.rest_port}/v1/models/{MODEL_NAME}:predict"
    try:
        items = 10_000
        body = b'{"instances": [' + b",".join([b"[]"] * items) + b"]}"
        assert len(body) < 2**20 // 16 < 2 * items * JSON_ITEM_BYTES
        for framing, payload in (({}, body), ({"Content-Encoding": "gzip"}, gzip.compress(body))):
            request = urllib.request.Request(url, data=payload, headers=framing, method="POST")
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=30)
            assert refused.value.code == 429
            assert "the request's JSON values take" in json.loads(refused.value.read())["error"]
        status, answer = http("POST", url, {"instances": ["hola mundo"] * 64})
        assert status == 200, answer
        budget = connection.server.core.memory_budget
        wait_for(lambda: budget.held_bytes == 0, "the answered request to give its bytes back")
    finally:
        connection.server.stop(grace_seconds=0)
