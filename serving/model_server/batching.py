"""Server-side batching of concurrent requests, as TF Serving's BatchingSession.

Requests for the same (model version, signature, outputs) go to one queue. A
queue is a list of batches: a request joins the open (last) batch if it fits in
the execution batch size (`max_batch_size`, or `max_execution_batch_size` with
`enable_large_batch_splitting`), otherwise it closes that batch and opens a new
one. With large batch splitting, a request that does not fit is split instead:
its first rows fill the open batch and the rest go to new batches, at most one
execution batch each; its answer is put back together from the pieces. A batch
is handed to one of `num_batch_threads` workers when it is closed, full, or
its first request has waited `batch_timeout_micros`. The worker concatenates
the inputs along dimension 0, runs the model once, and splits every output
back along dimension 0. As in TF Serving, the run's deadline is the latest of its
requests' deadlines (none if one of them has none): a batch nobody waits for any
more is aborted instead of holding its thread.

Differences from TF Serving, all in the client's favour: a request whose
deadline passes while it waits is answered DEADLINE_EXCEEDED at once; a request
whose caller goes away (a cancelled gRPC call) leaves the queue with its pieces
that have not started, so a cancelled large request costs at most the pieces
already running; and when a merged run fails, the batch's requests are re-run
one by one so a single bad input only fails its own request.
"""

import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Hashable, Mapping

import grpc
import numpy as np

from serving.model_server import errors
from serving.model_server.config import BatchingOptions
from serving.model_server.metrics import ServerMetrics

logger = logging.getLogger("serving.batching")

# `(inputs, deadline) -> outputs`; the run is aborted at `deadline` (a time.monotonic() value,
# None for no deadline).
RunFn = Callable[[Mapping[str, np.ndarray], float | None], dict[str, np.ndarray]]
# Registers a callback to run when the caller has gone, as gRPC's `ServicerContext.add_callback`
# (which also runs it when the call ends normally); False when the caller has gone already.
WhenCallerGone = Callable[[Callable[[], None]], bool]
CALLER_GONE_MESSAGE = "The caller cancelled the request"


def batch_size_of(inputs: Mapping[str, np.ndarray]) -> int:
    """The common 0th dimension of a request's inputs.

    Raises:
        ServingError: INVALID_ARGUMENT, worded as TF Serving's batching_util.
    """
    sizes = set()
    for array in inputs.values():
        if array.ndim == 0:
            raise errors.invalid_argument(
                "Batching Run() input tensors must have at least one dimension"
            )
        sizes.add(array.shape[0])
    if len(sizes) > 1:
        raise errors.invalid_argument(
            "Batching Run() input tensors must have equal 0th-dimension size"
        )
    return sizes.pop() if sizes else 0


@dataclasses.dataclass(eq=False)
class _Task:
    inputs: Mapping[str, np.ndarray]
    size: int
    deadline: float | None
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    outputs: dict[str, np.ndarray] | None = None
    error: errors.ServingError | None = None
    abandoned: bool = False  # The waiting request gave up (deadline, error, caller gone).
    started: bool = False  # A worker has taken it into a run.
    enqueue_time: float = dataclasses.field(default_factory=time.monotonic)

    def finish(self, outputs=None, error=None) -> None:
        self.outputs, self.error = outputs, error
        self.done.set()


@dataclasses.dataclass(eq=False)
class _Batch:
    tasks: list[_Task] = dataclasses.field(default_factory=list)
    size: int = 0
    start_time: float = 0.0
    closed: bool = False


def _chunks(size: int, capacity: int) -> list[int]:
    """`size` rows as pieces of at most `capacity`: [capacity, ..., remainder]."""
    return [min(capacity, size - start) for start in range(0, size, capacity)]


def concatenate_rows(parts: list[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Puts a split request's outputs back together along dimension 0.

    Each piece ran in its own batch, so an output padded to its batch's longest row (the
    `alignments` signature's tokens and weights) can be shorter in one piece than in another;
    such outputs are padded to the longest piece as the model pads its own rows, with "" for
    strings and 0 for numbers, which is what the whole request run as one batch returns.
    """
    merged = {}
    for alias in parts[0]:
        arrays = [part[alias] for part in parts]
        shape = np.max([array.shape for array in arrays], axis=0)
        padded = []
        for array in arrays:
            if array.shape[1:] != tuple(shape[1:]):
                filler = np.full(
                    (array.shape[0], *shape[1:]),
                    b"" if array.dtype == object else 0,
                    dtype=array.dtype,
                )
                filler[tuple(slice(0, n) for n in array.shape)] = array
                array = filler
            padded.append(array)
        merged[alias] = np.concatenate(padded, axis=0)
    return merged


class _Queue:
    def __init__(self, run_fn: RunFn):
        self.run_fn = run_fn
        self.batches: collections.deque[_Batch] = collections.deque([_Batch()])


class BatchStats:
    """Sizes of the batches actually run (the processed_batch_size metric)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._counts: collections.Counter[int] = collections.Counter()

    def record(self, size: int) -> None:
        with self._lock:
            self._counts[size] += 1

    def histogram(self) -> dict[int, int]:
        """Number of batches run, by batch size (in rows, padding included)."""
        with self._lock:
            return dict(self._counts)


class BatchScheduler:
    """Merges concurrent requests into batches; shared by all models.

    Args:
        options: BatchingOptions (max_batch_size, batch_timeout_micros, ...).
        metrics: where input sizes, queuing latencies, batch sizes and runs are recorded.
    """

    def __init__(self, options: BatchingOptions, metrics: ServerMetrics | None = None):
        self.options = options
        self.metrics = metrics if metrics is not None else ServerMetrics()
        self.stats = BatchStats()
        self._timeout = options.batch_timeout_micros / 1e6
        self._cond = threading.Condition()
        self._queues: dict[Hashable, _Queue] = {}
        self._closing = False
        self._rows_enqueued = 0  # Since start, for wait_until_enqueued.
        self._unfinished_tasks = 0  # Queued or running, for wait_until_idle.
        self._workers = [
            threading.Thread(target=self._work, name=f"batch_threads_{i}", daemon=True)
            for i in range(options.num_batch_threads)
        ]
        for worker in self._workers:
            worker.start()

    # --------------------------------------------------------------- clients

    def check_task_size(self, size: int) -> None:
        """Refuses a request of more than `max_batch_size` rows, as TF Serving's batching does.

        Raises:
            ServingError: INVALID_ARGUMENT, with TF Serving's message.
        """
        if size > self.options.max_batch_size:
            raise errors.invalid_argument(
                f"Task size {size} is larger than maximum input batch size "
                f"{self.options.max_batch_size}"
            )

    def run(
        self,
        queue_key: Hashable,
        run_fn: RunFn,
        inputs: Mapping[str, np.ndarray],
        deadline: float | None = None,
        when_caller_gone: WhenCallerGone | None = None,
    ) -> dict[str, np.ndarray]:
        """Runs `run_fn` on `inputs` as part of a merged batch and returns this request's rows.

        Args:
            queue_key: requests with equal keys may be merged; the key must pin
                the model version, signature and requested outputs.
            run_fn: `(inputs, deadline) -> outputs`, every output batched along dimension 0;
                a merged batch runs with the latest deadline of its requests (none if one
                has none), as TF Serving's BatchingSession sets its RunOptions.timeout_in_ms.
            inputs: arrays by alias with a common 0th dimension.
            deadline: `time.monotonic()` value after which the caller gives up.
            when_caller_gone: registers the callback that takes this request's pieces that
                have not started out of the queue (they fail CANCELLED) once the caller has
                gone; pieces already running finish, since other requests share their run.

        Raises:
            ServingError: INVALID_ARGUMENT (no batch dimension, too large),
                UNAVAILABLE (queue full or shutting down), DEADLINE_EXCEEDED, CANCELLED
                (the caller went away), or the model's own error.
        """
        size = batch_size_of(inputs)
        for _ in inputs:  # TF Serving records each input tensor's rows.
            self.metrics.record_input_batch_size(size)
        if size == 0:
            return run_fn(inputs, deadline)  # Nothing to merge; the model decides.
        self.check_task_size(size)
        pieces = self._enqueue(queue_key, run_fn, inputs, size, deadline)
        if when_caller_gone is not None and not when_caller_gone(lambda: self._drop(pieces)):
            self._drop(pieces)
        for piece in pieces:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            finished = piece.done.wait(timeout)
            if not finished or piece.error is not None:
                with self._cond:  # The other pieces' rows would be thrown away: skip them.
                    for other in pieces:
                        other.abandoned = True
            if not finished:
                raise errors.deadline_exceeded(
                    "Run() timeout exceeded while waiting in batching queue"
                )
            if piece.error is not None:
                raise piece.error
        if len(pieces) == 1:
            return pieces[0].outputs
        return concatenate_rows([piece.outputs for piece in pieces])

    def _enqueue(
        self,
        queue_key: Hashable,
        run_fn: RunFn,
        inputs: Mapping[str, np.ndarray],
        size: int,
        deadline: float | None,
    ) -> list[_Task]:
        """Adds a request to its queue, split into pieces if it must be; returns the pieces."""
        capacity = self.options.execution_batch_size
        with self._cond:
            if self._closing:
                raise errors.unavailable("Batch scheduler is shutting down")
            queue = self._queues.get(queue_key)
            if queue is None:
                queue = self._queues[queue_key] = _Queue(run_fn)
            open_batch = queue.batches[-1]
            room = capacity - open_batch.size
            if self.options.enable_large_batch_splitting and size > room:
                piece_sizes = ([room] if room else []) + _chunks(size - room, capacity)
            else:
                piece_sizes = [size]
            new_batches = len(piece_sizes) - (1 if piece_sizes[0] <= room else 0)
            if len(queue.batches) + new_batches > self.options.max_enqueued_batches:
                raise errors.unavailable(
                    "The batch scheduling queue to which this task was submitted is full; "
                    f"currently {len(queue.batches)} batches enqueued and "
                    f"max_enqueued_batches is {self.options.max_enqueued_batches}"
                )
            pieces, start = [], 0
            for piece_size in piece_sizes:
                piece = _Task(
                    inputs={
                        alias: array[start : start + piece_size] for alias, array in inputs.items()
                    },
                    size=piece_size,
                    deadline=deadline,
                )
                start += piece_size
                if open_batch.size + piece_size > capacity:
                    open_batch.closed = True
                    open_batch = _Batch()
                    queue.batches.append(open_batch)
                if not open_batch.tasks:
                    open_batch.start_time = time.monotonic()
                open_batch.tasks.append(piece)
                open_batch.size += piece_size
                pieces.append(piece)
            self._rows_enqueued += size
            self._unfinished_tasks += len(pieces)
            self._cond.notify_all()
            return pieces

    def _drop(self, pieces: list[_Task]) -> None:
        """Fails a request's pieces that no worker has taken yet with CANCELLED; a worker skips
        them when their batch comes up."""
        with self._cond:
            for piece in pieces:
                if not piece.started and not piece.done.is_set():
                    piece.abandoned = True
                    piece.finish(error=errors.cancelled(CALLER_GONE_MESSAGE))

    def wait_until_enqueued(self, rows: int, timeout: float | None = None) -> bool:
        """Blocks until `rows` rows in total have entered the queues since start.

        Lets a caller order requests by the scheduler's state instead of by sleeping.

        Returns:
            True, or False when `timeout` seconds passed first.
        """
        with self._cond:
            return self._cond.wait_for(lambda: self._rows_enqueued >= rows, timeout)

    def wait_until_idle(self, timeout: float | None = None) -> bool:
        """Blocks until every enqueued request has been run, failed or dropped.

        Returns:
            True, or False when `timeout` seconds passed first.
        """
        with self._cond:
            return self._cond.wait_for(lambda: self._unfinished_tasks == 0, timeout)

    # --------------------------------------------------------------- workers

    def _ready(self, batch: _Batch, now: float) -> bool:
        return bool(batch.tasks) and (
            batch.closed
            or self._closing
            or batch.size >= self.options.execution_batch_size
            or now >= batch.start_time + self._timeout
        )

    def _next_batch(self):
        """Waits for a schedulable batch (oldest first); None once closed and drained."""
        with self._cond:
            while True:
                now = time.monotonic()
                best = None
                for key, queue in self._queues.items():
                    batch = queue.batches[0]
                    if self._ready(batch, now) and (
                        best is None or batch.start_time < best[2].start_time
                    ):
                        best = (key, queue, batch)
                if best is not None:
                    key, queue, batch = best
                    queue.batches.popleft()
                    if not queue.batches:
                        # Idle queues are dropped so an unloaded version's run_fn is not kept.
                        del self._queues[key]
                    return queue.run_fn, batch
                if self._closing:
                    return None
                waits = [
                    q.batches[0].start_time + self._timeout - now
                    for q in self._queues.values()
                    if q.batches[0].tasks
                ]
                self._cond.wait(max(min(waits), 0.0) if waits else None)

    def _work(self) -> None:
        while True:
            item = self._next_batch()
            if item is None:
                return
            run_fn, batch = item
            try:
                self._process(run_fn, batch)
            except Exception as error:  # Never leave a request waiting forever.
                logger.exception("Batch processing failed")
                for task in batch.tasks:
                    if not task.done.is_set():
                        task.finish(error=errors.internal(f"Batch processing failed: {error}"))
            finally:
                with self._cond:
                    self._unfinished_tasks -= len(batch.tasks)
                    self._cond.notify_all()

    def _process(self, run_fn: RunFn, batch: _Batch) -> None:
        now = time.monotonic()
        tasks = []
        with self._cond:
            for task in batch.tasks:
                self.metrics.record_queuing(now - task.enqueue_time)
                if task.abandoned:
                    continue
                if task.deadline is not None and now >= task.deadline:
                    task.finish(
                        error=errors.deadline_exceeded(
                            "Run() timeout exceeded while waiting in batching queue"
                        )
                    )
                    continue
                task.started = True
                tasks.append(task)
        if not tasks:
            return
        try:
            merged, padded_size = self._merge(tasks)
        except errors.ServingError as error:
            for task in tasks:
                task.finish(error=error)
            return
        self.stats.record(padded_size)
        self.metrics.record_batch(padded_size, padded_size - sum(task.size for task in tasks))
        deadlines = [task.deadline for task in tasks]
        batch_deadline = None if None in deadlines else max(deadlines)
        try:
            self.metrics.record_wrapped_run()
            outputs = run_fn(merged, batch_deadline)
        except errors.ServingError as error:
            # Re-running alone helps a request whose input failed the batch, not one whose
            # run was aborted (deadline, cancellation).
            aborted = error.code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)
            if len(tasks) == 1 or aborted:
                for task in tasks:
                    task.finish(error=error)
                return
            logger.warning(
                "Batch of %d requests failed (%s); running them one by one", len(tasks), error
            )
            for task in tasks:
                try:
                    self.metrics.record_wrapped_run()
                    task.finish(outputs=run_fn(task.inputs, task.deadline))
                except errors.ServingError as task_error:
                    task.finish(error=task_error)
            return
        self._split(outputs, tasks, padded_size)

    def _merge(self, tasks: list[_Task]):
        total = sum(task.size for task in tasks)
        padded = next((s for s in self.options.allowed_batch_sizes if s >= total), total)
        merged = {}
        for alias in tasks[0].inputs:
            parts = [task.inputs[alias] for task in tasks]
            if any(part.shape[1:] != parts[0].shape[1:] for part in parts):
                raise errors.failed_precondition(
                    f"Tensors with name '{alias}' from different tasks have different shapes "
                    "and padding is turned off.Set pad_variable_length_inputs to true, or "
                    "ensure that all tensors with the same namehave equal dimensions starting "
                    "with the first dim."
                )
            if padded > total:
                # TF Serving pads with copies of a real row, which is always valid input.
                parts.append(np.repeat(parts[-1][:1], padded - total, axis=0))
            merged[alias] = np.concatenate(parts, axis=0)
        return merged, padded

    def _split(
        self, outputs: Mapping[str, np.ndarray], tasks: list[_Task], padded_size: int
    ) -> None:
        for array in outputs.values():
            if array.ndim == 0 or array.shape[0] != padded_size:
                error = errors.failed_precondition(
                    "Batched output tensor's 0th dimension does not equal the sum of the 0th "
                    "dimension sizes of the input tensors"
                )
                for task in tasks:
                    task.finish(error=error)
                return
        offset = 0
        for task in tasks:
            task.finish(
                outputs={
                    alias: array[offset : offset + task.size] for alias, array in outputs.items()
                }
            )
            offset += task.size

    # -------------------------------------------------------------- shutdown

    def close(self) -> None:
        """Runs everything still queued without waiting for timeouts, then stops the workers."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        for worker in self._workers:
            worker.join()
