"""The REST API's routing, as tensorflow_serving/model_servers/http_rest_api_handler.cc does it.

    POST /v1/models/NAME[/versions/N | /labels/L]:predict   {"instances": [...]} or {"inputs": ...}
    POST /v1/models/NAME[/versions/N | /labels/L]:classify  (and :regress) signature checks only
    GET  /v1/models/NAME[/versions/N | /labels/L]            model status
    GET  /v1/models/NAME[/versions/N | /labels/L]/metadata   signature defs

A request path is matched to its handler, the handler's ServingError becomes
`{"error": "<message>"}` with the HTTP status TF Serving maps the gRPC code to, and every
request is recorded in the request metrics. The JSON <-> tensor conversion is
json_tensor.py's; the HTTP transport is http_server.py's.
"""

import json
import logging
import re
import time
import urllib.parse
from collections.abc import Callable

import grpc
from google.protobuf import json_format
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_pb2,
    predict_pb2,
)

from serving.model_server import errors, metrics
from serving.model_server.core import SIGNATURE_DEF_FIELD, ServingCore
from serving.model_server.json_tensor import (
    INT_RANGES,
    parse_predict_body,
    parsed_bytes_bound,
    predict_response_to_json,
    tensors_from_predict_document,
)
from serving.model_server.memory_budget import JSON
from serving.model_server.predict import DEFAULT_SERVING_SIGNATURE_DEF_KEY
from serving.model_server.tensors import ndarray_to_tensor_proto

logger = logging.getLogger("serving.rest")

# The regexes of http_rest_api_util.cc.
_DISPATCH_PATH = re.compile(r"/v1/.*", re.IGNORECASE)
_PREDICTION_PATH = re.compile(
    r"/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?:(classify|regress|predict)",
    re.IGNORECASE,
)
_STATUS_PATH = re.compile(
    r"/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?(?:/(metadata))?",
    re.IGNORECASE,
)


class RestApi:
    """Transport-independent REST handling: (method, path, body) -> (status, payload, type).

    Args:
        core: the ServingCore.
        timeout_seconds: deadline of each predict call (`--rest_api_timeout_in_ms`).
        metrics_path: the path answered with `metrics_page()` (Prometheus' text format),
            whatever the method, as TF Serving's --monitoring_config_file sets it; None
            serves no metrics.
        metrics_page: returns the metrics page.
    """

    def __init__(
        self,
        core: ServingCore,
        timeout_seconds: float | None = 30.0,
        metrics_path: str | None = None,
        metrics_page: Callable[[], bytes] | None = None,
    ):
        self._core = core
        self._timeout = timeout_seconds
        self._metrics_path = metrics_path
        self._metrics_page = metrics_page

    def accepts(self, path: str) -> bool:
        """Whether `path` has a handler (the others are 404, refused before their body)."""
        return path == self._metrics_path or bool(_DISPATCH_PATH.fullmatch(path))

    def handle(
        self, method: str, path: str, body: bytes, deadline: float | None = None
    ) -> tuple[int, bytes, str]:
        """Answers one request of an accepted path: (HTTP status, payload, content type).

        `deadline` (`time.monotonic()`): a predict's deadline, as the transport set it; None:
        `timeout_seconds` from now.

        A /v1/ request is recorded in the request metrics as TF Serving's http_server.cc
        records it: counted by model and status, and the latency of a successful one under
        its API, the URL's verb ("predict"; "" for GET). Never raises."""
        if path == self._metrics_path:
            return 200, self._metrics_page(), metrics.CONTENT_TYPE
        start, code = time.monotonic(), grpc.StatusCode.OK
        try:
            payload = self._dispatch(method, path, body, deadline)
            text = json.dumps(payload, indent=1, ensure_ascii=False)
            return 200, text.encode("utf-8"), errors.REST_JSON_CONTENT_TYPE
        except errors.ServingError as error:
            code = error.code
            logger.debug("REST %s %s failed: %s", method, errors.quote(path), error)
            return (
                error.http_status,
                errors.rest_error_body(error.message),
                errors.REST_JSON_CONTENT_TYPE,
            )
        except Exception as error:  # A bug must fail the request, not the connection.
            code = grpc.StatusCode.INTERNAL
            logger.exception("REST %s %s failed unexpectedly", method, errors.quote(path))
            return (
                500,
                errors.rest_error_body(f"{type(error).__name__}: {error}"),
                errors.REST_JSON_CONTENT_TYPE,
            )
        finally:
            model_name, api = self._metric_labels(method, path)
            self._core.metrics.record_request(
                model_name, code, api, "REST", time.monotonic() - start
            )

    @staticmethod
    def _metric_labels(method: str, path: str) -> tuple[str, str]:
        """(model name, API) of a request path, as TF Serving's ParseModelInfo reads them."""
        pattern = {"POST": _PREDICTION_PATH, "GET": _STATUS_PATH}.get(method)
        match = pattern.fullmatch(path) if pattern else None
        if match is None:
            return "", ""
        name = urllib.parse.unquote(match.group(1) or "")
        return name, match.group(4) if method == "POST" else ""

    def _dispatch(self, method: str, path: str, body: bytes, deadline: float | None) -> dict:
        malformed = errors.invalid_argument(f"Malformed request: {method} {errors.quote(path)}")
        pattern = {"POST": _PREDICTION_PATH, "GET": _STATUS_PATH}.get(method)
        match = pattern.fullmatch(path) if pattern else None
        if match is None:
            raise malformed
        name, version, label, action = match.groups()
        model_spec = self._model_spec(name, version, label)
        if method == "POST":
            # The document's values and their rows live until the answer: held in the budget,
            # at a bound of what they take, before they are parsed.
            with self._core.memory_budget.reserve(parsed_bytes_bound(body), JSON):
                action = action.lower()
                if action != "predict":
                    _, signature_name = parse_predict_body(body)
                    self._core.check_classify_or_regress(model_spec, signature_name, action)
                return self._predict(model_spec, body, deadline)
        if not model_spec.name:
            raise errors.invalid_argument("Missing model name in request.")
        if action:
            return self._metadata(model_spec)
        return self._status(model_spec)

    @staticmethod
    def _model_spec(name, version, label) -> model_pb2.ModelSpec:
        spec = model_pb2.ModelSpec()
        spec.name = urllib.parse.unquote(name or "")
        if version is not None:
            if int(version) > INT_RANGES[types_pb2.DT_INT64][1]:  # absl::SimpleAtoi to int64.
                raise errors.invalid_argument(
                    f"Failed to convert version: {errors.quote(version)} to numeric."
                )
            spec.version.value = int(version)
        if label is not None:
            spec.version_label = urllib.parse.unquote(label)
        return spec

    def _predict(self, model_spec, body: bytes, deadline: float | None) -> dict:
        request = predict_pb2.PredictRequest()
        request.model_spec.CopyFrom(model_spec)
        document, signature_name = parse_predict_body(body)
        if signature_name is not None:
            request.model_spec.signature_name = signature_name
        key = signature_name or DEFAULT_SERVING_SIGNATURE_DEF_KEY
        with self._core.manager.servable(request.model_spec) as servable:
            signature = servable.signature_defs.get(key)
            if signature is None:
                raise errors.invalid_argument(
                    f'Serving signature name: "{errors.quote(key)}" not found in signature def'
                )
            input_dtypes = {alias: info.dtype for alias, info in signature.inputs.items()}
        if not input_dtypes:
            raise errors.invalid_argument(
                f"Failed to get input map for signature: {errors.quote(signature_name or 'DEFAULT')}"
            )
        tensors, row_format = tensors_from_predict_document(document, input_dtypes)
        for alias, array in tensors.items():
            request.inputs[alias].CopyFrom(ndarray_to_tensor_proto(array))
            request.inputs[alias].dtype = input_dtypes[alias]
        if deadline is None and self._timeout:
            deadline = time.monotonic() + self._timeout
        response = self._core.predict(request, deadline=deadline)
        return predict_response_to_json(response, row_format=row_format)

    def _status(self, model_spec) -> dict:
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.CopyFrom(model_spec)
        response = self._core.get_model_status(request)
        return json_format.MessageToDict(response, always_print_fields_with_no_presence=True)

    def _metadata(self, model_spec) -> dict:
        request = get_model_metadata_pb2.GetModelMetadataRequest(
            metadata_field=[SIGNATURE_DEF_FIELD]
        )
        request.model_spec.CopyFrom(model_spec)
        response = self._core.get_model_metadata(request)
        signature_def_map = get_model_metadata_pb2.SignatureDefMap()
        response.metadata[SIGNATURE_DEF_FIELD].Unpack(signature_def_map)

        def to_dict(message):
            return json_format.MessageToDict(
                message, always_print_fields_with_no_presence=True, preserving_proto_field_name=True
            )

        return {
            "model_spec": to_dict(response.model_spec),
            "metadata": {SIGNATURE_DEF_FIELD: to_dict(signature_def_map)},
        }
