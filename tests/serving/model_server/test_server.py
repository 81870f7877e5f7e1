"""serving/model_server/server.py: flags, ports and SIGTERM, on real servers over gRPC and HTTP
on 127.0.0.1.

Servers run in-process (one module-wide instance per configuration) or, where the process
itself is under test, as `python -m serving.server`; every server binds port 0 and the tests
read the port it got. Requests use the official tensorflow-serving-api stubs; expected outputs
come from the plain-Python definitions of the toy model in tests/serving_fixtures.py. Tests wait
on server state, never on sleeps.
"""

import concurrent.futures
import signal
import socket

import grpc
import pytest
from tensorflow_serving.apis import (
    get_model_status_pb2,
    model_service_pb2_grpc,
    prediction_service_pb2_grpc,
)

from serving.model_server import config as config_lib
from serving.model_server.server import ModelServer, ServerOptions, parse_flags
from tests.model_server_fixtures import (
    http,
    read_until_closed,
    strings,
    write_batching_file,
)
from tests.serving_fixtures import (
    ENDLESS_STEPS,
    MODEL_NAME,
    ServerProcess,
    cpu_seconds_during,
    expected_greedy,
    loop_model_base,
    loop_request,
    make_model_base,
    texts_request,
    wait_for,
)


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
