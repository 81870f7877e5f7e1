"""The batch scheduler (serving/model_server/batching.py) on a NumPy model: merging, splitting, reassembly.; and batching servers:
merged requests, limits, deadlines and cancellations over gRPC."""

import concurrent.futures
import contextlib
import os
import threading
import time
import tracemalloc

import grpc
import numpy as np
import pytest
import tensorflow as tf

from serving.model_server import errors
from serving.model_server.batching import BatchScheduler, concatenate_rows
from serving.model_server.config import BatchingOptions, ConfigError, load_batching_options
from tests.model_server_fixtures import (
    SERVING_DIR,
    expire_an_endless_call,
    http,
    huge_tensor_request,
    rpc_error,
    start_server,
    strings,
    write_batching_file,
)
from tests.serving_fixtures import (
    MODEL_NAME,
    ServerProcess,
    expected_greedy,
    loop_model_base,
    make_model_base,
    texts_request,
)

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


# -------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def batching_server(exports, tmp_path_factory):
    """Batching with serving/batching.config exactly as committed."""
    root = tmp_path_factory.mktemp("batching")
    connection = start_server(
        root,
        model_name=MODEL_NAME,
        model_base_path=make_model_base(exports, str(root)),
        enable_batching=True,
        batching_parameters_file=os.path.join(SERVING_DIR, "batching.config"),
    )
    yield connection
    connection.server.stop()


@pytest.fixture(scope="module")
def strict_server(exports, tmp_path_factory):
    """Small batches, a long batch timeout, a short queue and a 64 KiB request limit."""
    root = tmp_path_factory.mktemp("strict")
    batching_file = write_batching_file(
        root / "batching.config",
        max_batch_size=8,
        batch_timeout_micros=1_000_000,
        num_batch_threads=1,
        max_enqueued_batches=2,
    )
    connection = start_server(
        root,
        model_name=MODEL_NAME,
        model_base_path=make_model_base(exports, str(root)),
        enable_batching=True,
        batching_parameters_file=batching_file,
        rest_api_port=0,
        grpc_channel_arguments="grpc.max_receive_message_length=65536",
    )
    yield connection
    connection.server.stop()


# ----------------------------------------------------------------------- batching


def test_sixteen_clients_two_hundred_requests_each_without_errors(batching_server):
    stub = batching_server.predict
    histogram_before = batching_server.server.batch_stats.histogram()

    def client(worker: int):
        failures = []
        for index in range(200):
            text = f"client {worker} request {index}"
            try:
                response = stub.Predict(texts_request([text]), timeout=30)
                if strings(response.outputs["translation"]) != [expected_greedy(text, 1)]:
                    failures.append(f"wrong answer for {text!r}")
            except grpc.RpcError as error:
                failures.append(f"{error.code()}: {error.details()}")
        return failures

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        failures = [f for result in pool.map(client, range(16)) for f in result]
    assert failures == []

    histogram_after = batching_server.server.batch_stats.histogram()
    new_batches = {
        size: histogram_after.get(size, 0) - histogram_before.get(size, 0)
        for size in histogram_after
    }
    assert sum(size * count for size, count in new_batches.items()) == 16 * 200
    # Concurrent requests were merged: fewer model calls than requests.
    assert sum(new_batches.values()) < 16 * 200
    assert max(size for size, count in new_batches.items() if count) > 1


def test_batching_merges_up_to_max_batch_size_and_isolates_bad_inputs(strict_server):
    stats = strict_server.server.batch_stats
    before = stats.histogram()
    texts = [f"sentence number {i}" for i in range(8)]
    texts[3] = b"bad \xff utf-8"
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        calls = [
            pool.submit(strict_server.predict.Predict, texts_request([text]), timeout=30)
            for text in texts
        ]
        outcomes = []
        for call in calls:
            try:
                outcomes.append(strings(call.result().outputs["translation"])[0])
            except grpc.RpcError as error:
                outcomes.append(error.code())
    expected = [
        expected_greedy(t, 1) if isinstance(t, str) else grpc.StatusCode.INVALID_ARGUMENT
        for t in texts
    ]
    assert outcomes == expected
    after = stats.histogram()
    # The 8 requests filled max_batch_size=8 and ran as one merged batch (which failed
    # because of the bad input; its requests were then re-run one by one).
    assert after.get(8, 0) - before.get(8, 0) == 1


def test_batch_limits_deadlines_and_message_size(strict_server):
    too_big = rpc_error(strict_server.predict.Predict, texts_request([f"s{i}" for i in range(9)]))
    assert (too_big.code(), too_big.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "Task size 9 is larger than maximum input batch size 8",
    )

    stats_before = strict_server.server.batch_stats.histogram()
    with pytest.raises(grpc.RpcError) as late:
        strict_server.predict.Predict(texts_request(["waits 1 s in the queue"]), timeout=0.1)
    assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # Once its batch has been handled, the expired request must not have been run.
    assert strict_server.server.core.batcher.wait_until_idle(timeout=60)
    assert strict_server.server.batch_stats.histogram() == stats_before

    huge = texts_request(["x" * 100_000])
    error = rpc_error(strict_server.predict.Predict, huge)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    status, body = http(
        "POST", f"{strict_server.rest}/v1/models/translator:predict", {"instances": ["x" * 100_000]}
    )
    assert status == 429 and "larger than the limit of 65536 bytes" in body["error"]
    ok = strict_server.predict.Predict(texts_request(["small"]), timeout=10)
    assert strings(ok.outputs["translation"]) == [expected_greedy("small", 1)]


def test_a_request_over_max_batch_size_is_refused_before_its_tensors_are_made(strict_server):
    """One string padded to 2*10^7 rows was made whole (160 MB of row pointers) before batching
    refused it; its rows are now read from the request's shape, and it is refused with TF
    Serving's message before anything is made."""
    request = huge_tensor_request(tf.string, 2 * 10**7, b"hola")
    tracemalloc.start()
    try:
        error = rpc_error(strict_server.predict.Predict, request)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (error.code(), error.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "Task size 20000000 is larger than maximum input batch size 8",
    )
    assert peak < 16 * 2**20, peak


def test_large_batch_splitting_answers_as_one_unbatched_call(exports, main_server, tmp_path):
    """A 7-sentence request on a server whose batches hold 3 runs as pieces and comes back
    identical to the unbatched server's answer, the padded alignments included."""
    batching_file = write_batching_file(
        tmp_path / "batching.config",
        max_batch_size=8,
        batch_timeout_micros=1000,
        num_batch_threads=2,
        enable_large_batch_splitting=True,
        max_execution_batch_size=3,
    )
    connection = start_server(
        tmp_path,
        model_name=MODEL_NAME,
        model_base_path=make_model_base(exports, str(tmp_path), (1, 2)),
        enable_batching=True,
        batching_parameters_file=batching_file,
    )
    texts = [
        "one",
        "a much longer sentence than the others",
        "two words",
        "x y z",
        "the cat sat on the mat",
        "hi",
        "four words in row",
    ]
    try:
        split = connection.predict.Predict(texts_request(texts, "alignments"), timeout=30)
        histogram = connection.server.batch_stats.histogram()
        too_big = rpc_error(connection.predict.Predict, texts_request(["s"] * 9))
    finally:
        connection.server.stop()
    whole = main_server.predict.Predict(texts_request(texts, "alignments"), timeout=30)
    assert set(split.outputs) == set(whole.outputs)
    for name in whole.outputs:
        np.testing.assert_array_equal(
            tf.make_ndarray(split.outputs[name]), tf.make_ndarray(whole.outputs[name]), err_msg=name
        )
    assert max(histogram) <= 3 and sum(size * count for size, count in histogram.items()) == 7
    assert (too_big.code(), too_big.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "Task size 9 is larger than maximum input batch size 8",
    )


def test_a_batched_run_past_its_deadline_is_aborted_and_frees_its_thread(tmp_path):
    """A merged batch runs with its requests' latest deadline, as TF Serving's BatchingSession
    sets RunOptions.timeout_in_ms: it ran without one, so an endless batched call kept the
    only batch thread (and a CPU) busy for good after its client had been answered
    DEADLINE_EXCEEDED, and every later request timed out in the queue."""
    batching_file = write_batching_file(
        tmp_path / "batching.config",
        max_batch_size=8,
        batch_timeout_micros=0,
        num_batch_threads=1,
    )
    with ServerProcess(
        [
            "--model_name=loop",
            f"--model_base_path={loop_model_base(tmp_path)}",
            "--file_system_poll_wait_seconds=0",
            "--enable_batching=true",
            f"--batching_parameters_file={batching_file}",
        ]
    ) as server:
        # The batch thread is free again once the expired batch stops.
        expire_an_endless_call(server)


def test_a_cancelled_batched_call_leaves_the_queue_with_its_pieces_not_yet_run(exports, tmp_path):
    """A gRPC call cancelled by its client ran to the end: every piece of a split request went
    through the model after nobody waited for it. The pieces not yet started now leave.

    The request is long enough (1,024 one-row pieces) that the cancellation lands long before
    the batch thread could run half of them, however busy the machine: with 32 pieces, a CI
    machine under load ran more than half before the cancellation arrived."""
    rows = 1024
    batching_file = write_batching_file(
        tmp_path / "batching.config",
        max_batch_size=rows,
        batch_timeout_micros=0,
        num_batch_threads=1,
        max_enqueued_batches=rows,
        enable_large_batch_splitting=True,
        max_execution_batch_size=1,
    )
    connection = start_server(
        tmp_path,
        model_name=MODEL_NAME,
        model_base_path=make_model_base(exports, str(tmp_path), (1,)),
        enable_batching=True,
        batching_parameters_file=batching_file,
    )
    batcher = connection.server.core.batcher
    texts = [f"fila {i}" for i in range(rows)]
    try:
        call = connection.predict.Predict.future(texts_request(texts), timeout=120)
        # All one-row pieces are queued behind the one batch thread, and the first is under
        # way (its batch recorded): one piece at least runs whenever the cancellation lands.
        assert batcher.wait_until_enqueued(len(texts), timeout=60)
        deadline = time.monotonic() + 60
        while not connection.server.batch_stats.histogram():
            assert time.monotonic() < deadline, "no piece started within 60 s"
            time.sleep(0.001)
        call.cancel()
        assert batcher.wait_until_idle(timeout=120)
        pieces_run = sum(connection.server.batch_stats.histogram().values())
    finally:
        connection.server.stop(grace_seconds=0)
    assert call.cancelled()
    # Those under way when the cancellation arrived ran; without it, all 32 did.
    assert 1 <= pieces_run < len(texts) // 2
