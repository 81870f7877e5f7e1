"""Predict semantics of TF Serving (predict_util.cc) on top of a Servable.

`check_predict` performs TF Serving's checks with its messages (signature lookup, input
count, input aliases, tensor parsing, output filter, then the dtype error Session::Run would
raise) on the request's protos, before any tensor is made; `decode_predict` then makes the
tensors (`prepare_predict` does both), and `make_predict_response` fills the response the same
way (model_spec with the served version and signature, outputs as typed proto fields).

What TF Serving checks while it makes the tensors (their header: dtype set, dimensions not
negative, count within int64) is checked in its place; the dtype that TF Serving's
Session::Run refuses only after the tensors are made is refused before, with the same message:
making them first let a 42-byte request for a float tensor of two billion elements take
7.2 GiB before it was refused.
"""

import dataclasses
import logging
import threading
import time

import numpy as np
from tensorflow_serving.apis import predict_pb2

from serving.model_server import errors
from serving.model_server.batching import CALLER_GONE_MESSAGE, batch_size_of, concatenate_rows
from serving.model_server.servable import Servable, read_warmup_requests
from serving.model_server.tensors import (
    check_allocatable,
    check_input_shape,
    dtype_name,
    ndarray_to_tensor_proto,
    tensor_num_elements,
    tensor_proto_to_ndarray,
)

logger = logging.getLogger("serving.predict")

DEFAULT_SERVING_SIGNATURE_DEF_KEY = "serving_default"


@dataclasses.dataclass(frozen=True)
class CheckedPredict:
    """A Predict request whose checks passed, its tensors not yet made.

    Attributes:
        signature_name: resolved signature key (default `serving_default`).
        input_protos: the request's input TensorProtos by alias.
        output_aliases: outputs to return, in request order (all outputs, sorted,
            when the request has no output_filter).
    """

    signature_name: str
    input_protos: dict
    output_aliases: list[str]

    def decoded_bytes(self) -> int:
        """What the inputs will take once made (`tensors.decoded_bytes`), counted before.

        Raises:
            ServingError: INVALID_ARGUMENT "tensor parsing error: <alias>" for a tensor that
                the memory left cannot hold (`tensors.check_allocatable`), as TF Serving's
                allocation fails.
        """
        return sum(check_allocatable(proto, alias) for alias, proto in self.input_protos.items())


@dataclasses.dataclass(frozen=True)
class PreparedPredict:
    """A validated Predict request, ready to run.

    Attributes:
        signature_name: resolved signature key (default `serving_default`).
        inputs: decoded input arrays by alias.
        output_aliases: outputs to return, in request order (all outputs, sorted,
            when the request has no output_filter).
    """

    signature_name: str
    inputs: dict[str, np.ndarray]
    output_aliases: list[str]


def prepare_predict(servable: Servable, request: predict_pb2.PredictRequest) -> PreparedPredict:
    """`check_predict`, then `decode_predict`: the request checked and its tensors made."""
    return decode_predict(check_predict(servable, request))


def decode_predict(checked: CheckedPredict) -> PreparedPredict:
    """Makes a checked request's tensors (`tensors.tensor_proto_to_ndarray`).

    Raises:
        ServingError: INVALID_ARGUMENT "tensor parsing error: <alias>" for a tensor that
            cannot be made (a tensor_content of the wrong size, more than memory holds).
    """
    inputs = {
        alias: tensor_proto_to_ndarray(proto, alias)
        for alias, proto in checked.input_protos.items()
    }
    return PreparedPredict(checked.signature_name, inputs, checked.output_aliases)


def check_predict(servable: Servable, request: predict_pb2.PredictRequest) -> CheckedPredict:
    """Validates a PredictRequest against the servable's SignatureDef, before any tensor is
    made (see the module docstring for the order).

    As in TF Serving, the signature's method_name is not checked (the real server's
    --enable_signature_method_name_check defaults to false). Unlike TF Serving, whose
    Session::Run feeds a tensor of any shape and lets the model decide, an input's shape
    is checked against the signature's before TensorFlow sees it (`check_input_shape`):
    a feed of more than `MAX_FEED_RANK` dimensions crashes Python's Session.run.

    Raises:
        ServingError: FAILED_PRECONDITION for an unknown signature, INVALID_ARGUMENT
            for wrong/missing inputs, shapes the signature does not accept, malformed tensor
            headers, wrong dtypes, bad output filters and signatures that are not functions
            (`__saved_model_init_op`).
    """
    signature_name = request.model_spec.signature_name or DEFAULT_SERVING_SIGNATURE_DEF_KEY
    signature = servable.signature_defs.get(signature_name)
    if signature is None:
        raise errors.failed_precondition(
            f'Serving signature key "{errors.quote(signature_name)}" not found.'
        )

    request_inputs, signature_inputs = sorted(request.inputs), sorted(signature.inputs)
    if len(request_inputs) != len(signature_inputs):
        extra = sorted(set(request_inputs) - set(signature_inputs))
        missing = sorted(set(signature_inputs) - set(request_inputs))
        raise errors.invalid_argument(
            f"input size does not match signature: {len(request_inputs)}!={len(signature_inputs)} "
            f"len({{{errors.quote(','.join(request_inputs))}}}) != "
            f"len({{{','.join(signature_inputs)}}}). "
            f"Sent extra: {{{errors.quote(','.join(extra))}}}. "
            f"Missing but required: {{{','.join(missing)}}}."
        )
    for alias in request_inputs:
        if alias not in signature.inputs:
            raise errors.invalid_argument(
                f"input tensor alias not found in signature: {errors.quote(alias)}. Inputs "
                "expected to be in "
                f"the set {{{','.join(signature_inputs)}}}."
            )
        check_input_shape(alias, request.inputs[alias], signature.inputs[alias])
        tensor_num_elements(request.inputs[alias], alias)

    output_aliases = []
    for alias in request.output_filter:
        if alias not in signature.outputs:
            raise errors.invalid_argument(
                f"output tensor alias not found in signature: {errors.quote(alias)} Outputs "
                "expected to be in "
                f"the set {{{','.join(sorted(signature.outputs))}}}."
            )
        if alias in output_aliases:
            raise errors.invalid_argument(f"duplicate output tensor alias: {errors.quote(alias)}")
        output_aliases.append(alias)
    if not output_aliases:
        output_aliases = sorted(signature.outputs)

    # What Session::Run reports for a feed of the wrong type.
    for index, alias in enumerate(request_inputs):
        expected, provided = signature.inputs[alias].dtype, request.inputs[alias].dtype
        if expected != provided:
            raise errors.invalid_argument(
                f"Expects arg[{index}] to be {dtype_name(expected)} but {dtype_name(provided)} "
                "is provided"
            )
    if not servable.runnable(signature_name):
        raise errors.invalid_argument(
            f'Signature "{signature_name}" is not a function of the SavedModel and cannot be '
            "run by Predict"
        )
    input_protos = {alias: request.inputs[alias] for alias in request_inputs}
    return CheckedPredict(signature_name, input_protos, output_aliases)


def make_predict_response(
    request: predict_pb2.PredictRequest,
    servable: Servable,
    prepared: PreparedPredict,
    outputs: dict[str, np.ndarray],
) -> predict_pb2.PredictResponse:
    """Builds the PredictResponse: model_spec (name, served version, signature) and outputs."""
    response = predict_pb2.PredictResponse()
    response.model_spec.name = request.model_spec.name
    response.model_spec.version.value = servable.version
    response.model_spec.signature_name = prepared.signature_name
    for alias in prepared.output_aliases:
        response.outputs[alias].CopyFrom(ndarray_to_tensor_proto(outputs[alias]))
    return response


def run_warmup(servable: Servable, num_request_iterations: int = 1) -> int:
    """Replays the version's warmup requests directly on it (before it serves).

    Args:
        servable: the freshly loaded version.
        num_request_iterations: times each request is replayed.

    Returns:
        Number of warmup records read.

    Raises:
        ServingError: an unreadable warmup file or a failing
            request; the load then fails, as in TF Serving.
    """
    start = time.monotonic()
    requests = read_warmup_requests(servable.export_dir)
    for request in requests:
        prepared = prepare_predict(servable, request)
        for _ in range(max(num_request_iterations, 1)):
            servable.run(prepared.signature_name, prepared.inputs, prepared.output_aliases)
    if requests:
        logger.info(
            "Finished reading warmup data for model at %s/assets.extra/"
            "tf_serving_warmup_requests. Number of warmup records read: %d. "
            "Elapsed time (microseconds): %d.",
            servable.export_dir,
            len(requests),
            int((time.monotonic() - start) * 1e6),
        )
    return len(requests)


def check_deadline(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() >= deadline:
        raise errors.deadline_exceeded("Deadline Exceeded")


def check_string_sizes(checked: CheckedPredict, max_string_bytes: int) -> None:
    """Refuses, before any tensor is made, a request holding a string longer than
    `max_string_bytes`.

    A model's memory can grow with the square of a string's length: the translator builds
    [1, T, T] masks over a source's T tokens before cutting it to its positional encodings,
    and one 1 MiB string asked for 64 GiB. The strings are read in the request as sent, each
    once (one string padded to a hundred million rows is one string to check).

    Args:
        checked: the checked request.
        max_string_bytes: longest string accepted; <= 0 accepts any.

    Raises:
        ServingError: INVALID_ARGUMENT naming the input, the string's size and the limit.
    """
    if max_string_bytes <= 0:
        return
    for alias, proto in checked.input_protos.items():
        longest = max(map(len, proto.string_val), default=0)
        if longest > max_string_bytes:
            raise errors.invalid_argument(
                f"input tensor {alias} holds a string of {longest} bytes, more than the "
                f"{max_string_bytes} this server accepts (--max_input_string_bytes)"
            )


def request_rows(checked: CheckedPredict) -> int:
    """The most rows (0th dimension) of a checked request's inputs, read from their shapes
    before any tensor is made; 0 when every input is a scalar."""
    return max(
        (
            proto.tensor_shape.dim[0].size
            for proto in checked.input_protos.values()
            if proto.tensor_shape.dim
        ),
        default=0,
    )


def check_rows(rows: int, max_rows: int) -> None:
    """Refuses, before any tensor is made, a request of more than `max_rows` rows.

    A row costs a model run its share, whatever its inputs take: one string padded to
    2*10^7 rows (38 bytes on the wire) fitted the memory budget and kept the server's cores
    busy until its deadline.

    Args:
        rows: the request's rows (`request_rows`).
        max_rows: most rows accepted; <= 0 accepts any.

    Raises:
        ServingError: INVALID_ARGUMENT naming the rows and the limit.
    """
    if 0 < max_rows < rows:
        raise errors.invalid_argument(
            f"the request has {rows} rows, more than the {max_rows} this server accepts in one "
            "request (--max_rows_per_request): send them in smaller requests"
        )


def run_in_pieces(
    servable: Servable,
    prepared: PreparedPredict,
    max_rows_per_run: int,
    deadline: float | None = None,
    caller_gone: threading.Event | None = None,
) -> dict[str, np.ndarray]:
    """Runs a request as runs of at most `max_rows_per_run` rows, stopping between them once
    its deadline has passed or its caller has gone.

    A Session run's deadline (`RunOptions.timeout_in_ms`) stops it between operations, not
    inside one and not while TensorFlow prepares a run it has not made before: the first
    3,000-sentence call in a fresh process answered DEADLINE_EXCEEDED 22 s past a 2 s
    deadline. A client's cancellation does not reach a run at all, and a run's memory follows
    its rows. Pieces bound all three, as batching's `max_execution_batch_size` does. Their outputs are joined along dimension 0
    (`batching.concatenate_rows`), which assumes rows are independent, as batching does.

    Args:
        servable: the version to run.
        prepared: the validated request.
        max_rows_per_run: rows per run; <= 0 runs the request whole (TF Serving's way), and so
            does a request whose inputs have no common 0th dimension.
        deadline: `time.monotonic()` value; each run is aborted at it too.
        caller_gone: set once nobody waits for the answer any more.

    Raises:
        ServingError: DEADLINE_EXCEEDED, CANCELLED (the caller went away between pieces), or
            what a run raised.
    """
    inputs = prepared.inputs
    try:
        rows = batch_size_of(inputs)
    except errors.ServingError:  # A scalar input, or inputs of different lengths.
        rows = 0
    if max_rows_per_run <= 0 or rows <= max_rows_per_run:
        return servable.run(prepared.signature_name, inputs, prepared.output_aliases, deadline)
    parts = []
    for start in range(0, rows, max_rows_per_run):
        check_deadline(deadline)
        if caller_gone is not None and caller_gone.is_set():
            raise errors.cancelled(CALLER_GONE_MESSAGE)
        piece = {alias: array[start : start + max_rows_per_run] for alias, array in inputs.items()}
        parts.append(
            servable.run(prepared.signature_name, piece, prepared.output_aliases, deadline)
        )
    return concatenate_rows(parts)
