"""The XLA export variant (`serving.export --jit_compile`) and the server's
`--xla_cpu_compilation_enabled`.

The tiny trained run is exported twice, as a plain graph and with greedy decoding compiled by
XLA. The XLA export must translate exactly as the plain one, through `tf.saved_model.load`, the
TF1 Session loader (`saved_model_cli run`, as TF Serving loads it) and the local server; and the
server must refuse its XLA signatures unless started with the flag, as TF Serving does (INTERNAL
"XLA compilation disabled", which also fails the version's warmup).
"""

import dataclasses
import json
import os
import subprocess

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_service_pb2_grpc

from common.serving_contract import (
    ALIGNMENTS_SIGNATURE,
    BEAM_SIGNATURE,
    EXPORT_INFO_PATH,
    GREEDY_SIGNATURE,
    TEXT_INPUT,
    TRANSLATION_OUTPUT,
)
from serving import export
from serving.model_server import servable as servable_lib
from serving.model_server.errors import ServingError
from serving.model_server.predict import run_warmup
from serving.model_server.server import ModelServer, ServerOptions
from tests.export_fixtures import saved_model_cli, text_literal
from tests.serving_fixtures import texts_request
from training import artifacts

MODEL_NAME = "translator"
TEXTS = ["¿Dónde está el gato?", "Hola.", "El perro negro está en la casa pequeña.", ""]
GREEDY_SIGNATURES = (GREEDY_SIGNATURE, ALIGNMENTS_SIGNATURE)


def _export(run_dir, export_base, jit_compile):
    options = dataclasses.replace(artifacts.decoding_options(run_dir), jit_compile=jit_compile)
    return export.export_run(run_dir, export_base, MODEL_NAME, options)


@pytest.fixture(scope="module")
def versions(tiny_export_run, tmp_path_factory):
    """`{"plain": version dir, "xla": version dir}`, each the only version of its model base."""
    base = tmp_path_factory.mktemp("exports")
    return {
        kind: _export(tiny_export_run, base / kind, jit_compile=kind == "xla")
        for kind in ("plain", "xla")
    }


@pytest.fixture(scope="module")
def loaded(versions):
    import tensorflow_text  # noqa: F401  (the tokenizer's ops)

    return {kind: tf.saved_model.load(path) for kind, path in versions.items()}


def _outputs(loaded_model, signature):
    result = loaded_model.signatures[signature](text=tf.constant(TEXTS))
    return {name: value.numpy() for name, value in result.items()}


def _assert_same_outputs(actual, expected):
    assert actual.keys() == expected.keys()
    for name, value in expected.items():
        if value.dtype == object:
            assert actual[name].tolist() == value.tolist(), name
        else:
            np.testing.assert_allclose(actual[name], value, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("signature", GREEDY_SIGNATURES + (BEAM_SIGNATURE,))
def test_xla_export_translates_exactly_as_the_plain_export(loaded, signature):
    plain = _outputs(loaded["plain"], signature)
    assert any(plain[TRANSLATION_OUTPUT]), "the tiny run should translate something"
    _assert_same_outputs(_outputs(loaded["xla"], signature), plain)


def test_export_info_records_the_xla_option(versions):
    for kind, path in versions.items():
        with open(os.path.join(path, EXPORT_INFO_PATH), encoding="utf-8") as handle:
            assert json.load(handle)["decoding"]["jit_compile"] is (kind == "xla")


def test_the_server_finds_the_signatures_that_run_xla(versions):
    def xla_signatures(kind):
        return servable_lib.xla_signature_names(
            servable_lib.read_meta_graph(versions[kind], ["serve"])
        )

    assert xla_signatures("xla") == set(GREEDY_SIGNATURES)
    assert xla_signatures("plain") == set()


def test_tf1_session_loader_runs_the_xla_export(versions, loaded):
    """`saved_model_cli run`: the TF1 loader into a Session, what tensorflow_model_server does."""
    outdir = versions["xla"] + "-cli"
    result = subprocess.run(
        saved_model_cli(
            "run",
            "--dir",
            versions["xla"],
            "--tag_set",
            "serve",
            "--signature_def",
            GREEDY_SIGNATURE,
            "--input_exprs",
            f"text={text_literal(TEXTS)}",
            "--outdir",
            outdir,
        ),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    translations = np.load(os.path.join(outdir, "translation.npy"), allow_pickle=True)
    plain = _outputs(loaded["plain"], GREEDY_SIGNATURE)
    assert translations.tolist() == plain[TRANSLATION_OUTPUT].tolist()


def test_without_the_flag_xla_signatures_fail_and_so_does_their_warmup(versions):
    version = servable_lib.load_servable(MODEL_NAME, 1, versions["xla"])
    text = np.array([t.encode() for t in TEXTS], dtype=object)
    for signature in GREEDY_SIGNATURES:
        with pytest.raises(ServingError) as info:
            version.run(signature, {TEXT_INPUT: text}, [TRANSLATION_OUTPUT])
        assert info.value.code == grpc.StatusCode.INTERNAL
        assert info.value.message == servable_lib.XLA_DISABLED_MESSAGE
    assert version.run(BEAM_SIGNATURE, {TEXT_INPUT: text}, [TRANSLATION_OUTPUT])[
        TRANSLATION_OUTPUT
    ].size
    # The export's warmup requests call every signature: TF Serving's load fails on them.
    with pytest.raises(ServingError, match=servable_lib.XLA_DISABLED_MESSAGE):
        run_warmup(version)


def _serve(base_path, **flags):
    options = ServerOptions(
        port=0,
        model_name=MODEL_NAME,
        model_base_path=os.path.dirname(base_path),
        file_system_poll_wait_seconds=0,
        **flags,
    )
    return ModelServer(options).start()


def _predict(server, signature):
    request = texts_request(TEXTS, signature, MODEL_NAME)
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        response = stub.Predict(request, timeout=120)
    return [value.decode() for value in response.outputs[TRANSLATION_OUTPUT].string_val]


def test_served_over_grpc_only_with_xla_cpu_compilation_enabled(versions, loaded):
    plain = [
        value.decode() for value in _outputs(loaded["plain"], GREEDY_SIGNATURE)[TRANSLATION_OUTPUT]
    ]
    server = _serve(versions["xla"], enable_model_warmup=False)
    try:
        with pytest.raises(grpc.RpcError) as info:
            _predict(server, GREEDY_SIGNATURE)
        assert info.value.code() == grpc.StatusCode.INTERNAL
        assert info.value.details() == servable_lib.XLA_DISABLED_MESSAGE
    finally:
        server.stop()
    server = _serve(versions["xla"], xla_cpu_compilation_enabled=True)
    try:
        assert _predict(server, GREEDY_SIGNATURE) == plain
    finally:
        server.stop()
