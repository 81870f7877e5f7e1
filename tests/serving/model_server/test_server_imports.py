"""The model server runs on TensorFlow and the Serving protos only: it never loads the model code.

`import model` (or `training`, which imports it) would load every Keras layer of the project,
keras-hub's tokenizers and the project's start-up hooks into a process that only needs to load
SavedModels. What a process imported is read from CPython's `-X importtime` report
(PYTHONPROFILEIMPORTTIME), which names every module the first time it is imported, at start-up
or later.
"""

import re
import subprocess
import sys

import grpc
from tensorflow_serving.apis import prediction_service_pb2_grpc

from common.serving_contract import GREEDY_SIGNATURE, TRANSLATION_OUTPUT
from tests.serving_fixtures import (
    MODEL_NAME,
    REPO_ROOT,
    ServerProcess,
    expected_greedy,
    make_model_base,
    texts_request,
)

IMPORT_TIME_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)\s*$", re.MULTILINE)
PROFILE_IMPORTS = {"PYTHONPROFILEIMPORTTIME": "1"}
# Project packages and libraries the model server needs none of (the model code, training, the
# offline tools, benchmarks).
FORBIDDEN_PACKAGES = ("model", "run_directory", "training", "inference", "benchmarks", "keras_hub")


def imported_modules(log):
    """The modules an `-X importtime` report in `log` names."""
    return set(IMPORT_TIME_LINE.findall(log))


def top_level(modules):
    return {name.split(".")[0] for name in modules}


def keras_modules(modules):
    return {name for name in modules if name.split(".")[0] == "keras"}


def test_the_import_report_is_read_from_a_process_log():
    result = subprocess.run(
        [sys.executable, "-c", "import json.decoder"],
        env={"PYTHONPROFILEIMPORTTIME": "1", "PATH": ""},
        capture_output=True,
        text=True,
        check=True,
    )
    assert {"json", "json.decoder", "json.scanner"} <= imported_modules(result.stderr)


def test_the_serving_model_server_imports_no_model_or_training_code(exports, tmp_path):
    base_path = make_model_base(exports, str(tmp_path))
    with ServerProcess(
        [f"--model_name={MODEL_NAME}", f"--model_base_path={base_path}"],
        environment=PROFILE_IMPORTS,
    ) as server:
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            response = stub.Predict(texts_request(["hola mundo"], GREEDY_SIGNATURE), timeout=60)
        translation = response.outputs[TRANSLATION_OUTPUT].string_val
        assert [text.decode() for text in translation] == [expected_greedy("hola mundo", 1)]
        server.kill()
        served = imported_modules(server.output())
    assert "serving.model_server.server" in served and "tensorflow" in served
    assert not top_level(served) & set(FORBIDDEN_PACKAGES), sorted(
        name for name in served if name.split(".")[0] in FORBIDDEN_PACKAGES
    )
    # TensorFlow itself imports part of Keras 3 (`keras.src.optimizers`, eagerly, in its
    # `__init__`): the server may hold those modules, no others.
    tensorflow_only = subprocess.run(
        [sys.executable, "-c", "import tensorflow, tensorflow_text"],
        cwd=REPO_ROOT,
        env={**PROFILE_IMPORTS, "TF_CPP_MIN_LOG_LEVEL": "2", "PATH": ""},
        capture_output=True,
        text=True,
        check=True,
    )
    extra_keras = keras_modules(served) - keras_modules(imported_modules(tensorflow_only.stderr))
    assert not extra_keras, sorted(extra_keras)
