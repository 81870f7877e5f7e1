"""Servers and clients the model server's tests share: in-process servers on free ports, the
official gRPC stubs, and HTTP over urllib or raw sockets on 127.0.0.1.

`start_main_server` and `start_rest_server` build the servers behind tests/conftest.py's
`main_server` and `rest_server` fixtures (one per test module).
"""

import json
import os
import socket
import struct
import urllib.error
import urllib.request

import grpc
import pytest
import tensorflow as tf
from google.protobuf import text_format
from grpc_health.v1 import health_pb2_grpc
from tensorflow_serving.apis import (
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from benchmarks.bench_memory_limit import padded_request
from serving.model_server import config as config_lib
from serving.model_server.server import ModelServer, ServerOptions
from serving.model_server.session_bundle_config_pb2 import BatchingParameters
from tests.serving_fixtures import (
    ENDLESS_STEPS,
    MODEL_NAME,
    REPO_ROOT,
    cpu_seconds_during,
    loop_request,
    make_model_base,
    wait_for,
)

SERVING_DIR = os.path.join(REPO_ROOT, "serving")
SENTENCES = ["hello big world", "the cat sat on the mat", "x", "Ça va bien merci"]
PREDICT_PATH = "/v1/models/translator:predict"


class Connection:
    """Stubs of one server."""

    def __init__(self, server: ModelServer):
        self.server = server
        self.channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        self.predict = prediction_service_pb2_grpc.PredictionServiceStub(self.channel)
        self.models = model_service_pb2_grpc.ModelServiceStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self.rest = f"http://127.0.0.1:{server.rest_port}" if server.rest_port else None


def rpc_error(call, *args, **kwargs) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(*args, timeout=10, **kwargs)
    return info.value


def strings(proto) -> list:
    return [value.decode("utf-8") for value in tf.make_ndarray(proto).reshape(-1)]


def http(method: str, url: str, body=None, timeout: float = 10):
    """(status, parsed JSON or raw text) of one HTTP request; `timeout` bounds each wait."""
    data = (
        None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    )
    request = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, text = response.status, response.read().decode("utf-8")
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read().decode("utf-8")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def read_until_closed(connection: socket.socket) -> bytes:
    """Everything the server sends until it closes (socket.timeout if it never does).

    A server that answers before reading the whole body closes with unread bytes,
    which the kernel signals with a reset after the answer: that too is a close.
    """
    chunks = []
    while True:
        try:
            chunk = connection.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def raw_predict(port: int, body: bytes, framing: bytes, timeout: float = 30) -> tuple:
    """(HTTP status, body bytes) of a POST :predict whose framing headers are given raw."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as connection:
        connection.sendall(
            b"POST /v1/models/translator:predict HTTP/1.1\r\nHost: test\r\n"
            b"Connection: close\r\n" + framing + b"\r\n\r\n" + body
        )
        response = read_until_closed(connection)
    head, _, payload = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1."), f"not an HTTP response: {response[:200]!r}"
    return int(head.split()[1]), payload


def chunked(body: bytes, piece_size: int) -> bytes:
    """`body` in Transfer-Encoding: chunked framing."""
    pieces = [body[start : start + piece_size] for start in range(0, len(body), piece_size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces) + b"0\r\n\r\n"


def listen_backlog(port: int) -> int:
    """Accept-queue limit of the TCP socket listening on `port`, from Linux's sock_diag
    (what `ss -lt` shows as Send-Q)."""
    netlink_sock_diag, sock_diag_by_family, nlmsg_error, nlmsg_done, tcp_listen = 4, 20, 2, 3, 10
    request = struct.pack(
        "=BBBBI", socket.AF_INET, socket.IPPROTO_TCP, 0, 0, 1 << tcp_listen
    ) + bytes(48)  # inet_diag_req_v2, any address.
    header = struct.pack(
        "=IHHII", 16 + len(request), sock_diag_by_family, 0x1 | 0x300, 1, 0
    )  # NLM_F_REQUEST | NLM_F_DUMP
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, netlink_sock_diag) as netlink:
        netlink.sendto(header + request, (0, 0))
        while True:
            data, offset = netlink.recv(1 << 16), 0
            while offset < len(data):
                length, kind = struct.unpack_from("=IH", data, offset)
                if kind in (nlmsg_error, nlmsg_done):
                    raise LookupError(f"no listening socket on port {port}")
                message = offset + 16  # inet_diag_msg: 4 bytes, sockid (sport first), ...
                if struct.unpack_from("!H", data, message + 4)[0] == port:
                    return struct.unpack_from("=I", data, message + 60)[0]  # idiag_wqueue
                offset += (length + 3) & ~3


def start_server(tmp_path, **options) -> Connection:
    """An in-process server on a free port; the base paths are polled once unless told."""
    server = ModelServer(
        ServerOptions(**{"port": 0, "file_system_poll_wait_seconds": 0, **options})
    ).start()
    return Connection(server)


def assert_rest_error(server, method: str, path: str, body, status: int, message: str) -> None:
    """`method path` with `body` answers `status` with an error that contains `message`."""
    got_status, got_body = http(method, server.rest + path, body)
    assert got_status == status, got_body
    assert message in got_body["error"]


def json_error(payload: bytes) -> str:
    return json.loads(payload)["error"]


def start_main_server(exports, root) -> Connection:
    """serving/models.config (base_path rewritten) plus a second model with `all` and labels,
    REST on a free port."""
    config = config_lib.load_model_server_config(os.path.join(SERVING_DIR, "models.config"))
    config.model_config_list.config[0].base_path = make_model_base(exports, str(root), (1, 2))
    extra = config.model_config_list.config.add()
    text_format.Parse(
        """
        name: "translator_all" model_platform: "tensorflow"
        model_version_policy { all {} }
        version_labels { key: "stable" value: 1 }
        version_labels { key: "canary" value: 2 }""",
        extra,
    )
    extra.base_path = make_model_base(exports, str(root), (1, 2), "translator_all")
    config_path = root / "models.config"
    config_path.write_text(text_format.MessageToString(config))
    return start_server(root, model_config_file=str(config_path), rest_api_port=0)


def start_rest_server(exports, root) -> Connection:
    """REST with a 1 s read timeout and a 64 KiB request limit."""
    return start_server(
        root,
        model_name=MODEL_NAME,
        model_base_path=make_model_base(exports, str(root)),
        rest_api_port=0,
        rest_api_read_timeout_seconds=1,
        grpc_channel_arguments="grpc.max_receive_message_length=65536",
    )


def huge_tensor_request(dtype, rows: int, value) -> predict_pb2.PredictRequest:
    """A Predict of a few dozen bytes for `rows` rows of `text` of the toy model: one value,
    padded to the shape as Tensor::FromProto pads a short value list."""
    return padded_request(MODEL_NAME, dtype, rows, value)


def write_batching_file(path, **values) -> str:
    """A batching parameters file (text BatchingParameters) at `path` with `values`; its path."""
    parameters = BatchingParameters()
    for name, value in values.items():
        getattr(parameters, name).value = value
    path.write_text(text_format.MessageToString(parameters))
    return str(path)


def expire_an_endless_call(server):
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
