"""Tests of serving/model_server/json_tensor.py, the REST API's JSON <-> tensor conversion:
statuses and messages as TF Serving's util/json_tensor.cc and rapidjson give them, over HTTP on
127.0.0.1 against a server running the toy model of tests/serving_fixtures.py.
"""

import pytest
import tensorflow as tf

from tests.model_server_fixtures import PREDICT_PATH, assert_rest_error, http, start_server
from tests.serving_fixtures import expected_greedy


@pytest.mark.parametrize(
    "method, path, body, status, message",
    [
        ("POST", "/v1/models/translator:predict", b"{not json", 400, "JSON Parse error"),
        (
            "POST",
            "/v1/models/translator:predict",
            b"",
            400,
            "JSON Parse error: The document is empty",
        ),
        (
            "POST",
            "/v1/models/translator:predict",
            {"text": ["a"]},
            400,
            "Missing 'inputs' or 'instances' key",
        ),
        (
            "POST",
            "/v1/models/translator:predict",
            {"instances": [1, 2]},
            400,
            "Failed to process element: 0 of 'instances' list. Error: INVALID_ARGUMENT: JSON Value: 1 "
            "Type: Number is not of expected type: string",
        ),
        (
            "POST",
            "/v1/models/translator:predict",
            {"instances": []},
            400,
            "No values in 'instances' array",
        ),
        (
            "POST",
            "/v1/models/translator:predict",
            {"instances": ["a"], "inputs": ["a"]},
            400,
            "expecting only one of 'inputs' or 'instances' keys to exist",
        ),
        (
            "POST",
            "/v1/models/translator:predict",
            b'{"instances": ["\xff"]}',
            400,
            "JSON Parse error: Invalid encoding",
        ),
        (
            "POST",
            "/v1/models/translator:predict",
            b'{"instances": ' + b"[" * 900 + b'"a"' + b"]" * 900 + b"}",
            400,
            "JSON Parse error: The document is nested deeper than 258 levels",
        ),
        (
            "POST",
            "/v1/models/translator:predict",
            b'{"instances": ' + b"[" * 100_000,
            400,
            "JSON Parse error: The document is nested deeper than 258 levels",
        ),
        # rapidjson refuses unpaired surrogate escapes (Python's json let them through, and
        # encoding them later failed with 500 and sometimes an empty body).
        (
            "POST",
            "/v1/models/translator:predict",
            b'{"instances": ["\\ud800"]}',
            400,
            "JSON Parse error: The surrogate pair in string is invalid. at offset: 16",
        ),
        (
            "POST",
            "/v1/models/translator:predict",
            b'{"instances": "\\udc00 alone"}',
            400,
            "JSON Parse error: The surrogate pair in string is invalid. at offset: 15",
        ),
        (
            "POST",
            "/v1/models/translator:predict",
            b'{"\\ud800": 1, "instances": ["a"]}',
            400,
            "JSON Parse error: The surrogate pair in string is invalid. at offset: 2",
        ),
        (
            "POST",
            "/v1/models/translator:predict",
            b'{"instances": [' + b"1" * 5000 + b"]}",
            400,
            "JSON Parse error: Number too big to be stored in double. at offset: 15",
        ),
        (
            "POST",
            "/v1/models/translator:predict",
            b'{"instances": ' + b"[" * 65 + b'"a"' + b"]" * 65 + b"}",
            400,
            "nests lists 64 deep: its tensor would have 65 dimensions, more than the 64 this "
            "server supports",
        ),
        (
            "POST",
            "/v1/models/translator:predict",
            b'{"inputs": ' + b"[" * 65 + b'"a"' + b"]" * 65 + b"}",
            400,
            "nests lists 65 deep: its tensor would have 65 dimensions, more than the 64",
        ),
        # rapidjson reads UTF-8 only (Python's json.loads(bytes) guesses UTF-16 and -32).
        (
            "POST",
            "/v1/models/translator:predict",
            '{"instances": ["a"]}'.encode("utf-16"),
            400,
            "JSON Parse error: Invalid encoding in string. at offset: 0",
        ),
        (
            "POST",
            "/v1/models/translator:predict",
            '{"instances": ["a"]}'.encode("utf-16-le"),
            400,
            "JSON Parse error: Expecting property name enclosed in double quotes at offset: 1",
        ),
    ],
)
def test_rest_json_errors_match_tf_serving(main_server, method, path, body, status, message):
    assert_rest_error(main_server, method, path, body, status, message)


@pytest.mark.parametrize(
    "method, path, body, message",
    [
        (
            "POST",
            PREDICT_PATH,
            {"instances": [{"b64": "aGk=="}]},  # One "=" too many for absl.
            "Failed to process element: 0 of 'instances' list. Error: INVALID_ARGUMENT: "
            "Unable to base64 decode",
        ),
        (
            "POST",
            PREDICT_PATH,
            {"inputs": {"text": [{"b64": 1}]}},
            'JSON Value: {\n    "b64": 1\n} not formatted correctly for base64 data',
        ),
        (
            "POST",
            PREDICT_PATH,
            {"instances": [{"source": "a"}]},
            "Failed to process element: 0 key: source of 'instances' list. Error: "
            "INVALID_ARGUMENT: JSON object: does not have named input: source",
        ),
        (
            "POST",
            PREDICT_PATH,
            {"inputs": {"source": ["a"]}},
            "Missing named input: text in 'inputs' object.",
        ),
        (
            "POST",
            PREDICT_PATH,
            {"inputs": [["a", "b"], ["c"]]},
            "Encountered list at unexpected size: 1 at level: 1 expected size: 2",
        ),
        (
            "POST",
            PREDICT_PATH,
            {"inputs": ["a", ["b"]]},
            "Encountered list at unexpected level: 1 expected < 1",
        ),
        (
            "POST",
            PREDICT_PATH,
            {"inputs": [["a"], "b"]},
            'JSON Value: "b" found at incorrect level: 2 in the JSON DOM. Expected at level: 2',
        ),
        (
            "POST",
            PREDICT_PATH,
            {"instances": "a"},
            'JSON Value: {\n    "instances": "a"\n} Expecting \'instances\' to be an list/array',
        ),
        ("GET", "/v1/models", None, "Missing model name in request."),
        ("GET", "/v1/models/versions/1/metadata", None, "Missing model name in request."),
    ],
)
def test_rest_json_tensor_errors_are_tf_servings_400s(main_server, method, path, body, message):
    """Status and message as json_tensor.cc and http_rest_api_handler.cc give them
    (INVALID_ARGUMENT, so 400), JSON values echoed as rapidjson's PrettyWriter writes them."""
    assert http(method, main_server.rest + path, body) == (400, {"error": message})


def test_rest_base64_is_decoded_as_absl_does(main_server):
    """absl::Base64Unescape skips whitespace and accepts a missing padding."""
    for encoded in ("aGkgdGhlcmU", "aGkg dGhl\ncmU=", "aGkgdGhlcmU."):  # "hi there"
        status, body = http(
            "POST", main_server.rest + PREDICT_PATH, {"instances": [{"b64": encoded}]}
        )
        assert (status, body["predictions"][0]["translation"]) == (
            200,
            expected_greedy("hi there", 2),
        ), encoded


class _Doubler(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    def double(self, x):
        return {"y": x * 2}


def test_rest_float_inputs_take_any_json_number_rounded(tmp_path):
    """TF Serving 2.5 dropped the check that integers given for float inputs are exact:
    16777217 is read as the float32 16777216, as GetFloat() rounds it."""
    module = _Doubler()
    tf.saved_model.save(
        module, str(tmp_path / "doubler" / "1"), signatures={"serving_default": module.double}
    )
    connection = start_server(
        tmp_path, model_name="doubler", model_base_path=str(tmp_path / "doubler"), rest_api_port=0
    )
    try:
        status, body = http(
            "POST",
            f"{connection.rest}/v1/models/doubler:predict",
            {"instances": [16777217, 0.25, 123456789012345678901234567890]},
        )
        assert (status, body) == (200, {"predictions": [33554432.0, 0.5, 2.4691358e29]})
    finally:
        connection.server.stop()
