"""Throughput/latency benchmark of the model server against the in-process SavedModel call.

    python -m benchmarks.bench_serve --model_base_path exports/translator

For concurrency 1, 8 and 32 it measures requests/s and p50/p99 latency of
  * the in-process call of the SavedModel signature (no server, same inputs),
  * `python -m serving.server` over gRPC without batching,
  * the same server with `--enable_batching` (serving/batching.config by default),
  * with --xla_run_dir, that run exported with `--jit_compile`, its warmup requests compiling
    the measured signature's programs for batches of up to --xla_warmup_max_batch sentences
    (batching.config's largest run) of up to --xla_warmup_max_source_tokens tokens, and served
    with batching and `--xla_cpu_compilation_enabled=true`, measured from its first request
    after load: what its warmup requests compiled is all it has,
then soaks the batching server with --soak_requests requests and reports the
growth of its resident memory, and the greedy output length of each sentence
(a merged batch steps until its longest one ends). Last, the adversarial rows: a
REST client of the batching server, one request at a time, timed without and
with --adversarial_idle idle, --adversarial_slowloris slowloris and
--adversarial_slow_body slow-body connections and --adversarial_crlf_flood CRLF
floods held against the same port (benchmarks/held_connections.py; a held turn is timed once the
server has taken them all in, a quiet one once it has let them go), and the server's threads, file
descriptors and memory before, during and after. At each concurrency the
setups take turns (--rounds), so a slow spell of a shared machine does not
land on one of them.
The servers run as subprocesses so their memory can be measured and the client
threads do not share their interpreter; --server_flags go to all. Output is a
Markdown section (with --output, written as the section <--section> of BENCHMARKS.md),
with the goals: gRPC overhead <= 10% over in-process at concurrency 1, batching
>= 3x the unbatched throughput at concurrency 32, soak memory growth < 10%,
for the --jit_compile export p99 <= 2x p50 at every concurrency, REST p99 with
the connections held <= 2x without, and threads (within `THREAD_MARGIN`) and descriptors back to baseline.
Loopback only; every loop is bounded by a request count.
"""

import argparse
import collections
import concurrent.futures
import contextlib
import dataclasses
import http.client
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Sequence

import grpc
import numpy as np
import psutil
from tqdm import tqdm

from benchmarks.held_connections import CRLF_FLOOD, IDLE, SLOW_BODY, SLOWLORIS, HeldConnections
from benchmarks.sentences import SPANISH_SENTENCES
from common.serving_contract import ALIGNMENTS_SIGNATURE, GREEDY_SIGNATURE, TEXT_INPUT
from serving.model_server.server import GRPC_PORT_LOG_LINE, REST_PORT_LOG_LINE

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVING_DIR = os.path.join(REPO_ROOT, "serving")  # the committed batching.config
SECTION = "Serving"  # the results page's section (benchmarks/report.py)
IN_PROCESS, NO_BATCHING, BATCHING = "in-process SavedModel", "gRPC, no batching", "gRPC, batching"
XLA_BATCHING = "gRPC, batching, --jit_compile export"
REST_QUIET = "REST, batching"
# A gRPC channel option: the channel connects on its own, sharing no subchannel (nor its
# reconnect backoff) with the process's other channels to the same address.
LOCAL_SUBCHANNEL_POOL = ("grpc.use_local_subchannel_pool", 1)
CHANNEL_READY_SECONDS = 60


def percentile_ms(latencies: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(latencies) * 1000.0, q))


@dataclasses.dataclass
class Load:
    """What a load run saw: each successful call's latency (s), the wall time (s), the failures."""

    latencies: list[float] = dataclasses.field(default_factory=list)
    elapsed: float = 0.0
    errors: int = 0

    def __add__(self, other: "Load") -> "Load":
        return Load(
            self.latencies + other.latencies,
            self.elapsed + other.elapsed,
            self.errors + other.errors,
        )

    def summary(self) -> dict[str, float]:
        """{"rps", "p50_ms", "p99_ms", "errors"}."""
        latencies = self.latencies or [float("nan")]
        return {
            "rps": len(self.latencies) / self.elapsed,
            "p50_ms": percentile_ms(latencies, 50),
            "p99_ms": percentile_ms(latencies, 99),
            "errors": self.errors,
        }


def run_load(call: Callable[[int], None], total: int, concurrency: int, label: str) -> Load:
    """Runs `call(i)` for i < total from `concurrency` threads."""
    latencies: list[float] = []
    errors = 0

    def timed(index: int) -> float:
        start = time.perf_counter()
        call(index)
        return time.perf_counter() - start

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        futures = [pool.submit(timed, i) for i in range(total)]
        for future in tqdm(
            concurrent.futures.as_completed(futures),
            total=total,
            desc=label,
            leave=False,
            file=sys.stderr,
        ):
            try:
                latencies.append(future.result())
            except Exception:  # Counted, not fatal: the table reports errors.
                errors += 1
    return Load(latencies, time.perf_counter() - start, errors)


def measure_interleaved(
    callers: dict[str, Callable[[int], None]],
    concurrency_levels: Sequence[int],
    requests: int,
    rounds: int,
    cold: Collection[str] = (),
) -> list[tuple]:
    """(setup, concurrency, summary, per-round requests/s) rows; at each concurrency the setups
    take turns, `rounds` times, `requests / rounds` calls each, so a slow spell of a shared
    machine hits all alike. The summary is over all rounds. Each setup's path is warmed by one
    call before timing, but those of `cold`: their first timed calls are their first calls."""
    rows = []
    for concurrency in concurrency_levels:
        loads: dict[str, list[Load]] = {setup: [] for setup in callers}
        for setup, call in callers.items():
            if setup not in cold:
                call(0)
        for _ in range(rounds):
            for setup, call in callers.items():
                loads[setup].append(
                    run_load(call, requests // rounds, concurrency, f"{setup} c={concurrency}")
                )
        rows.extend(
            (
                setup,
                concurrency,
                sum(runs, Load()).summary(),
                [run.summary()["rps"] for run in runs],
            )
            for setup, runs in loads.items()
        )
    return sorted(rows, key=lambda row: list(callers).index(row[0]))


def start_server(
    flags: Sequence[str],
    log,
    rest: bool = False,
    startup_timeout: float = 180,
    launcher: Sequence[str] = (),
) -> tuple:
    """Starts `python -m serving.server *flags` writing its log to `log` (a binary file) and
    returns (process, gRPC port, REST port or None) once it logs the ports it bound (the REST
    one too when `rest`, the last line before it serves) and its gRPC channel is ready.
    `launcher`: a command prefix the server runs under, which must exec it (a memory limit's:
    `prlimit --as=N --`), so the process is the server's.

    Raises:
        RuntimeError: the server exited, logged no port within `startup_timeout` seconds or
            did not accept a gRPC connection within `CHANNEL_READY_SECONDS` after; with its log
            (the process is killed).
    """
    process = subprocess.Popen(
        [*launcher, sys.executable, "-m", "serving.server", *flags],
        cwd=REPO_ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    ports = {GRPC_PORT_LOG_LINE: None, REST_PORT_LOG_LINE: None}
    wanted = [GRPC_PORT_LOG_LINE, REST_PORT_LOG_LINE] if rest else [GRPC_PORT_LOG_LINE]
    deadline = time.monotonic() + startup_timeout
    while any(ports[line] is None for line in wanted):
        log.seek(0)
        text = log.read().decode(errors="replace")
        for line in wanted:
            match = line.search(text)
            ports[line] = int(match.group(1)) if match else None
        if any(ports[line] is None for line in wanted):
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError("server did not start:\n" + text)
            time.sleep(0.1)
    # A connection of its own: a channel of this process to the same address (a client of a
    # server killed and restarted on its ports) shares gRPC's subchannel, whose reconnect
    # backoff had grown to a minute while the server was down.
    channel = grpc.insecure_channel(
        f"127.0.0.1:{ports[GRPC_PORT_LOG_LINE]}", options=[LOCAL_SUBCHANNEL_POOL]
    )
    try:
        grpc.channel_ready_future(channel).result(timeout=CHANNEL_READY_SECONDS)
    except grpc.FutureTimeoutError:
        process.kill()
        log.seek(0)
        raise RuntimeError(
            f"server accepted no gRPC connection within {CHANNEL_READY_SECONDS} s:\n"
            + log.read().decode(errors="replace")
        ) from None
    finally:
        channel.close()
    return process, ports[GRPC_PORT_LOG_LINE], ports[REST_PORT_LOG_LINE]


@dataclasses.dataclass(frozen=True)
class RunningServer:
    """A server `server_process` started: its gRPC address, its process, the seconds it took to
    load and answer, and its REST (host, port) when it serves REST."""

    address: str
    process: psutil.Process
    seconds: float
    rest_address: tuple[str, int] | None = None


@contextlib.contextmanager
def server_process(
    model_name: str,
    base_path: str,
    extra_flags: Sequence[str],
    startup_timeout: float = 180,
    rest: bool = False,
) -> Iterator[RunningServer]:
    """Starts `python -m serving.server` on ports it picks (`--port=0`, and with `rest`
    `--rest_api_free_port`) and yields it once it answers (within `startup_timeout` seconds)."""
    flags = [
        "--port=0",
        f"--model_name={model_name}",
        f"--model_base_path={base_path}",
        "--file_system_poll_wait_seconds=0",
        *(["--rest_api_free_port"] if rest else []),
        *extra_flags,
    ]
    log = tempfile.TemporaryFile()
    process = None
    try:
        start = time.perf_counter()
        process, port, rest_port = start_server(flags, log, rest, startup_timeout)
        yield RunningServer(
            f"127.0.0.1:{port}",
            psutil.Process(process.pid),
            time.perf_counter() - start,
            ("127.0.0.1", rest_port) if rest else None,
        )
    finally:
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
        log.close()


@dataclasses.dataclass(frozen=True)
class XlaLoad:
    """How the --jit_compile export's server loaded: the run exported, its warmup records, the
    seconds from the server's start until it answered (its warmup included), and what the
    records compile (in words)."""

    run_dir: str
    warmup_records: int
    seconds: float
    warmup_bounds: str


@contextlib.contextmanager
def xla_export(
    run_dir: str, model_name: str, warmup_flags: Sequence[str] = ()
) -> Iterator[tuple[str, int]]:
    """Exports `run_dir` with `python -m inference.export --jit_compile` and `warmup_flags` (its
    --warmup_* flags) into a temporary model base; yields (its path, its warmup records).

    Raises:
        subprocess.CalledProcessError: the export failed (its output went to stderr).
    """
    from serving.model_server.servable import read_warmup_requests

    with tempfile.TemporaryDirectory(prefix="bench-serve-xla-") as export_base:
        command = [sys.executable, "-m", "inference.export", "--run_dir", run_dir]
        command += ["--export_base", export_base, "--model_name", model_name, "--jit_compile"]
        command += warmup_flags
        subprocess.run(
            command,
            cwd=REPO_ROOT,
            check=True,
            stdout=subprocess.DEVNULL,
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        )
        base_path = os.path.join(export_base, model_name)
        yield base_path, len(read_warmup_requests(os.path.join(base_path, "1")))


def grpc_caller(address: str, model_name: str, signature: str, batches: list[list[str]]):
    """A function sending batch i % len(batches) as one Predict request."""
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    channel = grpc.insecure_channel(address)
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    requests = []
    for batch in batches:
        request = predict_pb2.PredictRequest()
        request.model_spec.name = model_name
        request.model_spec.signature_name = signature
        request.inputs[TEXT_INPUT].CopyFrom(tf.make_tensor_proto(batch, dtype=tf.string))
        requests.append(request)

    def call(index: int) -> None:
        stub.Predict(requests[index % len(requests)], timeout=60)

    return call


def greedy_output_lengths(address: str, model_name: str, sentences: list[str]):
    """Output tokens ([END] included) the served model's greedy decoder gives each sentence,
    from its `alignments` signature; None if the server cannot answer that (a model without
    the signature)."""
    from serving.client import TranslationClient, TranslationError

    with TranslationClient(address, model_name, timeout=120, retries=0) as client:
        try:
            results = client.translate_with_details(sentences, ALIGNMENTS_SIGNATURE)
        except TranslationError:
            return None
    return [len(result.target_tokens) for result in results]


def rest_caller(rest_address: tuple[str, int], model_name: str, batches: list[list[str]]):
    """A function POSTing batch i % len(batches) to :predict on a new connection, as a simple
    REST client does; raises on anything but 200."""
    bodies = [json.dumps({"instances": batch}).encode() for batch in batches]

    def call(index: int) -> None:
        connection = http.client.HTTPConnection(*rest_address, timeout=120)
        try:
            connection.request(
                "POST",
                f"/v1/models/{model_name}:predict",
                bodies[index % len(bodies)],
                {"Content-Type": "application/json"},
            )
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"REST answered {response.status}")
        finally:
            connection.close()

    return call


# gRPC's core runs its work on a pool of threads it sizes itself ("event_engine", watched by its
# "lifeguard" thread): it adds one when its workers look busy, as they do on a starved CPU, and
# retires idle ones on its own schedule. Those come and go with gRPC's timers, not with what a
# client holds open, so `resources` counts them apart.
GRPC_POOL_THREAD_NAME = "event_engine"
# How many threads the server may end above its baseline after the hostile connections and
# still count as back: the runtimes under it start a thread of their own now and then (seen
# once, under load: one more named `python`, still there 120 s after the last connection was let
# go). A thread kept per connection would leave dozens.
THREAD_MARGIN = 2


def thread_names(process: psutil.Process) -> collections.Counter:
    """The process's threads by their OS names (Linux: /proc/PID/task/TID/comm)."""
    names = collections.Counter()
    for thread in process.threads():
        try:
            with open(f"/proc/{process.pid}/task/{thread.id}/comm", encoding="utf-8") as comm:
                names[comm.read().strip()] += 1
        except FileNotFoundError:  # the thread ended meanwhile
            pass
    return names


def resources(process: psutil.Process) -> dict[str, float]:
    """The server's resident memory (MiB), threads (gRPC's own pool apart:
    `GRPC_POOL_THREAD_NAME`) and open file descriptors."""
    names = thread_names(process)
    with process.oneshot():
        return {
            "rss_mib": process.memory_info().rss / 2**20,
            "threads": sum(names.values()) - names[GRPC_POOL_THREAD_NAME],
            "grpc_pool_threads": names[GRPC_POOL_THREAD_NAME],
            "fds": process.num_fds(),
        }


@dataclasses.dataclass
class Adversarial:
    """What a REST client saw without and with idle and slowloris connections held, and the
    server's resources before, while held and after they were let go; `arrivals`: the seconds
    of each round's first, untimed call, made as soon as the server had every connection."""

    quiet: Load
    held: Load
    before: dict[str, float]
    during: dict[str, float]
    after: dict[str, float]
    settle_seconds: float
    replaced: int
    arrivals: list[float] = dataclasses.field(default_factory=list)


def wait_for_descriptors(
    process: psutil.Process, enough: Callable[[int], bool], timeout: float
) -> bool:
    """Polls the process's open descriptors until `enough(count)`; False after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not enough(process.num_fds()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def measure_adversarial(
    call: Callable[[int], None],
    server: RunningServer,
    requests: int,
    rounds: int,
    idle: int,
    slowloris: int,
    settle_timeout: float = 120.0,
    slow_body: int = 0,
    crlf_flood: int = 0,
) -> Adversarial:
    """Times `call` one request at a time, in `rounds` turns without and with `idle` idle,
    `slowloris` slowloris, `slow_body` slow-body connections and `crlf_flood` CRLF floods held
    against the server's REST port (each it closes is replaced), then waits (at most
    `settle_timeout` s) for its threads and file descriptors to come back to what they were
    before the first hostile connection.

    Each held turn is timed once the server holds a descriptor for every connection and has
    answered one untimed call behind them (its seconds are `arrivals`), and each quiet turn
    once the server has closed the last turn's: the REST front end takes in and lets go of
    connections in turn, so the first request after well over a thousand arrive or leave at once
    waits for them (0.1-0.4 s with the transport alone), which would put each round's change of
    phase, not the held connections, into both p99s."""
    call(0)
    before = resources(server.process)
    quiet, held, during, arrivals = [], [], [], []
    replaced = 0
    # CRLF floods are refused and replaced every few seconds: the count leaves them out.
    steady = before["fds"] + idle + slowloris + slow_body

    def count_closed(*outcome) -> None:
        nonlocal replaced
        replaced += 1

    for _ in range(rounds):
        quiet.append(run_load(call, requests // rounds, 1, "REST, quiet"))
        holder = HeldConnections(
            lambda: server.rest_address,
            idle,
            slowloris,
            count_closed,
            slow_body=slow_body,
            crlf_flood=crlf_flood,
        )
        with holder:
            if not holder.wait_until_held(timeout=120) or not wait_for_descriptors(
                server.process, lambda fds: fds >= steady, timeout=120
            ):
                raise RuntimeError(
                    f"could not hold {idle} idle, {slowloris} slowloris, {slow_body} slow-body "
                    f"connections and {crlf_flood} CRLF floods"
                )
            first = run_load(call, 1, 1, "REST, first call while held")
            arrivals.extend(first.latencies)
            held.append(Load(errors=first.errors))
            held.append(run_load(call, requests // rounds, 1, "REST, connections held"))
            during.append(resources(server.process))
        wait_for_descriptors(server.process, lambda fds: fds <= before["fds"], settle_timeout)
    let_go = time.monotonic()
    after = resources(server.process)
    while time.monotonic() - let_go < settle_timeout and not back_to_baseline(before, after):
        time.sleep(0.5)
        after = resources(server.process)
    peak = {key: max(sample[key] for sample in during) for key in before}
    return Adversarial(
        sum(quiet, Load()),
        sum(held, Load()),
        before,
        peak,
        after,
        time.monotonic() - let_go,
        replaced,
        arrivals,
    )


def held_connections(args) -> dict[str, int]:
    """How many connections of each hostile kind the adversarial rows hold."""
    return {
        IDLE: args.adversarial_idle,
        SLOWLORIS: args.adversarial_slowloris,
        SLOW_BODY: args.adversarial_slow_body,
        CRLF_FLOOD: args.adversarial_crlf_flood,
    }


def held_connections_text(args, joiner: str | None = None) -> str:
    """The held connections in words: "1,000 idle, 200 slowloris and 200 slow-body
    connections", or joined by `joiner`; kinds with none held are left out."""
    names = {IDLE: "idle", SLOWLORIS: "slowloris", SLOW_BODY: "slow-body", CRLF_FLOOD: "CRLF-flood"}
    held = [f"{count:,} {names[kind]}" for kind, count in held_connections(args).items() if count]
    if joiner is None and len(held) > 1:
        return ", ".join(held[:-1]) + f" and {held[-1]} connections"
    return (joiner or "").join(held) + " connections"


def back_to_baseline(before: dict[str, float], after: dict[str, float]) -> bool:
    """Whether the server's threads (within `THREAD_MARGIN`) and file descriptors are back to
    what they were (`resources` samples)."""
    return after["threads"] <= before["threads"] + THREAD_MARGIN and after["fds"] <= before["fds"]


def adversarial_goal(args, adversarial: Adversarial) -> str:
    """The report's lines for the adversarial rows: p99 ratio and resources against baseline."""
    quiet, held = adversarial.quiet.summary(), adversarial.held.summary()
    ratio = held["p99_ms"] / quiet["p99_ms"]
    before, during, after = adversarial.before, adversarial.during, adversarial.after
    back = back_to_baseline(before, after)
    rss_growth = 100.0 * (after["rss_mib"] / before["rss_mib"] - 1.0)
    return (
        f"- REST under {held_connections_text(args)} (batching server, one request at a time, "
        f"a new connection each): p99 **{ratio:.2f}×** the quiet p99 ({held['p99_ms']:.0f} vs "
        f"{quiet['p99_ms']:.0f} ms; goal ≤ 2×: {'met' if ratio <= 2 else 'not met'}); "
        f"{adversarial.replaced:,} held connections closed by the server and replaced."
        f"{arrival_text(adversarial.arrivals)}\n"
        f"- Server resources before → while held (peak) → after: threads (gRPC's own pool apart) "
        f"{before['threads']:.0f} → {during['threads']:.0f} → {after['threads']:.0f}, file "
        f"descriptors {before['fds']:.0f} → {during['fds']:.0f} → {after['fds']:.0f}, resident "
        f"memory {before['rss_mib']:,.0f} → {during['rss_mib']:,.0f} → "
        f"{after['rss_mib']:,.0f} MiB ({rss_growth:+.1f}%), {adversarial.settle_seconds:.1f} s "
        f"after the last was let go (goal: threads, within {THREAD_MARGIN}, and descriptors back to "
        f"baseline: "
        f"{'met' if back else 'not met'})."
    )


def arrival_text(arrivals: Sequence[float]) -> str:
    """The report's words on each round's first call, made as the held connections arrived."""
    if not arrivals:
        return ""
    low, high = min(arrivals) * 1000, max(arrivals) * 1000
    return (
        f" Each round's first call, untimed above, made as soon as the server held every "
        f"connection: {low:.0f}–{high:.0f} ms (it waits behind their arrival)."
    )


def in_process_caller(
    base_path: str, signature: str, batches: list[list[str]], server_flags: Sequence[str] = ()
):
    """A function running batch i % len(batches) through the SavedModel in this process,
    with the TensorFlow thread and XLA settings that `server_flags` give the servers."""
    from serving.model_server import server
    from serving.model_server.servable import load_servable

    options = server.parse_flags([f"--model_base_path={base_path}", *server_flags])
    server.configure_tensorflow_threads(options)

    version = max(int(name) for name in os.listdir(base_path) if name.isdigit())
    servable = load_servable(
        "bench",
        version,
        os.path.join(base_path, str(version)),
        xla_compilation_enabled=options.xla_cpu_compilation_enabled,
    )
    outputs = sorted(servable.signature_defs[signature].outputs)
    inputs = [
        {TEXT_INPUT: np.array([t.encode() for t in batch], dtype=object)} for batch in batches
    ]
    servable.run(signature, inputs[0], outputs)  # First call traces the function.

    def call(index: int) -> None:
        servable.run(signature, inputs[index % len(inputs)], outputs)

    return call


def xla_goal(by_setup, concurrency_levels, xla_load: XlaLoad) -> str:
    """The goal line of the --jit_compile export: p99 within 2× p50 at every concurrency."""
    ratios = []
    for concurrency in concurrency_levels:
        result = by_setup[(XLA_BATCHING, concurrency)]
        ratios.append((result["p99_ms"] / result["p50_ms"], concurrency, result))
    measured = ", ".join(
        f"**{ratio:.1f}×** at concurrency {concurrency} (p50 {result['p50_ms']:.0f} ms, p99 "
        f"{result['p99_ms']:.0f} ms)"
        for ratio, concurrency, result in ratios
    )
    met = all(ratio <= 2 for ratio, _, _ in ratios)
    return (
        f"- `--jit_compile` export of `{xla_load.run_dir}` (batching server; it loaded in "
        f"{xla_load.seconds:.0f} s, replaying {xla_load.warmup_records} warmup requests: "
        f"{xla_load.warmup_bounds}), from "
        f"its first request after load: p99 / p50 {measured}. Goal p99 ≤ 2× p50: "
        f"{'met' if met else 'not met'}."
    )


def report(
    args,
    command,
    rows,
    soak: Load,
    rss,
    load_before,
    output_lengths=None,
    xla_load=None,
    adversarial: Adversarial | None = None,
) -> str:
    """The Markdown section: setup, the table, the goals and the soak (and, given the greedy
    output length of each sentence, how many steps a merged batch runs; given `xla_load`, the
    --jit_compile export's goal; given `adversarial`, its rows and goals)."""
    from benchmarks.report import machine_description

    by_setup = {(setup, concurrency): result for setup, concurrency, result, _ in rows}
    round_rps = {(setup, concurrency): rps for setup, concurrency, _, rps in rows}
    table = "\n".join(
        f"| {setup} | {concurrency} | {result['rps']:.1f} | {result['p50_ms']:.0f} | "
        f"{result['p99_ms']:.0f} | {result['errors']} |"
        for setup, concurrency, result, _ in rows
    )
    if adversarial is not None:
        for setup, load in (
            (REST_QUIET, adversarial.quiet),
            (f"{REST_QUIET}, {held_connections_text(args, ' + ')} held", adversarial.held),
        ):
            result = load.summary()
            table += (
                f"\n| {setup} | 1 | {result['rps']:.1f} | {result['p50_ms']:.0f} | "
                f"{result['p99_ms']:.0f} | {result['errors']} |"
            )
    goals = []
    low, high = min(args.concurrency), max(args.concurrency)
    in_process, plain = by_setup[(IN_PROCESS, low)], by_setup[(NO_BATCHING, low)]
    overhead = 100.0 * (in_process["rps"] / plain["rps"] - 1.0)
    goals.append(
        f"- gRPC server overhead at concurrency {low}: **{overhead:+.1f}%** requests/s "
        f"({plain['rps']:.1f} through gRPC vs {in_process['rps']:.1f} in process; p50 "
        f"{plain['p50_ms']:.0f} vs {in_process['p50_ms']:.0f} ms). Goal ≤ 10%: "
        f"{'met' if overhead <= 10 else 'not met'}."
    )
    batched, unbatched = by_setup[(BATCHING, high)], by_setup[(NO_BATCHING, high)]
    speedup = batched["rps"] / unbatched["rps"]
    # The rounds ran back to back, so their ratios show how much a shared machine moves it.
    round_speedups = ", ".join(
        f"{with_batching / without:.1f}×"
        for with_batching, without in zip(
            round_rps[(BATCHING, high)], round_rps[(NO_BATCHING, high)]
        )
    )
    goals.append(
        f"- Batching vs no batching at concurrency {high}: **{speedup:.1f}×** requests/s "
        f"({batched['rps']:.1f} vs {unbatched['rps']:.1f}; round by round {round_speedups}). "
        f"Goal ≥ 3×: {'met' if speedup >= 3 else 'not met'}."
    )
    if xla_load is not None:
        goals.append(xla_goal(by_setup, args.concurrency, xla_load))
    if output_lengths:
        mean, longest = float(np.mean(output_lengths)), max(output_lengths)
        goals.append(
            f"- Greedy output tokens per sentence ([END] included): mean {mean:.1f}, longest "
            f"{longest}. A merged batch steps until its longest sentence ends; sentences that "
            f"have ended leave it, so its later steps run on fewer rows."
        )
    if adversarial is not None:
        goals.append(adversarial_goal(args, adversarial))
    rss_before, rss_after = rss
    growth = 100.0 * (rss_after - rss_before) / rss_before
    if not args.soak_requests:
        goals.append("- Soak: skipped (--soak_requests 0).")
    else:
        soaked = soak.summary()
        goals.append(
            f"- Soak (batching server, {args.soak_requests:,} requests at concurrency "
            f"{args.soak_concurrency}): {soaked['rps']:.1f} requests/s, p99 "
            f"{soaked['p99_ms']:.0f} ms, {soaked['errors']} errors; resident memory "
            f"{rss_before / 2**20:,.0f} → {rss_after / 2**20:,.0f} MiB (**{growth:+.1f}%**; "
            f"goal < 10%: {'met' if growth < 10 else 'not met'})."
        )
    with open(args.batching_parameters_file, encoding="utf-8") as config:
        batching = "; ".join(
            line.strip() for line in config if line.strip() and not line.startswith("#")
        )
    return f"""Command: `{command}`
Machine: {machine_description()}; load average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after; client, servers and model share the cores.
Model: `{args.model_base_path}` (latest version), signature `{args.signature_name}`, inputs {f"from `{args.sentences_file}`" if args.sentences_file else f"the {len(SPANISH_SENTENCES)} Spanish sentences of `benchmarks/sentences.py`"}, {args.sentences_per_request} sentence(s) per request, {args.requests} requests per row, the setups taking turns in {args.rounds} rounds; server flags: `{" ".join(args.server_flags) or "defaults"}`; batching parameters: `{batching}`.

| setup | concurrency | requests/s | p50 ms | p99 ms | errors |
|---|---:|---:|---:|---:|---:|
{table}

{chr(10).join(goals)}
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_serve",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model_base_path", required=True, help="directory of numbered versions")
    parser.add_argument("--model_name", default="translator", help="served model name")
    parser.add_argument("--signature_name", default=GREEDY_SIGNATURE)
    parser.add_argument(
        "--sentences_file",
        help="one sentence per line (default: the Spanish sentences of benchmarks/sentences.py)",
    )
    parser.add_argument("--sentences_per_request", type=int, default=1)
    parser.add_argument("--requests", type=int, default=400, help="requests per measurement")
    parser.add_argument(
        "--rounds",
        type=int,
        default=4,
        help="the setups take turns this many times per concurrency",
    )
    parser.add_argument(
        "--server_flags",
        nargs="*",
        action="extend",
        default=[],
        help="extra flags for both servers, e.g. "
        "--server_flags=--tensorflow_intra_op_parallelism=1 (repeat it for more than one)",
    )
    parser.add_argument(
        "--xla_run_dir",
        help="also export this run (or bundle) with --jit_compile and measure it served with "
        "batching and --xla_cpu_compilation_enabled=true, from its first request after load",
    )
    parser.add_argument(
        "--xla_warmup_max_batch",
        type=int,
        default=16,
        help="the --jit_compile export's --warmup_max_batch (default: %(default)s, "
        "max_execution_batch_size of serving/batching.config)",
    )
    parser.add_argument(
        "--xla_warmup_max_source_tokens",
        type=int,
        default=32,
        help="the --jit_compile export's --warmup_max_source_tokens (default: %(default)s, "
        "more than the longest of benchmarks/sentences.py)",
    )
    parser.add_argument(
        "--section", default=SECTION, help="title of the section written into --output"
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--soak_requests", type=int, default=10_000)
    parser.add_argument("--soak_concurrency", type=int, default=32)
    parser.add_argument(
        "--adversarial_idle",
        type=int,
        default=1000,
        help="idle REST connections held against the batching server in the adversarial rows",
    )
    parser.add_argument(
        "--adversarial_slowloris",
        type=int,
        default=200,
        help="slowloris REST connections (a header byte a second) held with them "
        "(all four kinds 0: no adversarial rows)",
    )
    parser.add_argument(
        "--adversarial_slow_body",
        type=int,
        default=200,
        help="slow-body REST connections (a head announcing 1 MB, then a body byte a second) "
        "held with them",
    )
    parser.add_argument(
        "--adversarial_crlf_flood",
        type=int,
        default=20,
        help="REST connections sending empty lines (16 KiB a second) and never a request, held "
        "with them (each refused at the head limit is replaced)",
    )
    parser.add_argument(
        "--adversarial_requests",
        type=int,
        default=200,
        help="REST requests timed without and as many with the connections held",
    )
    parser.add_argument(
        "--batching_parameters_file", default=os.path.join(SERVING_DIR, "batching.config")
    )
    parser.add_argument(
        "--output",
        help="write the results as the '<--section>' section of "
        "this Markdown file (created if missing)",
    )
    args = parser.parse_args(argv)
    command = shlex.join(
        ["python", "-m", "benchmarks.bench_serve", *(argv if argv is not None else sys.argv[1:])]
    )
    load_before = os.getloadavg()
    # The adversarial rows hold a socket each, here and in the server (which inherits this).
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    sentences = list(SPANISH_SENTENCES)
    if args.sentences_file:
        with open(args.sentences_file, encoding="utf-8") as sentences_file:
            sentences = [line.strip() for line in sentences_file if line.strip()]
    size = args.sentences_per_request
    batches = [
        [sentences[(i + j) % len(sentences)] for j in range(size)] for i in range(len(sentences))
    ]
    base_path = os.path.abspath(args.model_base_path)
    batching_flags = [
        "--enable_batching=true",
        f"--batching_parameters_file={args.batching_parameters_file}",
    ]
    with contextlib.ExitStack() as servers:
        plain_address = servers.enter_context(
            server_process(args.model_name, base_path, args.server_flags)
        ).address
        batching = servers.enter_context(
            server_process(
                args.model_name, base_path, [*args.server_flags, *batching_flags], rest=True
            )
        )
        batching_address, batching_process = batching.address, batching.process
        callers = {
            IN_PROCESS: in_process_caller(
                base_path, args.signature_name, batches, args.server_flags
            ),
            NO_BATCHING: grpc_caller(plain_address, args.model_name, args.signature_name, batches),
            BATCHING: grpc_caller(batching_address, args.model_name, args.signature_name, batches),
        }
        xla_load = None
        if args.xla_run_dir:
            xla_base_path, warmup_records = servers.enter_context(
                xla_export(
                    args.xla_run_dir,
                    args.model_name,
                    [
                        f"--warmup_signatures={args.signature_name}",
                        f"--warmup_max_batch={args.xla_warmup_max_batch}",
                        f"--warmup_max_source_tokens={args.xla_warmup_max_source_tokens}",
                    ],
                )
            )
            xla_flags = [*args.server_flags, *batching_flags, "--xla_cpu_compilation_enabled=true"]
            # A bound on a hang: its warmup compiles a program per record, seconds each.
            xla_server = servers.enter_context(
                server_process(args.model_name, xla_base_path, xla_flags, startup_timeout=7200)
            )
            xla_address = xla_server.address
            xla_load = XlaLoad(
                args.xla_run_dir,
                warmup_records,
                xla_server.seconds,
                f"{args.signature_name}'s programs for batches of up to "
                f"{args.xla_warmup_max_batch} sentences of up to "
                f"{args.xla_warmup_max_source_tokens} tokens",
            )
            callers[XLA_BATCHING] = grpc_caller(
                xla_address, args.model_name, args.signature_name, batches
            )
        output_lengths = greedy_output_lengths(plain_address, args.model_name, sentences)
        rows = measure_interleaved(
            callers, args.concurrency, args.requests, args.rounds, cold=[XLA_BATCHING]
        )
        rss_before = batching_process.memory_info().rss
        soak = (
            run_load(callers[BATCHING], args.soak_requests, args.soak_concurrency, "soak")
            if args.soak_requests
            else Load()
        )
        rss_after = batching_process.memory_info().rss
        adversarial = None
        if any(held_connections(args).values()):
            adversarial = measure_adversarial(
                rest_caller(batching.rest_address, args.model_name, batches),
                batching,
                args.adversarial_requests,
                args.rounds,
                args.adversarial_idle,
                args.adversarial_slowloris,
                slow_body=args.adversarial_slow_body,
                crlf_flood=args.adversarial_crlf_flood,
            )

    body = report(
        args,
        command,
        rows,
        soak,
        (rss_before, rss_after),
        load_before,
        output_lengths,
        xla_load,
        adversarial,
    )
    print(body)
    if args.output:
        from benchmarks.report import write_section

        write_section(args.output, args.section, body)
    adversarial_errors = adversarial.quiet.errors + adversarial.held.errors if adversarial else 0
    failed = soak.errors + adversarial_errors + sum(r["errors"] for _, _, r, _ in rows)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
