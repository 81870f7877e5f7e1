"""serving/model_server/predict.py in a server: deadlines abort a run, inputs of any shape reach
a model whose signature accepts them.

Servers run in-process (one module-wide instance per configuration) or, where the process
itself is under test, as `python -m serving.server`; every server binds port 0 and the tests
read the port it got. Requests use the official tensorflow-serving-api stubs; expected outputs
come from the plain-Python definitions of the toy model in tests/serving_fixtures.py. Tests wait
on server state, never on sleeps.
"""

import tensorflow as tf

from tests.model_server_fixtures import (
    expire_an_endless_call,
    http,
    start_server,
)
from tests.serving_fixtures import (
    ENDLESS_STEPS,
    ServerProcess,
    cpu_seconds_during,
    loop_model_base,
    loop_request,
    texts_request,
)


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
        # At the deadline, whichever comes first names it: the REST server's wait for the
        # answer (TF Serving's "Timed out waiting for notification") or, on a loaded machine,
        # the run stopped by its own deadline (RunOptions: DEADLINE_EXCEEDED).
        status, body = http("POST", url, {"instances": [ENDLESS_STEPS]})
        assert (status, body["error"]) in {
            (504, "Timed out waiting for notification"),
            (504, "Deadline Exceeded"),
        }
        # The answer comes at the deadline, and the run stops at the same deadline (its
        # RunOptions): a moment later, a loaded machine's moment, the server is idle.
        assert any(cpu_seconds_during(server.process.pid, 1.0) < 0.2 for _ in range(5))
        status, body = http("POST", url, {"instances": [100]})
        assert status == 200 and len(body["predictions"]) == 1

        # The client stops waiting at the deadline on its own; the server's run stops then too.
        stub = expire_an_endless_call(server)
        # A call without a deadline runs unbounded (it was an INTERNAL error: gRPC's "no
        # deadline" is a time_remaining() of 292,000 years, too many milliseconds for TF).
        assert stub.Predict(loop_request(100)).outputs["y"].float_val


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
