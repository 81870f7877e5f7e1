"""The model server under a real memory limit, against the small requests that once got it
OOM-killed or froze it, with good clients beside each (into BENCHMARKS.md, its section "Serving
under a memory limit").

    python -m benchmarks.bench_memory_limit --output BENCHMARKS.md

The server (`python -m serving.server`, the bundled model exported once into
exports/soak/translator, or --export_dir) first runs without a limit while good gRPC and REST
clients translate (`GoodClients`): what it maps and holds then is what it needs (`Needs`). Then
it runs under each memory limit this machine can set, `HEADROOM_BYTES` above that need:

- `ADDRESS_SPACE`: `prlimit --as` on the server process (RLIMIT_AS; any user);
- `CGROUP`: a new cgroup of that memory limit (`MemoryCgroup`; root, or a delegated cgroup v2
  subtree), skipped where none can be made, and said so.

Under each, with its good clients translating, every probe of `probes` is sent once (the
requests of the hostile rounds that expanded a few bytes into gigabytes, or cost what the
memory budget did not count), and for each this reports the answer, the server's resident peak
while it was handled above its peak before the probes (the model's: loading, warming up and
serving the good clients; `/proc/<pid>/status` VmHWM, reset before each probe where the kernel
lets this process, `reset_resident_peak`), and the good calls answered beside it; then whether
the server still answers (the same process, its health and its model's status).
`tests/serving/model_server/test_server_memory_limit.py` runs the same probes on the toy model
and asserts what this measures: the codes, 0 good calls lost, the peak within the budget plus
the model plus `MARGIN_BYTES`. Loopback only.
"""

import argparse
import contextlib
import dataclasses
import gzip
import http.client
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import grpc
import psutil
import tensorflow as tf
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from benchmarks.bench_serve import start_server
from benchmarks.bench_soak import bundled_export, predict_request
from benchmarks.report import command_line, machine_description, publish, shown_path
from benchmarks.sentences import SPANISH_SENTENCES
from common.serving_contract import TEXT_INPUT, TRANSLATION_OUTPUT
from serving.model_server.tensors import decoded_bytes

SECTION = "Serving under a memory limit"
ADDRESS_SPACE, CGROUP = "address space (prlimit --as)", "cgroup memory limit"
# What a limit leaves above what the server maps (address space) or holds (cgroup) serving its
# good clients: room for what the requests in flight may hold (a quarter of it becomes the
# default budget) and for the runs.
HEADROOM_BYTES = 2**30
# The stated margin: what the server's resident peak may take, while any probe is handled,
# above the model's peak and the memory budget together (the memory no budget counts: a
# request's bytes before they are counted, the parsers' and the runs' scratch, the allocator's
# slack). Set with room above the highest peak above the model's measured under the probes
# (BENCHMARKS.md, "Serving under a memory limit"), for other machines' allocators and loads.
MARGIN_BYTES = 128 * 2**20
GOOD_TEXTS = list(SPANISH_SENTENCES[:2])


# ----------------------------------------------------------------------------- limits


def address_space_launcher(limit_bytes: int) -> tuple[str, ...]:
    """A command prefix that runs its command under an address-space limit (RLIMIT_AS, soft and
    hard) of `limit_bytes`: util-linux's prlimit, which sets it and execs the command, so the
    server keeps its pid.

    Raises:
        OSError: no prlimit on the PATH.
    """
    if shutil.which("prlimit") is None:
        raise OSError("prlimit (util-linux) is not installed")
    return ("prlimit", f"--as={limit_bytes}", "--")


class MemoryCgroup:
    """A new memory cgroup of `limit_bytes` (`create`), a child of this process's own (cgroup v1
    `memory.limit_in_bytes`, v2 `memory.max`): `launcher` runs a command in it, where the kernel
    OOM-kills what outgrows the limit, as a container's limit does, without touching the rest of
    the machine; `remove` deletes it once its processes have ended."""

    def __init__(self, directory: str, limit_file: str):
        self.directory, self.limit_file = directory, limit_file

    @classmethod
    def create(cls, limit_bytes: int) -> "MemoryCgroup":
        """Raises OSError where no such cgroup can be made (not root, a read-only
        /sys/fs/cgroup, cgroup v2 without a delegated subtree)."""
        parent, limit_file = None, None
        with open("/proc/self/cgroup", encoding="utf-8") as handle:
            for line in handle.read().splitlines():
                _, controllers, path = line.split(":", 2)
                if "memory" in controllers.split(","):
                    parent, limit_file = f"/sys/fs/cgroup/memory{path}", "memory.limit_in_bytes"
                elif controllers == "" and parent is None:
                    parent, limit_file = f"/sys/fs/cgroup{path}", "memory.max"
        name = f"bench-{os.getpid()}-{time.monotonic_ns()}"
        directory = os.path.join(parent or "/nonexistent", name)
        os.mkdir(directory)
        try:
            with open(os.path.join(directory, limit_file), "w", encoding="ascii") as handle:
                handle.write(str(limit_bytes))
        except OSError:
            os.rmdir(directory)
            raise
        return cls(directory, limit_file)

    @property
    def launcher(self) -> tuple[str, ...]:
        """A command prefix that moves the shell into the cgroup, then execs the command (which
        keeps the shell's pid)."""
        return ("sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', self.directory)

    def busy(self) -> bool:
        with open(os.path.join(self.directory, "cgroup.procs"), encoding="ascii") as handle:
            return bool(handle.read().strip())

    def remove(self, timeout: float = 30.0) -> None:
        """Deletes the cgroup; its processes must have been killed and waited for (the kernel
        removes a cgroup's last task a moment after it is reaped)."""
        deadline = time.monotonic() + timeout
        while self.busy():
            if time.monotonic() > deadline:
                raise TimeoutError(f"processes still in {self.directory}")
            time.sleep(0.05)
        os.rmdir(self.directory)


# ----------------------------------------------------------------------------- memory


def _status_bytes(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    raise LookupError(f"no {field} for process {pid}")


def resident_peak_bytes(pid: int) -> int:
    """A process's peak resident memory (VmHWM) since it started or since the last
    `reset_resident_peak`: what it touched, however briefly."""
    return _status_bytes(pid, "VmHWM")


def address_space_peak_bytes(pid: int) -> int:
    """The most address space a process has mapped (VmPeak): what RLIMIT_AS bounds."""
    return _status_bytes(pid, "VmPeak")


def reset_resident_peak(pid: int) -> bool:
    """Resets a process's VmHWM to its resident memory now (`clear_refs` 5, Linux 4.0+), so a
    peak read later is the peak since; False where this process may not (the peak then is the
    peak since the start)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
    except OSError:
        return False
    return True


def alive(pid: int) -> bool:
    """Whether a process runs (a zombie, killed and not yet reaped, does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def logged_budget_bytes(log: str) -> int:
    """The memory budget the server logged when the flag left it out ("Memory budget of the
    requests in flight: N bytes")."""
    marker = "Memory budget of the requests in flight: "
    start = log.index(marker) + len(marker)
    return int(log[start:].split()[0])


# ----------------------------------------------------------------------------- clients


@dataclasses.dataclass(frozen=True)
class Target:
    """A running server: its process id, gRPC address, REST (host, port) and model name."""

    pid: int
    grpc_address: str
    rest_address: tuple[str, int]
    model_name: str


@dataclasses.dataclass(frozen=True)
class Answer:
    """How a request ended: `code`, a gRPC status name or an HTTP status ("200"), or what the
    connection did; `message`, the error's text or the answer's body."""

    code: str
    message: str = ""


def grpc_predict(stub, request: predict_pb2.PredictRequest, timeout: float = 60.0) -> Answer:
    """A Predict's status and, when OK, its translations (JSON)."""
    try:
        response = stub.Predict(request, timeout=timeout)
    except grpc.RpcError as error:
        return Answer(error.code().name, error.details() or "")
    translations = [value.decode("utf-8") for value in response.outputs["translation"].string_val]
    return Answer(grpc.StatusCode.OK.name, json.dumps(translations))


def rest_post(
    target: Target, body: bytes, headers: dict | None = None, timeout: float = 60.0
) -> Answer:
    """A REST predict on a new connection: its status and body, or what the connection did."""
    connection = http.client.HTTPConnection(*target.rest_address, timeout=timeout)
    try:
        connection.request(
            "POST",
            f"/v1/models/{target.model_name}:predict",
            body,
            {"Content-Type": "application/json", **(headers or {})},
        )
        response = connection.getresponse()
        return Answer(str(response.status), response.read().decode("utf-8", "replace"))
    except (OSError, http.client.HTTPException) as error:
        return Answer(type(error).__name__, str(error))
    finally:
        connection.close()


def rest_translations(answer: Answer) -> list[str] | None:
    """The translations of a REST predict's 200 answer (None for any other)."""
    if answer.code != "200":
        return None
    return [row[TRANSLATION_OUTPUT] for row in json.loads(answer.message)["predictions"]]


class GoodClients:
    """A gRPC and a REST client, each translating `texts` in a loop on its own connection
    until `stop`, every answer checked against `reference` (the translations, in order); the
    calls that did not get it are kept in `failures` ("lost"). `wait_for_answers` waits on their
    state, never on time.
    """

    KINDS = ("gRPC", "REST")

    def __init__(self, target: Target, texts: Sequence[str], reference: Sequence[str]):
        self._target, self._texts, self._reference = target, list(texts), list(reference)
        self.answered = {kind: 0 for kind in self.KINDS}
        self.failures: list[tuple[str, Answer]] = []
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._channel = grpc.insecure_channel(target.grpc_address)
        self._threads = [
            threading.Thread(target=self._loop, args=(kind,), daemon=True) for kind in self.KINDS
        ]

    def _call(self, kind: str) -> bool:
        if kind == "gRPC":
            stub = prediction_service_pb2_grpc.PredictionServiceStub(self._channel)
            answer = grpc_predict(stub, predict_request(self._target.model_name, self._texts))
            translations = json.loads(answer.message) if answer.code == "OK" else None
        else:
            body = json.dumps({"instances": self._texts}).encode()
            answer = rest_post(self._target, body)
            translations = rest_translations(answer)
        if translations == self._reference:
            return True
        with self._changed:
            self.failures.append((kind, answer))
            self._changed.notify_all()
        return False

    def _loop(self, kind: str) -> None:
        while not self._stop.is_set():
            if self._call(kind):
                with self._changed:
                    self.answered[kind] += 1
                    self._changed.notify_all()

    def __enter__(self) -> "GoodClients":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)
        self._channel.close()

    def total(self) -> int:
        with self._changed:
            return sum(self.answered.values())

    def wait_for_answers(self, count: int = 1, timeout: float = 120.0) -> None:
        """Waits until each client has had `count` more calls answered (or a call lost) since
        this was called: both are running then.

        Raises:
            TimeoutError: after `timeout` seconds (a hang, not a measurement).
        """
        with self._changed:
            goal = {kind: done + count for kind, done in self.answered.items()}
            lost = len(self.failures)
            if not self._changed.wait_for(
                lambda: (
                    len(self.failures) > lost
                    or all(self.answered[kind] >= goal[kind] for kind in self.KINDS)
                ),
                timeout,
            ):
                raise TimeoutError(f"good clients answered {self.answered}, waiting for {goal}")


# ----------------------------------------------------------------------------- probes


@dataclasses.dataclass(frozen=True)
class Probe:
    """One hostile request: its name, its size on the wire and how to send it."""

    name: str
    wire_bytes: int
    send: Callable[[Target], Answer]


def padded_request(
    model_name: str, dtype: tf.DType, rows: int, value
) -> predict_pb2.PredictRequest:
    """A Predict of `rows` elements of `dtype` for the text input holding one value, which
    TensorFlow pads to the shape (as Tensor::FromProto pads a short value list): a few dozen
    bytes on the wire."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    tensor = request.inputs[TEXT_INPUT]
    tensor.dtype = dtype.as_datatype_enum
    tensor.tensor_shape.dim.add(size=rows)
    getattr(tensor, "string_val" if dtype == tf.string else "float_val").append(value)
    return request


def _grpc_probe(name: str, request: predict_pb2.PredictRequest) -> Probe:
    def send(target: Target) -> Answer:
        with grpc.insecure_channel(target.grpc_address) as channel:
            return grpc_predict(prediction_service_pb2_grpc.PredictionServiceStub(channel), request)

    return Probe(name, request.ByteSize(), send)


def _rest_probe(name: str, body: bytes, headers: dict | None = None) -> Probe:
    return Probe(name, len(body), lambda target: rest_post(target, body, headers))


FLOATS = "a float tensor of 1,932,735,283 elements for the string input, one value (gRPC)"
LONG_ROWS = "8 rows of 'a ' × 8191, each under the string limit (REST)"
PADDED_STRINGS = "one string padded to 10^8 rows (gRPC)"
EMPTY_ARRAYS = "14.3 MiB of empty JSON arrays (REST)"
EMPTY_ARRAYS_GZIP = "empty JSON arrays, gzip, under 10 MiB decompressed (REST)"
PAST_BUDGET = "strings past the budget, within the memory left (gRPC)"
PADDED_ROWS = 10**8
# The JSON bodies: `[]` items, 3 bytes with their comma: 14.3 MiB whole; under TF Serving's
# 10 MiB of decompressed gzip.
EMPTY_ARRAYS_ITEMS, EMPTY_ARRAYS_GZIP_ITEMS = 5_000_000, 3_400_000


def empty_arrays_body(items: int) -> bytes:
    return b'{"instances": [' + b",".join([b"[]"] * items) + b"]}"


def past_budget_request(model_name: str, budget_bytes: int) -> predict_pb2.PredictRequest:
    """One "hola" padded to as many rows as take a quarter more than `budget_bytes` once decoded
    (`tensors.decoded_bytes`, as the budget counts them)."""
    one_row = padded_request(model_name, tf.string, 1, b"hola")
    row_bytes = decoded_bytes(one_row.inputs[TEXT_INPUT], TEXT_INPUT)
    return padded_request(model_name, tf.string, budget_bytes * 5 // 4 // row_bytes + 1, b"hola")


def probes(model_name: str, budget_bytes: int) -> list[Probe]:
    """The probes, in the order they are sent. `budget_bytes`: the server's memory budget, which
    PAST_BUDGET passes by a quarter."""
    long_rows = json.dumps({"instances": ["a " * 8191] * 8}).encode()
    return [
        _grpc_probe(FLOATS, padded_request(model_name, tf.float32, 1_932_735_283, 1.0)),
        _rest_probe(LONG_ROWS, long_rows),
        _grpc_probe(PADDED_STRINGS, padded_request(model_name, tf.string, PADDED_ROWS, b"hola")),
        _rest_probe(EMPTY_ARRAYS, empty_arrays_body(EMPTY_ARRAYS_ITEMS)),
        _rest_probe(
            EMPTY_ARRAYS_GZIP,
            gzip.compress(empty_arrays_body(EMPTY_ARRAYS_GZIP_ITEMS)),
            {"Content-Encoding": "gzip"},
        ),
        _grpc_probe(PAST_BUDGET, past_budget_request(model_name, budget_bytes)),
    ]


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    """A probe's answer, the server's resident peak while it was handled (`peak_bytes`, since
    the probe if `peak_reset`, else since the start), and the good calls answered beside it."""

    probe: Probe
    answer: Answer
    peak_bytes: int
    peak_reset: bool
    good_answered: int


def run_probes(target: Target, clients: GoodClients, to_send: Sequence[Probe]) -> list:
    """Sends each probe once, the good clients running: each has a call answered before the
    probe is sent and another after it is answered, so they run beside it. `ProbeResult`s.

    Raises:
        RuntimeError: the server died (the kernel's OOM killer, an abort).
    """
    results = []
    for probe in to_send:
        clients.wait_for_answers()
        answered_before = clients.total()
        peak_reset = reset_resident_peak(target.pid)
        answer = probe.send(target)
        clients.wait_for_answers()
        if not alive(target.pid):
            raise RuntimeError(f"the server died with the probe {probe.name!r}: {answer}")
        results.append(
            ProbeResult(
                probe,
                answer,
                resident_peak_bytes(target.pid),
                peak_reset,
                clients.total() - answered_before,
            )
        )
    return results


def serving_answers(target: Target) -> dict[str, str]:
    """What the server answers after the probes: its gRPC health and its model's status over
    REST (the version's state)."""
    with grpc.insecure_channel(target.grpc_address) as channel:
        health = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=60
        )
    connection = http.client.HTTPConnection(*target.rest_address, timeout=60)
    try:
        connection.request("GET", f"/v1/models/{target.model_name}")
        response = connection.getresponse()
        status = json.loads(response.read())
    finally:
        connection.close()
    return {
        "health": health_pb2.HealthCheckResponse.ServingStatus.Name(health.status),
        "model status": f"{response.status} "
        + ",".join(row["state"] for row in status["model_version_status"]),
    }


@dataclasses.dataclass(frozen=True)
class Needs:
    """What a server serving its good clients maps (VmPeak) and holds (VmHWM)."""

    address_space_bytes: int
    resident_bytes: int

    def limit(self, kind: str) -> int:
        """The limit of `kind` that leaves HEADROOM_BYTES above this need."""
        need = self.address_space_bytes if kind == ADDRESS_SPACE else self.resident_bytes
        return need + HEADROOM_BYTES


def warm_clients(target: Target, clients: GoodClients, calls: int) -> int:
    """Lets each good client have `calls` calls answered, then returns the server's resident
    peak: the model's (loading, warming up, serving)."""
    clients.wait_for_answers(calls)
    return resident_peak_bytes(target.pid)


def serving_needs(target: Target, reference: Sequence[str], warm_calls: int) -> Needs:
    """What a server without a limit maps and holds once its good clients (translating
    GOOD_TEXTS into `reference`) have had `warm_calls` calls each answered."""
    with GoodClients(target, GOOD_TEXTS, reference) as clients:
        warm_clients(target, clients, warm_calls)
    if clients.failures:
        raise RuntimeError(f"good calls failed without a limit: {clients.failures[:3]}")
    return Needs(address_space_peak_bytes(target.pid), resident_peak_bytes(target.pid))


@dataclasses.dataclass
class LimitRun:
    """One server's run under a limit: its kind and bytes, the budget the server derived from
    it (`logged_budget_bytes`), then what `probe_server` finds: the model's peak, the probes'
    results, the good calls lost, whether the process lives and what it answers after; or why
    the limit could not be set (`skipped`)."""

    kind: str
    limit_bytes: int
    budget_bytes: int = 0
    model_peak_bytes: int = 0
    results: list = dataclasses.field(default_factory=list)
    lost: list = dataclasses.field(default_factory=list)
    alive_after: bool = False
    answers_after: dict = dataclasses.field(default_factory=dict)
    skipped: str = ""


def probe_server(run: LimitRun, target: Target, reference: Sequence[str], warm_calls: int):
    """Warms the good clients up (`warm_clients`), sends every probe beside them (`run_probes`)
    and checks the server after, into `run`."""
    with GoodClients(target, GOOD_TEXTS, reference) as clients:
        run.model_peak_bytes = warm_clients(target, clients, warm_calls)
        run.results = run_probes(target, clients, probes(target.model_name, run.budget_bytes))
    run.lost = list(clients.failures)
    run.alive_after = alive(target.pid)
    run.answers_after = serving_answers(target)


# ----------------------------------------------------------------------------- benchmark


@contextlib.contextmanager
def bench_server(
    export_dir: str, model_name: str, launcher: Sequence[str] = ()
) -> Iterator[tuple[Target, str]]:
    """The local server on `export_dir` (copied in as version 1) under `launcher`, on ports it
    picks: yields its `Target` and its log up to when it served."""
    with tempfile.TemporaryDirectory(prefix="memory-limit-") as workdir:
        base_path = os.path.join(workdir, model_name)
        shutil.copytree(export_dir, os.path.join(base_path, "1"))
        flags = ["--port=0", "--rest_api_free_port", f"--model_name={model_name}"]
        flags.append(f"--model_base_path={base_path}")
        with tempfile.TemporaryFile() as log:
            process, port, rest_port = start_server(flags, log, rest=True, launcher=launcher)
            try:
                log.seek(0)
                started = log.read().decode(errors="replace")
                address, rest_address = f"127.0.0.1:{port}", ("127.0.0.1", rest_port)
                yield Target(process.pid, address, rest_address, model_name), started
            finally:
                process.kill()
                process.wait()


def reference_translations(target: Target) -> list[str]:
    with grpc.insecure_channel(target.grpc_address) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        answer = grpc_predict(stub, predict_request(target.model_name, GOOD_TEXTS))
    if answer.code != "OK":
        raise RuntimeError(f"the server did not translate: {answer}")
    return json.loads(answer.message)


def measure(args) -> tuple[Needs, list[LimitRun]]:
    """The server's needs without a limit, then a `LimitRun` under each kind of limit."""
    with bench_server(args.export_dir, args.model_name) as (target, _):
        reference = reference_translations(target)
        needs = serving_needs(target, reference, args.warm_calls)
    runs = []
    for kind in (ADDRESS_SPACE, CGROUP):
        run = LimitRun(kind, needs.limit(kind))
        runs.append(run)
        cgroup = None
        try:
            if kind == ADDRESS_SPACE:
                launcher = address_space_launcher(run.limit_bytes)
            else:
                cgroup = MemoryCgroup.create(run.limit_bytes)
                launcher = cgroup.launcher
        except OSError as error:
            run.skipped = f"no such limit can be set here: {error}"
            continue
        try:
            with bench_server(args.export_dir, args.model_name, launcher) as (target, log):
                run.budget_bytes = logged_budget_bytes(log)
                probe_server(run, target, reference, args.warm_calls)
        finally:
            if cgroup is not None:
                cgroup.remove()
    return needs, runs


def _mib(value: int) -> str:
    return f"{value / 2**20:,.0f}"


def _signed_mib(value: int) -> str:
    return f"{value / 2**20:+,.0f}".replace("-", "−")


def markdown(needs: Needs, runs: list[LimitRun], model: str, command: str, load: tuple) -> str:
    """The section: the server's needs, a row per limit and probe, a line per limit, then the
    highest peak and the stated bound (the model's peak + the budget + MARGIN_BYTES)."""
    lines = [
        f"Machine: {machine_description()}; load average {load[0]:.2f} before, "
        f"{load[1]:.2f} after; clients and server share the cores.",
        f"Command: `{command}`.",
        "",
        f"The local server on `{model}`, first without a limit while a gRPC and a REST client "
        f"translate: it mapped {_mib(needs.address_space_bytes)} MiB of address space (VmPeak) "
        f"and held {_mib(needs.resident_bytes)} MiB resident (VmHWM). Then under each limit, "
        f"{_mib(HEADROOM_BYTES)} MiB above that, with the default memory budget (no flag), each "
        "probe sent once with both clients translating beside it. Peak: the server's resident "
        "peak while the probe was handled (VmHWM, reset before it), and how far it is above "
        "the model's (the peak from the start through serving the good clients, before any "
        "probe).",
        "",
        "| limit | probe | bytes sent | answer | peak MiB | above the model's MiB | good calls "
        "beside it |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: |",
    ]
    worst, bound_met = None, True
    for run in runs:
        for result in run.results:
            above = result.peak_bytes - run.model_peak_bytes
            worst = above if worst is None else max(worst, above)
            bound_met &= above <= run.budget_bytes + MARGIN_BYTES
            since = "" if result.peak_reset else " (since the start)"
            lines.append(
                f"| {run.kind}, {_mib(run.limit_bytes)} MiB | {result.probe.name} | "
                f"{result.probe.wire_bytes:,} | {result.answer.code} | "
                f"{_mib(result.peak_bytes)}{since} | {_signed_mib(above)} | "
                f"{result.good_answered} |"
            )
    lines.append("")
    for run in runs:
        if run.skipped:
            lines.append(f"- {run.kind}: not measured, {run.skipped}.")
            continue
        good = sum(result.good_answered for result in run.results)
        lines.append(
            f"- {run.kind} of {_mib(run.limit_bytes)} MiB: default budget "
            f"{_mib(run.budget_bytes)} MiB, the model's peak {_mib(run.model_peak_bytes)} MiB; "
            f"good calls lost: **{len(run.lost)}** of {good + len(run.lost)} beside the probes; "
            f"after them the same process {'answers' if run.alive_after else 'is gone'} "
            f"(health {run.answers_after.get('health')}, model status "
            f"{run.answers_after.get('model status')})."
        )
    if worst is not None:
        lines.append(
            f"- The highest resident peak above the model's under any probe: "
            f"**{_signed_mib(worst)} MiB**. The stated bound, the model's peak + the budget + "
            f"{_mib(MARGIN_BYTES)} MiB (`MARGIN_BYTES`): {'met' if bound_met else 'not met'} "
            "under every probe."
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_memory_limit",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--export_dir", help="the version directory to serve (default: the bundled model)"
    )
    parser.add_argument("--model_name", default="translator")
    parser.add_argument(
        "--warm_calls", type=int, default=20, help="good calls of each client before measuring"
    )
    parser.add_argument("--output", help="Markdown file to write the section into")
    args = parser.parse_args(argv)
    command = command_line("benchmarks.bench_memory_limit", argv)
    if args.export_dir is None:
        args.export_dir = bundled_export()
    args.export_dir = os.path.abspath(args.export_dir)
    load_before = os.getloadavg()[0]
    needs, runs = measure(args)
    load = (load_before, os.getloadavg()[0])
    text = markdown(needs, runs, shown_path(args.export_dir), command, load)
    publish(text, args.output, SECTION)
    return 0


if __name__ == "__main__":
    sys.exit(main())
