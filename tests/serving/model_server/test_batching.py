"""The batch scheduler (serving/model_server/batching.py) on a NumPy model: merging, splitting, reassembly."""

import concurrent.futures
import contextlib
import threading
import time

import grpc
import numpy as np
import pytest

from serving.model_server import errors
from serving.model_server.batching import BatchScheduler, concatenate_rows
from serving.model_server.config import BatchingOptions, ConfigError, load_batching_options

# Bounds a wait for an answer that a bug may never give (not a measured duration).
HANG_BOUND_SECONDS = 10


class RowModel:
    """Doubles each row and returns, per row, a row-length-padded matrix (as `alignments` does);
    records the batch sizes it ran."""

    def __init__(self):
        self.batch_sizes = []
        self._lock = threading.Lock()

    def __call__(self, inputs, deadline=None):
        values = inputs["x"]
        with self._lock:
            self.batch_sizes.append(len(values))
        longest = int(values.max())
        padded = np.zeros((len(values), longest), np.float32)
        for row, value in enumerate(values):
            padded[row, :value] = value
        names = np.array([b"n%d" % value for value in values], dtype=object)
        return {"double": values * 2, "padded": padded, "name": names}


def splitting_scheduler(**overrides):
    options = dict(
        max_batch_size=10,
        batch_timeout_micros=200_000,
        num_batch_threads=2,
        max_enqueued_batches=10,
        enable_large_batch_splitting=True,
        max_execution_batch_size=3,
    )
    options.update(overrides)
    return BatchScheduler(BatchingOptions(**options))


def test_a_large_request_runs_as_execution_sized_pieces_and_comes_back_whole():
    scheduler = splitting_scheduler()
    model = RowModel()
    try:
        values = np.array([5, 1, 2, 7, 3, 1, 4], np.int64)
        outputs = scheduler.run("q", model, {"x": values})
    finally:
        scheduler.close()
    assert sorted(model.batch_sizes) == [1, 3, 3]
    np.testing.assert_array_equal(outputs["double"], values * 2)
    # Each piece padded its matrix to its own longest row; the reassembled answer is padded
    # to the request's longest, exactly as one batch of the whole request would be.
    reference = RowModel()({"x": values})
    np.testing.assert_array_equal(outputs["padded"], reference["padded"])
    assert outputs["name"].tolist() == reference["name"].tolist()


@contextlib.contextmanager
def clients_of(scheduler: BatchScheduler, model: RowModel):
    """Yields `submit(values)`, which runs `model` on `values` through `scheduler` in a client
    thread. Each call gives up after HANG_BOUND_SECONDS, and the scheduler is closed before
    the threads are joined: a failing assertion ends the test at once instead of waiting
    out the queued batches' (test-long) timeout."""
    with concurrent.futures.ThreadPoolExecutor(3) as pool:

        def submit(values: list[int]) -> concurrent.futures.Future:
            deadline = time.monotonic() + HANG_BOUND_SECONDS
            return pool.submit(scheduler.run, "q", model, {"x": np.array(values)}, deadline)

        try:
            yield submit
        finally:
            scheduler.close()


def test_a_request_that_does_not_fit_fills_the_open_batch_first():
    # A batch timeout far beyond the test: batches run because they are full or closed,
    # and close() runs the last, partial one.
    scheduler = splitting_scheduler(num_batch_threads=1, batch_timeout_micros=600_000_000)
    model = RowModel()
    with clients_of(scheduler, model) as submit:
        small = submit([1])
        assert scheduler.wait_until_enqueued(1, timeout=HANG_BOUND_SECONDS)  # It opened the batch.
        large = submit([2, 3, 4, 5])
        # Answered before close(): the large request's first rows filled the small one's batch.
        assert small.result(timeout=HANG_BOUND_SECONDS)["double"].tolist() == [2]
        scheduler.close()
        assert large.result(timeout=HANG_BOUND_SECONDS)["double"].tolist() == [4, 6, 8, 10]
    # [1] + the large request's first 2 rows fill a batch of 3; its last 2 rows run after.
    assert model.batch_sizes == [3, 2]


def test_without_splitting_a_request_never_shares_out_and_batches_reach_max_batch_size():
    scheduler = BatchScheduler(
        BatchingOptions(
            max_batch_size=4,
            batch_timeout_micros=600_000_000,
            num_batch_threads=1,
            max_enqueued_batches=10,
        )
    )
    model = RowModel()
    with clients_of(scheduler, model) as submit:
        too_large = submit([1, 2, 3, 4, 5])
        with pytest.raises(
            errors.ServingError, match="Task size 5 is larger than maximum input batch size 4"
        ):
            too_large.result(timeout=HANG_BOUND_SECONDS)
        first = submit([1, 2])
        assert scheduler.wait_until_enqueued(2, timeout=HANG_BOUND_SECONDS)
        second = submit([3, 4, 5])
        # The second request, whole, does not fit beside the first: it closed the first
        # one's batch, which ran without waiting, and opened its own.
        assert first.result(timeout=HANG_BOUND_SECONDS)["double"].tolist() == [2, 4]
        assert scheduler.wait_until_enqueued(5, timeout=HANG_BOUND_SECONDS)
        third = submit([6])
        # [3, 4, 5] + [6] make max_batch_size: the full batch runs before close().
        assert second.result(timeout=HANG_BOUND_SECONDS)["double"].tolist() == [6, 8, 10]
        assert third.result(timeout=HANG_BOUND_SECONDS)["double"].tolist() == [12]
    assert model.batch_sizes == [2, 4]


def test_a_split_request_is_refused_whole_when_its_pieces_do_not_fit_the_queue():
    scheduler = splitting_scheduler(max_enqueued_batches=2, num_batch_threads=1)
    model = RowModel()
    try:
        with pytest.raises(
            errors.ServingError, match="queue to which this task was submitted is full"
        ):
            scheduler.run("q", model, {"x": np.arange(1, 8)})  # Needs 3 batches of 3.
        assert model.batch_sizes == []
        assert scheduler.run("q", model, {"x": np.arange(1, 7)})["double"].tolist() == [
            2,
            4,
            6,
            8,
            10,
            12,
        ]
    finally:
        scheduler.close()


def test_one_failing_piece_fails_the_request_with_the_models_error():
    def fails_on_seven(inputs, deadline=None):
        if 7 in inputs["x"]:
            raise errors.invalid_argument("seven is not allowed")
        return {"double": inputs["x"] * 2}

    scheduler = splitting_scheduler()
    try:
        with pytest.raises(errors.ServingError, match="seven is not allowed"):
            scheduler.run("q", fails_on_seven, {"x": np.array([1, 2, 3, 4, 7, 6])})
        assert scheduler.run("q", fails_on_seven, {"x": np.array([1, 2, 3, 4])})[
            "double"
        ].tolist() == [2, 4, 6, 8]
    finally:
        scheduler.close()


def test_a_request_whose_caller_has_gone_leaves_with_its_pieces_not_yet_started():
    started, release = threading.Event(), threading.Event()
    ran = []

    def blocks_until_released(inputs, deadline=None):
        ran.append(inputs["x"].tolist())
        started.set()
        release.wait(HANG_BOUND_SECONDS)
        return {"double": inputs["x"] * 2}

    callbacks = []
    scheduler = splitting_scheduler(num_batch_threads=1)
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            answer = pool.submit(
                scheduler.run, "q", blocks_until_released, {"x": np.arange(1, 10)}, None,
                lambda callback: callbacks.append(callback) or True,
            )  # fmt: skip
            assert started.wait(HANG_BOUND_SECONDS)  # The first piece of 3 runs.
            callbacks[0]()  # The caller goes away.
            release.set()
            with pytest.raises(errors.ServingError) as cancelled:
                answer.result(HANG_BOUND_SECONDS)
        assert scheduler.wait_until_idle(HANG_BOUND_SECONDS)
        # A caller gone before its request was queued: nothing of it runs.
        with pytest.raises(errors.ServingError) as gone_before:
            scheduler.run("q", blocks_until_released, {"x": np.arange(1, 4)}, None, lambda _: False)
        assert scheduler.wait_until_idle(HANG_BOUND_SECONDS)
    finally:
        scheduler.close()
    assert cancelled.value.code == gone_before.value.code == grpc.StatusCode.CANCELLED
    assert ran == [[1, 2, 3]]


def test_concatenate_rows_pads_shorter_pieces_with_empty_strings_and_zeros():
    parts = [
        {"m": np.ones((1, 2), np.float32), "s": np.array([[b"a"]], dtype=object)},
        {"m": np.ones((2, 3), np.float32), "s": np.array([[b"b", b"c"]] * 2, dtype=object)},
    ]
    merged = concatenate_rows(parts)
    np.testing.assert_array_equal(merged["m"], [[1, 1, 0], [1, 1, 1], [1, 1, 1]])
    assert merged["s"].tolist() == [[b"a", b""], [b"b", b"c"], [b"b", b"c"]]


def test_splitting_options_parse_as_tf_serving_reads_them(tmp_path):
    path = tmp_path / "batching.config"
    path.write_text(
        "max_batch_size { value: 64 }\n"
        "enable_large_batch_splitting { value: true }\n"
        "max_execution_batch_size { value: 16 }\n"
        "allowed_batch_sizes: 8\nallowed_batch_sizes: 16\n"
    )
    options = load_batching_options(str(path))
    assert (options.max_batch_size, options.execution_batch_size) == (64, 16)
    assert options.enable_large_batch_splitting

    # Without max_execution_batch_size, batches may reach max_batch_size (TF Serving's default).
    path.write_text("max_batch_size { value: 64 } enable_large_batch_splitting { value: true }")
    assert load_batching_options(str(path)).execution_batch_size == 64
    # Without splitting, max_execution_batch_size has no effect, as in TF Serving.
    path.write_text("max_batch_size { value: 64 } max_execution_batch_size { value: 16 }")
    assert load_batching_options(str(path)).execution_batch_size == 64

    path.write_text(
        "max_batch_size { value: 64 } enable_large_batch_splitting { value: true } "
        "max_execution_batch_size { value: 16 } allowed_batch_sizes: 8 "
        "allowed_batch_sizes: 64"
    )
    with pytest.raises(
        ConfigError,
        match="must equal max_execution_batch_size when enable_large_batch_splitting is True",
    ):
        load_batching_options(str(path))
    path.write_text(
        "enable_large_batch_splitting { value: true } max_execution_batch_size { value: 0 }"
    )
    with pytest.raises(ConfigError, match="max_execution_batch_size must be positive, got 0"):
        load_batching_options(str(path))
