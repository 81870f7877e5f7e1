"""Soak and chaos benchmark of the model server (issue 26): steady good and hostile traffic, a
version roll-out, a reload storm and a kill -9 with a restart, all under load.

    python -m benchmarks.bench_soak --duration 600 --output BENCHMARKS.md

The server (`python -m serving.server`, batching as `make serve` has it, requests above
--message_limit_bytes refused) serves a copy of --export_dir (default: the bundled model,
exported once into exports/soak/translator) from a base path of its own, on ports it picks.
For --duration seconds:
  * good traffic: --grpc_clients threads translating with `serving.client.TranslationClient`
    and --rest_clients threads POSTing :predict, each retrying what a server down or restarting
    gives (UNAVAILABLE; a refused or reset connection, 503) with a backoff doubling from
    --client_backoff up to --client_max_backoff seconds, for at most --client_retry_seconds from
    the request's first attempt (`RetryPolicy`); every answer is checked against the
    translations the server gave before the load began;
  * hostile traffic: --hostile_clients threads sending, in turn, malformed JSON, a REST body and a
    gRPC message above the limit, a gRPC call cancelled while it runs, a REST call abandoned
    before its answer, a gRPC call with a deadline too short to meet, a malformed request line,
    a header that smuggles a body (whitespace before its colon), a flood of empty lines, tensors
    of 33 dimensions over gRPC and REST (they crashed the server), a string over
    --max_input_string_bytes and a full batch of sentences with a 1 s deadline; and one thread
    holding --idle_connections idle, --slowloris_connections slowloris (a header byte a second),
    --slow_body_connections slow-body REST connections (a body byte a second) and
    --crlf_flood_connections CRLF floods, opening a new one for each the server closes;
  * at 30% of the duration, a roll-out: the export is copied in as the next version, then
    GetModelStatus is polled until that version is AVAILABLE;
  * at 50%, a reload storm: --reloads HandleReloadConfigRequest calls back to back, alternating
    between keeping the latest 2 versions and the latest 1, then GetModelStatus is polled until
    only the newest version is AVAILABLE;
  * at 70%, the server is killed (SIGKILL) under load and restarted on the same ports; a probe
    Predict every 50 ms measures how long a client sees UNAVAILABLE.
The soak runs on until --duration has passed and the restarted server has served a tenth of it.
It reports lost good requests (goal 0), the outcomes of each kind of traffic, p50/p99 latency
of the good requests over time, and the server's resident memory, threads and open files over
time (psutil), drawn in --plot. Loopback only.
"""

import argparse
import collections
import dataclasses
import http.client
import itertools
import json
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence

import grpc
import numpy as np
import psutil
import tensorflow as tf
from tensorflow_serving.apis import (
    get_model_status_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from benchmarks.bench_serve import LOCAL_SUBCHANNEL_POOL, REPO_ROOT, SERVING_DIR, start_server
from benchmarks.held_connections import HeldConnections
from benchmarks.sentences import SPANISH_SENTENCES
from common.serving_contract import TEXT_INPUT, TRANSLATION_OUTPUT
from serving.client import TranslationClient, TranslationError, backoff_delay, reconnect_options
from serving.model_server.server import ServerOptions
from serving.model_server.tensors import MAX_FEED_RANK

SECTION = "Serving soak"
DEFAULT_EXPORT_BASE = os.path.join(REPO_ROOT, "exports", "soak")
BUNDLED_RUN = os.path.join(REPO_ROOT, "pretrained", "es-en")
DEFAULT_PLOT = os.path.join(REPO_ROOT, "docs", "serving_soak.png")

GRPC_GOOD, REST_GOOD = "gRPC translation", "REST translation"
GOOD_KINDS = (GRPC_GOOD, REST_GOOD)
OK, WRONG_ANSWER = "OK", "WRONG ANSWER"
RELOAD = "ReloadConfig"
AVAILABLE = get_model_status_pb2.ModelVersionStatus.AVAILABLE
# When the roll-out, the reload storm and the kill come, as shares of --duration.
ROLLOUT_AT, STORM_AT, KILL_AT = 0.3, 0.5, 0.7
PROBE_INTERVAL_SECONDS = 0.05
# The longest the server may take to start or restart: on a busy machine, replaying its warmup
# requests alone takes minutes.
STARTUP_TIMEOUT_SECONDS = 900


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How one request ended: its kind of traffic, a code (a gRPC status name, an HTTP status,
    OK, WRONG ANSWER or what the connection did), when it started (seconds into the soak) and
    how long it took."""

    kind: str
    code: str
    start: float
    seconds: float


def lost_good_requests(outcomes: Sequence[Outcome]) -> dict[str, dict[str, int]]:
    """{good kind: {"sent", "answered", "lost"}}: answered means the expected translations came
    back; anything else is lost."""
    counts = {}
    for kind in GOOD_KINDS:
        codes = [outcome.code for outcome in outcomes if outcome.kind == kind]
        answered = codes.count(OK)
        counts[kind] = {"sent": len(codes), "answered": answered, "lost": len(codes) - answered}
    return counts


def codes_by_kind(outcomes: Sequence[Outcome]) -> dict[str, dict[str, int]]:
    """{kind: {code: count}}, kinds and codes in the order they first occurred."""
    codes: dict[str, collections.Counter] = {}
    for outcome in outcomes:
        codes.setdefault(outcome.kind, collections.Counter())[outcome.code] += 1
    return {kind: dict(counter.most_common()) for kind, counter in codes.items()}


def latency_windows(outcomes: Sequence[Outcome], end: float, window: float) -> list[dict]:
    """Per `window` seconds of the soak (by start time): the good requests answered in it and
    their p50/p99 latency in ms (None when there were none)."""
    answered = [o for o in outcomes if o.kind in GOOD_KINDS and o.code == OK]
    rows = []
    for index in range(max(1, int(np.ceil(end / window)))):
        low, high = index * window, (index + 1) * window
        seconds = [o.seconds for o in answered if low <= o.start < high]
        rows.append(
            {
                "start": low,
                "answered": len(seconds),
                "p50_ms": float(np.percentile(seconds, 50) * 1000) if seconds else None,
                "p99_ms": float(np.percentile(seconds, 99) * 1000) if seconds else None,
            }
        )
    return rows


# ------------------------------------------------------------------------ the requests


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How a good client retries an attempt that found the server down or restarting: after
    a delay doubling from `backoff` seconds (serving.client's jitter) up to `max_backoff`, for as
    long as the next attempt starts within `seconds` of the first. A budget in time, not in
    attempts, so that a restart is ridden through however long it takes up to `seconds`, and
    a client whose backoff has grown does not sleep through the minutes after it."""

    seconds: float
    backoff: float
    max_backoff: float

    def run(self, attempt: Callable[[], tuple[str, bool]]) -> str:
        """Calls `attempt` (which returns a code and whether to retry it) until a code is
        not to be retried or the budget is spent; the last code."""
        give_up = time.monotonic() + self.seconds
        for number in itertools.count():
            code, retry = attempt()
            delay = min(backoff_delay(self.backoff, number), self.max_backoff)
            if not retry or time.monotonic() + delay > give_up:
                return code
            time.sleep(delay)
        raise AssertionError("unreachable")


def translate_over_grpc(
    client: TranslationClient, texts: list[str], references: dict[str, str], retry: RetryPolicy
) -> str:
    """One good gRPC request's code: OK when the translations are the references. UNAVAILABLE
    is retried by `retry` (give `client` no retries of its own)."""

    def attempt() -> tuple[str, bool]:
        try:
            translations = client.translate(texts)
        except TranslationError as error:
            return error.code.name, error.code == grpc.StatusCode.UNAVAILABLE
        correct = translations == [references[text] for text in texts]
        return (OK if correct else WRONG_ANSWER), False

    return retry.run(attempt)


def translate_over_rest(
    address: tuple[str, int],
    model_name: str,
    texts: list[str],
    references: dict[str, str],
    retry: RetryPolicy,
    timeout: float,
) -> str:
    """One good REST request's code: OK when the translations are the references. A refused or
    reset connection, or a 503, is retried by `retry`, as UNAVAILABLE over gRPC."""
    body = json.dumps({"instances": texts}).encode()

    def attempt() -> tuple[str, bool]:
        connection = http.client.HTTPConnection(*address, timeout=timeout)
        try:
            connection.request(
                "POST",
                f"/v1/models/{model_name}:predict",
                body,
                {"Content-Type": "application/json"},
            )
            response = connection.getresponse()
            status, answer = response.status, response.read()
        except (ConnectionError, http.client.HTTPException) as error:
            return type(error).__name__, True
        except TimeoutError:
            return "timeout", False
        finally:
            connection.close()
        if status != 200:
            return str(status), status == 503
        translations = [row[TRANSLATION_OUTPUT] for row in json.loads(answer)["predictions"]]
        return (OK if translations == [references[t] for t in texts] else WRONG_ANSWER), False

    return retry.run(attempt)


def raw_http(address: tuple[str, int], data: bytes, read_answer: bool = True) -> str:
    """Sends `data` on a new connection; the status of the answer, or what the connection did."""
    try:
        with socket.create_connection(address, timeout=30) as connection:
            connection.sendall(data)
            if not read_answer:
                return "abandoned"
            head = connection.recv(64)
    except ConnectionRefusedError:
        return "connection refused"
    except ConnectionError:  # The server answered early and reset the rest of a large body.
        return "connection reset"
    except TimeoutError:
        return "timeout"
    if not head:
        return "closed without an answer"
    return head.split(b" ", 2)[1].decode("latin-1") if head.startswith(b"HTTP/") else "garbled"


def post(path: str, body: bytes, length: int | None = None) -> bytes:
    length = len(body) if length is None else length
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\nConnection: close\r\n\r\n"
    ).encode() + body


def predict_request(model_name: str, texts: list[str]) -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.inputs[TEXT_INPUT].CopyFrom(tf.make_tensor_proto(texts, dtype=tf.string))
    return request


def grpc_code(method, request, timeout: float) -> str:
    """The status a unary gRPC call ended with."""
    try:
        method(request, timeout=timeout)
    except grpc.RpcError as error:
        return error.code().name
    return OK


def cancelled_call(stub, request, after_seconds: float) -> str:
    """Starts a Predict and cancels it after `after_seconds`; the code the call ended with."""
    future = stub.Predict.future(request, timeout=60)
    try:
        future.result(timeout=after_seconds)
    except grpc.FutureTimeoutError:
        future.cancel()
    except grpc.RpcError:
        pass
    return future.code().name


def hostile_requests(model_name: str, rest, stub, message_limit: int) -> dict[str, Callable]:
    """{kind: a function sending one such request and returning its code}."""
    path = f"/v1/models/{model_name}:predict"
    good_body = json.dumps({"instances": list(SPANISH_SENTENCES)}).encode()
    long_request = predict_request(model_name, list(SPANISH_SENTENCES) * 4)
    oversized = predict_request(model_name, ["a" * (message_limit + 1)])
    short = predict_request(model_name, [SPANISH_SENTENCES[0]])
    too_deep = predict_request(model_name, [])
    too_deep.inputs[TEXT_INPUT].CopyFrom(
        tf.make_tensor_proto(np.array(b"hola", dtype=object).reshape((1,) * (MAX_FEED_RANK + 1)))
    )
    too_deep_body = json.dumps({"instances": too_deep_instances()}).encode()
    too_long_body = json.dumps(
        {"instances": ["hola " * (ServerOptions().max_input_string_bytes // 4)]}
    ).encode()
    full_batch = predict_request(model_name, list(SPANISH_SENTENCES) * 8)
    return {
        "malformed JSON": lambda: raw_http(rest(), post(path, b'{"instances": ["hola"')),
        # The head announces the size; only a little of the body is sent before the answer.
        "REST body above the limit": lambda: raw_http(
            rest(), post(path, b"[" * 65536, length=message_limit + 1)
        ),
        "gRPC message above the limit": lambda: grpc_code(stub.Predict, oversized, 60),
        "gRPC call cancelled": lambda: cancelled_call(stub, long_request, 0.1),
        "REST call abandoned": lambda: raw_http(rest(), post(path, good_body), read_answer=False),
        "gRPC deadline of 5 ms": lambda: grpc_code(stub.Predict, short, 0.005),
        "malformed request line": lambda: raw_http(rest(), b"GET / HTTP/9.9\r\nHost: x\r\n\r\n"),
        "smuggled body framing": lambda: raw_http(
            rest(),
            post(path, good_body).replace(b"Content-Length:", b"Content-Length :"),
        ),
        "CRLF flood": lambda: raw_http(rest(), b"\r\n" * 100_000),
        "gRPC tensor of rank 33": lambda: grpc_code(stub.Predict, too_deep, 60),
        "REST tensor of rank 33": lambda: raw_http(rest(), post(path, too_deep_body)),
        "REST string over the limit": lambda: raw_http(rest(), post(path, too_long_body)),
        "gRPC 64 sentences, 1 s deadline": lambda: grpc_code(stub.Predict, full_batch, 1.0),
    }


def too_deep_instances() -> list:
    """ "instances" nesting a string MAX_FEED_RANK + 1 levels deep (the list itself is one)."""
    value = "hola"
    for _ in range(MAX_FEED_RANK + 1):
        value = [value]
    return value


# --------------------------------------------------------------------------- the soak


class Soak:
    """The server under test, what the traffic saw, and the threads sending it."""

    def __init__(self, args, base_path: str, workdir: str):
        self.args = args
        self.base_path = base_path
        self.workdir = workdir
        self.start = time.monotonic()
        self.stop = threading.Event()
        self.outcomes: list[Outcome] = []
        self.samples: list[dict] = []
        self.events: list[tuple[float, str]] = []
        self.process: subprocess.Popen | None = None
        self.grpc_port = self.rest_port = None
        self.flags = [
            f"--model_name={args.model_name}",
            f"--model_base_path={base_path}",
            "--file_system_poll_wait_seconds=1",
            "--enable_batching",
            f"--batching_parameters_file={os.path.join(SERVING_DIR, 'batching.config')}",
            f"--grpc_channel_arguments=grpc.max_receive_message_length={args.message_limit_bytes}",
            *args.server_flags,
        ]
        self.channel = None
        self.retry = RetryPolicy(args.client_retry_seconds, args.client_backoff,
                                 args.client_max_backoff)  # fmt: skip

    def now(self) -> float:
        return time.monotonic() - self.start

    def wait_for_good_answers_since(self, since: float, timeout: float) -> None:
        """Waits (at most `timeout` seconds, or until the soak stops) until every kind of good
        traffic has had a call that started after `since` answered OK: clients still backing
        off from a kill come back before the load ends."""
        deadline = self.now() + timeout
        while self.now() < deadline and not self.stop.is_set():
            answered = {o.kind for o in list(self.outcomes) if o.start > since and o.code == OK}
            if answered >= set(GOOD_KINDS):
                return
            self.stop.wait(0.1)

    def event(self, name: str) -> None:
        self.events.append((self.now(), name))
        print(f"[{self.now():7.1f} s] {name}", file=sys.stderr, flush=True)

    def record(self, kind: str, call: Callable[..., str], *arguments) -> str:
        """Runs `call(*arguments)`, which returns a code, as one outcome of `kind`."""
        start = self.now()
        code = call(*arguments)
        self.outcomes.append(Outcome(kind, code, start, self.now() - start))
        return code

    def start_server(self, port_flags: list[str]) -> None:
        log_dir = self.args.log_dir or self.workdir
        os.makedirs(log_dir, exist_ok=True)
        log = open(os.path.join(log_dir, f"server-{len(self.events)}.log"), "w+b")
        self.process, self.grpc_port, self.rest_port = start_server(
            [*port_flags, *self.flags], log, rest=True, startup_timeout=STARTUP_TIMEOUT_SECONDS
        )

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def rest_address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.rest_port)

    def model_status(self) -> dict[int, int]:
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name = self.args.model_name
        response = model_service_pb2_grpc.ModelServiceStub(self.channel).GetModelStatus(
            request, timeout=30
        )
        return {status.version: status.state for status in response.model_version_status}

    def wait_for_versions(self, available: set[int], what: str) -> None:
        """Polls GetModelStatus until exactly the `available` versions are AVAILABLE."""
        deadline = time.monotonic() + 600
        while True:
            states = self.model_status()
            if {version for version, state in states.items() if state == AVAILABLE} == available:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}: versions {states}")
            time.sleep(0.1)

    # ---------------------------------------------------------------- traffic

    def good_grpc_traffic(self, references: dict[str, str], seed: int) -> None:
        rng = random.Random(seed)
        args = self.args
        with TranslationClient(
            self.grpc_address,
            args.model_name,
            timeout=args.request_timeout,
            retries=0,
            backoff=args.client_backoff,
        ) as client:
            while not self.stop.is_set():
                texts = rng.sample(SPANISH_SENTENCES, rng.randint(1, 3))
                self.record(GRPC_GOOD, translate_over_grpc, client, texts, references, self.retry)

    def good_rest_traffic(self, references: dict[str, str], seed: int) -> None:
        rng = random.Random(seed)
        args = self.args
        while not self.stop.is_set():
            texts = rng.sample(SPANISH_SENTENCES, rng.randint(1, 3))
            self.record(
                REST_GOOD,
                translate_over_rest,
                self.rest_address(),
                args.model_name,
                texts,
                references,
                self.retry,
                args.request_timeout,
            )

    def hostile_traffic(self, offset: int) -> None:
        channel = grpc.insecure_channel(
            self.grpc_address,
            options=[("grpc.max_send_message_length", 2 * self.args.message_limit_bytes)],
        )
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        kinds = list(
            hostile_requests(
                self.args.model_name, self.rest_address, stub, self.args.message_limit_bytes
            ).items()
        )
        index = offset
        while not self.stop.wait(self.args.hostile_pause):
            kind, send = kinds[index % len(kinds)]
            self.record(kind, send)
            index += 1
        channel.close()

    def held_connection_closed(self, kind: str, code: str, opened: float, seconds: float) -> None:
        """`HeldConnections`' report of a held connection that ended."""
        self.outcomes.append(Outcome(kind, code, opened - self.start, seconds))

    def sample_resources(self) -> None:
        while not self.stop.wait(self.args.sample_seconds):
            try:
                process = psutil.Process(self.process.pid)
                if process.status() == psutil.STATUS_ZOMBIE:  # Killed, not yet reaped.
                    continue
                with process.oneshot():
                    sample = {
                        "time": self.now(),
                        "rss_mib": process.memory_info().rss / 2**20,
                        "threads": process.num_threads(),
                        "fds": process.num_fds(),
                    }
            except psutil.Error:  # Killed and not yet restarted.
                continue
            self.samples.append(sample)

    # ----------------------------------------------------------------- chaos

    def roll_out(self) -> dict:
        version = max(int(name) for name in os.listdir(self.base_path) if name.isdigit()) + 1
        install_copy(self.args.export_dir, self.base_path, version)
        self.event(f"version {version} copied in")
        start = time.monotonic()
        self.wait_for_versions({version}, f"version {version} to be AVAILABLE alone")
        self.event(f"version {version} AVAILABLE, the previous one unloaded")
        return {"version": version, "seconds": time.monotonic() - start}

    def reload_storm(self) -> dict:
        stub = model_service_pb2_grpc.ModelServiceStub(self.channel)
        self.event(f"reload storm: {self.args.reloads} ReloadConfig calls")
        start = time.monotonic()
        for index in range(self.args.reloads):
            request = model_management_pb2.ReloadConfigRequest()
            model = request.config.model_config_list.config.add(
                name=self.args.model_name, base_path=self.base_path, model_platform="tensorflow"
            )
            model.model_version_policy.latest.num_versions = 2 if index % 2 == 0 else 1
            self.record(
                RELOAD,
                grpc_code,
                stub.HandleReloadConfigRequest,
                request,
                600,
            )
        newest = max(int(name) for name in os.listdir(self.base_path) if name.isdigit())
        self.wait_for_versions({newest}, "the reload storm to settle")
        self.event("reload storm settled")
        return {"reloads": self.args.reloads, "seconds": time.monotonic() - start}

    def kill_and_restart(self) -> dict:
        """SIGKILL, then a restart on the same ports while a probe Predict every 50 ms
        (no retries) measures how long a client sees UNAVAILABLE."""
        ports = [f"--port={self.grpc_port}", f"--rest_api_port={self.rest_port}"]
        killed = self.process
        killed.send_signal(signal.SIGKILL)
        kill_time = self.now()
        self.event("server killed (SIGKILL)")
        killed.wait()
        restart_error = []

        def restart():
            try:
                self.start_server(ports)
            except RuntimeError as error:
                restart_error.append(error)

        restarter = threading.Thread(target=restart)
        restarter.start()
        stub = prediction_service_pb2_grpc.PredictionServiceStub(self.channel)
        probe = predict_request(self.args.model_name, [SPANISH_SENTENCES[0]])
        unavailable = []
        while True:
            code = grpc_code(stub.Predict, probe, 30)
            if code == OK:
                break
            if code == "UNAVAILABLE":
                unavailable.append(self.now())
            if restart_error:
                raise restart_error[0]
            time.sleep(PROBE_INTERVAL_SECONDS)
        first_answer = self.now()
        restarter.join()
        self.event("restarted server answers")
        return {
            "unavailable_seconds": (unavailable[-1] - kill_time) if unavailable else 0.0,
            "first_answer_seconds": first_answer - kill_time,
            "at": kill_time,
        }


def install_copy(export_dir: str, base_path: str, version: int) -> None:
    """Copies an export into `<base_path>/<version>` aside, then renames it in: a version
    appears complete in one step, as a deployment does it."""
    staging = os.path.join(base_path, f".staging-{version}")
    shutil.copytree(export_dir, staging)
    os.rename(staging, os.path.join(base_path, str(version)))


def bundled_export() -> str:
    """The latest version in exports/soak/translator, exported from the bundled model first if
    there is none (`python -m inference.export`)."""
    base = os.path.join(DEFAULT_EXPORT_BASE, "translator")
    versions = [int(n) for n in os.listdir(base) if n.isdigit()] if os.path.isdir(base) else []
    if not versions:
        subprocess.run(
            [sys.executable, "-m", "inference.export", "--run_dir", BUNDLED_RUN,
             "--export_base", DEFAULT_EXPORT_BASE, "--model_name", "translator"],
            cwd=REPO_ROOT,
            check=True,
        )  # fmt: skip
        versions = [int(n) for n in os.listdir(base) if n.isdigit()]
    return os.path.join(base, str(max(versions)))


def run_soak(args) -> dict:
    """Runs the soak; returns the report's data (see `summarize`)."""
    with tempfile.TemporaryDirectory(prefix="soak-") as workdir:
        base_path = os.path.join(workdir, args.model_name)
        os.makedirs(base_path)
        install_copy(args.export_dir, base_path, 1)
        soak = Soak(args, base_path, workdir)
        soak.start_server(["--port=0", "--rest_api_free_port"])
        # The probe's and the operations' channel reconnects as often as the probe asks, on a
        # connection of its own: gRPC's default backoff (up to 120 s) would have it measure
        # its own wait to reconnect after the restart, not the server's.
        soak.channel = grpc.insecure_channel(
            soak.grpc_address,
            options=[*reconnect_options(PROBE_INTERVAL_SECONDS), LOCAL_SUBCHANNEL_POOL],
        )
        with TranslationClient(soak.grpc_address, args.model_name, timeout=600) as client:
            references = dict(zip(SPANISH_SENTENCES, client.translate(list(SPANISH_SENTENCES))))
        soak.start = time.monotonic()
        soak.event("load begins")
        threads = [
            *(
                threading.Thread(target=soak.good_grpc_traffic, args=(references, seed))
                for seed in range(args.grpc_clients)
            ),
            *(
                threading.Thread(target=soak.good_rest_traffic, args=(references, 100 + seed))
                for seed in range(args.rest_clients)
            ),
            *(
                threading.Thread(target=soak.hostile_traffic, args=(offset,))
                for offset in range(args.hostile_clients)
            ),
            threading.Thread(target=soak.sample_resources),
        ]
        held = HeldConnections(
            soak.rest_address,
            args.idle_connections,
            args.slowloris_connections,
            soak.held_connection_closed,
            slow_body=args.slow_body_connections,
            crlf_flood=args.crlf_flood_connections,
        )
        for thread in threads:
            thread.start()
        held.start()
        chaos = {}
        try:
            for share, name, phase in (
                (ROLLOUT_AT, "rollout", soak.roll_out),
                (STORM_AT, "reload_storm", soak.reload_storm),
                (KILL_AT, "restart", soak.kill_and_restart),
            ):
                soak.stop.wait(max(0.0, share * args.duration - soak.now()))
                chaos[name] = phase()
            # The restarted server serves a tenth of the duration at least, and each kind of
            # good traffic once more: a short soak would otherwise end while clients back off.
            soak.stop.wait(max(args.duration, soak.now() + 0.1 * args.duration) - soak.now())
            restart = chaos["restart"]
            soak.wait_for_good_answers_since(
                restart["at"] + restart["first_answer_seconds"], timeout=max(60.0, args.duration)
            )
        finally:
            soak.stop.set()
            held.stop()
            for thread in threads:
                thread.join()
            end = soak.now()
            soak.event("load ends")
            soak.channel.close()
            soak.process.terminate()
            try:
                soak.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                soak.process.kill()
    return summarize(args, soak, references, chaos, end)


def summarize(args, soak: Soak, references: dict[str, str], chaos: dict, end: float) -> dict:
    """The report's data: {"duration", "references", "good", "codes", "chaos", "events",
    "latency", "resources", "outcomes"}, JSON-ready."""
    good_calls = [o for o in soak.outcomes if o.kind in GOOD_KINDS and o.code == OK]
    kill_time = chaos["restart"]["at"]
    spanning = [o.seconds for o in good_calls if o.start <= kill_time <= o.start + o.seconds]
    chaos["restart"]["longest_good_call_seconds"] = max(spanning, default=0.0)
    return {
        "duration": end,
        "references": references,
        "good": lost_good_requests(soak.outcomes),
        "codes": codes_by_kind(soak.outcomes),
        "chaos": chaos,
        "events": soak.events,
        "latency": latency_windows(soak.outcomes, end, max(1.0, end / 60)),
        "resources": soak.samples,
        "outcomes": [dataclasses.asdict(outcome) for outcome in soak.outcomes],
    }


# ------------------------------------------------------------------------- the report


def plot(data: dict, path: str) -> None:
    """Good-request p50/p99 latency, RSS, threads and open files over time, events marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(4, 1, figsize=(10, 10), sharex=True)
    windows = data["latency"]
    for key, label in (("p50_ms", "p50"), ("p99_ms", "p99")):
        # Windows without an answer are gaps (NaN), not lines across the outage.
        axes[0].plot(
            [row["start"] for row in windows],
            [np.nan if row[key] is None else row[key] for row in windows],
            ".-",
            label=label,
        )
    axes[0].set_ylabel("good request latency (ms)")
    axes[0].legend(loc="upper left")
    samples = data["resources"]
    for axis, key, label in (
        (axes[1], "rss_mib", "RSS (MiB)"),
        (axes[2], "threads", "threads"),
        (axes[3], "fds", "open files"),
    ):
        axis.plot([s["time"] for s in samples], [s[key] for s in samples], ".", markersize=3)
        axis.set_ylabel(label)
    events = data["events"][1:-1]  # Between "load begins" and "load ends".
    for axis in axes:
        for number, (moment, _) in enumerate(events, 1):
            axis.axvline(moment, color="grey", linestyle=":", linewidth=1)
            if axis is axes[0]:
                axis.annotate(str(number), (moment, 1.0), xycoords=("data", "axes fraction"),
                              ha="center", va="bottom", fontsize=8)  # fmt: skip
    figure.suptitle(
        "; ".join(f"{number} {name}" for number, (_, name) in enumerate(events, 1)),
        fontsize=8,
        wrap=True,
    )
    axes[-1].set_xlabel("seconds into the soak")
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)


def markdown(args, data: dict, command: str, plot_link: str, load_before) -> str:
    from benchmarks.report import machine_description, shown_path

    good = data["good"]
    sent = sum(row["sent"] for row in good.values())
    lost = sum(row["lost"] for row in good.values())
    table = "\n".join(
        f"| {kind} | {sum(codes.values()):,} | "
        + ", ".join(f"{code} × {count:,}" for code, count in codes.items())
        + " |"
        for kind, codes in data["codes"].items()
    )
    window = data["duration"] / 10

    def resources_in(start):
        """The last sample of the window (the server is down for none in it: –)."""
        inside = [s for s in data["resources"] if start <= s["time"] < start + window]
        last = inside[-1] if inside else None
        return (
            f"{last['rss_mib']:,.0f} | {last['threads']} | {last['fds']}" if last else "– | – | –"
        )

    timeline = "\n".join(
        f"| {row['start']:.{0 if window >= 10 else 1}f} | {row['answered']:,} | "
        + (f"{row['p50_ms']:.0f} | {row['p99_ms']:.0f}" if row["answered"] else "– | –")
        + f" | {resources_in(row['start'])} |"
        for row in latency_windows(
            [Outcome(**outcome) for outcome in data["outcomes"]], data["duration"], window
        )
    )
    rollout, storm, restart = (data["chaos"][k] for k in ("rollout", "reload_storm", "restart"))
    return f"""Command: `{command}`
Machine: {machine_description()}; load average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after; clients and server share the cores.
Model: a copy of `{shown_path(args.export_dir)}` (version 1); server flags `{" ".join(args.server_flags) or "defaults"}` plus batching (serving/batching.config) and a {args.message_limit_bytes:,}-byte request limit. Traffic: {args.grpc_clients} gRPC and {args.rest_clients} REST good clients (retrying for up to {args.client_retry_seconds:g} s, backoff {args.client_backoff:g} s doubling up to {args.client_max_backoff:g} s), {args.hostile_clients} hostile clients, {args.idle_connections} idle, {args.slowloris_connections} slowloris, {args.slow_body_connections} slow-body and {args.crlf_flood_connections} CRLF-flood connections held; {data["duration"]:.0f} s.

**Lost good requests: {lost}** of {sent:,} (goal 0: {"met" if lost == 0 else "not met"}).

| traffic | requests | outcomes |
|---|---:|---|
{table}

- Roll-out: version {rollout["version"]} AVAILABLE alone {rollout["seconds"]:.1f} s after its directory was copied in.
- Reload storm: {storm["reloads"]} ReloadConfig calls (latest 2 versions, then 1, in turn) settled in {storm["seconds"]:.1f} s.
- kill -9 at {restart["at"]:.0f} s and a restart on the same ports: a probe Predict saw UNAVAILABLE until {restart["unavailable_seconds"]:.1f} s after the kill and its first answer at {restart["first_answer_seconds"]:.1f} s; the longest good call across the kill, riding through on retries, took {restart["longest_good_call_seconds"]:.1f} s.

| from s | good answered | p50 ms | p99 ms | RSS MiB | threads | open files |
|---:|---:|---:|---:|---:|---:|---:|
{timeline}

![Latency, memory, threads and open files over the soak]({plot_link})
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of load")
    parser.add_argument(
        "--export_dir", help="the version directory to serve (default: the bundled model)"
    )
    parser.add_argument("--model_name", default="translator")
    parser.add_argument("--grpc_clients", type=int, default=3)
    parser.add_argument("--rest_clients", type=int, default=2)
    parser.add_argument("--hostile_clients", type=int, default=2)
    parser.add_argument(
        "--hostile_pause", type=float, default=0.2, help="seconds between hostile requests"
    )
    parser.add_argument("--idle_connections", type=int, default=50)
    parser.add_argument("--slowloris_connections", type=int, default=20)
    parser.add_argument("--slow_body_connections", type=int, default=20)
    parser.add_argument("--crlf_flood_connections", type=int, default=5)
    parser.add_argument("--reloads", type=int, default=6)
    parser.add_argument(
        "--client_retry_seconds",
        type=float,
        default=600.0,
        help="how long a good request is retried while the server is down or restarting, "
        "from its first attempt",
    )
    parser.add_argument(
        "--client_backoff", type=float, default=0.1, help="first retry delay (s), doubling"
    )
    parser.add_argument(
        "--client_max_backoff", type=float, default=2.0, help="longest retry delay (s)"
    )
    parser.add_argument("--request_timeout", type=float, default=60.0)
    parser.add_argument("--message_limit_bytes", type=int, default=4 * 2**20)
    parser.add_argument("--sample_seconds", type=float, default=1.0)
    parser.add_argument("--server_flags", nargs="*", action="extend", default=[])
    parser.add_argument("--plot", help=f"the PNG to draw (default with --output: {DEFAULT_PLOT})")
    parser.add_argument("--report_json", help="also write the report's data as JSON here")
    parser.add_argument(
        "--log_dir",
        help="keep the servers' logs here (server-N.log, N the events before its start); "
        "default: a temporary directory, removed at the end",
    )
    parser.add_argument("--section", default=SECTION)
    parser.add_argument("--output", help="write the '<--section>' section of this Markdown file")
    args = parser.parse_args(argv)
    command = shlex.join(
        ["python", "-m", "benchmarks.bench_soak", *(argv if argv is not None else sys.argv[1:])]
    )
    load_before = os.getloadavg()
    args.export_dir = os.path.abspath(args.export_dir or bundled_export())
    data = run_soak(args)
    plot_path = args.plot or (DEFAULT_PLOT if args.output else None)
    plot_link = "(no plot: give --plot)"
    if plot_path:
        plot(data, plot_path)
        plot_link = os.path.relpath(
            plot_path, os.path.dirname(os.path.abspath(args.output or plot_path))
        )
    body = markdown(args, data, command, plot_link, load_before)
    print(body)
    if args.report_json:
        with open(args.report_json, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
    if args.output:
        from benchmarks.report import write_section

        write_section(args.output, args.section, body)
    return 0 if all(row["lost"] == 0 for row in data["good"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
