"""The REST API's HTTP/1.1 transport: event-driven, as TF Serving's http_server (libevent) is.

One asyncio event loop, in one thread, reads and writes every connection, so a connection
costs no thread while it is idle, sends its request slowly or waits for its answer; the
requests themselves run in a pool of `num_threads` threads, so a slow model call never
holds up the transport. h11 parses each request head (RFC 9112, strictly: whitespace
before a header's colon, control characters in a value, a malformed request line are
refused); the framing of the body is read here, so each limit below holds whatever the
client sends:

| limit | the client gets |
| --- | --- |
| request line and headers, and any empty lines before them, over MAX_REQUEST_HEAD_BYTES | 431 |
| a head not complete within `read_timeout_seconds` of when the connection began waiting for it | 408 (nothing when nothing was sent) |
| a malformed request line or header, a bare LF line ending, two different Content-Lengths, both Content-Length and chunked | 400 |
| an HTTP version other than 1.0 and 1.1 (the HTTP/2 preface too) | 505 |
| a Transfer-Encoding other than chunked | 501 |
| a body larger than `max_body_bytes` (announced, or as chunks arrive) | 429, before any of it is read and instead of `100 Continue` |
| a body whose bytes received (chunked framing included, held as they arrive: never what is announced) do not fit in the memory budget of the requests in flight (`memory_budget.RequestMemoryBudget`), or pass 1/FAIR_SHARE_OF_BUDGET of it | 429, once they arrive |
| no body byte for `read_timeout_seconds`, or a body slower than MIN_BODY_BYTES_PER_SECOND after its first `read_timeout_seconds` | 408 |
| a body not complete within `body_timeout_seconds` of its head, however steadily it arrives | 408 |
| an answer whose bytes do not fit in the memory budget (held until they are sent) | 429 instead |
| an answer the client does not take within `read_timeout_seconds` (or answers left unread when an idle connection is closed) | nothing: the connection is reset, its unsent bytes dropped |
| chunked trailers over MAX_REQUEST_HEAD_BYTES; a chunk-size line over MAX_CHUNK_LINE_BYTES | 431; 400 |
| a gzip body (Content-Encoding containing "gzip", as TF Serving) over MAX_GZIP_BODY_BYTES once decompressed, or not gzip | 400 |

Every refusal is TF Serving's `{"error": "<message>"}`, logged in one line, and closes
the connection (the rest of the request was not read), but for a gzip body's, which was
read whole.
"""

import asyncio
import concurrent.futures
import contextlib
import fcntl
import http
import logging
import re
import socket
import struct
import termios
import threading
import time
import urllib.parse
import zlib
from collections.abc import Callable
from typing import Protocol

import h11

from serving.model_server import errors
from serving.model_server.memory_budget import ANSWER, BODY, RequestMemoryBudget

logger = logging.getLogger("serving.http")

# The request line and headers together: TF Serving (libevent) sets no limit, which lets
# one client make the server buffer gigabytes of headers.
MAX_REQUEST_HEAD_BYTES = 64 * 1024
MAX_CHUNK_LINE_BYTES = 4096  # A chunk-size line with its extensions.
# Past its first read timeout a body must average this rate: a client sending a byte a
# second, which no read timeout cuts off, is refused (Apache's mod_reqtimeout MinRate).
MIN_BODY_BYTES_PER_SECOND = 1024
# TF Serving's ZLib::kMaxUncompressedBytes: a gzip body decompresses to at most this.
MAX_GZIP_BODY_BYTES = 10 * 1024 * 1024
# Bytes read from a socket at a time: memory follows what arrives, not what is announced.
_READ_PIECE_BYTES = 1 << 16
# One request's body may hold at most this fraction of the memory budget (1/4): a client
# cannot take what the others need, however fast it sends.
FAIR_SHARE_OF_BUDGET = 4
_LEADING_EMPTY_LINES = re.compile(rb"(?:\r\n)*")
_BARE_LF = re.compile(rb"(?<!\r)\n")
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]+")
_CONTENT_LENGTH_LINE = re.compile(rb"^content-length:[ \t]*(.*?)[ \t]*\r$", re.I | re.M)
_HEADER_FIELD = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[^\r\n]*")
# How long past its deadline a handler may still answer itself (its own 504 names what
# stopped) before the transport answers 504 for it.
_LATE_ANSWER_MARGIN_SECONDS = 0.1
# A stop lets the requests running when its grace period ends this long to answer (the
# server cancels their model runs then, and each answers 499 at once).
_CANCELLED_ANSWER_SECONDS = 1.0


class RequestHandler(Protocol):
    """What the transport serves (rest_api.RestApi)."""

    def accepts(self, path: str) -> bool:
        """Whether `path` has a handler; the others get 404 before their body is read."""

    def handle(
        self, method: str, path: str, body: bytes, deadline: float | None = None
    ) -> tuple[int, bytes, str]:
        """(HTTP status, payload, content type) of one request; never raises. `deadline`
        (`time.monotonic()`): when the transport answers 504 if the handler has not."""


class _Refusal(Exception):
    """A request the transport refuses: answered with `status` and {"error": message}."""

    def __init__(self, status: int, message: str):
        message = errors.bounded_message(message)
        super().__init__(message)
        self.status = status
        self.message = message


class _ClientGone(Exception):
    """The client closed the connection, or went silent between requests."""


class _ClientStalled(_ClientGone):
    """The client did not take an answer within the read timeout."""


def _reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:  # 499, TF Serving's CANCELLED.
        return "Client Closed Request"


def _too_large(limit: int, size_text: str) -> _Refusal:
    # RESOURCE_EXHAUSTED, the code gRPC gives a message over its limit: 429 over REST.
    return _Refusal(
        429, f"Request body of {size_text} bytes is larger than the limit of {limit} bytes"
    )


def _gunzip(body: bytes) -> bytes:
    """A gzip body decompressed, to at most MAX_GZIP_BODY_BYTES.

    Raises:
        _Refusal: 400 when the body is not gzip or decompresses to more.
    """
    decompressor = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        data = decompressor.decompress(body, MAX_GZIP_BODY_BYTES + 1)
    except zlib.error as error:
        raise _Refusal(400, f"Content-Encoding: gzip, but the body is not gzip: {error}") from None
    if len(data) > MAX_GZIP_BODY_BYTES:
        raise _Refusal(
            400,
            f"The gzip request body decompresses to more than {MAX_GZIP_BODY_BYTES} bytes, "
            "the limit",
        )
    if not decompressor.eof:
        raise _Refusal(400, "Content-Encoding: gzip, but the gzip body ends early")
    return data


def _unsent_bytes(writer: asyncio.StreamWriter) -> int:
    """What a connection has written and the client has not received: its transport's buffer
    and its socket's send queue (Linux TIOCOUTQ; 0 where it cannot be read)."""
    unsent = writer.transport.get_write_buffer_size()
    with contextlib.suppress(OSError, AttributeError):
        queued = fcntl.ioctl(writer.get_extra_info("socket").fileno(), termios.TIOCOUTQ, b"\0" * 4)
        unsent += struct.unpack("i", queued)[0]
    return unsent


class _Head:
    """A request line and headers h11 accepted, with the framing they announce."""

    def __init__(self, request: h11.Request):
        self.method = request.method.decode("ascii")
        # The raw target: the REST API decodes model names and labels itself, as TF Serving.
        self.path = urllib.parse.urlsplit(request.target.decode("latin-1")).path
        self.headers = {}
        for name, value in request.headers:  # h11 lowercases names and merges Content-Length.
            self.headers[name] = (
                value if name not in self.headers else self.headers[name] + b", " + value
            )
        tokens = {token.strip() for token in self.headers.get(b"connection", b"").split(b",")}
        # HTTP/1.0 keeps a connection only when asked to, and must be told it was kept.
        self.http_1_0 = request.http_version == b"1.0"
        self.keep_alive = b"keep-alive" in tokens if self.http_1_0 else b"close" not in tokens
        self.expects_continue = (
            request.http_version == b"1.1"
            and self.headers.get(b"expect", b"").lower() == b"100-continue"
        )
        self.chunked = b"transfer-encoding" in self.headers
        self.gzip = b"gzip" in self.headers.get(b"content-encoding", b"")


def _parse_head(head: bytes) -> _Head:
    """The request of a complete head (request line, headers, empty line).

    Raises:
        _Refusal: 400, 501 or 505 naming what is wrong.
    """
    lengths = set(_CONTENT_LENGTH_LINE.findall(head))
    if len(lengths) > 1:  # Which one frames the body is ambiguous: request smuggling.
        first, second = (
            errors.quote(value.decode("latin-1"))
            for value in _CONTENT_LENGTH_LINE.findall(head)[:2]
        )
        raise _Refusal(400, f"Content-Length is given twice, as '{first}' and '{second}'")
    parser = h11.Connection(h11.SERVER, max_incomplete_event_size=len(head) + 1)
    parser.receive_data(head)
    try:
        request = parser.next_event()
    except h11.RemoteProtocolError as error:
        raise _Refusal(error.error_status_hint, f"Malformed request head: {error}") from None
    if request.http_version not in (b"1.0", b"1.1"):
        version = request.http_version.decode("ascii")
        raise _Refusal(505, f"HTTP/{version} is not supported: this server speaks HTTP/1.1")
    parsed = _Head(request)
    if parsed.chunked and b"content-length" in parsed.headers:
        raise _Refusal(400, "Both Content-Length and Transfer-Encoding: chunked are set")
    return parsed


class _Connection:
    """One client's connection: reads its requests one after another, answers each.

    Every wait has a deadline (see the module docstring), so a connection ends however
    the client behaves; nothing a client sends raises out of `serve`.
    """

    def __init__(
        self, server: "HttpServer", reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ):
        self._server, self._reader, self._writer = server, reader, writer
        self._buffer = bytearray()
        self._loop = asyncio.get_running_loop()
        peer = writer.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        # Between requests: nothing of the next one has arrived (a stop closes it at once).
        self.idle = True
        self.handling = False  # A request is in the thread pool, or its answer being written.
        self._stalled = False  # An answer was not taken within the read timeout.
        self._timed_out = False  # The client was silent between requests for the read timeout.

    async def serve(self) -> None:
        try:
            while not self._server.stopping:
                head = await self._read_head()
                if not await self._exchange(head) or self._server.stopping:
                    return
        except _Refusal as refusal:
            logger.info(
                "REST client %s refused: %d %s", self._peer, refusal.status, refusal.message
            )
            await self._send_and_close(refusal.status, refusal.message)
        except _ClientStalled:
            self._stalled = True
        except (_ClientGone, OSError):
            pass
        except Exception as error:  # A bug must end this connection only, and be seen.
            logger.exception("REST client %s: unexpected error", self._peer)
            await self._send_and_close(500, f"{type(error).__name__}: {error}")
        finally:
            self._close()

    def _close(self) -> None:
        """Closes the connection; at once, dropping what is still unsent (an abortive close,
        a reset), when the client stalled: a graceful close keeps the socket and its send
        queue until the client reads them, which a client that never reads never does."""
        if not self._stalled and not (self._timed_out and _unsent_bytes(self._writer)):
            self._writer.close()
            return
        with contextlib.suppress(OSError):
            self._writer.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
        self._writer.transport.abort()

    async def _send_and_close(self, status: int, message: str) -> None:
        try:
            await self._send(
                status, errors.rest_error_body(message), errors.REST_JSON_CONTENT_TYPE, close=True
            )
        except _ClientStalled:
            self._stalled = True
        except (OSError, _ClientGone):
            pass

    async def _read_more(self, timeout: float, refusal: _Refusal | None) -> None:
        """Adds what the client sends next to the buffer.

        Raises:
            `refusal` (or _ClientGone when None) if nothing comes within `timeout`;
            _ClientGone when the client has closed.
        """
        try:
            data = await asyncio.wait_for(self._reader.read(_READ_PIECE_BYTES), max(timeout, 0))
        except TimeoutError:
            self._timed_out = refusal is None  # Silent between requests: nothing to answer.
            raise (refusal or _ClientGone()) from None
        if not data:
            raise _ClientGone()
        self._buffer += data

    async def _read_head(self) -> _Head:
        """The next request's head, read within the head limit and the read timeout.

        Each byte is scanned once, however slowly the head arrives (rescanning the whole
        buffer at every byte made a 64 KiB head sent a byte at a time cost 4 GB of scanning).
        """
        deadline = self._loop.time() + self._server.read_timeout_seconds
        skipped = 0  # Empty lines before the request (RFC 9112 2.2) count against the limit.
        scanned = 0  # Bytes of the buffer already searched for the end of the head.
        while True:
            if not scanned:  # The request line has not begun.
                empty_lines = _LEADING_EMPTY_LINES.match(self._buffer).end()
                skipped += empty_lines
                del self._buffer[:empty_lines]
            end = self._buffer.find(b"\r\n\r\n", max(scanned - 3, 0))
            head_end = end + 4 if end >= 0 else len(self._buffer)
            if skipped + head_end > MAX_REQUEST_HEAD_BYTES:
                raise _Refusal(
                    431,
                    "The request line and headers are larger than the limit of "
                    f"{MAX_REQUEST_HEAD_BYTES} bytes",
                )
            if _BARE_LF.search(self._buffer, scanned, head_end):
                raise _Refusal(400, "Malformed request head: a line ends in a bare LF, not CRLF")
            if end >= 0:
                head = bytes(self._buffer[:head_end])
                del self._buffer[:head_end]
                return _parse_head(head)
            # A lone CR may begin one more empty line: it is scanned again with its LF.
            scanned = 0 if self._buffer in (b"", b"\r") else len(self._buffer)
            self.idle = not (skipped or self._buffer)
            timeout = _Refusal(408, "The request head did not arrive within the read timeout")
            await self._read_more(deadline - self._loop.time(), None if self.idle else timeout)
            self.idle = False

    async def _exchange(self, head: _Head) -> bool:
        """Reads the body of `head`, answers it; returns whether the connection stays open."""
        if not self._server.handler.accepts(head.path):
            raise _Refusal(404, "Not Found")
        # The body's bytes, then the answer's, are held in the memory budget until the answer
        # is written.
        with contextlib.ExitStack() as reservations:
            body = await _BodyReader(self, head, reservations).read()
            return await self._answer(head, body, reservations)

    async def _answer(self, head: _Head, body: bytes, reservations: contextlib.ExitStack) -> bool:
        """Answers a request read whole, holding the answer's bytes in the memory budget in
        `reservations` (429 instead, when they do not fit); returns whether the connection
        stays open."""
        self.handling = True  # Until the answer is written: a stop lets it go out.
        try:
            status, payload, content_type = await self._handled(head, body, reservations)
            budget = self._server.memory_budget
            if budget is not None:
                try:
                    reservations.enter_context(budget.reserve(len(payload), ANSWER))
                except errors.ServingError as error:
                    status, content_type = error.http_status, errors.REST_JSON_CONTENT_TYPE
                    payload = errors.rest_error_body(error.message)
            keep_alive = head.keep_alive and not self._server.stopping
            await self._send(
                status,
                payload,
                content_type,
                close=not keep_alive,
                head_only=head.method == "HEAD",
                keep_alive_1_0=head.http_1_0,
            )
        finally:
            self.handling = False
        return keep_alive

    async def _handled(
        self, head: _Head, body: bytes, reservations: contextlib.ExitStack
    ) -> tuple[int, bytes, str]:
        """The handler's answer, or 504 at the answer deadline if it has not answered by then.

        The deadline runs from when the request has been read, its wait for a thread
        included, as a gRPC call's runs from the call; the handler is given it, and stops
        its model runs between pieces at it, but a run may go on past it (one that no
        timeout interrupts): its client is answered at the deadline all the same, as gRPC's
        client is, and the late answer is dropped. What `reservations` holds (the body's
        bytes) is then given back when the handler returns, not with the 504: the handler
        still holds the body, and its run still computes.
        """
        timeout = self._server.answer_timeout_seconds
        deadline = time.monotonic() + timeout if timeout else None
        answer = self._loop.run_in_executor(
            self._server.executor, self._server.answer, head, body, deadline
        )
        if deadline is None:
            return await answer
        # A late answer's outcome is read, so that nothing is reported as never retrieved.
        answer.add_done_callback(lambda done: done.cancelled() or done.exception())
        try:
            return await asyncio.wait_for(
                asyncio.shield(answer), timeout + _LATE_ANSWER_MARGIN_SECONDS
            )
        except TimeoutError:
            held_by_the_handler = reservations.pop_all()
            answer.add_done_callback(lambda _: held_by_the_handler.close())
            logger.info("REST client %s: no answer by the deadline, answered 504", self._peer)
            return 504, errors.rest_error_body("Deadline Exceeded"), errors.REST_JSON_CONTENT_TYPE

    async def _send(
        self,
        status: int,
        payload: bytes,
        content_type: str,
        close: bool,
        head_only: bool = False,
        keep_alive_1_0: bool = False,
    ) -> None:
        """Writes one answer; to HEAD the headers alone (with the body's Content-Length)."""
        lines = [
            f"HTTP/1.1 {status} {_reason(status)}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(payload)}",
        ]
        if self._server.enable_cors:
            lines += [
                "Access-Control-Allow-Origin: *",
                "Access-Control-Allow-Methods: POST, GET",
                "Access-Control-Allow-Headers: Content-Type",
            ]
        if close:
            lines.append("Connection: close")
        elif keep_alive_1_0:
            lines.append("Connection: keep-alive")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self._writer.write(head if head_only else head + payload)
        await self._drain()

    async def _drain(self) -> None:
        """Waits until the written bytes are sent; a client that does not read them within
        the read timeout is dropped."""
        try:
            await asyncio.wait_for(self._writer.drain(), self._server.read_timeout_seconds)
        except TimeoutError:
            raise _ClientStalled() from None


class _BodyReader:
    """Reads the body `head` announces from `connection`, within its limits; the bytes it
    receives, chunked framing included, are held in the server's memory budget as they
    arrive (never what the head announces), up to a fair share of it, in `reservations`."""

    def __init__(self, connection: _Connection, head: _Head, reservations: contextlib.ExitStack):
        self._connection, self._head = connection, head
        self._server = connection._server
        self._buffer = connection._buffer
        self._received = 0
        self._started: float | None = None
        budget = self._server.memory_budget
        self._reservation = (
            None
            if budget is None
            else reservations.enter_context(
                budget.reservation(BODY, most=budget.limit_bytes // FAIR_SHARE_OF_BUDGET)
            )
        )

    async def read(self) -> bytes:
        limit = self._server.max_body_bytes
        body = bytearray()  # One buffer, however many pieces or chunks the body comes in.
        if self._head.chunked:
            self._continue()
            await self._read_chunked(limit, body)
            return bytes(body)
        length_header = self._head.headers.get(b"content-length")
        if length_header is None:
            return b""
        length = int(length_header)  # h11 accepts digits only.
        if length > limit:
            raise _too_large(limit, str(length))
        if length:
            self._continue()
        await self._read_into(body, length)
        return bytes(body)

    def _hold(self, size: int) -> None:
        """Holds `size` more bytes received in the budget."""
        if self._reservation is None:
            return
        try:
            self._reservation.grow(size)
        except errors.ServingError as error:
            raise _Refusal(error.http_status, error.message) from None

    def _continue(self) -> None:
        """Sends `100 Continue` when the client waits for it (after the checks that could
        refuse the request before its body)."""
        self._started = self._connection._loop.time()
        if self._head.expects_continue:
            self._connection._writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    async def _read_more(self) -> None:
        """More body bytes into the buffer, within the silence, the rate and the whole-body
        deadlines."""
        loop, timeout = self._connection._loop, self._server.read_timeout_seconds
        rate_deadline = self._started + timeout + self._received / MIN_BODY_BYTES_PER_SECOND
        body_deadline = self._started + self._server.body_timeout_seconds
        remaining = min(rate_deadline, body_deadline) - loop.time()
        if body_deadline <= rate_deadline and remaining < timeout:
            refusal = _Refusal(
                408,
                "The request body did not arrive in full within "
                f"{self._server.body_timeout_seconds:g} s",
            )
        elif remaining < timeout:
            refusal = _Refusal(
                408,
                f"The request body arrived slower than {MIN_BODY_BYTES_PER_SECOND} bytes a "
                f"second after its first {timeout:g} s",
            )
        else:
            refusal = _Refusal(408, "No request body bytes arrived within the read timeout")
        before = len(self._buffer)
        await self._connection._read_more(min(remaining, timeout), refusal)
        self._received += len(self._buffer) - before

    async def _read_into(self, body: bytearray | None, length: int) -> None:
        """Moves the next `length` bytes to `body` (None: drops them), holding each piece."""
        received = 0
        while received < length:
            if not self._buffer:
                try:
                    await self._read_more()
                except _ClientGone:
                    raise _Refusal(
                        400, f"Request body ended after {received} of {length} bytes"
                    ) from None
            size = min(len(self._buffer), length - received)
            self._hold(size)
            if body is not None:
                body += self._buffer[:size]
            del self._buffer[:size]
            received += size

    async def _read_line(self, limit: int, too_long: _Refusal, what: str) -> bytes:
        """One CRLF-terminated line of chunked framing, without its CRLF (held with it)."""
        scanned = 0  # As for heads, each byte is searched once.
        while True:
            end = self._buffer.find(b"\r\n", max(scanned - 1, 0), limit + 2)
            if end >= 0:
                self._hold(end + 2)
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 2]
                return line
            if len(self._buffer) >= limit + 2:
                raise too_long
            scanned = len(self._buffer)
            try:
                await self._read_more()
            except _ClientGone:
                raise _Refusal(
                    400, f"Malformed chunked request body: a {what} ended early"
                ) from None

    async def _read_chunked(self, limit: int, body: bytearray) -> None:
        """Decodes a chunked body into `body`, refusing a chunk that would pass `limit` before
        reading it."""
        line_too_long = _Refusal(
            400, "Malformed chunked request body: a chunk-size line is too long"
        )
        while True:
            line = await self._read_line(MAX_CHUNK_LINE_BYTES, line_too_long, "chunk-size line")
            size_text = line.split(b";", 1)[0].strip(b" \t")
            # libevent reads chunk sizes as int64: longer ones are malformed, not large.
            if not _CHUNK_SIZE.fullmatch(size_text) or int(size_text, 16) >= 2**63:
                raise _Refusal(
                    400, f"Malformed chunked request body: bad chunk size {size_text[:40]!r}"
                )
            chunk_size = int(size_text, 16)
            if chunk_size == 0:
                await self._skip_trailers()
                return
            if len(body) + chunk_size > limit:
                raise _too_large(limit, f"more than {limit}")
            await self._read_into(body, chunk_size)
            crlf_at = len(body)
            await self._read_into(body, 2)
            if body[crlf_at:] != b"\r\n":
                raise _Refusal(400, "Malformed chunked request body: no CRLF after a chunk")
            del body[crlf_at:]

    async def _skip_trailers(self) -> None:
        """Reads the trailer fields (ignored, as TF Serving does) up to the empty line, within
        the head limit."""
        too_long = _Refusal(
            431,
            f"The chunked body's trailers are larger than the limit of {MAX_REQUEST_HEAD_BYTES} bytes",
        )
        budget = MAX_REQUEST_HEAD_BYTES
        while line := await self._read_line(budget, too_long, "trailer"):
            if not _HEADER_FIELD.fullmatch(line):
                raise _Refusal(
                    400, "Malformed chunked request body: a trailer is not a header field"
                )
            budget -= len(line) + 2
            if budget < 0:
                raise too_long


class HttpServer:
    """Serves a RequestHandler over HTTP/1.1 (keep-alive, chunked bodies, `Expect:
    100-continue`, HEAD), with the limits of the module docstring.

    Args:
        address: (host, port); port 0 picks a free port. The socket is bound and listening,
            with the system's largest backlog, when the constructor returns.
        handler: what answers the requests.
        num_threads: requests handled at once (`--rest_api_num_threads`); the others wait.
        max_body_bytes: largest accepted request body.
        enable_cors: add CORS headers to every answer (`--rest_api_enable_cors_support`).
        read_timeout_seconds: longest wait for a client's next bytes, longest time a request
            head may take to arrive, and a body's time before the minimum rate applies.
        body_timeout_seconds: longest time a whole body may take to arrive, from its head
            (`--rest_api_body_timeout_seconds`): a client that keeps to the minimum rate
            still cannot hold its connection, and what its body holds of the budget, longer.
        memory_budget: where the bodies' bytes are held while their requests are read and
            answered (the one the model runs' inputs are held in); None: not held.
        answer_timeout_seconds: a request not answered this long after it was read is
            answered 504 (`--rest_api_timeout_in_ms`); the handler is given the deadline.
            None: no deadline.
    """

    def __init__(
        self,
        address: tuple[str, int],
        handler: RequestHandler,
        num_threads: int,
        max_body_bytes: int,
        enable_cors: bool = False,
        read_timeout_seconds: float = 30.0,
        body_timeout_seconds: float = 120.0,
        memory_budget: RequestMemoryBudget | None = None,
        answer_timeout_seconds: float | None = None,
    ):
        self.handler = handler
        self.answer_timeout_seconds = answer_timeout_seconds
        self.memory_budget = memory_budget
        self.max_body_bytes = max_body_bytes
        self.enable_cors = enable_cors
        self.read_timeout_seconds = read_timeout_seconds
        self.body_timeout_seconds = body_timeout_seconds
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max(num_threads, 1), thread_name_prefix="rest"
        )
        self.stopping = False
        self._socket = socket.socket(socket.AF_INET6 if ":" in address[0] else socket.AF_INET)
        # Connections a stopped or killed server leaves behind must not keep a restart on
        # the same port from binding it.
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(address)
        self._socket.listen(socket.SOMAXCONN)
        self._loop = asyncio.new_event_loop()
        self._stop_requested: asyncio.Event | None = None
        self._grace_seconds = 0.0
        self._connections: dict[asyncio.Task, _Connection] = {}
        self._serving = False
        self._done = threading.Event()

    @property
    def server_address(self) -> tuple[str, int]:
        """The bound (host, port)."""
        return self._socket.getsockname()[:2]

    def answer(
        self, head: _Head, body: bytes, deadline: float | None = None
    ) -> tuple[int, bytes, str]:
        """The handler's answer to one request (run in the thread pool) by `deadline`."""
        if head.gzip:
            try:
                body = _gunzip(body)
            except _Refusal as refusal:
                logger.info("REST request refused: %d %s", refusal.status, refusal.message)
                return (
                    refusal.status,
                    errors.rest_error_body(refusal.message),
                    errors.REST_JSON_CONTENT_TYPE,
                )
        return self.handler.handle(head.method, head.path, body, deadline)

    def serve_forever(self) -> None:
        """Serves until `stop` (run it in a thread)."""
        self._serving = True
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()
            self._done.set()

    def stop(self, grace_seconds: float) -> None:
        """Stops accepting, lets requests under way finish for up to `grace_seconds`, then
        closes the connections still open (stalled clients included)."""
        self._grace_seconds = grace_seconds
        if not self._serving:
            self._socket.close()
            self.executor.shutdown(wait=False, cancel_futures=True)
            return
        if self._done.is_set():
            return
        self._loop.call_soon_threadsafe(self._request_stop)
        self._done.wait(grace_seconds + _CANCELLED_ANSWER_SECONDS + 10)

    def _request_stop(self) -> None:
        self.stopping = True
        if self._stop_requested is not None:
            self._stop_requested.set()

    async def _serve(self) -> None:
        self._stop_requested = asyncio.Event()
        if self.stopping:
            self._stop_requested.set()
        server = await asyncio.start_server(
            self._on_connection, sock=self._socket, backlog=socket.SOMAXCONN
        )
        await self._stop_requested.wait()
        server.close()
        await self._close_connections()
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def _close_connections(self) -> None:
        """Closes idle connections at once, the others once their request is answered or the
        grace period is over (the requests then still handled get a moment to answer)."""
        self._cancel_connections(lambda connection: connection.idle)
        await self._wait_for_connections(self._grace_seconds)
        self._cancel_connections(lambda connection: not connection.handling)
        await self._wait_for_connections(_CANCELLED_ANSWER_SECONDS)
        self._cancel_connections(lambda connection: True)
        await self._wait_for_connections(None)

    def _cancel_connections(self, which: Callable[[_Connection], bool]) -> None:
        for task, connection in list(self._connections.items()):
            if which(connection):
                task.cancel()

    async def _wait_for_connections(self, timeout: float | None) -> None:
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=timeout)

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        connection = _Connection(self, reader, writer)
        task = asyncio.current_task()
        self._connections[task] = connection
        try:
            await connection.serve()
        finally:
            del self._connections[task]
