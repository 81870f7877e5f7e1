"""The memory budget of the requests in flight (`--request_memory_budget_bytes`).

TF Serving bounds one request's size (`grpc.max_receive_message_length`) but not how many
large requests a process holds at once: a few concurrent calls of 100,000 strings each took
the local server from 3.8 GB to 13.5 GB. The local server charges each Predict the memory of
its decoded inputs (`request_bytes`) against one process-wide budget before any model run,
and gives it back when the request ends, answered or not; the REST transport charges a body's
bytes too, announced or as its chunks arrive, before it reads them. A request that does not fit is
refused with RESOURCE_EXHAUSTED (REST 429) and nothing runs for it: one larger than the whole
budget for good (the message says to split it), one that finds the budget held by others until
they end (the message says to retry). A run's own memory is bounded apart: by its rows
(`--max_rows_per_run`, batching's `max_execution_batch_size`) and its strings' length
(`--max_input_string_bytes`).
"""

import contextlib
import sys
import threading
from collections.abc import Iterator

import numpy as np

from serving.model_server import errors

FLAG = "--request_memory_budget_bytes"
# What a reservation holds, as its refusal names it.
INPUTS = "inputs"
BODY = "body bytes"


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
        self._lock = threading.Lock()

    @property
    def held_bytes(self) -> int:
        """What the requests in flight hold now."""
        with self._lock:
            return self._held

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
        with self._lock:
            if self.limit_bytes > 0 and self._held + size > self.limit_bytes:
                raise self._refusal(size, self._held, what)
            self._held += size
        try:
            yield
        finally:
            with self._lock:
                self._held -= size

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
