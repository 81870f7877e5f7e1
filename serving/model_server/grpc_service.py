"""gRPC front end: TF Serving's PredictionService and ModelService on a ServingCore."""

import functools
import logging
import time

import grpc
from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

from serving.model_server import errors
from serving.model_server.core import ServingCore

logger = logging.getLogger("serving.grpc")


# gRPC reports a call without a deadline as one ending in the infinite future (about 292,000
# years away); anything past this many seconds is no deadline at all.
_NO_DEADLINE_SECONDS = 10**9


def _deadline_of(context: grpc.ServicerContext):
    remaining = context.time_remaining()
    if remaining is None or remaining > _NO_DEADLINE_SECONDS:
        return None
    return time.monotonic() + remaining


def _handles_errors(method):
    """Turns ServingError into the call's status; anything else becomes INTERNAL."""

    @functools.wraps(method)
    def wrapper(self, request, context):
        try:
            return method(self, request, context)
        except errors.ServingError as error:
            logger.debug("%s failed: %s", method.__name__, error)
            context.abort(error.code, error.message)
        except Exception as error:  # A bug must fail the request, not the server.
            logger.exception("%s failed unexpectedly", method.__name__)
            context.abort(grpc.StatusCode.INTERNAL, f"{type(error).__name__}: {error}")

    return wrapper


def _counted(api: str):
    """Records the call in the request metrics, as TF Serving's PredictionServiceImpl does for
    Predict, Classify and Regress: its count by status, and the latency of a successful one.
    Goes under `_handles_errors`, which turns what it lets through into the call's status."""

    def decorate(method):
        @functools.wraps(method)
        def wrapper(self, request, context):
            start, code = time.monotonic(), grpc.StatusCode.INTERNAL
            try:
                response = method(self, request, context)
                code = grpc.StatusCode.OK
                return response
            except errors.ServingError as error:
                code = error.code
                raise
            finally:
                self._core.metrics.record_request(
                    request.model_spec.name, code, api, "GRPC", time.monotonic() - start
                )

        return wrapper

    return decorate


def _unimplemented(api: str) -> errors.ServingError:
    return errors.unimplemented(
        f"{api} is not implemented by this model server; use Predict (the translator's "
        "signatures are prediction signatures)"
    )


class PredictionServicer(prediction_service_pb2_grpc.PredictionServiceServicer):
    """tensorflow.serving.PredictionService."""

    def __init__(self, core: ServingCore):
        self._core = core

    @_handles_errors
    @_counted("Predict")
    def Predict(self, request, context):
        return self._core.predict(
            request, deadline=_deadline_of(context), when_caller_gone=context.add_callback
        )

    @_handles_errors
    def GetModelMetadata(self, request, context):
        return self._core.get_model_metadata(request)

    @_handles_errors
    @_counted("Classify")
    def Classify(self, request, context):
        self._check_classify_or_regress(request, "classify")

    @_handles_errors
    @_counted("Regress")
    def Regress(self, request, context):
        self._check_classify_or_regress(request, "regress")

    def _check_classify_or_regress(self, request, api: str) -> None:
        if not request.HasField("model_spec"):
            raise errors.invalid_argument("Missing ModelSpec")
        self._core.check_classify_or_regress(
            request.model_spec, request.model_spec.signature_name or None, api
        )

    @_handles_errors
    def MultiInference(self, request, context):
        raise _unimplemented("MultiInference")


class ModelServicer(model_service_pb2_grpc.ModelServiceServicer):
    """tensorflow.serving.ModelService."""

    def __init__(self, core: ServingCore):
        self._core = core

    @_handles_errors
    def GetModelStatus(self, request, context):
        return self._core.get_model_status(request)

    @_handles_errors
    def HandleReloadConfigRequest(self, request, context):
        return self._core.reload_config(request)


def add_services(server: grpc.Server, core: ServingCore) -> None:
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        PredictionServicer(core), server
    )
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelServicer(core), server)
