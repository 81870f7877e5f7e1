"""The memory budget of the requests in flight (`--request_memory_budget_bytes`).

TF Serving bounds one request's size (`grpc.max_receive_message_length`) but not how many
large requests a process holds at once: a few concurrent calls of 100,000 strings each took
the local server from 3.8 GB to 13.5 GB. The local server charges each Predict the memory of
its decoded inputs (`request_bytes`, counted from the request before its tensors are made:
`tensors.decoded_bytes`) against one process-wide budget before any model run, and gives it
back when the request ends, answered or not. Over REST it charges too, in one reservation each
(`RequestMemoryBudget.reservation`): a body's bytes as they arrive (never as announced), at
most a fair share of the budget for one body; the JSON values parsed from it, at a bound
counted before parsing; and the answer's bytes until they are sent (a body past its REST
deadline's 504, until the run that holds it ends). A request that does not fit is
refused with RESOURCE_EXHAUSTED (REST 429) and nothing runs for it: one larger than the whole
budget for good (the message says to split it), one that finds the budget held by others until
they end (the message says to retry); while it refuses, and PRESSURE_SECONDS after, the model
status API says so (`RequestMemoryBudget.pressure`). A run's own memory is bounded apart: by
its rows (`--max_rows_per_run`, batching's `max_execution_batch_size`; a request's by
`--max_rows_per_request`, batching's `max_batch_size`) and its strings' length
(`--max_input_string_bytes`).

Where the process runs under a memory limit, the host's free memory says nothing of what the
process may still take: the default budget (`default_budget_bytes`) and the free-memory guard of
the tensor decoder (`available_memory_bytes`) derive from the limit instead. Two limits count:

- a container's or a pod's, its cgroup's (v2 `memory.max`, v1 `memory.limit_in_bytes`), which
  bounds the memory the process touches (the kernel OOM-kills it past the limit);
- the process's address-space limit (`RLIMIT_AS`: `ulimit -v`, `prlimit --as`, a systemd
  unit's `LimitAS=`), which bounds the memory it maps, touched or not (an allocation past it
  fails, and in C++ or gRPC code a failed allocation can abort the process). TensorFlow maps
  gigabytes of address space at import, little of it resident (its libraries, a malloc arena per
  thread), so what counts is what the limit leaves: `address_space_left_bytes`, the limit minus
  the address space mapped when it is read.
"""

import contextlib
import os
import resource
import sys
import threading
import time
from collections.abc import Iterator

import numpy as np
import psutil

from serving.model_server import errors

FLAG = "--request_memory_budget_bytes"
# What a reservation holds, as its refusal names it.
INPUTS = "inputs"
BODY = "body bytes"
JSON = "JSON values"
ANSWER = "answer bytes"


# How long after its last refusal the budget reports that it refuses (`pressure`): longer than
# a readiness probe's period (Kubernetes's default is 10 s), so a probe sees every episode.
PRESSURE_SECONDS = 15.0


# The budget when the flag leaves it out: this much, or a quarter of what the process's memory
# limit allows when that is smaller (the model, its runs and the answers need the rest).
DEFAULT_BUDGET_BYTES = 2**30
_DEFAULT_BUDGET_SHARE_OF_LIMIT = 4
# A cgroup limit at or above this is no limit (v1 writes "unlimited" as 2^63 rounded to pages).
_NO_LIMIT_BYTES = 2**62


def _cgroup_directories(root: str) -> list[tuple[str, str, str]]:
    """(directory, limit file, usage file) of this process's memory cgroup and of each of its
    ancestors below the hierarchy's mount point, read from /proc/self/cgroup and
    /proc/self/mountinfo under `root`."""
    proc = os.path.join(root, "proc/self")
    try:
        with open(os.path.join(proc, "cgroup"), encoding="utf-8") as handle:
            memberships = [
                line.rstrip("\n").split(":", 2) for line in handle if line.count(":") >= 2
            ]
        with open(os.path.join(proc, "mountinfo"), encoding="utf-8") as handle:
            mounts = [line.split() for line in handle]
    except OSError:
        return []
    paths = {"v1": None, "v2": None}
    for _, controllers, path in memberships:
        if "memory" in controllers.split(","):
            paths["v1"] = path
        elif not controllers:
            paths["v2"] = path
    found = []
    for fields in mounts:
        if "-" not in fields:
            continue
        separator = fields.index("-")
        mount_root, mount_point = fields[3], fields[4]
        fs_type, options = fields[separator + 1], fields[separator + 3].split(",")
        if fs_type == "cgroup2" and paths["v2"] is not None:
            version, files = "v2", ("memory.max", "memory.current")
        elif fs_type == "cgroup" and "memory" in options and paths["v1"] is not None:
            version, files = "v1", ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        relative = os.path.relpath(paths[version], mount_root)
        if relative.startswith(".."):  # The process's cgroup is outside what is mounted.
            continue
        parts = [] if relative == "." else relative.split("/")
        base = os.path.join(root, mount_point.lstrip("/"))
        for depth in range(len(parts), -1, -1):
            found.append((os.path.join(base, *parts[:depth]), *files))
    return found


def _read_bytes(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as handle:
            value = handle.read().strip()
    except OSError:
        return None
    return int(value) if value.isdigit() and int(value) < _NO_LIMIT_BYTES else None


def cgroup_memory_limit_bytes(root: str = "/") -> int | None:
    """The smallest memory limit of this process's cgroup and its ancestors (cgroup v2
    `memory.max`, v1 `memory.limit_in_bytes`); None when there is none. `root`: where /proc
    and /sys are (tests)."""
    limits = [
        _read_bytes(os.path.join(directory, limit_file))
        for directory, limit_file, _ in _cgroup_directories(root)
    ]
    limits = [limit for limit in limits if limit is not None]
    return min(limits) if limits else None


def address_space_left_bytes() -> int | None:
    """What this process's address-space limit (the soft `RLIMIT_AS`, the one enforced) leaves
    it: the limit minus the address space it has mapped now (its VmSize); None when there is
    no limit."""
    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    if limit == resource.RLIM_INFINITY:
        return None
    return max(limit - psutil.Process().memory_info().vms, 0)


def available_memory_bytes(root: str = "/") -> int:
    """What the process can still take: the host's available memory, or less where a cgroup
    limit leaves less (its limit minus its usage, page cache included, for the cgroup and each
    ancestor) or the address-space limit does (`address_space_left_bytes`)."""
    available = psutil.virtual_memory().available
    for directory, limit_file, usage_file in _cgroup_directories(root):
        limit = _read_bytes(os.path.join(directory, limit_file))
        usage = _read_bytes(os.path.join(directory, usage_file))
        if limit is not None and usage is not None:
            available = min(available, max(limit - usage, 0))
    address_space = address_space_left_bytes()
    if address_space is not None:
        available = min(available, address_space)
    return available


def default_budget_bytes(root: str = "/") -> int:
    """`--request_memory_budget_bytes` when the flag is left out: DEFAULT_BUDGET_BYTES, or less
    under a memory limit: a quarter of the cgroup's limit, and a quarter of what the
    address-space limit leaves the process when this is called (the server calls it once
    TensorFlow is imported, before any model loads), whichever is smallest."""
    budget = DEFAULT_BUDGET_BYTES
    limit = cgroup_memory_limit_bytes(root)
    if limit is not None:
        budget = min(budget, limit // _DEFAULT_BUDGET_SHARE_OF_LIMIT)
    address_space = address_space_left_bytes()
    if address_space is not None:
        budget = min(budget, address_space // _DEFAULT_BUDGET_SHARE_OF_LIMIT)
    return budget


def request_bytes(inputs: dict[str, np.ndarray]) -> int:
    """The memory a request's decoded inputs hold: each array's buffer, and for arrays of
    strings (numpy object arrays of `bytes`) every string object too, header included."""
    total = 0
    for array in inputs.values():
        total += array.nbytes
        if array.dtype == object:
            total += sum(map(sys.getsizeof, array.reshape(-1)))
    return total


class RequestMemoryBudget:
    """Bytes held by the requests in flight, against a limit.

    Args:
        limit_bytes: the most the requests in flight may hold together; <= 0: no limit.
    """

    def __init__(self, limit_bytes: int):
        self.limit_bytes = limit_bytes
        self._held = 0
        self._refusals: dict[str, int] = {}
        self._last_refusal: float | None = None  # time.monotonic() of the latest.
        self._lock = threading.Lock()

    @property
    def held_bytes(self) -> int:
        """What the requests in flight hold now."""
        with self._lock:
            return self._held

    def refusals(self) -> dict[str, int]:
        """How many reservations were refused so far, by what they held (`INPUTS`, `BODY`)."""
        with self._lock:
            return dict(self._refusals)

    def pressure(self, now: float | None = None) -> str:
        """What the status API says while the budget refuses requests: "" when it refused none
        in the last PRESSURE_SECONDS (before `now`, `time.monotonic()`), else when it last
        refused and what the requests in flight hold."""
        now = time.monotonic() if now is None else now
        with self._lock:
            last, held = self._last_refusal, self._held
        if last is None or now - last > PRESSURE_SECONDS:
            return ""
        return (
            f"refusing requests for memory (RESOURCE_EXHAUSTED), the last {now - last:.1f} s "
            f"ago: the requests in flight hold {held} of this server's {self.limit_bytes} bytes "
            f"({FLAG})"
        )

    @contextlib.contextmanager
    def reserve(self, size: int, what: str = INPUTS) -> Iterator[None]:
        """Holds `size` bytes of the budget for the `with` block.

        Args:
            size: bytes to hold.
            what: what holds them, for the refusal's message (`INPUTS`, `BODY`).

        Raises:
            ServingError: RESOURCE_EXHAUSTED, before the block runs, when `size` does not fit
                beside what the requests in flight hold.
        """
        with self.reservation(what) as reservation:
            reservation.grow(size)
            yield

    @contextlib.contextmanager
    def reservation(self, what: str = INPUTS, most: int = 0) -> Iterator["Reservation"]:
        """A reservation that starts empty and grows (`Reservation.grow`) as what it holds
        arrives, for the `with` block; what it grew to is given back at the end.

        Args:
            what: what it holds, for the refusals' messages (`INPUTS`, `BODY`).
            most: the most it may grow to (one client's fair share); <= 0: the limit only.
        """
        reservation = Reservation(self, what, most)
        try:
            yield reservation
        finally:
            with self._lock:
                self._held -= reservation.size

    def _grow(self, reservation: "Reservation", size: int) -> None:
        with self._lock:
            total = reservation.size + size
            if self.limit_bytes > 0 and self._held + size > self.limit_bytes:
                refusal = self._refusal(total, self._held - reservation.size, reservation.what)
            elif 0 < reservation.most < total:
                refusal = errors.resource_exhausted(
                    f"one request's {reservation.what} may take at most {reservation.most} bytes "
                    f"of this server's budget of {self.limit_bytes} bytes for the requests in "
                    f"flight ({FLAG}): send them in smaller requests"
                )
            else:
                self._held += size
                reservation.size = total
                return
            self._refusals[reservation.what] = self._refusals.get(reservation.what, 0) + 1
            self._last_refusal = time.monotonic()
        raise refusal

    def _refusal(self, size: int, held: int, what: str) -> errors.ServingError:
        if size > self.limit_bytes:
            return errors.resource_exhausted(
                f"the request's {what} take {size} bytes in memory, more than this server's "
                f"budget of {self.limit_bytes} bytes for the requests in flight ({FLAG}): "
                "send them in smaller requests"
            )
        return errors.resource_exhausted(
            f"the requests in flight hold {held} of this server's {self.limit_bytes} bytes "
            f"({FLAG}) and this one's {what} take {size} more: retry later"
        )


class Reservation:
    """Bytes one request holds in a `RequestMemoryBudget` (`RequestMemoryBudget.reservation`).

    Attributes:
        size: what it holds now.
        what: what it holds (`INPUTS`, `BODY`).
        most: the most it may hold; <= 0: the budget's limit only.
    """

    def __init__(self, budget: RequestMemoryBudget, what: str, most: int):
        self._budget, self.what, self.most = budget, what, most
        self.size = 0

    def grow(self, size: int) -> None:
        """Holds `size` bytes more.

        Raises:
            ServingError: RESOURCE_EXHAUSTED, holding nothing more, when they do not fit beside
                what the requests in flight hold or would take it past `most`.
        """
        if size:
            self._budget._grow(self, size)
