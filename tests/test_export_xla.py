"""The XLA export variant (`serving.export --jit_compile`) and the server's
`--xla_cpu_compilation_enabled`.

The tiny trained run is exported twice, as a plain graph and with greedy decoding and beam
search compiled by XLA. The XLA export must translate exactly as the plain one (the same
translations, the same scores to a float tolerance), through `tf.saved_model.load`, the TF1
Session loader (`saved_model_cli run`, as TF Serving loads it) and the local server; and the
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
    N_BEST_SIGNATURE,
    PREFIX_SIGNATURE,
    SIGNATURE_OUTPUTS,
    TARGET_PREFIX_INPUT,
    TEXT_INPUT,
    TRANSLATION_OUTPUT,
    TRANSLATIONS_OUTPUT,
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
# Five sentences: XLA decodes them in a batch of 8, three rows of padding.
TEXTS = [
    "¿Dónde está el gato?",
    "Hola.",
    "El perro negro está en la casa pequeña.",
    "",
    "Tengo un gato negro.",
]
# The signatures `--jit_compile` compiles: greedy decoding and beam search.
XLA_SIGNATURES = (GREEDY_SIGNATURE, ALIGNMENTS_SIGNATURE, BEAM_SIGNATURE, N_BEST_SIGNATURE)


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


def _translated_something(outputs):
    """Whether a signature's outputs hold a translation that is not empty."""
    name = TRANSLATION_OUTPUT if TRANSLATION_OUTPUT in outputs else TRANSLATIONS_OUTPUT
    return any(outputs[name].flat)


@pytest.mark.parametrize("signature", XLA_SIGNATURES)
def test_xla_export_translates_exactly_as_the_plain_export(loaded, signature):
    plain = _outputs(loaded["plain"], signature)
    assert _translated_something(plain), "the tiny run should translate something"
    _assert_same_outputs(_outputs(loaded["xla"], signature), plain)


def test_export_info_records_the_xla_option(versions):
    for kind, path in versions.items():
        with open(os.path.join(path, EXPORT_INFO_PATH), encoding="utf-8") as handle:
            info = json.load(handle)
        assert info["decoding"]["jit_compile"] is (kind == "xla")
        compiled = {
            name
            for name, options in info["signature_options"].items()
            if options.get("jit_compile")
        }
        assert compiled == (set(XLA_SIGNATURES) if kind == "xla" else set())


def test_the_server_finds_the_signatures_that_run_xla(versions):
    def xla_signatures(kind):
        return servable_lib.xla_signature_names(
            servable_lib.read_meta_graph(versions[kind], ["serve"])
        )

    assert xla_signatures("xla") == set(XLA_SIGNATURES)
    assert xla_signatures("plain") == set()


@pytest.mark.parametrize("signature", (GREEDY_SIGNATURE, BEAM_SIGNATURE))
def test_tf1_session_loader_runs_the_xla_export(versions, loaded, signature):
    """`saved_model_cli run`: the TF1 loader into a Session, what tensorflow_model_server does."""
    outdir = f"{versions['xla']}-cli-{signature}"
    result = subprocess.run(
        saved_model_cli(
            "run",
            "--dir",
            versions["xla"],
            "--tag_set",
            "serve",
            "--signature_def",
            signature,
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
    outputs = {
        name: np.load(os.path.join(outdir, f"{name}.npy"), allow_pickle=True)
        for name in SIGNATURE_OUTPUTS[signature]
    }
    _assert_same_outputs(outputs, _outputs(loaded["plain"], signature))


def test_without_the_flag_xla_signatures_fail_and_so_does_their_warmup(versions):
    version = servable_lib.load_servable(MODEL_NAME, 1, versions["xla"])
    text = np.array([t.encode() for t in TEXTS], dtype=object)
    for signature in XLA_SIGNATURES:
        output = SIGNATURE_OUTPUTS[signature][0]
        with pytest.raises(ServingError) as info:
            version.run(signature, {TEXT_INPUT: text}, [output])
        assert info.value.code == grpc.StatusCode.INTERNAL
        assert info.value.message == servable_lib.XLA_DISABLED_MESSAGE
    # Beam search with a prefix stays a plain graph.
    no_prefix = np.array([b""] * len(TEXTS), dtype=object)
    assert version.run(
        PREFIX_SIGNATURE, {TEXT_INPUT: text, TARGET_PREFIX_INPUT: no_prefix}, [TRANSLATION_OUTPUT]
    )[TRANSLATION_OUTPUT].size
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
    """The outputs of `signature` on `TEXTS` over gRPC, as `_outputs` returns them."""
    request = texts_request(TEXTS, signature, MODEL_NAME)
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        response = stub.Predict(request, timeout=120)
    return {name: tf.make_ndarray(proto) for name, proto in response.outputs.items()}


def test_served_over_grpc_only_with_xla_cpu_compilation_enabled(versions, loaded):
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
        for signature in (GREEDY_SIGNATURE, BEAM_SIGNATURE, N_BEST_SIGNATURE):
            _assert_same_outputs(_predict(server, signature), _outputs(loaded["plain"], signature))
    finally:
        server.stop()
