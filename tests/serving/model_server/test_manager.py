"""serving/model_server/manager.py and servable.py in a server: versions swapped, reloaded,
labelled, unloaded; load and warmup failures reported with TF Serving's codes.

Servers run in-process (one module-wide instance per configuration) or, where the process
itself is under test, as `python -m serving.server`; every server binds port 0 and the tests
read the port it got. Requests use the official tensorflow-serving-api stubs; expected outputs
come from the plain-Python definitions of the toy model in tests/serving_fixtures.py. Tests wait
on server state, never on sleeps.
"""

import ctypes
import os
import re
import shutil
import threading
import time

import grpc
import psutil
import pytest
import tensorflow as tf
from google.protobuf import text_format
from tensorflow_serving.apis import (
    get_model_status_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    prediction_log_pb2,
)

from common.serving_contract import MAX_WARMUP_RECORDS, WARMUP_PATH
from serving.model_server import servable as servable_lib
from serving.model_server.errors import ServingError
from serving.model_server.server import ModelServer, ServerOptions, parse_flags
from tests.model_server_fixtures import (
    Connection,
    rpc_error,
    start_server,
    strings,
)
from tests.serving_fixtures import (
    MODEL_NAME,
    ServerProcess,
    expected_greedy,
    install_version,
    make_model_base,
    texts_request,
    wait_for,
)

# ---------------------------------------------------------------- version swapping


def test_new_version_is_swapped_in_without_failing_requests(exports, tmp_path):
    base_path = make_model_base(exports, str(tmp_path), (1,))
    os.makedirs(os.path.join(base_path, "3"))  # Incomplete: no saved_model.pb yet.
    os.makedirs(os.path.join(base_path, "tmp-export"))  # Not a version number.
    connection = Connection(
        ModelServer(
            ServerOptions(
                port=0,
                model_name=MODEL_NAME,
                model_base_path=base_path,
                file_system_poll_wait_seconds=1,
                max_num_load_retries=0,
            )
        ).start()
    )
    stop = threading.Event()
    failures, served_versions = [], []

    def client(worker):
        index = 0
        while not stop.is_set():
            text = f"w{worker} {index}"
            sent_at = time.monotonic()
            try:
                response = connection.predict.Predict(texts_request([text]), timeout=30)
                version = response.model_spec.version.value
                assert strings(response.outputs["translation"]) == [expected_greedy(text, version)]
                served_versions.append((sent_at, version))
            except (grpc.RpcError, AssertionError) as error:
                failures.append(repr(error))
            index += 1

    def served_after(moment):
        return [version for sent_at, version in list(served_versions) if sent_at > moment]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    try:
        for thread in threads:
            thread.start()
        wait_for(lambda: len(served_versions) >= 8 or failures, "answers from version 1")
        install_version(exports, base_path, 2)
        wait_for(lambda: 2 in served_after(0) or failures, "a first answer from version 2")
        swapped_at = time.monotonic()
        wait_for(
            lambda: len(served_after(swapped_at)) >= 8 or failures,
            "answers to requests sent after the swap",
        )
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    try:
        assert failures == []
        assert {version for _, version in served_versions} == {1, 2}
        # Every request sent after the first answer from version 2 was served by version 2.
        after_swap = [version for sent_at, version in served_versions if sent_at > swapped_at]
        assert after_swap and set(after_swap) == {2}
        request = get_model_status_pb2.GetModelStatusRequest(model_spec={"name": MODEL_NAME})
        states = get_model_status_pb2.ModelVersionStatus

        def version_rows():
            return [
                (row.version, states.State.Name(row.state), row.status)
                for row in connection.models.GetModelStatus(
                    request, timeout=10
                ).model_version_status
            ]

        # Version 1 was unloaded once 2 was available; 3 (incomplete) and tmp-export were ignored.
        assert [row[:2] for row in version_rows()] == [(2, "AVAILABLE"), (1, "END")]

        # A version that fails to load (corrupt warmup file) leaves version 2 serving.
        broken = install_version(exports, str(tmp_path / "staging"), 1, as_version=4)
        with open(
            os.path.join(broken, "assets.extra", "tf_serving_warmup_requests"), "wb"
        ) as warmup:
            warmup.write(b"not a TFRecord file")
        os.rename(broken, os.path.join(base_path, "4"))
        wait_for(lambda: version_rows()[0][:2] == (4, "END"), "version 4 to fail and end")
        (_, state, status), (_, serving_state, _) = version_rows()[:2]
        assert (state, serving_state) == ("END", "AVAILABLE")
        assert status.error_code == grpc.StatusCode.DATA_LOSS.value[0]
        assert "corrupted record" in status.error_message
        assert (
            connection.predict.Predict(texts_request(["x"]), timeout=10).model_spec.version.value
            == 2
        )

        # HandleReloadConfigRequest: roll back by pinning version 1 with a `specific` policy.
        reload = model_management_pb2.ReloadConfigRequest()
        text_format.Parse(
            f"""model_config_list {{ config {{
            name: "{MODEL_NAME}" base_path: "{base_path}" model_platform: "tensorflow"
            model_version_policy {{ specific {{ versions: 1 }} }} }} }}""",
            reload.config,
        )
        assert (
            connection.models.HandleReloadConfigRequest(reload, timeout=60).status.error_code == 0
        )
        response = connection.predict.Predict(texts_request(["back"]), timeout=10)
        assert response.model_spec.version.value == 1
        assert strings(response.outputs["translation"]) == [expected_greedy("back", 1)]
        assert [row[:2] for row in version_rows()][1:] == [(2, "END"), (1, "AVAILABLE")]
    finally:
        connection.server.stop()


def test_an_unload_hands_the_freed_heap_back_to_the_system():
    """A released version's memory went back to malloc, which kept it for the process. The
    manager now calls `release_memory_to_system` after each unload, as TF Serving's
    BasicManager releases memory to the system. Here the heap is fragmented as a freed graph
    leaves it: 160 MB of small blocks freed but the last, which pins the top of the heap, so
    free() cannot shrink it."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    process = psutil.Process()
    blocks = [libc.malloc(4096) for _ in range(40_000)]
    for block in blocks:
        ctypes.memset(block, 1, 4096)
    for block in blocks[:-1]:
        libc.free(block)
    kept = process.memory_info().rss
    assert servable_lib.release_memory_to_system()
    assert kept - process.memory_info().rss > 100 * 2**20
    libc.free(blocks[-1])


# -------------------------------------------------------- model management


def reload_request(text: str) -> model_management_pb2.ReloadConfigRequest:
    request = model_management_pb2.ReloadConfigRequest()
    text_format.Parse(text, request.config)
    return request


def model_config_text(name: str, base_path: str, extra: str = "") -> str:
    return (
        f'config {{ name: "{name}" base_path: "{base_path}" model_platform: "tensorflow" {extra} }}'
    )


def version_states(connection: Connection, name: str = MODEL_NAME) -> list:
    """[(version, state name)] of GetModelStatus, newest first."""
    request = get_model_status_pb2.GetModelStatusRequest(model_spec={"name": name})
    rows = connection.models.GetModelStatus(request, timeout=10).model_version_status
    return [
        (row.version, get_model_status_pb2.ModelVersionStatus.State.Name(row.state)) for row in rows
    ]


def predicted_version(
    connection: Connection, name: str = MODEL_NAME, label: str = None, version: int = None
) -> int:
    request = texts_request(["which version"], model_name=name, version=version)
    if label:
        request.model_spec.version_label = label
    response = connection.predict.Predict(request, timeout=10)
    served = response.model_spec.version.value
    assert strings(response.outputs["translation"]) == [expected_greedy("which version", served)]
    return served


@pytest.fixture
def labeled_server(exports, tmp_path):
    """translator (latest) and translator_all (versions 1 and 2, label stable -> 1)."""
    base_path = make_model_base(exports, str(tmp_path), (1, 2))
    all_base_path = make_model_base(exports, str(tmp_path), (1, 2), "translator_all")
    config_path = tmp_path / "models.config"
    config_path.write_text(
        "model_config_list { "
        + model_config_text(MODEL_NAME, base_path)
        + " "
        + model_config_text(
            "translator_all",
            all_base_path,
            'model_version_policy { all {} } version_labels { key: "stable" value: 1 }',
        )
        + " }"
    )
    connection = start_server(tmp_path, model_config_file=str(config_path))
    connection.base_paths = {MODEL_NAME: base_path, "translator_all": all_base_path}
    yield connection
    connection.server.stop()


def test_empty_reload_request_is_refused_and_unloads_nothing(labeled_server):
    error = rpc_error(
        labeled_server.models.HandleReloadConfigRequest, model_management_pb2.ReloadConfigRequest()
    )
    assert (error.code(), error.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "ServerModelConfig type not supported by HandleReloadConfigRequest. Only ModelConfigList "
        "is currently supported",
    )
    assert predicted_version(labeled_server) == 2
    assert predicted_version(labeled_server, "translator_all", label="stable") == 1


def test_failed_reload_keeps_the_previous_version_labels(labeled_server):
    paths = labeled_server.base_paths
    missing_version = reload_request(
        "model_config_list { "
        + model_config_text(
            "translator_all",
            paths["translator_all"],
            'model_version_policy { all {} } version_labels { key: "stable" value: 7 }',
        )
        + " "
        + model_config_text(MODEL_NAME, paths[MODEL_NAME])
        + " }"
    )
    error = rpc_error(labeled_server.models.HandleReloadConfigRequest, missing_version)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error.details() == (
        "Request to assign label to version 7 of model translator_all, "
        "which is not currently available for inference"
    )
    assert predicted_version(labeled_server, "translator_all", label="stable") == 1

    # A valid reload moves the label and adds one; removing translator unloads it.
    moved = reload_request(
        "model_config_list { "
        + model_config_text(
            "translator_all",
            paths["translator_all"],
            'model_version_policy { all {} } version_labels { key: "stable" value: 2 } '
            'version_labels { key: "canary" value: 1 }',
        )
        + " }"
    )
    assert labeled_server.models.HandleReloadConfigRequest(moved, timeout=60).status.error_code == 0
    assert predicted_version(labeled_server, "translator_all", label="stable") == 2
    assert predicted_version(labeled_server, "translator_all", label="canary") == 1
    assert version_states(labeled_server) == [(2, "END")]
    error = rpc_error(labeled_server.predict.Predict, texts_request(["gone"]))
    assert (error.code(), error.details()) == (
        grpc.StatusCode.NOT_FOUND,
        "Servable not found for request: Latest(translator)",
    )


def test_latest_policy_keeps_the_newest_n_versions(exports, tmp_path):
    base_path = make_model_base(exports, str(tmp_path), (1, 2))
    install_version(exports, base_path, 1, as_version=3)
    config_path = tmp_path / "models.config"
    config_path.write_text(
        "model_config_list { "
        + model_config_text(
            MODEL_NAME, base_path, "model_version_policy { latest { num_versions: 2 } }"
        )
        + " }"
    )
    connection = start_server(tmp_path, model_config_file=str(config_path))
    try:
        assert version_states(connection) == [(3, "AVAILABLE"), (2, "AVAILABLE")]
        latest = connection.predict.Predict(texts_request(["newest"]), timeout=10)
        assert latest.model_spec.version.value == 3
        assert strings(latest.outputs["translation"]) == [
            expected_greedy("newest", 1)
        ]  # 1's export.
        assert predicted_version(connection, version=2) == 2
        error = rpc_error(connection.predict.Predict, texts_request(["x"], version=1))
        assert error.details() == "Servable not found for request: Specific(translator, 1)"
    finally:
        connection.server.stop()


def test_config_file_reloads_and_keeps_the_last_good_config(exports, tmp_path, caplog):
    base_path = make_model_base(exports, str(tmp_path), (1,))
    second_base_path = make_model_base(exports, str(tmp_path), (2,), "second")
    config_path = tmp_path / "models.config"
    one_model = "model_config_list { " + model_config_text(MODEL_NAME, base_path) + " }"
    two_models = (
        "model_config_list { "
        + model_config_text(MODEL_NAME, base_path)
        + " "
        + model_config_text("second", second_base_path)
        + " }"
    )
    config_path.write_text(one_model)
    connection = start_server(
        tmp_path, model_config_file=str(config_path), model_config_file_poll_wait_seconds=1
    )
    try:
        config_path.write_text(two_models)
        wait_for(
            lambda: predicted_version_or_none(connection, "second") == 2,
            "the model added to the config file",
        )
        for broken in ("model_config_list { config { name: ", ""):
            reloads_failed = caplog.text.count("Failed to reload ModelServerConfig file")
            config_path.write_text(broken)
            wait_for(
                lambda: (
                    caplog.text.count("Failed to reload ModelServerConfig file") > reloads_failed
                ),
                f"the poll to reject {broken!r}",
            )
            assert predicted_version(connection, "second") == 2
            assert predicted_version(connection) == 1
        config_path.write_text(one_model)
        wait_for(
            lambda: version_states(connection, "second") == [(2, "END")],
            "the model removed from the config file to be unloaded",
        )
        assert predicted_version(connection) == 1
    finally:
        connection.server.stop()


def predicted_version_or_none(connection: Connection, name: str):
    try:
        return predicted_version(connection, name)
    except grpc.RpcError:
        return None


def test_a_failed_version_that_is_deleted_ends(exports, tmp_path):
    base_path = make_model_base(exports, str(tmp_path), (1,))
    connection = start_server(
        tmp_path,
        model_name=MODEL_NAME,
        model_base_path=base_path,
        file_system_poll_wait_seconds=0.2,
    )
    try:
        broken = tmp_path / "staging" / "3"
        broken.mkdir(parents=True)
        (broken / "saved_model.pb").write_bytes(b"not a SavedModel")
        os.rename(broken, os.path.join(base_path, "3"))
        wait_for(
            lambda: version_states(connection)[0] == (3, "LOADING"),
            "version 3 to fail and wait for a retry",
        )
        shutil.rmtree(os.path.join(base_path, "3"))
        wait_for(
            lambda: version_states(connection)[0] == (3, "END"), "version 3 to end", timeout=30
        )
        assert version_states(connection) == [(3, "END"), (1, "AVAILABLE")]
        assert predicted_version(connection) == 1
    finally:
        connection.server.stop()


def version_errors(connection: Connection, name: str) -> list:
    """(version, state, gRPC code number, error message) of every version of a model."""
    response = connection.models.GetModelStatus(
        get_model_status_pb2.GetModelStatusRequest(model_spec={"name": name}), timeout=10
    )
    return [
        (
            row.version,
            get_model_status_pb2.ModelVersionStatus.State.Name(row.state),
            row.status.error_code,
            row.status.error_message,
        )
        for row in response.model_version_status
    ]


def _warmup_file(export_dir, records):
    path = os.path.join(export_dir, WARMUP_PATH)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)


def _predict_log(texts=("hola",)):
    log = prediction_log_pb2.PredictionLog()
    log.predict_log.request.CopyFrom(texts_request(list(texts)))
    return log.SerializeToString()


@pytest.mark.parametrize(
    "records, code, message",
    [
        ([_predict_log()] * (MAX_WARMUP_RECORDS + 1), grpc.StatusCode.INVALID_ARGUMENT,
         re.escape(f"Number of warmup records exceeds the maximum ({MAX_WARMUP_RECORDS})")),
        ([_predict_log(), b"\xff\xff\xff"], grpc.StatusCode.INVALID_ARGUMENT,
         "Failed to parse warmup record 1"),
        ([prediction_log_pb2.PredictionLog(classify_log={}).SerializeToString()],
         grpc.StatusCode.UNIMPLEMENTED, "Warmup record 0 of .* is a classify_log"),
    ],
    ids=["too many", "unparsable", "not predict"],
)  # fmt: skip
def test_a_bad_warmup_file_fails_with_the_code_tf_serving_gives(tmp_path, records, code, message):
    _warmup_file(str(tmp_path), records)
    with pytest.raises(ServingError, match=message) as info:
        servable_lib.read_warmup_requests(str(tmp_path))
    assert info.value.code == code


def models_config_of(root, *names: str) -> str:
    """The path of a models.config written in `root` serving each of `names` from
    `root/<name>`."""
    config_path = root / "models.config"
    config_path.write_text(
        "model_config_list { "
        + "".join(model_config_text(name, str(root / name)) for name in names)
        + " }"
    )
    return str(config_path)


def test_load_failures_report_the_loaders_error_code(exports, tmp_path):
    """A SavedModel proto that does not parse is DATA_LOSS and a missing tag set NOT_FOUND,
    as TF's loader reports them to TF Serving; both were UNKNOWN."""
    corrupt = tmp_path / "corrupt" / "1"
    corrupt.mkdir(parents=True)
    (corrupt / "saved_model.pb").write_bytes(b"not a SavedModel")
    untagged = tmp_path / "untagged" / "1"
    shutil.copytree(exports[1], untagged)
    connection = start_server(
        tmp_path,
        model_config_file=models_config_of(tmp_path, "corrupt", "untagged"),
        max_num_load_retries=0,
        saved_model_tags="serve,gpu",
    )
    try:
        [(version, state, code, message)] = version_errors(connection, "corrupt")
        assert (version, state, code) == (1, "END", grpc.StatusCode.DATA_LOSS.value[0])
        assert message.startswith(f"Can't parse the SavedModel proto in {corrupt}: ")
        [(version, state, code, message)] = version_errors(connection, "untagged")
        assert (version, state, code) == (1, "END", grpc.StatusCode.NOT_FOUND.value[0])
        assert message.startswith(
            "Could not find meta graph def matching supplied tags: { gpu serve }."
        )
    finally:
        connection.server.stop()


def test_a_failed_load_closes_what_it_made_before_the_next_attempt(exports, tmp_path, monkeypatch):
    """Repeated failed loads of a version with truncated variables grew the server by about
    100 MB an attempt (1.1 GB after 11): the failed Session was left to the garbage collector.
    A load whose variables fail to restore now closes its Session, and a version whose warmup
    fails is released, before the next attempt."""
    sessions = []

    class RecordedSession(tf.compat.v1.Session):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            sessions.append(self)

    monkeypatch.setattr(tf.compat.v1, "Session", RecordedSession)
    truncated = tmp_path / "truncated" / "1"
    shutil.copytree(exports[1], truncated)
    for name in os.listdir(truncated / "variables"):
        if name.startswith("variables.data"):
            (truncated / "variables" / name).write_bytes(b"")
    bad_warmup = tmp_path / "bad_warmup" / "1"
    shutil.copytree(exports[1], bad_warmup)
    _warmup_file(str(bad_warmup), [_predict_log(), b"\xff\xff\xff"])
    connection = start_server(
        tmp_path,
        model_config_file=models_config_of(tmp_path, "truncated", "bad_warmup"),
        max_num_load_retries=2,
        load_retry_interval_micros=0,
        file_system_poll_wait_seconds=0.1,
    )
    try:
        for name in ("truncated", "bad_warmup"):
            wait_for(
                lambda: version_errors(connection, name)[0][1] == "END",  # noqa: B023
                f"{name} to give up after its retries",
            )
        assert len(sessions) == 6
        assert all(session._closed for session in sessions)
    finally:
        connection.server.stop()


# Root reads every directory; without these capabilities it obeys the permission bits.
WITHOUT_ROOTS_READ_ALL = (
    ("setpriv", "--bounding-set", "-dac_override,-dac_read_search") if os.geteuid() == 0 else ()
)


@pytest.mark.skipif(
    bool(WITHOUT_ROOTS_READ_ALL) and not shutil.which("setpriv"), reason="needs setpriv as root"
)
def test_an_unreadable_version_directory_is_reported_not_skipped(exports, tmp_path):
    """TF Serving loads every numbered directory and reports why one fails; an unreadable
    one was skipped without a word, and the older version served as if it were the newest."""
    base_path = make_model_base(exports, str(tmp_path), (1, 2))
    unreadable = os.path.join(base_path, "2")
    os.chmod(unreadable, 0)
    try:
        with ServerProcess(
            [
                f"--model_name={MODEL_NAME}",
                f"--model_base_path={base_path}",
                "--file_system_poll_wait_seconds=0",
                "--max_num_load_retries=0",
            ],
            launcher=WITHOUT_ROOTS_READ_ALL,
        ) as server:
            channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
            response = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(
                get_model_status_pb2.GetModelStatusRequest(model_spec={"name": MODEL_NAME}),
                timeout=30,
            )
            [row] = response.model_version_status
            expected_message = f"[Errno 13] Permission denied: '{unreadable}'"
            assert (row.version, row.state, row.status.error_code, row.status.error_message) == (
                2,
                get_model_status_pb2.ModelVersionStatus.END,
                grpc.StatusCode.PERMISSION_DENIED.value[0],
                expected_message,
            )
            assert (
                f"Loading servable: {{name: {MODEL_NAME} version: 2}} failed: PERMISSION_DENIED: "
                f"{expected_message}" in server.output()
            )
    finally:
        os.chmod(unreadable, 0o755)


def test_disabled_warmup_serves_a_version_whose_warmup_file_is_broken(exports, tmp_path):
    base_path = make_model_base(exports, str(tmp_path), (1,))
    with open(
        os.path.join(base_path, "1", "assets.extra", "tf_serving_warmup_requests"), "wb"
    ) as warmup:
        warmup.write(b"not a TFRecord file")
    flags = [
        f"--model_name={MODEL_NAME}",
        f"--model_base_path={base_path}",
        "--port=0",
        "--file_system_poll_wait_seconds=0",
        "--max_num_load_retries=0",
    ]
    for warmup_flag, serves in (
        ("--enable_model_warmup=false", True),
        ("--enable_model_warmup=true", False),
    ):
        connection = Connection(ModelServer(parse_flags(flags + [warmup_flag])).start())
        try:
            if serves:
                assert predicted_version(connection) == 1
            else:  # The broken warmup file fails the load, as in TF Serving.
                assert version_states(connection) == [(1, "END")]
        finally:
            connection.server.stop()
