"""The model server under a real memory limit, against the small requests that once got it
OOM-killed or froze every client (large: three servers start).

Under a 6 GiB container limit a 42-byte gRPC Predict of a float tensor of 1,932,735,283
elements holding one value was made whole (7.2 GiB) and the kernel killed the server, every
client getting UNAVAILABLE; a 131 KB REST predict of 8 rows of 'a ' × 8191 was killed the same
way; one string padded to 10^8 rows grew it by 763 MB and stalled every client; 14.3 MiB of
empty JSON arrays took 2.73 GB. Here `python -m serving.server` runs under each limit this
machine can set (`benchmarks.bench_memory_limit`: `prlimit --as` on the process, which any user
can set; a cgroup the test makes, where it can, else it skips and says why), a limit of 1 GiB
above what the same server maps or holds serving good clients without one (measured first, so
the limit fits this machine's TensorFlow and cores), the memory budget left to its default.
Good gRPC and REST clients translate beside every probe, and each probe must get the answer TF
Serving gives (or the budget's early refusal), no good call may be lost, the same process must
answer after, its budget and guard must derive from the limit, and its resident peak while a
probe is handled must stay within the model's peak plus the budget plus
`bench_memory_limit.MARGIN_BYTES`. The benchmark measures the same on the bundled model
(BENCHMARKS.md, "Serving under a memory limit").
"""

import contextlib
import json

import psutil
import pytest

from benchmarks.bench_memory_limit import (
    ADDRESS_SPACE,
    CGROUP,
    EMPTY_ARRAYS,
    EMPTY_ARRAYS_GZIP,
    FLOATS,
    GOOD_TEXTS,
    LONG_ROWS,
    MARGIN_BYTES,
    PADDED_STRINGS,
    PAST_BUDGET,
    GoodClients,
    LimitRun,
    Needs,
    Target,
    address_space_launcher,
    address_space_peak_bytes,
    logged_budget_bytes,
    past_budget_request,
    probe_server,
    serving_needs,
)
from common.serving_contract import TEXT_INPUT
from serving.model_server.memory_budget import DEFAULT_BUDGET_BYTES
from serving.model_server.tensors import decoded_bytes
from tests.serving_fixtures import (
    MODEL_NAME,
    ServerProcess,
    expected_greedy,
    make_model_base,
    memory_cgroup,
)

pytestmark = pytest.mark.large

REFERENCE = [expected_greedy(text, 1) for text in GOOD_TEXTS]
# Good calls of each client before the model's peak is read: the server's threads and caches
# are then those of serving.
WARM_CALLS = 5


def target_of(server: ServerProcess) -> Target:
    return Target(
        server.process.pid,
        f"127.0.0.1:{server.grpc_port}",
        ("127.0.0.1", server.rest_port),
        MODEL_NAME,
    )


@pytest.fixture(scope="module")
def model_base(exports, tmp_path_factory) -> str:
    return make_model_base(exports, str(tmp_path_factory.mktemp("memory_limit")))


def server_flags(model_base: str) -> list[str]:
    return [f"--model_name={MODEL_NAME}", f"--model_base_path={model_base}"]


@pytest.fixture(scope="module")
def needs(model_base) -> Needs:
    """What the server maps and holds serving the good clients, without a limit."""
    with ServerProcess(server_flags(model_base), rest=True) as server:
        return serving_needs(target_of(server), REFERENCE, WARM_CALLS)


@contextlib.contextmanager
def limited(kind: str, limit_bytes: int):
    """A launcher that runs the server under a limit of `kind`; skips where none can be set."""
    if kind == CGROUP:
        with memory_cgroup(limit_bytes) as launcher:
            yield launcher
        return
    try:
        launcher = address_space_launcher(limit_bytes)
    except OSError as error:
        pytest.skip(f"no address-space limit can be set here: {error}")
    yield launcher


@pytest.mark.parametrize("kind", [ADDRESS_SPACE, CGROUP], ids=["address_space", "cgroup"])
def test_small_requests_for_gigabytes_are_refused_under_a_memory_limit_beside_good_clients(
    model_base, needs, kind
):
    limit = needs.limit(kind)
    with (
        limited(kind, limit) as launcher,
        ServerProcess(server_flags(model_base), rest=True, launcher=launcher) as server,
    ):
        target = target_of(server)
        run = LimitRun(kind, limit, budget_bytes=logged_budget_bytes(server.output()))
        budget = run.budget_bytes
        # The default budget derives from the limit: a quarter of a cgroup's, a quarter of what
        # the address-space limit left the server once TensorFlow was imported (less than it
        # left before, more than it leaves now that the server is serving).
        if kind == CGROUP:
            assert budget == min(DEFAULT_BUDGET_BYTES, limit // 4)
        else:
            assert (limit - address_space_peak_bytes(target.pid)) // 4 <= budget
            assert budget < DEFAULT_BUDGET_BYTES
        probe_server(run, target, REFERENCE, WARM_CALLS)
        assert run.lost == [], run.lost[:3]
        # The process that started is the one that answers (prlimit and the cgroup's shell
        # exec the server in place).
        assert server.process.poll() is None and run.alive_after, server.output()[-3000:]
        assert psutil.Process(target.pid).cmdline()[1:3] == ["-m", "serving.server"]
        assert run.answers_after == {"health": "SERVING", "model status": "200 AVAILABLE"}

    answers = {result.probe.name: result.answer for result in run.results}
    assert {result.probe.name: result.probe.wire_bytes for result in run.results}[FLOATS] <= 64
    assert answers[FLOATS].code == "INVALID_ARGUMENT", answers[FLOATS]
    assert answers[FLOATS].message == "Expects arg[0] to be string but float is provided"
    assert answers[LONG_ROWS].code == "200", answers[LONG_ROWS].message[:500]
    rows = json.loads(answers[LONG_ROWS].message)["predictions"]
    assert [row["translation"] for row in rows] == [expected_greedy("a " * 8191, 1)] * 8
    # More than the memory the limit leaves: refused as TF Serving's allocation fails, before
    # it is made (the guard reads the limit, not the host's free gigabytes).
    assert (answers[PADDED_STRINGS].code, answers[PADDED_STRINGS].message) == (
        "INVALID_ARGUMENT",
        f"tensor parsing error: {TEXT_INPUT}",
    )
    for name in (EMPTY_ARRAYS, EMPTY_ARRAYS_GZIP):
        assert answers[name].code == "429", answers[name]
        assert "the request's JSON values take" in answers[name].message, answers[name]
    # Within the memory left, past the budget the limit gave: refused before it is made.
    counted = decoded_bytes(past_budget_request(MODEL_NAME, budget).inputs[TEXT_INPUT], "x")
    assert (answers[PAST_BUDGET].code, answers[PAST_BUDGET].message) == (
        "RESOURCE_EXHAUSTED",
        f"the request's inputs take {counted} bytes in memory, more than this server's budget "
        f"of {budget} bytes for the requests in flight (--request_memory_budget_bytes): send "
        "them in smaller requests",
    )
    for result in run.results:
        # Each good client had a call answered before the probe was sent and one after.
        assert result.good_answered >= len(GoodClients.KINDS), result
        above = result.peak_bytes - run.model_peak_bytes
        assert above <= budget + MARGIN_BYTES, (result.probe.name, above, budget)
