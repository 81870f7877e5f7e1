"""Hostile REST connections held open against a server (bench_serve, bench_soak).

An idle connection sends nothing after its TCP handshake; a slowloris connection sends the start
of a request head, then one more header byte a tick (a second), never finishing it; a slow-body
connection sends a whole head announcing a 1 MB body, then one body byte a tick; a CRLF flood
sends empty lines, 16 KiB a tick, and never a request line. Each connection the server closes
(or answers) is reported to `on_closed` and replaced, so the server faces the same number for as
long as the holder runs.
"""

import socket
import threading
import time
from collections.abc import Callable

IDLE, SLOWLORIS = "idle connection", "slowloris connection"
SLOW_BODY, CRLF_FLOOD = "slow-body connection", "CRLF flood"
SLOWLORIS_HEAD = b"GET /v1/models/x HTTP/1.1\r\nHost: 127.0.0.1\r\n"
SLOW_BODY_HEAD = (
    b"POST /v1/models/x:predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000000\r\n\r\n"
)
# What each kind sends once connected, and then at every tick (None: nothing).
_OPENING = {IDLE: b"", SLOWLORIS: SLOWLORIS_HEAD, SLOW_BODY: SLOW_BODY_HEAD, CRLF_FLOOD: b""}
_EACH_TICK = {IDLE: None, SLOWLORIS: b"X", SLOW_BODY: b"{", CRLF_FLOOD: b"\r\n" * 8192}


class HeldConnections:
    """Holds `idle` idle, `slowloris` slowloris, `slow_body` slow-body connections and
    `crlf_flood` CRLF floods to `address()` until stopped.

    Args:
        address: returns the REST (host, port) to connect to; called for each new connection,
            so a server restarted on other ports is followed.
        idle, slowloris, slow_body, crlf_flood: how many of each to hold.
        on_closed: called as on_closed(kind, code, opened, seconds) for each connection that
            ended: what ended it (`"closed by the server"`, `"answered, then closed"`, an
            OSError's name), when it was opened (`time.monotonic()`) and how long it lasted.
            Called from the holder's thread.
        tick_seconds: how often the holder sends each connection its next bytes and replaces
            closed ones.
    """

    def __init__(
        self,
        address: Callable[[], tuple[str, int]],
        idle: int,
        slowloris: int,
        on_closed: Callable[[str, str, float, float], None] = lambda *outcome: None,
        tick_seconds: float = 1.0,
        slow_body: int = 0,
        crlf_flood: int = 0,
    ):
        self._address = address
        self._wanted = {
            IDLE: idle,
            SLOWLORIS: slowloris,
            SLOW_BODY: slow_body,
            CRLF_FLOOD: crlf_flood,
        }
        self._on_closed = on_closed
        self._tick_seconds = tick_seconds
        self._held: list[tuple[str, socket.socket, float]] = []
        self._stop = threading.Event()
        self._full = threading.Event()
        self._thread = threading.Thread(target=self._hold, name="held_connections", daemon=True)

    def start(self) -> "HeldConnections":
        self._thread.start()
        return self

    def __enter__(self) -> "HeldConnections":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def wait_until_held(self, timeout: float) -> bool:
        """True once every wanted connection has been open at the same time."""
        return self._full.wait(timeout)

    def stop(self) -> None:
        """Closes every held connection and ends the holder's thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _open_missing(self) -> None:
        for kind, count in self._wanted.items():
            for _ in range(count - sum(1 for entry in self._held if entry[0] == kind)):
                opened = time.monotonic()
                try:
                    connection = socket.create_connection(self._address(), timeout=1)
                except OSError as error:
                    self._on_closed(kind, type(error).__name__, opened, 0.0)
                    break
                connection.setblocking(False)
                self._held.append((kind, connection, opened))
                if _OPENING[kind]:
                    connection.send(_OPENING[kind])
        if len(self._held) == sum(self._wanted.values()):
            self._full.set()

    def _tend(self) -> None:
        """Sends each connection its next bytes; reports and drops the closed ones."""
        for entry in list(self._held):
            kind, connection, opened = entry
            try:
                data = connection.recv(64)
            except BlockingIOError:  # Still open and silent.
                try:
                    if _EACH_TICK[kind] is not None:
                        connection.send(_EACH_TICK[kind])
                    continue
                except OSError as error:
                    code = type(error).__name__
            except OSError as error:
                code = type(error).__name__
            else:
                code = "closed by the server" if not data else "answered, then closed"
            self._held.remove(entry)
            connection.close()
            self._on_closed(kind, code, opened, time.monotonic() - opened)

    def _hold(self) -> None:
        try:
            while not self._stop.is_set():
                self._open_missing()
                if self._stop.wait(self._tick_seconds):
                    break
                self._tend()
        finally:
            for _, connection, _ in self._held:
                connection.close()
            self._held.clear()
