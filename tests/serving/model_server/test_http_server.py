"""Tests of serving/model_server/http_server.py, the REST API's HTTP/1.1 transport, with raw
sockets on 127.0.0.1: framing (chunked bodies, Content-Length, HEAD, keep-alive), the limits
on heads, bodies and trailers, strict parsing (RFC 9112), and clients that are slow, silent
or hostile, alongside a good client that must keep being served.
"""

import concurrent.futures
import contextlib
import gzip
import json
import logging
import os
import socket
import threading
import time

import psutil
import pytest

from serving.model_server.errors import MAX_QUOTED_CHARS
from serving.model_server.http_server import (
    FAIR_SHARE_OF_BUDGET,
    MAX_GZIP_BODY_BYTES,
    MAX_REQUEST_HEAD_BYTES,
    HttpServer,
)
from serving.model_server.memory_budget import RequestMemoryBudget
from serving.model_server.rest_api import RestApi
from tests.model_server_fixtures import (
    SENTENCES,
    chunked,
    http,
    json_error,
    listen_backlog,
    raw_predict,
    read_until_closed,
    start_server,
)
from tests.serving_fixtures import (
    ENDLESS_STEPS,
    MODEL_NAME,
    ServerProcess,
    cpu_seconds_during,
    expected_greedy,
    expected_greedy_score,
    loop_model_base,
    make_model_base,
    texts_request,
    wait_for,
)


def test_rest_accepts_chunked_bodies_within_the_size_limit(rest_server):
    port = rest_server.server.rest_port
    body = json.dumps({"instances": SENTENCES}).encode()
    status, payload = raw_predict(port, chunked(body, 7), b"Transfer-Encoding: chunked")
    assert status == 200
    assert json.loads(payload)["predictions"] == [
        {"score": expected_greedy_score(s), "translation": expected_greedy(s, 1)} for s in SENTENCES
    ]

    too_big = json.dumps({"instances": ["x" * 70_000]}).encode()
    status, payload = raw_predict(port, chunked(too_big, 8192), b"Transfer-Encoding: chunked")
    assert status == 429
    assert "larger than the limit of 65536 bytes" in json.loads(payload)["error"]


@pytest.mark.parametrize("length", [b"-1", b"abc", b"+12", b"1_0", b""])
def test_rest_refuses_a_content_length_that_is_not_a_byte_count(rest_server, length):
    """A negative length once bypassed the size limit and read to the end of the stream."""
    body = json.dumps({"instances": ["x" * 100_000]}).encode()  # Over the 64 KiB limit.
    status, _ = raw_predict(rest_server.server.rest_port, body, b"Content-Length: " + length)
    assert status == 400


def test_rest_refuses_a_request_head_over_the_limit_before_buffering_it(rest_server):
    """Headers are read up to MAX_REQUEST_HEAD_BYTES (TF Serving has no limit: 64 MB headers
    were buffered whole), then refused with 431; headers within the limit are served."""
    port = rest_server.server.rest_port
    body = json.dumps({"instances": ["fits"]}).encode()
    status, payload = raw_predict(
        port, body, b"X-A: " + b"a" * 32_000 + b"\r\nContent-Length: %d" % len(body)
    )
    assert (status, json.loads(payload)["predictions"][0]["translation"]) == (
        200,
        expected_greedy("fits", 1),
    )
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        try:  # The server stops reading at the limit: the rest of the header may not go out.
            connection.sendall(
                b"GET /v1/models/translator HTTP/1.1\r\nHost: test\r\nX-A: "
                + b"a" * (8 * MAX_REQUEST_HEAD_BYTES)
                + b"\r\n\r\n"
            )
        except (BrokenPipeError, ConnectionResetError):
            pass
        head, _, payload = read_until_closed(connection).partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"HTTP/1.1 431 Request Header Fields Too Large"
    assert json_error(payload) == (
        f"The request line and headers are larger than the limit of {MAX_REQUEST_HEAD_BYTES} bytes"
    )


def test_rest_refuses_chunk_sizes_beyond_int64_or_the_body_limit_before_reading(rest_server):
    """A chunk size that overflows int64 is malformed (it was an OverflowError: 500 with an
    empty body); one over the limit is refused before its bytes are read or allocated."""
    port = rest_server.server.rest_port
    status, payload = raw_predict(
        port, b"ffffffffffffffff\r\nabc\r\n0\r\n\r\n", b"Transfer-Encoding: chunked"
    )
    assert (status, json_error(payload)) == (
        400,
        "Malformed chunked request body: bad chunk size b'ffffffffffffffff'",
    )
    status, payload = raw_predict(port, b"7fffffff\r\nabc", b"Transfer-Encoding: chunked")
    assert (status, json_error(payload)) == (
        429,
        "Request body of more than 65536 bytes is larger than the limit of 65536 bytes",
    )


def test_rest_answers_head_without_a_body_and_keeps_the_connection_in_step(main_server):
    """TF Serving answers HEAD "Malformed request" (400) with the headers alone; a body
    after them was read as the start of the next response on the connection."""
    error = json.dumps({"error": "Malformed request: HEAD /v1/models/translator"}).encode()
    with socket.create_connection(
        ("127.0.0.1", main_server.server.rest_port), timeout=30
    ) as client:
        client.sendall(
            b"HEAD /v1/models/translator HTTP/1.1\r\nHost: test\r\n\r\n"
            b"GET /v1/models/translator HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
        )
        head_response, _, rest = read_until_closed(client).partition(b"\r\n\r\n")
    head_lines = head_response.split(b"\r\n")
    assert head_lines[0] == b"HTTP/1.1 400 Bad Request"
    assert b"Content-Length: %d" % len(error) in head_lines
    get_head, _, payload = rest.partition(b"\r\n\r\n")
    assert get_head.split(b"\r\n")[0] == b"HTTP/1.1 200 OK"
    assert json.loads(payload)["model_version_status"][0]["version"] == "2"


def test_rest_refuses_two_different_content_lengths(rest_server):
    """Which one frames the body is ambiguous (request smuggling): the last one used to win."""
    body = json.dumps({"instances": ["a b c"]}).encode()  # 24 bytes.
    status, payload = raw_predict(
        rest_server.server.rest_port, body, b"Content-Length: 5\r\nContent-Length: 24"
    )
    assert (status, json_error(payload)) == (400, "Content-Length is given twice, as '5' and '24'")
    status, payload = raw_predict(
        rest_server.server.rest_port, body, b"Content-Length: 24\r\nContent-Length: 24"
    )
    assert (status, json.loads(payload)["predictions"][0]["translation"]) == (
        200,
        expected_greedy("a b c", 1),
    )


def peak_virtual_memory_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmPeak:"):
                return int(line.split()[1]) * 1024
    raise LookupError("no VmPeak in /proc/self/status")


def test_rest_reads_a_body_as_it_arrives_not_as_announced(main_server):
    """A 2 GB Content-Length (under the default limit, as in TF Serving) reserved 2 GB for
    the body before any byte came; the body is now read in pieces. (A 2 GB body is now refused
    by the memory budget before it is read: 900 MB fits in it.)"""
    peak_before = peak_virtual_memory_bytes()
    with socket.create_connection(
        ("127.0.0.1", main_server.server.rest_port), timeout=30
    ) as client:
        client.sendall(
            b"POST /v1/models/translator:predict HTTP/1.1\r\nHost: test\r\n"
            b"Content-Length: 900000000\r\n\r\n" + b'{"instances": '
        )
        client.shutdown(socket.SHUT_WR)
        head, _, payload = read_until_closed(client).partition(b"\r\n\r\n")
    assert (head.split(b"\r\n")[0], json_error(payload)) == (
        b"HTTP/1.1 400 Bad Request",
        "Request body ended after 14 of 900000000 bytes",
    )
    assert peak_virtual_memory_bytes() - peak_before < 2**28


def test_rest_closes_stalled_connections_after_the_read_timeout(rest_server):
    """Stalled clients (half a body, or nothing at all) are disconnected, 408 when a request
    was under way; the server keeps answering the others."""
    port = rest_server.server.rest_port
    half_bodies = [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in range(20)]
    silent = [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in range(5)]
    try:
        for connection in half_bodies:
            connection.sendall(
                b"POST /v1/models/translator:predict HTTP/1.1\r\nHost: test\r\n"
                b"Content-Length: 50\r\n\r\nabcd"
            )
        status, payload = raw_predict(
            port, b'{"instances": ["still served"]}', b"Content-Length: 31"
        )
        assert (status, json.loads(payload)["predictions"][0]["translation"]) == (
            200,
            expected_greedy("still served", 1),
        )
        assert [read_until_closed(c).split(b"\r\n")[0] for c in half_bodies] == [
            b"HTTP/1.1 408 Request Timeout"
        ] * 20
        assert {read_until_closed(c).split(b"\r\n")[0] for c in silent} <= {
            b"",
            b"HTTP/1.1 408 Request Timeout",
        }
    finally:
        for connection in half_bodies + silent:
            connection.close()


def open_file_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_idle_and_slow_rest_clients_hold_no_request_thread(main_server):
    """Connections that are silent or send their request head a byte at a time wait in the
    event loop, not in a request thread: 100 of them starved a 4-thread server (cheroot gave
    each one a thread until the read timeout), and a head sent a byte at a time was never cut
    off. A request head must now be complete within the read timeout."""
    baseline_threads, baseline_fds = threading.active_count(), open_file_descriptors()
    server = HttpServer(
        ("127.0.0.1", 0),
        RestApi(main_server.server.core, timeout_seconds=None),
        num_threads=2,
        max_body_bytes=1 << 20,
        read_timeout_seconds=3,
    )
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    port = server.server_address[1]
    idle = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(100)]
    slow = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(30)]
    try:
        for connection in slow:
            connection.sendall(b"GET /v1/models/translator HTTP/1.1\r\nHost: te")
        status, body = http("GET", f"http://127.0.0.1:{port}/v1/models/translator")
        assert (status, body["model_version_status"][0]["version"]) == (200, "2")

        # A client that keeps sending one more header byte is cut off once the read timeout
        # has passed since its head began (the pause between bytes is the wait for the close).
        trickle = slow[0]
        trickle.settimeout(0.2)
        started = time.monotonic()
        while time.monotonic() - started < 20:
            try:
                if trickle.recv(1024) == b"":
                    break
            except TimeoutError:
                trickle.send(b"s")
        assert time.monotonic() - started < 20, "the server kept reading a never-ending head"
        assert threading.active_count() <= baseline_threads + 4 + 2  # Pool, selector, 503s.
    finally:
        for connection in idle + slow:
            connection.close()
        server.stop(grace_seconds=1)
        serving.join(timeout=30)
    wait_for(
        lambda: open_file_descriptors() <= baseline_fds,
        "the server to close its side of the connections",
    )
    wait_for(lambda: threading.active_count() <= baseline_threads, "the server's threads to end")


def test_a_free_rest_port_is_bound_again_while_its_old_connections_linger(main_server):
    """A server on a free REST port, killed or stopped while a client keeps its connection
    open, left that connection on the port, and a restart on the same port failed with
    "Address already in use": the socket lacked SO_REUSEADDR (cheroot sets it only for a
    given port)."""

    def rest_server(port):
        server = HttpServer(
            ("127.0.0.1", port),
            RestApi(main_server.server.core, timeout_seconds=None),
            num_threads=1,
            max_body_bytes=1 << 20,
        )
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        return server, thread

    first, first_thread = rest_server(0)
    port = first.server_address[1]
    lingering = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        lingering.sendall(b"GET /v1/models/translator HTTP/1.1\r\nHost: test\r\n\r\n")
        assert lingering.recv(12) == b"HTTP/1.1 200"  # Accepted, and kept alive.
        first.stop(grace_seconds=1)
        first_thread.join(timeout=30)
        second, second_thread = rest_server(port)
        try:
            status, _ = http("GET", f"http://127.0.0.1:{port}/v1/models/translator")
            assert status == 200
        finally:
            second.stop(grace_seconds=1)
            second_thread.join(timeout=30)
    finally:
        lingering.close()


def test_rest_listens_with_the_systems_full_backlog(rest_server):
    with open("/proc/sys/net/core/somaxconn") as limit_file:
        system_limit = int(limit_file.read())
    assert listen_backlog(rest_server.server.rest_port) == min(socket.SOMAXCONN, system_limit)


# ------------------------------------------------- hostile clients (issue 46's third round)

GOOD_BODY = json.dumps({"instances": ["a b c"]}).encode()  # 24 bytes.


def open_post(port: int, head_lines: bytes, body_start: bytes = b"") -> socket.socket:
    """A connection that sent a POST :predict head with `head_lines`, then `body_start`."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=60)
    connection.sendall(
        b"POST /v1/models/translator:predict HTTP/1.1\r\nHost: test\r\n"
        + head_lines
        + b"\r\n"
        + body_start
    )
    return connection


def send_ignoring_a_close(connection: socket.socket, data: bytes) -> None:
    """Sends what it can of `data`: the server may answer and close before reading it all."""
    try:
        connection.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass


def status_and_error(response: bytes) -> tuple[bytes, str]:
    """(status line, the JSON error message) of one refusal."""
    head, _, payload = response.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0], json_error(payload)


def test_slow_request_bodies_hold_no_thread_and_starve_no_other_client(main_server):
    """200 clients that sent a head announcing a large body, then one byte, held each one of
    the 64 I/O threads for the read timeout (30 s here): no other REST request was answered.
    A connection now costs no thread while its body arrives."""
    port, baseline_threads = main_server.server.rest_port, threading.active_count()
    slow = [open_post(port, b"Content-Length: 1000000\r\n", b"{") for _ in range(200)]
    try:
        status, body = http("GET", f"http://127.0.0.1:{port}/v1/models/translator")
        assert (status, body["model_version_status"][0]["version"]) == (200, "2")
        status, payload = raw_predict(port, GOOD_BODY, b"Content-Length: 24", timeout=10)
        assert (status, json.loads(payload)["predictions"][0]["translation"]) == (
            200,
            expected_greedy("a b c", 2),
        )
        assert threading.active_count() < baseline_threads + 20
    finally:
        for connection in slow:
            connection.close()


@contextlib.contextmanager
def serving_http(core, **options):
    """An HttpServer of the REST API over `core`, on a free port, serving in a thread."""
    server = HttpServer(
        ("127.0.0.1", 0), RestApi(core, timeout_seconds=None), max_body_bytes=1 << 20, **options
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stop(grace_seconds=1)
        thread.join(timeout=30)


def send_until_answered(connection, piece, every_seconds, limit_seconds=60):
    """`(what the server answered, seconds until it closed)`: sends `piece` of a body every
    `every_seconds` until the server answers and closes (or `limit_seconds`); closes it."""
    connection.settimeout(every_seconds)
    started, response = time.monotonic(), b""
    try:
        while time.monotonic() - started < limit_seconds:
            try:
                chunk = connection.recv(4096)
            except TimeoutError:
                send_ignoring_a_close(connection, piece)
                continue
            if not chunk:
                break
            response += chunk
    finally:
        connection.close()
    return response, time.monotonic() - started


def test_a_body_slower_than_the_minimum_rate_is_cut_off_with_408(main_server):
    """A body trickling a byte every 0.2 s never let a read time out (3 s here), so it held
    its connection for as long as its Content-Length allowed; past its first read timeout a
    body must average MIN_BODY_BYTES_PER_SECOND."""
    with serving_http(main_server.server.core, num_threads=1, read_timeout_seconds=3) as server:
        trickle = open_post(server.server_address[1], b"Content-Length: 60000\r\n", b"{")
        response, _ = send_until_answered(trickle, b" ", every_seconds=0.2)
    assert status_and_error(response) == (
        b"HTTP/1.1 408 Request Timeout",
        "The request body arrived slower than 1024 bytes a second after its first 3 s",
    )


def test_a_body_that_keeps_the_minimum_rate_is_still_cut_off_at_the_body_deadline(main_server):
    """A body announcing 1 MB that kept above MIN_BODY_BYTES_PER_SECOND (2 KB every 0.5 s)
    held its connection, and its share of the memory budget, for the 8 minutes its length
    allowed: a whole body now has `body_timeout_seconds` (4 s here) from its head."""
    options = {"num_threads": 1, "read_timeout_seconds": 3, "body_timeout_seconds": 4}
    with serving_http(main_server.server.core, **options) as server:
        started = time.monotonic()  # before the head is sent: the server's clock starts later
        steady = open_post(server.server_address[1], b"Content-Length: 1000000\r\n", b"{")
        response, _ = send_until_answered(steady, b" " * 2048, every_seconds=0.5)
        elapsed = time.monotonic() - started
    assert status_and_error(response) == (
        b"HTTP/1.1 408 Request Timeout",
        "The request body did not arrive in full within 4 s",
    )
    # Not the rate's refusal, and not before the body deadline.
    assert elapsed >= 4


def test_empty_lines_before_a_request_count_against_the_head_limit(main_server):
    """Empty lines before a request line are skipped (RFC 9112 2.2), but a flood of them was
    read without end (16 MiB: 12 s of CPU, another client's request timed out): they count
    against MAX_REQUEST_HEAD_BYTES and the flood gets 431."""
    port = main_server.server.rest_port
    with socket.create_connection(("127.0.0.1", port), timeout=60) as flood:
        send_ignoring_a_close(flood, b"\r\n" * (8 * MAX_REQUEST_HEAD_BYTES))
        response = read_until_closed(flood)
    assert status_and_error(response) == (
        b"HTTP/1.1 431 Request Header Fields Too Large",
        f"The request line and headers are larger than the limit of {MAX_REQUEST_HEAD_BYTES} bytes",
    )
    with socket.create_connection(("127.0.0.1", port), timeout=60) as polite:
        polite.sendall(
            b"\r\n\r\nGET /v1/models/translator HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
        assert read_until_closed(polite).startswith(b"HTTP/1.1 200 OK\r\n")


@pytest.mark.parametrize(
    "request_bytes, status_line, message",
    [
        (
            b"GET /v1/models/translator HTTP/9.9\r\nHost: t\r\n\r\n",
            b"HTTP/1.1 505 HTTP Version Not Supported",
            "HTTP/9.9 is not supported: this server speaks HTTP/1.1",
        ),
        (
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            b"HTTP/1.1 505 HTTP Version Not Supported",
            "HTTP/2.0 is not supported: this server speaks HTTP/1.1",
        ),
        (
            b"GET /v1/models/translator HTTP/1.1\nHost: t\n\n",
            b"HTTP/1.1 400 Bad Request",
            "Malformed request head: a line ends in a bare LF, not CRLF",
        ),
        (
            b"GET\t/v1/models/translator\tHTTP/1.1\r\nHost: t\r\n\r\n",
            b"HTTP/1.1 400 Bad Request",
            "Malformed request head: illegal request line",
        ),
        (
            b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: t\r\n\r\n",
            b"HTTP/1.1 431 Request Header Fields Too Large",
            "The request line and headers are larger than the limit of 65536 bytes",
        ),
        (
            b"POST /v1/models/translator:predict HTTP/1.1\r\nHost: t\r\n"
            b"Transfer-Encoding: gzip, chunked\r\n\r\n",
            b"HTTP/1.1 501 Not Implemented",
            "Malformed request head: Only Transfer-Encoding: chunked is supported",
        ),
        # A refusal quoted its offending header whole: 200 of 60 KB added 7.6 MiB of log.
        (
            b"POST /v1/models/translator:predict HTTP/1.1\r\nHost: t\r\n"
            b"Content-Length: "
            + b"1" * 30_000
            + b"\r\nContent-Length: "
            + b"2" * 30_000
            + b"\r\n\r\n",
            b"HTTP/1.1 400 Bad Request",
            f"Content-Length is given twice, as '{'1' * MAX_QUOTED_CHARS}... (30000 characters)'",
        ),
    ],
    ids=[
        "http-9.9",
        "http2-preface",
        "bare-lf",
        "tabs",
        "70-kb-url",
        "gzip-transfer-coding",
        "60-kb-content-lengths",
    ],
)
def test_malformed_request_lines_get_a_json_error_and_one_log_line(
    main_server, caplog, request_bytes, status_line, message
):
    """They got no answer at all, and two tracebacks each in the log."""
    caplog.set_level(logging.INFO)
    with socket.create_connection(
        ("127.0.0.1", main_server.server.rest_port), timeout=60
    ) as client:
        host, port = client.getsockname()
        client_address = f"{host}:{port} "
        send_ignoring_a_close(client, request_bytes)
        got_status, got_message = status_and_error(read_until_closed(client))
    assert got_status == status_line
    assert got_message.startswith(message)
    # The server's log lines about this client (others may still be closing idle ones).
    lines = [record for record in caplog.records if client_address in record.getMessage()]
    assert len(lines) == 1 and message in lines[0].getMessage()
    assert len(lines[0].getMessage()) < 4 * MAX_QUOTED_CHARS
    assert not [record for record in caplog.records if record.exc_info]


@pytest.mark.parametrize(
    "framing, body",
    [
        (b"Transfer-Encoding : chunked", chunked(GOOD_BODY, 8)),
        (b"Content-Length : 24", GOOD_BODY),
        (b"Transfer-Encoding: \x0bchunked", chunked(GOOD_BODY, 8)),
        (b"Content-Length: 24\r\nTransfer-Encoding: chunked", chunked(GOOD_BODY, 8)),
    ],
    ids=["space-before-colon-te", "space-before-colon-cl", "vertical-tab", "cl-and-te"],
)
def test_header_fields_rfc_9112_rejects_are_refused_with_400(main_server, framing, body):
    """Whitespace before a field's colon and control characters in a value must be refused
    (RFC 9112 5.1, 5.5): a proxy that reads them otherwise frames the body differently
    (request smuggling). Each of the first three was answered 200."""
    status, payload = raw_predict(main_server.server.rest_port, body, framing)
    assert status == 400
    assert json_error(payload).startswith(
        ("Malformed request head: illegal header line", "Both Content-Length and")
    )


def test_expect_100_continue_is_refused_before_a_body_over_the_limit(main_server):
    """A 3 GB Content-Length with `Expect: 100-continue` got `100 Continue` (inviting the
    body), then the refusal: the refusal now comes first, and alone."""
    with open_post(
        main_server.server.rest_port,
        b"Content-Length: 3000000000\r\nExpect: 100-continue\r\n",
    ) as client:
        response = read_until_closed(client)
    assert status_and_error(response) == (
        b"HTTP/1.1 429 Too Many Requests",
        "Request body of 3000000000 bytes is larger than the limit of 2147483647 bytes",
    )


def test_a_body_that_finds_the_budget_held_by_others_is_refused_until_they_end(main_server):
    """A body's bytes count against the budget of the requests in flight as they arrive: one
    that finds the budget held by others is refused until they end, announced or chunked."""
    port = main_server.server.rest_port
    budget = main_server.server.core.memory_budget
    framings = (
        (GOOD_BODY, b"Content-Length: %d" % len(GOOD_BODY)),
        (chunked(GOOD_BODY, len(GOOD_BODY)), b"Transfer-Encoding: chunked"),
    )
    with budget.reserve(budget.limit_bytes - len(GOOD_BODY) + 1):
        for body, framing in framings:
            status, payload = raw_predict(port, body, framing)
            assert status == 429 and json_error(payload).endswith("retry later"), payload
    assert budget.held_bytes == 0
    for body, framing in framings:
        status, payload = raw_predict(port, body, framing)
        assert status == 200, payload
    assert budget.held_bytes == 0


def test_a_body_holds_what_has_arrived_up_to_a_fair_share_of_the_budget(exports, tmp_path):
    """A body's announced size was held in the budget before any byte arrived, and for as long
    as the body trickled in: announcing 1 GiB and sending 1.1 KiB/s refused 27,373 good calls
    in 40 s, and so did `Expect: 100-continue` with no body and one chunk-size line of
    40000000. A body now holds the bytes received (chunked framing included), never what it
    announces, and one connection at most a quarter of the budget; good clients beside it are
    served, and each refusal is counted in the metrics."""
    budget_bytes = 2**20
    connection = start_server(
        tmp_path,
        model_name=MODEL_NAME,
        model_base_path=make_model_base(exports, str(tmp_path)),
        rest_api_port=0,
        request_memory_budget_bytes=budget_bytes,
    )
    server = connection.server
    port, budget = server.rest_port, server.core.memory_budget
    fair_share = budget_bytes // FAIR_SHARE_OF_BUDGET
    try:
        for framing, start in (
            (b"Content-Length: %d\r\n" % 2**30, b""),
            (b"Transfer-Encoding: chunked\r\n", b"40000000\r\n"),
        ):
            with open_post(port, framing + b"Expect: 100-continue\r\n") as client:
                assert client.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
                client.sendall(start + b"x" * 1000)
                wait_for(
                    lambda: budget.held_bytes == len(start) + 1000,  # noqa: B023
                    "the body to hold what it sent",
                )
                status, payload = raw_predict(port, GOOD_BODY, b"Content-Length: 24")
                assert status == 200, payload
                response = connection.predict.Predict(texts_request(["a b c"]), timeout=30)
                assert response.outputs["translation"].string_val
                sent = len(start) + 1000
                while sent <= fair_share:
                    send_ignoring_a_close(client, b"x" * 65536)
                    sent += 65536
                response = read_until_closed(client)
            assert status_and_error(response) == (
                b"HTTP/1.1 429 Too Many Requests",
                f"one request's body bytes may take at most {fair_share} bytes of this server's "
                f"budget of {budget_bytes} bytes for the requests in flight "
                "(--request_memory_budget_bytes): send them in smaller requests",
            ), response[:300]
            wait_for(lambda: budget.held_bytes == 0, "the refused body to give its bytes back")
        page = server.metrics.exposition().decode()
        assert ':local:serving:request_memory_budget_refusals{what="body bytes"} 2.0' in page
        assert ":local:serving:request_memory_budget_bytes{" in page
    finally:
        server.stop(grace_seconds=0)


def test_chunked_trailers_are_bounded_by_the_head_limit(main_server):
    """Trailers were read without a bound (200,000 lines, 2.4 MB, answered 200); a few are
    still accepted."""
    port = main_server.server.rest_port
    body = chunked(GOOD_BODY, 8)[: -len(b"\r\n")]  # Up to the last chunk, before the empty line.
    status, payload = raw_predict(port, body + b"X-Check: 1\r\n\r\n", b"Transfer-Encoding: chunked")
    assert (status, json.loads(payload)["predictions"][0]["translation"]) == (
        200,
        expected_greedy("a b c", 2),
    )
    with open_post(port, b"Transfer-Encoding: chunked\r\nConnection: close\r\n") as client:
        send_ignoring_a_close(client, body + b"X-Trailer: 1234567\r\n" * 200_000 + b"\r\n")
        response = read_until_closed(client)
    assert status_and_error(response) == (
        b"HTTP/1.1 431 Request Header Fields Too Large",
        "The chunked body's trailers are larger than the limit of 65536 bytes",
    )


def test_gzip_bodies_are_decompressed_within_tf_servings_limit(main_server):
    """TF Serving decompresses a body whose Content-Encoding names gzip, to at most 10 MiB
    (ZLib::kMaxUncompressedBytes); it was answered 400."""
    port = main_server.server.rest_port
    compressed = gzip.compress(GOOD_BODY)
    status, payload = raw_predict(
        port, compressed, b"Content-Encoding: gzip\r\nContent-Length: %d" % len(compressed)
    )
    assert (status, json.loads(payload)["predictions"][0]["translation"]) == (
        200,
        expected_greedy("a b c", 2),
    )
    bomb = gzip.compress(b" " * (MAX_GZIP_BODY_BYTES + 1))  # About 10 KB.
    status, payload = raw_predict(
        port, bomb, b"Content-Encoding: gzip\r\nContent-Length: %d" % len(bomb)
    )
    assert (status, json_error(payload)) == (
        400,
        "The gzip request body decompresses to more than 10485760 bytes, the limit",
    )
    status, payload = raw_predict(port, GOOD_BODY, b"Content-Encoding: gzip\r\nContent-Length: 24")
    assert status == 400
    assert json_error(payload).startswith("Content-Encoding: gzip, but the body is not gzip")


@pytest.mark.large
def test_a_model_run_in_progress_blocks_neither_the_transport_nor_its_deadline(tmp_path):
    """Requests run in the thread pool, off the event loop: while the only request thread runs
    an endless model call, the transport still reads and answers other clients (here it
    refuses a malformed request line), and the endless call gets its 504 at
    --rest_api_timeout_in_ms, as before."""
    timeout_seconds = 20
    with ServerProcess(
        [
            "--model_name=loop",
            f"--model_base_path={loop_model_base(tmp_path)}",
            "--file_system_poll_wait_seconds=0",
            "--rest_api_num_threads=1",
            f"--rest_api_timeout_in_ms={timeout_seconds * 1000}",
        ],
        rest=True,
    ) as server:
        url = f"http://127.0.0.1:{server.rest_port}/v1/models/loop:predict"
        started = time.monotonic()
        endless = concurrent.futures.ThreadPoolExecutor(1).submit(
            http, "POST", url, {"instances": [ENDLESS_STEPS]}, timeout_seconds + 60
        )
        # A tenth of a core over a second: an idle server uses none, a busy machine still
        # gives the run that much.
        wait_for(
            lambda: cpu_seconds_during(server.process.pid, 1.0) > 0.1,
            "the server to run the endless request",
        )
        with socket.create_connection(("127.0.0.1", server.rest_port), timeout=60) as client:
            client.sendall(b"GET / HTTP/9.9\r\nHost: t\r\n\r\n")
            refusal = read_until_closed(client)
        assert not endless.done(), "the refusal waited for the model run"
        assert refusal.startswith(b"HTTP/1.1 505 ")
        status, body = endless.result(timeout=timeout_seconds + 60)
    assert status == 504, body
    assert time.monotonic() - started >= timeout_seconds


def test_http_1_0_clients_keep_a_connection_only_when_they_ask(main_server):
    """HTTP/1.0 keeps a connection open only with `Connection: keep-alive`, and then the answer
    says so (a 1.0 client waits for the close otherwise); without it the server closes."""
    port = main_server.server.rest_port
    status_request = b"GET /v1/models/translator HTTP/1.0\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=60) as client:
        client.sendall(
            status_request + b"Connection: keep-alive\r\n\r\n" + status_request + b"\r\n"
        )
        first, second = read_until_closed(client).split(b"HTTP/1.1 200 OK\r\n")[1:]
    assert b"Connection: keep-alive" in first.partition(b"\r\n\r\n")[0].split(b"\r\n")
    assert b"Connection: close" in second.partition(b"\r\n\r\n")[0].split(b"\r\n")
    assert json.loads(second.partition(b"\r\n\r\n")[2])["model_version_status"][0]["version"] == "2"


class _StuckHandler:
    """A REST handler whose every request runs until `release` is set (a model run that no
    timeout stops between its operations), recording the deadline it was given."""

    def __init__(self):
        self.release, self.started, self.deadlines = threading.Event(), threading.Event(), []

    def accepts(self, path: str) -> bool:
        return True

    def handle(self, method: str, path: str, body: bytes, deadline=None):
        self.deadlines.append(deadline)
        self.started.set()
        self.release.wait(60)
        return 200, b'{"late": true}', "application/json"


@contextlib.contextmanager
def stuck_server(memory_budget: RequestMemoryBudget | None = None):
    """An HttpServer over a `_StuckHandler` with a 1 s answer deadline: (server, handler); the
    handler is released and the server stopped after the block."""
    handler = _StuckHandler()
    server = HttpServer(
        ("127.0.0.1", 0),
        handler,
        num_threads=2,
        max_body_bytes=1 << 20,
        memory_budget=memory_budget,
        answer_timeout_seconds=1,
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, handler
    finally:
        handler.release.set()
        server.stop(grace_seconds=1)
        thread.join(timeout=30)


def read_head(client: socket.socket) -> bytes:
    """What the server sends up to the end of its first answer's head."""
    head = b""
    while b"\r\n\r\n" not in head:
        head += client.recv(4096)
    return head


def test_the_rest_deadline_is_answered_at_the_deadline_while_the_run_goes_on():
    """With --rest_api_timeout_in_ms=2000, a beam_search call of 600 sentences was answered
    504 after 8.5-9.5 s, when its run ended, where gRPC's client had its DEADLINE_EXCEEDED at
    2.00 s: the transport now answers 504 at the deadline it gave the handler (the run stops
    before its next piece), whatever the handler is doing, and serves the connection on."""
    with stuck_server() as (server, handler):
        with socket.create_connection(server.server_address, timeout=30) as client:
            started = time.monotonic()
            client.sendall(b"GET /v1/models/stuck HTTP/1.1\r\nHost: t\r\n\r\n")
            handler.started.wait(30)
            head = read_head(client)
            answered = time.monotonic() - started
            assert head.startswith(b"HTTP/1.1 504 Gateway Timeout\r\n"), head
            assert 1 <= answered < 10, answered
            # Set once the request was read, one timeout ahead; answered when it passed.
            assert started + 1 <= handler.deadlines[0] <= started + answered


def test_a_body_stays_held_in_the_budget_past_its_504_until_its_run_ends():
    """At the REST deadline the 504 gave the body's bytes back to the budget while the
    handler, still running, held the body: the budget counted less than the process held. They
    are now given back when the handler returns."""
    budget = RequestMemoryBudget(1 << 20)
    body = b"x" * 1000
    with stuck_server(budget) as (server, handler):
        with socket.create_connection(server.server_address, timeout=30) as client:
            client.sendall(
                b"POST /v1/models/stuck:predict HTTP/1.1\r\nHost: t\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            assert read_head(client).startswith(b"HTTP/1.1 504 Gateway Timeout\r\n")
            assert budget.held_bytes >= len(body), "the body was given back at the 504"
            handler.release.set()
            wait_for(lambda: budget.held_bytes == 0, "the body to be given back after its run")


def server_sockets_of(client: socket.socket, port: int) -> list:
    """This process's TCP sockets on `port` whose peer is `client` (the server's end of it)."""
    client_port = client.getsockname()[1]
    return [
        connection
        for connection in psutil.Process().net_connections(kind="tcp")
        if connection.laddr
        and connection.laddr.port == port
        and connection.raddr
        and connection.raddr.port == client_port
    ]


@contextlib.contextmanager
def client_that_never_reads(port: int):
    """A connection that pipelines 3,000 metadata requests, with a 4 KiB receive buffer, and
    reads none of the answers."""
    request = b"GET /v1/models/translator/metadata HTTP/1.1\r\nHost: t\r\n\r\n"
    with socket.socket() as client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.settimeout(30)
        client.connect(("127.0.0.1", port))
        send_ignoring_a_close(client, request * 3000)
        yield client


def test_a_client_that_never_reads_its_answers_is_dropped_with_its_unsent_bytes(rest_server):
    """20 clients that pipelined 3,000 metadata requests and never read kept 20 server sockets
    and a 54.8 MB send queue for as long as they stayed: closing a connection waited for its
    unsent answers to be flushed. A connection whose answer is not taken within the read
    timeout (1 s here) is now closed at once, its unsent bytes dropped (an abortive close)."""
    port = rest_server.server.rest_port
    with client_that_never_reads(port) as client:
        wait_for(
            lambda: not server_sockets_of(client, port),
            "the server to drop the connection that does not read",
            timeout=20,
        )
    status, _ = http("GET", f"{rest_server.rest}/v1/models/translator")
    assert status == 200


def test_an_answer_holds_its_bytes_in_the_budget_until_it_is_sent(rest_server):
    """Five clients that never read a 64 MB answer pinned 439 MB, counted nowhere: an answer's
    bytes are now held in the memory budget (as "answer bytes") until they are sent, and given
    back when a client that does not take them is dropped."""
    budget = rest_server.server.core.memory_budget
    with client_that_never_reads(rest_server.server.rest_port):
        wait_for(lambda: budget.held_bytes > 0, "the unsent answer to be held", interval=0.01)
        wait_for(lambda: budget.held_bytes == 0, "the dropped client's answer to be given back")
