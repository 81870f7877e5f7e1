"""The XLA export variant (`inference.export --jit_compile`) and the server's
`--xla_cpu_compilation_enabled`.

The tiny trained run is exported (`python -m inference.export`) with greedy decoding and beam search
compiled by XLA, and once more with XLA for single sentences only (`--xla_max_batch 1`). Each
must translate exactly as the plain graph (the same translations, the same scores to a float
tolerance): the run's `Translator` with its own options, traced as the plain export's signatures
are (tests/inference/test_export.py checks the plain export against the decoders), through
`tf.saved_model.load`, the TF1 Session loader (`saved_model_cli run`, as TF Serving loads it) and
the local server; and the server must refuse its XLA signatures unless started with the flag, as
TF Serving does (INTERNAL "XLA compilation disabled", which also fails the version's warmup).

The XLA export's warmup requests must cover every bucket (XLA program) of its bounds, so that a
server that has replayed them compiles nothing more for requests within them. XLA's own dump
(`XLA_FLAGS=--xla_dump_to`, one `module_*.before_optimizations.txt` per compilation) counts the
compilations of a server subprocess. Compiling is most of this file's time (seconds a program):
the export's bounds are small (4 buckets), one server serves every test that needs the flag, and
the bounds' full ranges are checked on the requests alone (`warmup_requests`), not served.
"""

import contextlib
import dataclasses
import glob
import itertools
import json
import os
import subprocess
import tempfile

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
    SIGNATURE_NAMES,
    SIGNATURE_OUTPUTS,
    SIGNATURES,
    TARGET_PREFIX_INPUT,
    TEXT_INPUT,
    TRANSLATION_OUTPUT,
    TRANSLATIONS_OUTPUT,
)
from inference import export
from model.decoding.xla import pad_to_xla_buckets, xla_batch_size, xla_slots
from model.translator import MIN_SOURCE_TOKENS, Translator, input_signature
from run_directory import artifacts
from serving.model_server import servable as servable_lib
from serving.model_server.errors import ServingError
from serving.model_server.predict import run_warmup
from serving.model_server.server import ModelServer, ServerOptions
from tests.export_fixtures import PAIRS, saved_model_cli, text_literal
from tests.serving_fixtures import ServerProcess, texts_request

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
# The XLA export's --warmup_max_batch and --warmup_max_source_tokens, small for a short load:
# batches of 1 and 2 sentences (1 and 2 rows) by sources of 2-4 and 5-16 tokens (16 and 32
# output slots, 16 columns), 4 buckets (the tiny model takes 24 tokens: 17-24 would be a third
# source bucket, 24 columns).
WARMUP_MAX_BATCH = 2
WARMUP_MAX_SOURCE_TOKENS = 16


# The hybrid export decodes batches of one sentence under XLA, larger ones in the plain graph.
HYBRID_XLA_MAX_BATCH = 1
EXPORT_FLAGS = {
    "xla": [
        "--jit_compile",
        f"--warmup_max_batch={WARMUP_MAX_BATCH}",
        f"--warmup_max_source_tokens={WARMUP_MAX_SOURCE_TOKENS}",
    ],
    "hybrid": [
        "--jit_compile",
        f"--xla_max_batch={HYBRID_XLA_MAX_BATCH}",
        f"--warmup_max_batch={WARMUP_MAX_BATCH}",
        f"--warmup_max_source_tokens={WARMUP_MAX_SOURCE_TOKENS}",
    ],
}


def _export(run_dir, export_base, flags):
    """`python -m inference.export` of `run_dir` into `export_base`; returns the version dir."""
    base = os.fspath(export_base)
    export.main(
        ["--run_dir", os.fspath(run_dir), "--export_base", base, "--model_name", MODEL_NAME, *flags]
    )
    return os.path.join(base, MODEL_NAME, "1")


@pytest.fixture(scope="module")
def versions(tiny_export_run, tmp_path_factory):
    """`{kind: version dir}` of each kind of `EXPORT_FLAGS`, each the only version of its model
    base."""
    base = tmp_path_factory.mktemp("exports")
    return {
        kind: _export(tiny_export_run, base / kind, flags) for kind, flags in EXPORT_FLAGS.items()
    }


@pytest.fixture(scope="module")
def translator(tiny_export_run):
    """The tiny run's `Translator` with its own decoding options (the plain export's)."""
    model, source_tokenizer, target_tokenizer, _ = artifacts.load_trained(tiny_export_run)
    options = artifacts.decoding_options(tiny_export_run)
    return Translator(model, source_tokenizer, target_tokenizer, options)


@pytest.fixture(scope="module")
def loaded(versions, translator):
    """`{kind: signatures}`: each export's, loaded by `tf.saved_model.load`, and under "plain"
    the translator's own, each a `tf.function` of the export's input signature."""
    import tensorflow_text  # noqa: F401  (the tokenizer's ops)

    loaded = {kind: tf.saved_model.load(path).signatures for kind, path in versions.items()}
    methods = {
        GREEDY_SIGNATURE: translator.greedy,
        BEAM_SIGNATURE: translator.beam_search,
        ALIGNMENTS_SIGNATURE: translator.alignments,
        N_BEST_SIGNATURE: translator.n_best,
    }
    loaded["plain"] = {
        name: tf.function(method, input_signature=input_signature(name))
        for name, method in methods.items()
    }
    return loaded


def _outputs(signatures, signature, texts=TEXTS):
    result = signatures[signature](text=tf.constant(texts))
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


@pytest.mark.parametrize("signature", [GREEDY_SIGNATURE, BEAM_SIGNATURE])
def test_hybrid_export_translates_exactly_as_the_plain_export_on_both_sides_of_its_bound(
    loaded, signature
):
    """One sentence (XLA) and five (the plain graph) through `--xla_max_batch 1`."""
    for texts in (TEXTS[:HYBRID_XLA_MAX_BATCH], TEXTS):
        plain = _outputs(loaded["plain"], signature, texts)
        _assert_same_outputs(_outputs(loaded["hybrid"], signature, texts), plain)


def test_export_info_records_the_xla_option(versions):
    for kind, path in versions.items():
        with open(os.path.join(path, EXPORT_INFO_PATH), encoding="utf-8") as handle:
            info = json.load(handle)
        assert info["decoding"]["jit_compile"] is True
        assert info["decoding"]["xla_max_batch"] == (
            HYBRID_XLA_MAX_BATCH if kind == "hybrid" else None
        )
        compiled = {
            name: options.get("xla_max_batch")
            for name, options in info["signature_options"].items()
            if options.get("jit_compile")
        }
        expected_bound = HYBRID_XLA_MAX_BATCH if kind == "hybrid" else None
        assert compiled == dict.fromkeys(XLA_SIGNATURES, expected_bound)


# --------------------------------------------------------------------------- warmup buckets


def _source_lengths(translator, texts):
    """Tokens of each text as the signatures decode it (`Translator.source_lengths`)."""
    return translator.source_lengths(tf.constant(texts, tf.string)).numpy().tolist()


def _bucket(translator, batch_size, source_length):
    """The XLA program of a batch of `batch_size` sources, the longest `source_length` tokens:
    the shape `pad_to_xla_buckets` pads its source ids to, and `xla_slots` of its output bound."""
    inp = tf.ones([batch_size, source_length], tf.int32)
    padded = pad_to_xla_buckets(inp, translator.model.pe_input)
    return (*padded.shape, int(xla_slots(translator.max_decoding_length(source_length))))


def _expected_buckets(translator, max_batch, max_source_tokens):
    """Sorted buckets of every batch of 1 to `max_batch` sources of up to `max_source_tokens`."""
    return sorted(
        {
            _bucket(translator, batch_size, length)
            for batch_size, length in itertools.product(
                range(1, max_batch + 1), range(MIN_SOURCE_TOKENS, max_source_tokens + 1)
            )
        }
    )


def _buckets_by_signature(translator, requests):
    """`{signature: sorted buckets of its requests}` of `(signature, texts)` requests."""
    buckets = {}
    for signature, texts in requests:
        longest = max(_source_lengths(translator, texts))
        buckets.setdefault(signature, []).append(_bucket(translator, len(texts), longest))
    return {signature: sorted(found) for signature, found in buckets.items()}


def _assert_warmup_covers(
    translator, requests, max_batch, max_source_tokens, warmed=XLA_SIGNATURES
):
    """Each signature of `warmed` has exactly one request per bucket of the bounds; the others
    one request each."""
    expected = _expected_buckets(translator, max_batch, max_source_tokens)
    buckets = _buckets_by_signature(translator, requests)
    assert list(buckets) == list(SIGNATURE_NAMES)
    for signature in SIGNATURE_NAMES:
        if signature in warmed:
            assert buckets[signature] == expected, signature
        else:
            assert len(buckets[signature]) == 1, signature


def _file_requests(version_dir):
    """The `(signature, texts)` of a version's warmup records, as the server reads them."""
    return [
        (
            request.model_spec.signature_name,
            [text.decode() for text in tf.make_ndarray(request.inputs[TEXT_INPUT])],
        )
        for request in servable_lib.read_warmup_requests(version_dir)
    ]


def test_xla_warmup_has_one_request_per_bucket_of_its_bounds(versions, translator):
    requests = _file_requests(versions["xla"])
    _assert_warmup_covers(translator, requests, WARMUP_MAX_BATCH, WARMUP_MAX_SOURCE_TOKENS)
    # Batches of 1 and 2 rows by sources of 2-4 and 5-16 tokens: had the export found fewer,
    # `expected` would be as short.
    assert len(requests) == len(XLA_SIGNATURES) * 2 * 2 + len(SIGNATURE_NAMES) - len(XLA_SIGNATURES)


def test_hybrid_warmup_compiles_no_batch_beyond_its_bound(versions, translator):
    """`--xla_max_batch 1` with `--warmup_max_batch 2`: batches of 2 run in the plain graph, so
    the warmup compiles the programs of single sentences only."""
    requests = _file_requests(versions["hybrid"])
    _assert_warmup_covers(translator, requests, HYBRID_XLA_MAX_BATCH, WARMUP_MAX_SOURCE_TOKENS)


def _compiled(translator):
    """`translator` with XLA's options."""
    return Translator(
        translator.model,
        translator.source_tokenizer,
        translator.target_tokenizer,
        dataclasses.replace(translator.options, jit_compile=True),
    )


@pytest.mark.parametrize("max_batch, max_source_tokens", [(1, 2), (5, 10), (2, 1000), (3, None)])
def test_warmup_requests_cover_the_buckets_of_other_bounds(
    translator, max_batch, max_source_tokens
):
    """Bounds beyond the served export's, down to one bucket and up to every source length the
    model takes (None)."""
    requests = export.warmup_requests(_compiled(translator), max_batch, max_source_tokens)
    # Sources are cut to the model's length: longer bounds add no bucket.
    longest = min(max_source_tokens or translator.model.pe_input, translator.model.pe_input)
    _assert_warmup_covers(translator, requests, max_batch, longest)
    if max_source_tokens is None:
        # Batches of 1, 2 and 4 rows by sources of 2-4, 5-16 and 17-24 tokens (16 and 24 columns).
        plain = len(SIGNATURE_NAMES) - len(XLA_SIGNATURES)
        assert len(requests) == len(XLA_SIGNATURES) * 3 * 3 + plain


def test_warmup_of_chosen_signatures_covers_their_buckets_only(translator, tmp_path, capsys):
    requests = export.warmup_requests(_compiled(translator), 3, 20, signatures=(BEAM_SIGNATURE,))
    _assert_warmup_covers(translator, requests, 3, 20, warmed=(BEAM_SIGNATURE,))
    with pytest.raises(ValueError, match="no signature named greedy; the signatures are"):
        export.warmup_requests(_compiled(translator), signatures=("greedy",))
    with pytest.raises(SystemExit):
        export.main(["--run_dir", os.fspath(tmp_path), "--warmup_signatures", "greedy"])
    assert "--warmup_signatures: no signature named greedy" in capsys.readouterr().err


def test_warmup_texts_are_exactly_as_long_as_asked(translator):
    lengths = list(range(MIN_SOURCE_TOKENS, translator.model.pe_input + 1))
    texts = export.texts_of_lengths(translator, lengths)
    assert _source_lengths(translator, [texts[length] for length in lengths]) == lengths
    with pytest.raises(ValueError, match="source lengths"):
        export.texts_of_lengths(translator, [MIN_SOURCE_TOKENS - 1])


def test_warmup_bounds_tf_serving_cannot_load_are_refused(translator, tmp_path):
    with pytest.raises(ValueError, match="1001 warmup requests, more than the 1000"):
        export.write_warmup_requests(tmp_path, MODEL_NAME, [(GREEDY_SIGNATURE, [""])] * 1001)
    assert not os.listdir(tmp_path)
    with pytest.raises(ValueError, match="max_batch"):
        translator.xla_buckets(0)
    with pytest.raises(ValueError, match="max_source_tokens"):
        translator.xla_buckets(1, MIN_SOURCE_TOKENS - 1)
    for flag in ("--warmup_max_batch=0", "--warmup_max_source_tokens=1"):
        with pytest.raises(SystemExit):
            export.main(["--run_dir", os.fspath(tmp_path), "--jit_compile", flag])


def _compilations(dump_dir):
    """XLA programs a process with `XLA_FLAGS=--xla_dump_to=dump_dir` has compiled so far."""
    return len(glob.glob(os.path.join(dump_dir, "module_*.before_optimizations.txt")))


@dataclasses.dataclass
class XlaServer:
    """A served XLA export: `stub` its gRPC PredictionService, `warmed_up` the XLA programs its
    process had compiled when it began to serve, `compilations()` those it has compiled since
    it started."""

    stub: prediction_service_pb2_grpc.PredictionServiceStub
    warmed_up: int
    dump_dir: str

    def compilations(self):
        return _compilations(self.dump_dir)

    def predict(self, texts, signature):
        """The outputs of `signature` on `texts`, as `_outputs` returns them."""
        response = self.stub.Predict(texts_request(texts, signature, MODEL_NAME), timeout=300)
        return {name: tf.make_ndarray(proto) for name, proto in response.outputs.items()}


@pytest.fixture(scope="module")
def xla_server(versions):
    """The XLA export served by `python -m serving.server --xla_cpu_compilation_enabled=true`,
    which replays its warmup before it serves, as TF Serving does; an `XlaServer`."""
    flags = [
        f"--model_name={MODEL_NAME}",
        f"--model_base_path={os.path.dirname(versions['xla'])}",
        "--xla_cpu_compilation_enabled=true",
    ]
    # LLVM at -O0 compiles the same programs in about half the time.
    xla_flags = "--xla_backend_optimization_level=0"
    with contextlib.ExitStack() as stack:
        dump_dir = stack.enter_context(tempfile.TemporaryDirectory())
        server = stack.enter_context(
            # A bound on a hang: the warmup compiles a program per record, a second or two each.
            ServerProcess(
                flags,
                startup_timeout=600,
                environment={"XLA_FLAGS": f"--xla_dump_to={dump_dir} {xla_flags}"},
            )
        )
        channel = stack.enter_context(grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}"))
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        yield XlaServer(stub, _compilations(dump_dir), dump_dir)


def _texts_in_every_bucket(translator, max_batch, max_source_tokens):
    """Requests (lists of texts) of the training sentences, not the warmup's texts, one in each
    bucket of batches of 1 to `max_batch` sources of up to `max_source_tokens` tokens: the
    largest batch of each batch bucket, its longest source the longest sentence of its (width,
    slots) bucket, the other rows sentences no longer (repeated when there are too few)."""
    sources = [source for source, _ in PAIRS]
    candidates = ["", *sources, *(f"{a} {b}" for a, b in itertools.product(sources[:12], repeat=2))]
    by_length = sorted(
        (length, text)
        for length, text in zip(_source_lengths(translator, candidates), candidates)
        if length <= max_source_tokens
    )
    longest = {_bucket(translator, 1, length)[1:]: (length, text) for length, text in by_length}
    batch_sizes = {_bucket(translator, size, 2)[0]: size for size in range(1, max_batch + 1)}

    def no_longer(length):
        return itertools.cycle(
            [other for other_length, other in by_length if other_length <= length]
        )

    return [
        [text, *itertools.islice(no_longer(length), size - 1)]
        for size in batch_sizes.values()
        for length, text in longest.values()
    ]


def test_a_served_xla_export_compiles_nothing_after_its_warmup(xla_server, translator):
    """The local server replays the warmup at load, as TF Serving does; afterwards a request in
    any bucket of the bounds runs a program compiled already."""
    requests = _texts_in_every_bucket(translator, WARMUP_MAX_BATCH, WARMUP_MAX_SOURCE_TOKENS)
    expected = _expected_buckets(translator, WARMUP_MAX_BATCH, WARMUP_MAX_SOURCE_TOKENS)
    assert (
        sorted(
            _bucket(translator, len(texts), max(_source_lengths(translator, texts)))
            for texts in requests
        )
        == expected
    ), "the test's requests should fall in every bucket"
    # The server serves once it has replayed the warmup: one program per compiled request.
    assert xla_server.warmed_up == len(XLA_SIGNATURES) * len(expected)
    compiled = xla_server.compilations()
    for signature, texts in itertools.product(XLA_SIGNATURES, requests):
        xla_server.predict(texts, signature)
    assert xla_server.compilations() == compiled
    # A batch beyond the bounds' largest bucket compiles a new program: the count does see
    # compilations after the load.
    beyond = [""] * (int(xla_batch_size(WARMUP_MAX_BATCH)) + 1)
    xla_server.predict(beyond, GREEDY_SIGNATURE)
    assert xla_server.compilations() == compiled + 1


def test_the_server_finds_the_signatures_that_run_xla(versions):
    def xla_signatures(kind):
        return servable_lib.xla_signature_names(
            servable_lib.read_meta_graph(versions[kind], ["serve"])
        )

    # The other signatures (score, sample, prefix, alternatives) stay plain graphs.
    assert xla_signatures("xla") == set(XLA_SIGNATURES)


def test_the_registry_names_the_signatures_xla_compiles(versions):
    """`Signature.jit_compiled` of `common.serving_contract.SIGNATURES` (which the warmup and the
    export info follow) marks exactly the signatures whose graph in a `--jit_compile` export
    reaches a function XLA must compile (the server's reader, checked above)."""
    registered = {record.name for record in SIGNATURES if record.jit_compiled}
    for kind, path in versions.items():
        with open(os.path.join(path, EXPORT_INFO_PATH), encoding="utf-8") as handle:
            options = export.DecodingOptions(**json.load(handle)["decoding"])
        compiled = servable_lib.xla_signature_names(servable_lib.read_meta_graph(path, ["serve"]))
        assert compiled == registered == set(export.compiled_signatures(options)), kind


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


def test_served_over_grpc_only_with_xla_cpu_compilation_enabled(
    versions, loaded, xla_server, translator
):
    options = ServerOptions(
        port=0,
        model_name=MODEL_NAME,
        model_base_path=os.path.dirname(versions["xla"]),
        file_system_poll_wait_seconds=0,
        enable_model_warmup=False,
    )
    server = ModelServer(options).start()
    try:
        with (
            grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel,
            pytest.raises(grpc.RpcError) as info,
        ):
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            stub.Predict(texts_request(TEXTS, GREEDY_SIGNATURE, MODEL_NAME), timeout=120)
        assert info.value.code() == grpc.StatusCode.INTERNAL
        assert info.value.details() == servable_lib.XLA_DISABLED_MESSAGE
    finally:
        server.stop()
    # With the flag (`xla_server`), on sentences within the warmup's bounds: programs it compiled.
    texts = TEXTS[:WARMUP_MAX_BATCH]
    assert max(_source_lengths(translator, texts)) <= WARMUP_MAX_SOURCE_TOKENS
    for signature in (GREEDY_SIGNATURE, BEAM_SIGNATURE, N_BEST_SIGNATURE):
        _assert_same_outputs(
            xla_server.predict(texts, signature), _outputs(loaded["plain"], signature, texts)
        )
