"""The exported translator SavedModel: TF1 loader (saved_model_cli), ops, outputs, warmup, versions.

One tiny trained run (tests/export_fixtures.py) is exported once per module, with the command
line (`inference.export.main`). The exported signatures are compared with the in-memory model
driven from Python (tokenizers + the decoding functions of model/decoding/), and the
command-line checks run in parallel subprocesses, as TF Serving loads the model: a fresh process
with only TensorFlow and tensorflow-text.
"""

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import re
import stat
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import types_pb2

from common import serving_contract
from common.serving_contract import (
    ALIGNMENT_OUTPUT,
    ALIGNMENTS_SIGNATURE,
    ALTERNATIVES_SIGNATURE,
    BEAM_SIGNATURE,
    GREEDY_SIGNATURE,
    N_BEST_SIGNATURE,
    PREFIX_SIGNATURE,
    SAMPLE_SIGNATURE,
    SCORE_OUTPUT,
    SCORE_SIGNATURE,
    SCORES_OUTPUT,
    SEED_INPUT,
    SIGNATURE_INPUTS,
    SOURCE_TOKENS_OUTPUT,
    TARGET_INPUT,
    TARGET_PREFIX_INPUT,
    TARGET_TOKENS_OUTPUT,
    TEXT_INPUT,
    TOKEN_SCORES_OUTPUT,
    TRANSLATION_OUTPUT,
    TRANSLATIONS_OUTPUT,
)
from inference import export
from model import translator
from model.decoding import beam_search_decode, greedy_decode
from model.special_tokens import END_ID, START_ID
from run_directory.artifacts import CONFIG_FILE, load_trained, read_config
from tests.export_fixtures import PAIRS, saved_model_cli, saved_model_cli_path, text_literal
from tests.frozen_weights import assert_frozen_weights_change_nothing
from tests.graphs import products_with_bias

MODEL_NAME = "translator"
# Different lengths, accents, a sentence outside the training pairs and an empty string.
MIXED_TEXTS = [
    "¿Dónde está el gato?",
    "Hola.",
    "El perro negro está en la casa pequeña.",
    "Tengo un libro.",
    "",
    "Me gusta el pan.",
]
# Exported with non-default beam options: the reference must see them to agree.
BEAM_WIDTH, ALPHA = 3, 0.8
OLD_VERSION_MARKER = "an older deployment"
LONG_TEXT = "El gato es negro y el perro es blanco. " * 40

# The project-wide interface (tf.string `text` [batch] in; every output batch-major).
EXPORTED_SIGNATURES = {
    GREEDY_SIGNATURE: {TRANSLATION_OUTPUT: ("DT_STRING", 1), SCORE_OUTPUT: ("DT_FLOAT", 1)},
    BEAM_SIGNATURE: {TRANSLATION_OUTPUT: ("DT_STRING", 1), SCORE_OUTPUT: ("DT_FLOAT", 1)},
    ALIGNMENTS_SIGNATURE: {
        TRANSLATION_OUTPUT: ("DT_STRING", 1),
        SCORE_OUTPUT: ("DT_FLOAT", 1),
        SOURCE_TOKENS_OUTPUT: ("DT_STRING", 2),
        TARGET_TOKENS_OUTPUT: ("DT_STRING", 2),
        ALIGNMENT_OUTPUT: ("DT_FLOAT", 3),
    },
}
# Signatures beyond translating `text` (tests/inference/test_export_decoding.py compares their outputs).
OTHER_SIGNATURES = {
    N_BEST_SIGNATURE: {TRANSLATIONS_OUTPUT: ("DT_STRING", 2), SCORES_OUTPUT: ("DT_FLOAT", 2)},
    SCORE_SIGNATURE: {
        SCORE_OUTPUT: ("DT_FLOAT", 1),
        TARGET_TOKENS_OUTPUT: ("DT_STRING", 2),
        TOKEN_SCORES_OUTPUT: ("DT_FLOAT", 2),
    },
    SAMPLE_SIGNATURE: {TRANSLATION_OUTPUT: ("DT_STRING", 1), SCORE_OUTPUT: ("DT_FLOAT", 1)},
    PREFIX_SIGNATURE: {TRANSLATION_OUTPUT: ("DT_STRING", 1), SCORE_OUTPUT: ("DT_FLOAT", 1)},
    ALTERNATIVES_SIGNATURE: {
        TRANSLATIONS_OUTPUT: ("DT_STRING", 2),
        SCORES_OUTPUT: ("DT_FLOAT", 2),
    },
}
ALL_SIGNATURES = {**EXPORTED_SIGNATURES, **OTHER_SIGNATURES}
# The dtype of each input, every one `[batch]`.
INPUT_DTYPES = {
    TEXT_INPUT: "DT_STRING",
    TARGET_INPUT: "DT_STRING",
    SEED_INPUT: "DT_INT32",
    TARGET_PREFIX_INPUT: "DT_STRING",
}

# `python -c OP_CHECK_THEN_CLI saved_model.pb CLI ARGS...`, in a fresh interpreter importing
# nothing but TensorFlow and tensorflow-text (what TF Serving links): prints an `OP_CHECK {json}`
# line on the ops of the graph and of every library function (While/If bodies included), then
# runs `saved_model_cli ARGS...` in the same process (one TensorFlow start-up less).
OP_CHECK_THEN_CLI = textwrap.dedent(
    """
    import json, runpy, sys
    import tensorflow
    import tensorflow_text  # noqa: F401  (registers its ops)
    from tensorflow.core.protobuf import saved_model_pb2
    from tensorflow.python.framework import op_def_registry

    saved_model = saved_model_pb2.SavedModel()
    with open(sys.argv[1], "rb") as pb_file:
        saved_model.ParseFromString(pb_file.read())
    ops, functions = set(), set()
    for meta_graph in saved_model.meta_graphs:
        graph = meta_graph.graph_def
        ops.update(node.op for node in graph.node)
        for function in graph.library.function:
            functions.add(function.signature.name)
            ops.update(node.op for node in function.node_def)
    unregistered = sorted(
        op for op in ops if op not in functions and op_def_registry.get(op) is None
    )
    print("OP_CHECK", json.dumps({"ops": sorted(ops), "functions": len(functions),
                                  "unregistered": unregistered}), flush=True)
    sys.argv = sys.argv[2:]
    runpy.run_path(sys.argv[0], run_name="__main__")
    """
)
OP_CHECK_PREFIX = "OP_CHECK "


def _subprocess_env():
    # Several of these run at once on few cores: one thread each avoids oversubscription.
    return {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "CUDA_VISIBLE_DEVICES": "",
        "TF_NUM_INTRAOP_THREADS": "1",
        "TF_NUM_INTEROP_THREADS": "1",
    }


def _decoded(strings):
    return [value.decode("utf-8") for value in np.asarray(strings).ravel()]


# ------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def run_dir(tiny_export_run):
    return tiny_export_run


@pytest.fixture(scope="module")
def trained(run_dir):
    """`(model, source_tokenizer, target_tokenizer, config)` of the tiny run, in memory."""
    return load_trained(run_dir)


class BackgroundCommands:
    """Subprocesses started together, awaited on demand.

    Each spends seconds importing TensorFlow, mostly on one core, so they run while the
    in-process tests work (the tests reading them come last in this file).
    """

    def __init__(self, commands):
        self._commands = commands
        self._processes = {
            name: subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=_subprocess_env(),
            )
            for name, argv in commands.items()
        }
        self._results = {}

    def result(self, name):
        """The `subprocess.CompletedProcess` of command `name` (waits for it)."""
        if name not in self._results:
            process = self._processes[name]
            stdout, stderr = process.communicate(timeout=300)
            self._results[name] = subprocess.CompletedProcess(
                self._commands[name], process.returncode, stdout, stderr
            )
        return self._results[name]

    def close(self):
        for process in self._processes.values():
            if process.poll() is None:
                process.kill()
                process.communicate()


@dataclasses.dataclass
class Export:
    """The module's export and the command-line checks running on it.

    Attributes:
        path: the version directory the command printed.
        commands: `BackgroundCommands`: `show` (the op check, then `saved_model_cli show
            --all`) and one `saved_model_cli run` per signature, writing its outputs as .npy
            files to `outdirs[signature]`.
    """

    path: str
    commands: BackgroundCommands
    outdirs: dict


def _export_with_cli(run_dir, export_base, *flags):
    """`inference.export`'s command line on the tiny run, with the tests' beam options and
    `flags`, in this process; returns the version directory it prints."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        export.main(
            [
                "--run_dir",
                str(run_dir),
                "--export_base",
                str(export_base),
                "--beam_width",
                str(BEAM_WIDTH),
                "--alpha",
                str(ALPHA),
                *flags,
            ]
        )
    return printed.getvalue().strip().splitlines()[-1]


@pytest.fixture(scope="module")
def exported(run_dir, tmp_path_factory):
    """The tiny run exported with the command line (in this process: tracing takes seconds)
    into a model directory that already holds version 3."""
    model_dir = tmp_path_factory.mktemp("exports") / MODEL_NAME
    (model_dir / "3").mkdir(parents=True)
    (model_dir / "3" / "keep.txt").write_text(OLD_VERSION_MARKER)
    path = _export_with_cli(run_dir, model_dir.parent, "--model_name", MODEL_NAME)

    commands = {
        "show": [
            sys.executable,
            "-c",
            OP_CHECK_THEN_CLI,
            os.path.join(path, "saved_model.pb"),
            saved_model_cli_path(),
            "show",
            "--all",
            "--dir",
            path,
        ]
    }
    outdirs = {}
    for signature in EXPORTED_SIGNATURES:
        outdirs[signature] = str(tmp_path_factory.mktemp(f"cli_{signature}"))
        commands[signature] = saved_model_cli(
            "run",
            "--dir",
            path,
            "--tag_set",
            "serve",
            "--signature_def",
            signature,
            "--input_exprs",
            f"text={text_literal(MIXED_TEXTS)}",
            "--outdir",
            outdirs[signature],
            "--overwrite",
        )
    background = BackgroundCommands(commands)
    yield Export(path, background, outdirs)
    background.close()


@pytest.fixture(scope="module")
def loaded(exported):
    import tensorflow_text  # noqa: F401  (registers the tokenizer's ops before loading)

    return tf.saved_model.load(exported.path)


@pytest.fixture(scope="module")
def reference(trained):
    """In-memory translation: tokenizers and decoders called from Python, with the decoders'
    own defaults except the beam options given to the export command."""
    model, source_tokenizer, target_tokenizer, _ = trained
    decoders = {
        "greedy": tf.function(
            lambda ids: greedy_decode(model, ids, START_ID, END_ID), reduce_retracing=True
        ),
        "beam": tf.function(
            lambda ids: beam_search_decode(model, ids, START_ID, END_ID, BEAM_WIDTH, ALPHA),
            reduce_retracing=True,
        ),
    }

    def translate(source_ids, decoder):
        decoded = decoders[decoder](tf.constant(source_ids, tf.int32))
        return {
            TRANSLATION_OUTPUT: _decoded(target_tokenizer.detokenize(decoded["tokens"])),
            SCORE_OUTPUT: decoded["scores"].numpy(),
            "tokens": decoded["tokens"].numpy(),
            **({ALIGNMENT_OUTPUT: decoded["alignment"].numpy()} if "alignment" in decoded else {}),
        }

    return translate


def _source_ids(trained, texts):
    return trained[1].tokenize(tf.constant(texts, tf.string)).to_tensor().numpy()


def _run_signature(loaded, name, texts):
    outputs = loaded.signatures[name](text=tf.constant(texts, tf.string))
    return {key: value.numpy() for key, value in outputs.items()}


# ------------------------------------------------------------------ layout and metadata


def test_command_line_export_layout_and_metadata(exported, run_dir):
    version_dir = exported.path
    model_dir = os.path.dirname(version_dir)
    # Version 3 existed: the export is 4, and 3 is untouched.
    assert os.path.basename(version_dir) == "4"
    with open(os.path.join(model_dir, "3", "keep.txt"), encoding="utf-8") as f:
        assert f.read() == OLD_VERSION_MARKER
    # Nothing but the versions is left in the model directory (no staging leftovers).
    assert sorted(os.listdir(model_dir)) == ["3", "4"]
    # As readable as any directory made with the umask (a server may run as another user).
    assert stat.S_IMODE(os.stat(version_dir).st_mode) == stat.S_IMODE(
        os.stat(os.path.join(model_dir, "3")).st_mode
    )
    assert os.path.isfile(os.path.join(version_dir, "saved_model.pb"))
    assert os.listdir(os.path.join(version_dir, "variables"))
    assert os.listdir(os.path.join(version_dir, "assets.extra")) == ["tf_serving_warmup_requests"]
    with open(os.path.join(version_dir, "assets", export.EXPORT_INFO_FILE), encoding="utf-8") as f:
        info = json.load(f)
    with open(os.path.join(run_dir, CONFIG_FILE), encoding="utf-8") as f:
        assert info["run_config"] == json.load(f)
    assert info["decoding"] == {
        "beam_width": BEAM_WIDTH,
        "alpha": ALPHA,
        "max_length_ratio": 1.5,
        "max_length_offset": 10,
        "jit_compile": False,
        "xla_max_batch": None,
        "repetition_penalty": 1.0,
        "no_repeat_ngram_size": 0,
        "num_hypotheses": None,
        "sampling_topk": 0,
        "sampling_topp": 1.0,
        "sampling_temperature": 1.0,
        "num_alternatives": 5,
        "limit_placeholders": True,
        "repair_words": True,
    }
    assert info["signature_options"][BEAM_SIGNATURE]["beam_width"] == BEAM_WIDTH
    assert info["signature_options"][N_BEST_SIGNATURE]["num_hypotheses"] == BEAM_WIDTH
    assert info["max_source_tokens"] == info["run_config"]["max_sequence_length"]
    assert info["signatures"] == list(ALL_SIGNATURES)


# ------------------------------------------------------ exported vs in-memory translation


@pytest.mark.parametrize(
    "signature, decoder", [(GREEDY_SIGNATURE, "greedy"), (BEAM_SIGNATURE, "beam")]
)
def test_exported_translations_equal_in_memory_model(
    signature, decoder, loaded, trained, reference
):
    outputs = _run_signature(loaded, signature, MIXED_TEXTS)
    expected = reference(_source_ids(trained, MIXED_TEXTS), decoder)
    assert _decoded(outputs[TRANSLATION_OUTPUT]) == expected[TRANSLATION_OUTPUT]
    np.testing.assert_allclose(outputs[SCORE_OUTPUT], expected[SCORE_OUTPUT], rtol=1e-5, atol=1e-5)
    assert np.all(np.isfinite(outputs[SCORE_OUTPUT])) and np.all(outputs[SCORE_OUTPUT] <= 0)


def test_exported_model_translates_the_training_pairs(loaded):
    """The fixture memorized its 40 pairs: the served graph must reproduce real English."""
    outputs = _run_signature(loaded, GREEDY_SIGNATURE, [source for source, _ in PAIRS])
    correct = sum(
        got == target for got, (_, target) in zip(_decoded(outputs[TRANSLATION_OUTPUT]), PAIRS)
    )
    assert correct >= 0.9 * len(PAIRS)


def test_alignments_match_tokens_and_attention(loaded, trained, reference):
    _, source_tokenizer, target_tokenizer, _ = trained
    outputs = _run_signature(loaded, ALIGNMENTS_SIGNATURE, MIXED_TEXTS)
    source_ids = _source_ids(trained, MIXED_TEXTS)
    expected = reference(source_ids, "greedy")
    target_ids = expected["tokens"]

    def pieces(tokenizer, ids):
        looked_up = tokenizer.lookup(tf.constant(ids)).numpy()
        return np.where(ids != 0, looked_up, b"")

    np.testing.assert_array_equal(
        outputs[SOURCE_TOKENS_OUTPUT], pieces(source_tokenizer, source_ids)
    )
    np.testing.assert_array_equal(
        outputs[TARGET_TOKENS_OUTPUT], pieces(target_tokenizer, target_ids)
    )
    assert all(row[0] == b"[START]" for row in outputs[SOURCE_TOKENS_OUTPUT])
    assert _decoded(outputs[TRANSLATION_OUTPUT]) == expected[TRANSLATION_OUTPUT]

    alignment = outputs[ALIGNMENT_OUTPUT]
    assert alignment.shape == (len(MIXED_TEXTS), target_ids.shape[1], source_ids.shape[1])
    is_target = target_ids != 0
    is_source = source_ids != 0
    np.testing.assert_allclose(
        alignment, expected[ALIGNMENT_OUTPUT] * is_target[:, :, None], atol=1e-5
    )
    # Each real target token's attention is a distribution over the real source tokens...
    np.testing.assert_allclose(alignment.sum(axis=2)[is_target], 1.0, atol=1e-5)
    assert np.all(alignment >= 0)
    np.testing.assert_allclose(alignment * ~is_source[:, None, :], 0.0, atol=1e-6)
    # ...and rows after [END] are empty.
    assert np.all(alignment[~is_target] == 0)


# ----------------------------------------------------------------------- edge inputs


@pytest.mark.parametrize("signature", list(ALL_SIGNATURES))
def test_empty_batch_gives_empty_outputs(signature, loaded):
    empty = {
        name: np.array([], dtype=object if INPUT_DTYPES[name] == "DT_STRING" else np.int32)
        for name in SIGNATURE_INPUTS[signature]
    }
    outputs = loaded.signatures[signature](**empty)
    outputs = {key: value.numpy() for key, value in outputs.items()}
    assert set(outputs) == set(ALL_SIGNATURES[signature])
    for key, (dtype, rank) in ALL_SIGNATURES[signature].items():
        assert outputs[key].shape[0] == 0 and outputs[key].ndim == rank, key
        assert outputs[key].dtype == (object if dtype == "DT_STRING" else np.float32), key


@pytest.mark.parametrize("signature", list(EXPORTED_SIGNATURES))
def test_empty_and_blank_strings_translate(signature, loaded, trained, reference):
    outputs = _run_signature(loaded, signature, ["", "   "])
    assert outputs[TRANSLATION_OUTPUT].shape == (2,)
    assert np.all(np.isfinite(outputs[SCORE_OUTPUT]))
    decoder = "beam" if signature == BEAM_SIGNATURE else "greedy"
    # Both tokenize to [START] [END], like the in-memory reference.
    expected = reference(np.array([[START_ID, END_ID]] * 2), decoder)
    assert _decoded(outputs[TRANSLATION_OUTPUT]) == expected[TRANSLATION_OUTPUT]


def test_long_input_is_truncated_to_model_length_keeping_end(loaded, trained, reference):
    model, source_tokenizer, _, _ = trained
    max_tokens = model.pe_input
    full_ids = source_tokenizer.tokenize(tf.constant([LONG_TEXT])).to_tensor().numpy()
    assert full_ids.shape[1] > 3 * max_tokens  # really too long for the positional encodings
    truncated = np.concatenate([full_ids[:, : max_tokens - 1], [[END_ID]]], axis=1)

    outputs = _run_signature(loaded, ALIGNMENTS_SIGNATURE, [LONG_TEXT, "Hola."])
    assert outputs[SOURCE_TOKENS_OUTPUT].shape == (2, max_tokens)
    assert outputs[SOURCE_TOKENS_OUTPUT][0, -1] == b"[END]"
    np.testing.assert_array_equal(
        outputs[SOURCE_TOKENS_OUTPUT][0, :-1],
        source_tokenizer.lookup(tf.constant(full_ids[0, : max_tokens - 1])).numpy(),
    )
    expected = reference(truncated, "greedy")
    assert _decoded(outputs[TRANSLATION_OUTPUT])[0] == expected[TRANSLATION_OUTPUT][0]
    np.testing.assert_allclose(
        outputs[SCORE_OUTPUT][0], expected[SCORE_OUTPUT][0], rtol=1e-5, atol=1e-5
    )
    assert outputs[ALIGNMENT_OUTPUT].shape[1] <= model.pe_target - 1

    for signature, decoder in ((GREEDY_SIGNATURE, "greedy"), (BEAM_SIGNATURE, "beam")):
        long_outputs = _run_signature(loaded, signature, [LONG_TEXT])
        expected = reference(truncated, decoder)
        assert _decoded(long_outputs[TRANSLATION_OUTPUT]) == expected[TRANSLATION_OUTPUT], signature
        np.testing.assert_allclose(
            long_outputs[SCORE_OUTPUT],
            expected[SCORE_OUTPUT],
            rtol=1e-5,
            atol=1e-5,
            err_msg=signature,
        )


def test_truncate_source_ids_cuts_only_long_rows():
    ids = tf.ragged.constant([[2, 5, 6, 7, 8, 3], [2, 5, 3], [2, 3]], dtype=tf.int64)
    np.testing.assert_array_equal(
        translator.truncate_source_ids(ids, 4).numpy(),
        [[2, 5, 6, 3], [2, 5, 3, 0], [2, 3, 0, 0]],
    )
    # Nothing to cut: padded to the longest row only, not to max_tokens.
    np.testing.assert_array_equal(
        translator.truncate_source_ids(ids[1:], 10).numpy(), [[2, 5, 3], [2, 3, 0]]
    )
    with pytest.raises(ValueError, match="max_tokens"):
        translator.truncate_source_ids(ids, 1)


# -------------------------------------------------------------------------- warmup


def test_warmup_requests_replay_through_loaded_model(exported, loaded):
    from tensorflow_serving.apis import prediction_log_pb2

    path = os.path.join(exported.path, "assets.extra", "tf_serving_warmup_requests")
    replayed = []
    for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
        log = prediction_log_pb2.PredictionLog.FromString(record)
        request = log.predict_log.request
        assert request.model_spec.name == MODEL_NAME
        signature = request.model_spec.signature_name
        inputs = {name: tf.make_ndarray(proto) for name, proto in request.inputs.items()}
        assert set(inputs) == set(SIGNATURE_INPUTS[signature])
        assert _decoded(inputs[TEXT_INPUT]) == list(export.WARMUP_TEXTS)
        outputs = loaded.signatures[signature](**inputs)
        assert set(outputs) == set(ALL_SIGNATURES[signature])
        assert all(value.shape[0] == len(export.WARMUP_TEXTS) for value in outputs.values())
        replayed.append(signature)
    assert sorted(replayed) == sorted(ALL_SIGNATURES)


def test_a_subset_of_the_signatures_is_exported_alone(trained, tmp_path, capsys):
    """`--signatures` exports only the signatures named (in `SIGNATURE_NAMES` order, whatever
    the order given): the SavedModel, its export info and its warmup requests hold those and no
    other; unknown names and an empty list are refused before any tracing."""
    model, source_tokenizer, target_tokenizer, _ = trained
    chosen = (SCORE_SIGNATURE, GREEDY_SIGNATURE)
    version_dir = export.export_translator(
        model, source_tokenizer, target_tokenizer, tmp_path, MODEL_NAME, signatures=chosen
    )
    in_order = [GREEDY_SIGNATURE, SCORE_SIGNATURE]
    assert sorted(tf.saved_model.load(version_dir).signatures) == sorted(in_order)
    with open(os.path.join(version_dir, serving_contract.EXPORT_INFO_PATH), encoding="utf-8") as f:
        info = json.load(f)
    assert info["signatures"] == in_order and sorted(info["signature_options"]) == sorted(in_order)
    from serving.model_server.servable import read_warmup_requests

    warmed = [request.model_spec.signature_name for request in read_warmup_requests(version_dir)]
    assert warmed == in_order

    for value, message in (
        ("greedy,beam_search", "no signature named greedy"),
        (",", "at least one"),
    ):
        with pytest.raises(SystemExit):
            export.main(["--run_dir", "unused", "--signatures", value])
        assert message in capsys.readouterr().err
    assert export.existing_versions(tmp_path / MODEL_NAME) == [1]


# ------------------------------------------------------------------------ versioning


def _tree_digest(directory):
    digest = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(directory)):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            digest.update(os.path.relpath(path, directory).encode())
            with open(path, "rb") as f:
                digest.update(f.read())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def small_archive():
    """A one-layer archive that traces in no time: numbering does not depend on the model."""
    layer = keras.layers.Dense(2)
    layer.build((None, 3))
    archive = keras.export.ExportArchive()
    archive.track(layer)
    archive.add_endpoint(
        "serving_default", layer.call, input_signature=[tf.TensorSpec([None, 3], tf.float32)]
    )
    return archive


def test_versions_increase_and_existing_ones_are_never_overwritten(small_archive, tmp_path):
    base = tmp_path / "exports"
    model_dir = base / MODEL_NAME
    first = export.write_version(small_archive, base, MODEL_NAME)
    first_digest = _tree_digest(first)
    second = export.write_version(small_archive, base, MODEL_NAME)
    assert (first, second) == (str(model_dir / "1"), str(model_dir / "2"))
    assert _tree_digest(first) == first_digest

    # Gaps and names TF Serving ignores do not matter; only the highest integer does.
    (model_dir / "7").mkdir()
    (model_dir / "7" / "keep.txt").write_text(OLD_VERSION_MARKER)
    (model_dir / "notes").mkdir()
    (model_dir / "12.txt").write_text("not a version")
    assert export.existing_versions(model_dir) == [1, 2, 7]
    assert export.next_version(model_dir) == 8
    assert export.write_version(small_archive, base, MODEL_NAME) == str(model_dir / "8")

    assert (model_dir / "7" / "keep.txt").read_text() == OLD_VERSION_MARKER
    assert _tree_digest(first) == first_digest
    assert sorted(os.listdir(model_dir)) == ["1", "12.txt", "2", "7", "8", "notes"]
    assert export.next_version(tmp_path / "nothing_here") == 1


def test_invalid_options_are_rejected_with_clear_errors(trained, tmp_path, small_archive):
    with pytest.raises(ValueError, match="beam_width"):
        export.DecodingOptions(beam_width=0)
    with pytest.raises(ValueError, match="max_length_offset"):
        export.DecodingOptions(max_length_offset=0)
    with pytest.raises(ValueError, match="model_name"):
        export.write_version(small_archive, tmp_path, "../elsewhere")
    model, source_tokenizer, target_tokenizer, _ = trained
    with pytest.raises(ValueError, match="different runs"):
        translator.Translator(model, target_tokenizer, source_tokenizer)
    assert not os.listdir(tmp_path)


# ------------------------------------------------ TF1 loader, ops, CLI (subprocesses, last)


def _parse_signature_defs(show_output):
    """`saved_model_cli show --all` text → {signature: {"inputs"|"outputs": {key: (dtype,
    dims)}, "method": str}}, dims a tuple of ints (-1: any size)."""
    signatures = {}
    blocks = re.split(r"^signature_def\['([^']+)'\]:\n", show_output, flags=re.M)
    for name, block in zip(blocks[1::2], blocks[2::2]):
        inputs_text, _, outputs_text = block.partition("contains the following output(s):")
        tensor = re.compile(
            r"(?:inputs|outputs)\['([^']+)'\] tensor_info:\s+dtype: (\w+)\s+"
            r"shape: \(([^)]*)\)"
        )

        def specs(text):
            return {
                key: (dtype, tuple(int(dim) for dim in shape.replace(" ", "").split(",")))
                for key, dtype, shape in tensor.findall(text)
            }

        method = re.search(r"Method name is: (\S*)", block)
        signatures[name] = {
            "inputs": specs(inputs_text),
            "outputs": specs(outputs_text),
            "method": method.group(1) if method else None,
        }
    return signatures


def test_the_serving_contract_declares_what_the_export_serves():
    declared = {name: set(outputs) for name, outputs in serving_contract.SIGNATURE_OUTPUTS.items()}
    assert declared == {name: set(outputs) for name, outputs in ALL_SIGNATURES.items()}
    assert serving_contract.SIGNATURE_NAMES == tuple(ALL_SIGNATURES)
    assert set(serving_contract.SIGNATURE_INPUTS) == set(ALL_SIGNATURES)


def test_saved_model_cli_show_lists_the_signatures(exported):
    result = exported.commands.result("show")
    assert result.returncode == 0, result.stderr[-3000:]
    signatures = _parse_signature_defs(result.stdout)
    served = {name: spec for name, spec in signatures.items() if not name.startswith("__")}
    assert set(served) == set(ALL_SIGNATURES)
    for name, outputs in ALL_SIGNATURES.items():
        # Every dimension is -1 (any batch, any length) but the n best's and alternatives' N.
        inputs = {key: (INPUT_DTYPES[key], (-1,)) for key in SIGNATURE_INPUTS[name]}
        assert served[name]["inputs"] == inputs, name
        width = {
            N_BEST_SIGNATURE: BEAM_WIDTH,
            ALTERNATIVES_SIGNATURE: export.DecodingOptions().num_alternatives,
        }.get(name, -1)
        expected = {
            key: (dtype, (-1,) + (width,) * (rank - 1)) for key, (dtype, rank) in outputs.items()
        }
        assert served[name]["outputs"] == expected, name
        assert served[name]["method"] == "tensorflow/serving/predict"


def _datatype(dtype):
    """The name saved_model_cli shows for a dtype or dtype name: "DT_STRING" for "string"."""
    return types_pb2.DataType.Name(tf.dtypes.as_dtype(dtype).as_datatype_enum)


def test_the_registry_records_what_the_export_serves(exported, loaded):
    """Each record of `common.serving_contract.SIGNATURES` against the export: its inputs with
    their dtypes (each `[batch]`) and its outputs with their dtypes and ranks are what the loaded
    SavedModel's signature and `saved_model_cli show` (the TF1 loader's) report, and there is no
    other signature."""
    result = exported.commands.result("show")
    assert result.returncode == 0, result.stderr[-3000:]
    shown = _parse_signature_defs(result.stdout)
    assert {name for name in shown if not name.startswith("__")} == set(
        serving_contract.SIGNATURES_BY_NAME
    )
    for record in serving_contract.SIGNATURES:
        inputs = {item.name: (_datatype(item.dtype), 1) for item in record.inputs}
        outputs = {item.name: (_datatype(item.dtype), len(item.dims)) for item in record.outputs}
        signature = loaded.signatures[record.name]
        for reported, declared in (
            (signature.structured_input_signature[1], inputs),
            (signature.structured_outputs, outputs),
        ):
            ranks = {
                key: (_datatype(spec.dtype), spec.shape.rank) for key, spec in reported.items()
            }
            assert ranks == declared, record.name
        for kind, declared in (("inputs", inputs), ("outputs", outputs)):
            ranks = {
                key: (dtype, len(dims)) for key, (dtype, dims) in shown[record.name][kind].items()
            }
            assert ranks == declared, (record.name, kind)


@pytest.mark.parametrize("signature", list(EXPORTED_SIGNATURES))
def test_saved_model_cli_run_translates_through_tf1_loader(signature, exported, trained, reference):
    result = exported.commands.result(signature)
    outdir = exported.outdirs[signature]
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = {
        key: np.load(os.path.join(outdir, f"{key}.npy"), allow_pickle=True)
        for key in EXPORTED_SIGNATURES[signature]
    }
    for key, (_, rank) in EXPORTED_SIGNATURES[signature].items():
        assert outputs[key].ndim == rank and outputs[key].shape[0] == len(MIXED_TEXTS), key
    expected = reference(
        _source_ids(trained, MIXED_TEXTS), "beam" if signature == BEAM_SIGNATURE else "greedy"
    )
    assert _decoded(outputs[TRANSLATION_OUTPUT]) == expected[TRANSLATION_OUTPUT]
    np.testing.assert_allclose(outputs[SCORE_OUTPUT], expected[SCORE_OUTPUT], rtol=1e-5, atol=1e-5)


def test_every_op_is_registered_in_tensorflow_or_tensorflow_text(exported):
    result = exported.commands.result("show")
    assert result.returncode == 0, result.stderr[-3000:]
    report_lines = [line for line in result.stdout.splitlines() if line.startswith(OP_CHECK_PREFIX)]
    assert len(report_lines) == 1
    report = json.loads(report_lines[0][len(OP_CHECK_PREFIX) :])
    assert report["unregistered"] == []
    ops = set(report["ops"])
    assert not ops & {"PyFunc", "EagerPyFunc", "PyFuncStateless"}
    # The scan reached into function bodies: the tokenizer's tensorflow-text ops and the
    # decoders' loops live there, not in the top-level graph.
    assert {"SentencepieceOp", "SentencepieceTokenizeOp", "SentencepieceDetokenizeOp"} <= ops
    assert ops & {"While", "StatelessWhile"}
    assert report["functions"] > 0


# ------------------------------------------------------------- served end to end over gRPC


def test_local_server_serves_the_export_to_the_grpc_client(exported, loaded):
    """The real export through `python -m serving.server` (a fresh process, as `make serve`
    starts it) and `TranslationClient`: the server must register tensorflow-text's ops as
    tensorflow_model_server does, or loading the translator fails."""
    from inference.demo import wait_until_serving
    from serving.client import TranslationClient
    from tests.serving_fixtures import ServerProcess

    flags = [f"--model_name={MODEL_NAME}", f"--model_base_path={os.path.dirname(exported.path)}"]
    with ServerProcess(flags, startup_timeout=240) as server:
        address = f"127.0.0.1:{server.grpc_port}"
        try:
            wait_until_serving(address, MODEL_NAME, server.process, timeout=240)
        except RuntimeError:
            pytest.fail(f"the server exited:\n{server.output()[-3000:]}")
        with TranslationClient(address, MODEL_NAME, timeout=120) as client:
            for signature in (GREEDY_SIGNATURE, BEAM_SIGNATURE):
                expected = _decoded(
                    _run_signature(loaded, signature, MIXED_TEXTS)[TRANSLATION_OUTPUT]
                )
                assert client.translate(MIXED_TEXTS, signature) == expected
            details = client.translate_with_details(
                MIXED_TEXTS[:2], signature_name=ALIGNMENTS_SIGNATURE
            )
            assert len(details) == 2


# ------------------------------------------------------------------ bfloat16 compute


def _graph_def(saved_model_pb):
    """The `GraphDef` (graph and function library) of a SavedModel's one meta graph."""
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    with open(saved_model_pb, "rb") as handle:
        proto.ParseFromString(handle.read())
    return proto.meta_graphs[0].graph_def


def _op_dtypes(saved_model_pb, ops):
    """`{op: {dtype names}}` of the nodes of `ops` in a SavedModel's graph and functions."""
    graph = _graph_def(saved_model_pb)
    nodes = list(graph.node) + [node for f in graph.library.function for node in f.node_def]
    found = {}
    for node in nodes:
        if node.op in ops and "T" in node.attr:
            found.setdefault(node.op, set()).add(tf.dtypes.as_dtype(node.attr["T"].type).name)
    return found


def _variables_cast_to(saved_model_pb, dtype):
    """Names of the `Cast` nodes in a SavedModel's functions that cast a variable's value (a
    `ReadVariableOp` output) to `dtype`."""
    found = []
    for function in _graph_def(saved_model_pb).library.function:
        op_of = {node.name: node.op for node in function.node_def}
        for node in function.node_def:
            if (
                node.op == "Cast"
                and tf.dtypes.as_dtype(node.attr["DstT"].type) == dtype
                and op_of.get(node.input[0].split(":")[0]) == "ReadVariableOp"
            ):
                found.append(node.name)
    return found


def test_bfloat16_export_multiplies_in_bfloat16_and_translates_as_float32(
    run_dir, loaded, tmp_path
):
    import tensorflow_text  # noqa: F401

    path = _export_with_cli(run_dir, tmp_path, "--compute_dtype", "bfloat16")
    with open(os.path.join(path, serving_contract.EXPORT_INFO_PATH), encoding="utf-8") as handle:
        assert json.load(handle)["compute_dtype"] == "bfloat16"
    dtypes = _op_dtypes(os.path.join(path, "saved_model.pb"), {"MatMul", "BatchMatMulV2"})
    # The dense layers and the attention's products; the float32 output projection keeps
    # some float32 MatMuls.
    assert "bfloat16" in dtypes["MatMul"] and "bfloat16" in dtypes["BatchMatMulV2"]
    # The weight matrices are stored in bfloat16, not cast at each step (`model.precision`);
    # the layer norms and the embedding matrix stay float32.
    stored = tf.train.load_checkpoint(os.path.join(path, "variables", "variables"))
    shapes = stored.get_variable_to_shape_map()
    by_dtype = {}
    for name, dtype in stored.get_variable_to_dtype_map().items():
        by_dtype.setdefault(dtype.name, []).append(shapes[name])
    config = read_config(run_dir)
    d_model, dff = config["d_model"], config["dff"]
    assert [d_model, d_model] in by_dtype["bfloat16"] and [d_model, dff] in by_dtype["bfloat16"]
    assert [d_model, d_model] not in by_dtype["float32"]
    # Nor is any float32 variable cast to bfloat16 where it is read (as Keras's mixed_bfloat16
    # does, and as it would do to the embedding matrix at every lookup: `model.precision`).
    assert _variables_cast_to(os.path.join(path, "saved_model.pb"), tf.bfloat16) == []
    bf16 = tf.saved_model.load(path)
    sources = [source for source, _ in PAIRS]
    for signature in (GREEDY_SIGNATURE, BEAM_SIGNATURE):
        got = _run_signature(bf16, signature, sources)
        want = _run_signature(loaded, signature, sources)
        assert _decoded(got[TRANSLATION_OUTPUT]) == _decoded(want[TRANSLATION_OUTPUT])
        np.testing.assert_allclose(got[SCORE_OUTPUT], want[SCORE_OUTPUT], atol=0.05, rtol=0.05)
    # serving/DEPLOY.md recommends TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 for bfloat16 exports: each
    # decoding loop multiplies by its weights fused, as the float32 export's does
    # (tests/inference/test_export_decoding.py), and a process with the variable answers alike.
    per_function = products_with_bias(_graph_def(os.path.join(path, "saved_model.pb")))
    assert set(per_function.values()) == {8 * config["num_layers"] + 1}, per_function
    assert_frozen_weights_change_nothing(
        path, (GREEDY_SIGNATURE, BEAM_SIGNATURE), sources[:4], tolerance=1e-3
    )
