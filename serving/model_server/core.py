"""The request handlers shared by the gRPC and REST front ends.

`ServingCore` answers Predict, GetModelMetadata, GetModelStatus and
HandleReloadConfigRequest from proto requests to proto responses, raising
`ServingError` with TF Serving's codes and messages; the front ends only
translate transports.
"""

import logging
import threading
import time

from google.protobuf import text_format
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_management_pb2,
    predict_pb2,
)

from serving.model_server import config as config_lib
from serving.model_server import errors
from serving.model_server.batching import BatchScheduler, WhenCallerGone
from serving.model_server.manager import ServableManager
from serving.model_server.memory_budget import RequestMemoryBudget
from serving.model_server.metrics import ServerMetrics
from serving.model_server.predict import (
    DEFAULT_SERVING_SIGNATURE_DEF_KEY,
    check_deadline,
    check_predict,
    check_rows,
    check_string_sizes,
    decode_predict,
    make_predict_response,
    request_rows,
    run_in_pieces,
)

logger = logging.getLogger("serving.core")

SIGNATURE_DEF_FIELD = "signature_def"
# The signature keys classifier.cc and regressor.cc look for (signature_constants.h).
_CLASSIFY_INPUTS, _CLASSIFY_OUTPUTS = "inputs", ("classes", "scores")
_REGRESS_INPUTS, _REGRESS_OUTPUTS = "inputs", "outputs"


class ServingCore:
    """Predict/metadata/status on top of a ServableManager.

    Args:
        manager: the ServableManager holding the loaded versions.
        batcher: BatchScheduler when `--enable_batching`, else None.
        metrics: where model runs are recorded (a ServerMetrics of its own when None).
        max_rows_per_run: without batching, a request runs in pieces of at most this many
            rows (`predict.run_in_pieces`); <= 0 runs it whole.
        max_input_string_bytes: a request holding a longer string is refused before any run
            (`predict.check_string_sizes`); <= 0 accepts any.
        max_rows_per_request: a request of more rows is refused before its tensors are made
            (`predict.check_rows`), as one of more than batching's `max_batch_size` is;
            <= 0 accepts any.
        request_memory_budget_bytes: the most the decoded inputs of the requests in flight
            may hold together; a request that does not fit is refused before its tensors are
            made (`memory_budget.RequestMemoryBudget`, `predict.CheckedPredict.decoded_bytes`);
            <= 0: no budget.
    """

    def __init__(
        self,
        manager: ServableManager,
        batcher: BatchScheduler | None = None,
        metrics: ServerMetrics | None = None,
        max_rows_per_run: int = 0,
        max_input_string_bytes: int = 0,
        max_rows_per_request: int = 0,
        request_memory_budget_bytes: int = 0,
    ):
        self.manager = manager
        self.batcher = batcher
        self.metrics = metrics if metrics is not None else ServerMetrics()
        self.max_rows_per_run = max_rows_per_run
        self.max_input_string_bytes = max_input_string_bytes
        self.max_rows_per_request = max_rows_per_request
        self.memory_budget = RequestMemoryBudget(request_memory_budget_bytes)

    def predict(
        self,
        request: predict_pb2.PredictRequest,
        deadline: float | None = None,
        when_caller_gone: WhenCallerGone | None = None,
    ) -> predict_pb2.PredictResponse:
        """Runs a PredictRequest.

        Args:
            request: the request.
            deadline: `time.monotonic()` value after which the caller has gone: the
                model's run is aborted then (DEADLINE_EXCEEDED).
            when_caller_gone: registers a callback for when the caller has gone (a cancelled
                gRPC call): the request's pieces that have not started are dropped, from the
                batch queue (`BatchScheduler.run`) or between its runs (`run_in_pieces`). A run
                under way is not stopped: a Session step has no cancellation but its deadline
                and the Session's close, and TF Serving does not stop one either.
        """
        if not request.HasField("model_spec"):
            raise errors.invalid_argument("Missing ModelSpec")
        with self.manager.servable(request.model_spec) as servable:
            checked = check_predict(servable, request)
            check_string_sizes(checked, self.max_input_string_bytes)
            # Counted before the tensors are made: a few bytes can announce billions of rows.
            with self.memory_budget.reserve(checked.decoded_bytes()):
                # Read from the shapes: a value padded to millions of rows costs the model
                # runs, not the request's bytes, and is refused before it is made.
                rows = request_rows(checked)
                if self.batcher is not None:
                    self.batcher.check_task_size(rows)
                check_rows(rows, self.max_rows_per_request)
                prepared = decode_predict(checked)
                return self._run(request, servable, prepared, deadline, when_caller_gone)

    def _run(self, request, servable, prepared, deadline, when_caller_gone):
        """Runs a validated request (without batching, in pieces) and answers it."""
        check_deadline(deadline)
        start = time.monotonic()
        if self.batcher is None:
            caller_gone = threading.Event()
            if when_caller_gone is not None and not when_caller_gone(caller_gone.set):
                caller_gone.set()
            outputs = run_in_pieces(
                servable, prepared, self.max_rows_per_run, deadline, caller_gone
            )
        else:
            outputs = self.batcher.run(
                queue_key=(
                    servable.model_name,
                    servable.version,
                    prepared.signature_name,
                    tuple(prepared.output_aliases),
                ),
                run_fn=lambda inputs, run_deadline: servable.run(
                    prepared.signature_name, inputs, prepared.output_aliases, run_deadline
                ),
                inputs=prepared.inputs,
                deadline=deadline,
                when_caller_gone=when_caller_gone,
            )
        # TF Serving times Session::Run, which with batching includes the batch queue.
        self.metrics.record_runtime(request.model_spec.name, "Predict", time.monotonic() - start)
        return make_predict_response(request, servable, prepared, outputs)

    def check_classify_or_regress(self, model_spec, signature_name: str | None, api: str) -> None:
        """Refuses Classify or Regress (`api`: "classify" or "regress"), over gRPC and REST, as
        TF Serving does for a signature that is not a classification (regression) one:
        INVALID_ARGUMENT, with classifier.cc's (regressor.cc's) message. A signature that
        passes those checks gets UNIMPLEMENTED: this server runs Predict only.

        Raises:
            ServingError: always.
        """
        key = signature_name or DEFAULT_SERVING_SIGNATURE_DEF_KEY
        with self.manager.servable(model_spec) as servable:
            signature = servable.signature_defs.get(key)
        if signature is None:
            raise errors.invalid_argument(
                f"No signature was found with the name: {errors.quote(key)}"
            )
        described = text_format.MessageToString(signature)  # SignatureDef::DebugString.
        if len(signature.inputs) != 1:
            raise errors.invalid_argument("Expected one input Tensor.")
        if api == "classify":
            if len(signature.outputs) not in (1, 2):
                raise errors.invalid_argument(
                    f"Expected one or two output Tensors, found {len(signature.outputs)}"
                )
            if _CLASSIFY_INPUTS not in signature.inputs:
                raise errors.invalid_argument(
                    f"No classification inputs found in SignatureDef: {described}"
                )
            if not any(name in signature.outputs for name in _CLASSIFY_OUTPUTS):
                raise errors.invalid_argument(
                    'Expected classification signature outputs to contain at least one of "'
                    f'classes" or "scores". Signature was: {described}'
                )
        else:
            if len(signature.outputs) != 1:
                raise errors.invalid_argument("Expected one output Tensor.")
            for kind, names, name in (
                ("inputs", signature.inputs, _REGRESS_INPUTS),
                ("outputs", signature.outputs, _REGRESS_OUTPUTS),
            ):
                if name not in names:
                    raise errors.invalid_argument(
                        f"No regression {kind} found in SignatureDef: {described}"
                    )
        raise errors.unimplemented(
            f"The {api} API is not implemented by this model server; use Predict (REST :predict)"
        )

    def get_model_metadata(
        self, request: get_model_metadata_pb2.GetModelMetadataRequest
    ) -> get_model_metadata_pb2.GetModelMetadataResponse:
        """Answers the `signature_def` metadata field with a SignatureDefMap packed in Any."""
        if not request.HasField("model_spec"):
            raise errors.invalid_argument("Missing ModelSpec")
        if not request.metadata_field:
            raise errors.invalid_argument(
                "GetModelMetadataRequest must specify at least one metadata_field"
            )
        for field in request.metadata_field:
            if field != SIGNATURE_DEF_FIELD:
                raise errors.invalid_argument(
                    f"Metadata field {errors.quote(field)} is not supported"
                )
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        with self.manager.servable(request.model_spec) as servable:
            signature_def_map = get_model_metadata_pb2.SignatureDefMap()
            for name, signature in servable.signature_defs.items():
                signature_def_map.signature_def[name].CopyFrom(signature)
            response.model_spec.name = servable.model_name
            response.model_spec.version.value = servable.version
        response.metadata[SIGNATURE_DEF_FIELD].Pack(signature_def_map)
        return response

    def get_model_status(
        self, request: get_model_status_pb2.GetModelStatusRequest
    ) -> get_model_status_pb2.GetModelStatusResponse:
        """Lists the state of one version, or of every version newest first.

        While the memory budget refuses requests (`RequestMemoryBudget.pressure`), an available
        version's status says so in its `error_message`, its `error_code` OK and its state
        AVAILABLE: the version serves what fits, and a client or probe that reads the code and
        the state, as TF Serving's do, sees it ready as before, while one that reads the words
        can hold traffic back.
        """
        if not request.HasField("model_spec"):
            raise errors.invalid_argument("Missing ModelSpec")
        spec = request.model_spec
        version = spec.version.value if spec.HasField("version") else None
        response = get_model_status_pb2.GetModelStatusResponse()
        pressure = self.memory_budget.pressure()
        for row in self.manager.version_statuses(spec.name, version):
            status = response.model_version_status.add(version=row.version, state=row.state)
            # An OK status is still present, with error_code OK, as in TF Serving.
            status.status.SetInParent()
            status.status.error_code = row.error.code.value[0] if row.error else 0
            if row.error:
                status.status.error_message = row.error.message
            elif row.state == get_model_status_pb2.ModelVersionStatus.AVAILABLE:
                status.status.error_message = pressure
        return response

    def reload_config(
        self, request: model_management_pb2.ReloadConfigRequest
    ) -> model_management_pb2.ReloadConfigResponse:
        """Applies a new ModelServerConfig (models added, updated or removed).

        Raises:
            ServingError: INVALID_ARGUMENT, with nothing changed, for a config that
                is not a model_config_list (an empty request included) or that fails
                validation; FAILED_PRECONDITION for labels of unavailable versions.
        """
        if request.config.WhichOneof("config") != "model_config_list":
            raise errors.invalid_argument(
                "ServerModelConfig type not supported by HandleReloadConfigRequest. Only "
                "ModelConfigList is currently supported"
            )
        try:
            self.manager.set_config(request.config)
        except config_lib.ConfigError as error:
            raise errors.invalid_argument(str(error)) from None
        response = model_management_pb2.ReloadConfigResponse()
        response.status.error_code = 0
        return response
