"""The export's n-best and score signatures against the decoders it is traced from and against CTranslate2
on the same weights, through `tf.saved_model.load` and through the local model server (the gRPC
client and REST).

The tiny trained run (tests/export_fixtures.py) is exported once with the command line, beam 4
without length penalty, where CTranslate2's beam search ranks hypotheses as ours does
(tests/test_export_ctranslate2.py compares the decoders themselves).
"""

import contextlib
import io
import json
import os
import urllib.request

import ctranslate2
import numpy as np
import pytest
import tensorflow as tf

from common.serving_contract import (
    BEAM_SIGNATURE,
    N_BEST_SIGNATURE,
    SCORE_OUTPUT,
    SCORE_SIGNATURE,
    SCORES_OUTPUT,
    TARGET_INPUT,
    TARGET_TOKENS_OUTPUT,
    TEXT_INPUT,
    TOKEN_SCORES_OUTPUT,
    TRANSLATION_OUTPUT,
    TRANSLATIONS_OUTPUT,
)
from model.decoding import beam_search_decode, sequence_log_prob, token_log_probs
from model.special_tokens import END_ID, START_ID
from model.translator import Translator
from serving import client as client_module
from serving import export, export_ctranslate2
from serving.export_ctranslate2 import source_pieces
from tests.export_fixtures import PAIRS
from tests.test_export_ctranslate2 import TEXTS, _max_length, _n_best_ct2, _source_ids
from training import score as score_cli
from training.artifacts import load_trained

MODEL_NAME = "translator"
BEAM_WIDTH, NUM_HYPOTHESES = 4, 3


def _decoded(strings):
    return [value.decode("utf-8") for value in np.asarray(strings).ravel()]


@pytest.fixture(scope="module")
def run(tiny_export_run, tmp_path_factory):
    """The tiny run loaded, exported (beam 4, alpha 0, 3 hypotheses) and converted to
    CTranslate2: the keys of tests/test_export_ctranslate2.py's `run`, plus `export_dir` and
    `loaded` (the SavedModel)."""
    import tensorflow_text  # noqa: F401  (registers the tokenizer's ops before loading)

    printed = io.StringIO()
    export_base = tmp_path_factory.mktemp("exports")
    with contextlib.redirect_stdout(printed):
        export.main(
            [
                "--run_dir",
                str(tiny_export_run),
                "--export_base",
                str(export_base),
                "--model_name",
                MODEL_NAME,
                "--beam_width",
                str(BEAM_WIDTH),
                "--alpha",
                "0",
                "--num_hypotheses",
                str(NUM_HYPOTHESES),
            ]
        )
        ct2_dir = str(tmp_path_factory.mktemp("ct2") / "model")
        export_ctranslate2.main(["--run_dir", str(tiny_export_run), "--output_dir", ct2_dir])
    export_dir = printed.getvalue().strip().splitlines()[0]
    model, source_tokenizer, target_tokenizer, _ = load_trained(tiny_export_run)
    return {
        "run_dir": str(tiny_export_run),
        "export_dir": export_dir,
        "loaded": tf.saved_model.load(export_dir),
        "model": model,
        "source": source_tokenizer,
        "target": target_tokenizer,
        "translator": ctranslate2.Translator(
            ct2_dir, device="cpu", inter_threads=1, intra_threads=1
        ),
    }


@pytest.fixture(scope="module")
def served(run):
    """The export behind `python -m serving.server` (gRPC and REST): `(grpc address, REST
    predict URL)`."""
    from serving.demo import wait_until_serving
    from tests.serving_fixtures import ServerProcess

    flags = [
        f"--model_name={MODEL_NAME}",
        f"--model_base_path={os.path.dirname(run['export_dir'])}",
    ]
    with ServerProcess(flags, rest=True, startup_timeout=240) as server:
        address = f"127.0.0.1:{server.grpc_port}"
        try:
            wait_until_serving(address, MODEL_NAME, server.process, timeout=240)
        except RuntimeError:
            pytest.fail(f"the server exited:\n{server.output()[-3000:]}")
        yield address, f"http://127.0.0.1:{server.rest_port}/v1/models/{MODEL_NAME}:predict"


def _signature(run, name, **inputs):
    outputs = run["loaded"].signatures[name](
        **{key: tf.constant(value) for key, value in inputs.items()}
    )
    return {key: value.numpy() for key, value in outputs.items()}


def _rest_predict(url, signature_name, inputs):
    """The `outputs` of a columnar REST predict request."""
    body = json.dumps({"signature_name": signature_name, "inputs": inputs}).encode()
    request = urllib.request.Request(url, data=body, method="POST")
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())["outputs"]


def _detokenize_rows(run, id_lists):
    """Texts of id lists (CTranslate2's or ours), each padded on its own."""
    return [
        run["target"].detokenize(tf.constant([ids], tf.int32)).numpy()[0].decode("utf-8")
        for ids in id_lists
    ]


# ----------------------------------------------------------------------------------- n-best


def test_n_best_signature_equals_beam_search_decode(run):
    served = _signature(run, N_BEST_SIGNATURE, text=TEXTS)
    source_ids = _source_ids(run, TEXTS)
    decoded = beam_search_decode(
        run["model"],
        source_ids,
        START_ID,
        END_ID,
        beam_width=BEAM_WIDTH,
        alpha=0.0,
        max_length=_max_length(run, source_ids),
        num_hypotheses=NUM_HYPOTHESES,
    )
    assert served[TRANSLATIONS_OUTPUT].shape == (len(TEXTS), NUM_HYPOTHESES)
    for row, hypotheses in enumerate(decoded["tokens"].numpy()):
        expected = _detokenize_rows(run, [[t for t in ids if t] for ids in hypotheses])
        assert _decoded(served[TRANSLATIONS_OUTPUT][row]) == expected
    np.testing.assert_allclose(served[SCORES_OUTPUT], decoded["scores"], atol=1e-5)
    # The best of the n is what the beam_search signature answers.
    beam = _signature(run, BEAM_SIGNATURE, text=TEXTS)
    assert _decoded(served[TRANSLATIONS_OUTPUT][:, 0]) == _decoded(beam[TRANSLATION_OUTPUT])
    np.testing.assert_allclose(served[SCORES_OUTPUT][:, 0], beam[SCORE_OUTPUT], atol=1e-5)


def test_n_best_signature_equals_ctranslate2s_num_hypotheses(run):
    """The same hypotheses in the same order with the same scores as CTranslate2's
    `num_hypotheses` (searching as ours: see tests/test_export_ctranslate2.py)."""
    served = _signature(run, N_BEST_SIGNATURE, text=TEXTS)
    max_length = _max_length(run, _source_ids(run, TEXTS))
    ct2_ids, ct2_scores = _n_best_ct2(
        run, TEXTS, BEAM_WIDTH, 1e-6, max_length, NUM_HYPOTHESES, patience=4
    )
    for row, hypotheses in enumerate(ct2_ids):
        assert _decoded(served[TRANSLATIONS_OUTPUT][row]) == _detokenize_rows(run, hypotheses)
    assert all(len(set(_decoded(row))) == NUM_HYPOTHESES for row in served[TRANSLATIONS_OUTPUT])
    np.testing.assert_allclose(served[SCORES_OUTPUT], ct2_scores, atol=1e-3)


def test_n_best_is_recorded_and_empty_batches_keep_its_shape(run):
    with open(os.path.join(run["export_dir"], export.EXPORT_INFO_PATH), encoding="utf-8") as f:
        options = json.load(f)["signature_options"][N_BEST_SIGNATURE]
    assert (options["beam_width"], options["alpha"], options["num_hypotheses"]) == (
        BEAM_WIDTH,
        0.0,
        NUM_HYPOTHESES,
    )
    empty = _signature(run, N_BEST_SIGNATURE, text=np.array([], dtype=object))
    assert empty[TRANSLATIONS_OUTPUT].shape == (0, NUM_HYPOTHESES)
    assert empty[SCORES_OUTPUT].shape == (0, NUM_HYPOTHESES)


def test_served_n_best_through_the_grpc_client_the_command_line_and_rest(run, served, capsys):
    address, rest_url = served
    expected = _signature(run, N_BEST_SIGNATURE, text=TEXTS)
    with client_module.TranslationClient(address, MODEL_NAME, timeout=120) as client:
        hypotheses = client.translate_n_best(TEXTS, 2)
        with pytest.raises(ValueError, match="returns 3 translations per sentence"):
            client.translate_n_best(TEXTS, 4)
    assert [[h.translation for h in row] for row in hypotheses] == [
        _decoded(row[:2]) for row in expected[TRANSLATIONS_OUTPUT]
    ]
    np.testing.assert_allclose(
        [[h.score for h in row] for row in hypotheses], expected[SCORES_OUTPUT][:, :2], atol=1e-5
    )
    assert client_module.main(["--server", address, "--n_best", "2", *TEXTS[:2]]) == 0
    lines = [line.split(" ||| ") for line in capsys.readouterr().out.splitlines()]
    expected_lines = [
        (str(index), h.translation, h.score) for index in (0, 1) for h in hypotheses[index]
    ]
    assert [tuple(line[:2]) for line in lines] == [line[:2] for line in expected_lines]
    np.testing.assert_allclose(
        [float(line[2]) for line in lines], [line[2] for line in expected_lines], atol=1e-4
    )
    outputs = _rest_predict(rest_url, N_BEST_SIGNATURE, {TEXT_INPUT: TEXTS})
    assert outputs[TRANSLATIONS_OUTPUT] == [_decoded(row) for row in expected[TRANSLATIONS_OUTPUT]]
    np.testing.assert_allclose(outputs[SCORES_OUTPUT], expected[SCORES_OUTPUT], atol=1e-5)


# ---------------------------------------------------------------------------------- scoring


def _score_targets(run):
    """Each text's 3rd best translation (less likely tokens than the best), and references of
    the training pairs, one longer than the decoders' longest output."""
    third = _decoded(_signature(run, N_BEST_SIGNATURE, text=TEXTS)[TRANSLATIONS_OUTPUT][:, 2])
    sources = TEXTS + [source for source, _ in PAIRS[:4]] + ["Hola."]
    targets = third + [target for _, target in PAIRS[:4]] + ["Hello. " * 40]
    return sources, targets


def test_score_signature_equals_token_log_probs_and_ctranslate2s_score_batch(run):
    sources, targets = _score_targets(run)
    served = _signature(run, SCORE_SIGNATURE, text=sources, target=targets)
    translator = Translator(run["model"], run["source"], run["target"])
    source_ids = translator.source_ids(tf.constant(sources))
    target_ids = translator.target_ids(tf.constant(targets))
    assert target_ids.shape[1] == run["model"].pe_target - 1  # the long target was cut
    expected = token_log_probs(run["model"], source_ids, target_ids, START_ID).numpy()
    np.testing.assert_allclose(served[TOKEN_SCORES_OUTPUT], expected, atol=1e-5)
    np.testing.assert_allclose(
        served[SCORE_OUTPUT],
        sequence_log_prob(run["model"], source_ids, target_ids, START_ID),
        atol=1e-4,
    )
    vocab = run["target"].vocab
    pieces = [[vocab[i] for i in row if i] for row in target_ids.numpy()]
    assert [
        _decoded(row)[: len(p)] for row, p in zip(served[TARGET_TOKENS_OUTPUT], pieces)
    ] == pieces
    # CTranslate2 appends [END] to each target itself, and keeps [PAD] in its softmax, where it
    # takes up to about 2e-3 of the mass here (1.7e-3 seen after "Hola."); on the looping
    # targets cut at the output limit more: those are left out.
    kept = [row for row, p in enumerate(pieces) if len(p) < run["model"].pe_target - 1]
    assert len(kept) >= 8, pieces
    results = run["translator"].score_batch(
        source_pieces(run["source"], [sources[row] for row in kept]),
        [pieces[row][:-1] for row in kept],
        max_input_length=run["model"].pe_input,
    )
    for row, result in zip(kept, results):
        assert result.tokens == pieces[row]
        np.testing.assert_allclose(
            result.log_probs, served[TOKEN_SCORES_OUTPUT][row, : len(pieces[row])], atol=2e-3
        )
        assert not served[TOKEN_SCORES_OUTPUT][row, len(pieces[row]) :].any()
    # The greedy signature's score of its own output is its forced-decoding score.
    greedy = _signature(run, export.GREEDY_SIGNATURE, text=TEXTS)
    rescored = _signature(
        run, SCORE_SIGNATURE, text=TEXTS, target=_decoded(greedy[TRANSLATION_OUTPUT])
    )
    # Where greedy search looped without [END], rescoring its text adds one: compared elsewhere.
    ended = greedy[SCORE_OUTPUT] > -3
    assert ended.sum() >= 5
    np.testing.assert_allclose(
        rescored[SCORE_OUTPUT][ended], greedy[SCORE_OUTPUT][ended], atol=1e-3
    )


def test_translate_score_command_line_on_a_run_and_on_an_export(run, tmp_path, capsys):
    sources, targets = _score_targets(run)
    served = _signature(run, SCORE_SIGNATURE, text=sources, target=targets)
    pairs_file = tmp_path / "pairs.tsv"
    pairs_file.write_text("".join(f"{s}\t{t}\n" for s, t in zip(sources, targets)), "utf-8")
    for where in (["--run_dir", run["run_dir"]], ["--export_dir", run["export_dir"]]):
        assert score_cli.main([*where, "--input_file", str(pairs_file), "--jsonl"]) == 0
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [(row["source"], row["target"]) for row in rows] == list(zip(sources, targets))
        for row, result in enumerate(rows):
            length = len(result["tokens"])
            assert result["tokens"] == _decoded(served[TARGET_TOKENS_OUTPUT][row])[:length]
            np.testing.assert_allclose(
                result["token_scores"], served[TOKEN_SCORES_OUTPUT][row, :length], atol=1e-4
            )
        np.testing.assert_allclose([r["score"] for r in rows], served[SCORE_OUTPUT], atol=1e-4)
    assert score_cli.main(["--export_dir", run["export_dir"], "--input_file", str(pairs_file)]) == 0
    printed = [float(line) for line in capsys.readouterr().out.splitlines()]
    np.testing.assert_allclose(printed, served[SCORE_OUTPUT], atol=1e-4)
    pairs_file.write_text("Hola.\tHello.\nno tab here\n", "utf-8")
    assert score_cli.main(["--export_dir", run["export_dir"], "--input_file", str(pairs_file)]) == 2
    assert f"{pairs_file}:2: expected source<TAB>target" in capsys.readouterr().err


def test_served_score_through_the_grpc_client_the_command_line_and_rest(
    run, served, tmp_path, capsys
):
    address, rest_url = served
    sources, targets = _score_targets(run)
    expected = _signature(run, SCORE_SIGNATURE, text=sources, target=targets)
    with client_module.TranslationClient(address, MODEL_NAME, timeout=120) as client:
        scores = client.score(sources, targets)
    np.testing.assert_allclose([s.score for s in scores], expected[SCORE_OUTPUT], atol=1e-4)
    for row, result in enumerate(scores):
        assert result.tokens == [t for t in _decoded(expected[TARGET_TOKENS_OUTPUT][row]) if t]
        np.testing.assert_allclose(
            result.token_scores,
            expected[TOKEN_SCORES_OUTPUT][row, : len(result.tokens)],
            atol=1e-4,
        )
    (tmp_path / "src.txt").write_text("".join(f"{s}\n" for s in sources), "utf-8")
    (tmp_path / "tgt.txt").write_text("".join(f"{t}\n" for t in targets), "utf-8")
    argv = ["--server", address, "--input_file", str(tmp_path / "src.txt")]
    assert client_module.main([*argv, "--target_file", str(tmp_path / "tgt.txt")]) == 0
    printed = [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()]
    np.testing.assert_allclose([float(v) for v in printed], expected[SCORE_OUTPUT], atol=1e-4)
    outputs = _rest_predict(rest_url, SCORE_SIGNATURE, {TEXT_INPUT: sources, TARGET_INPUT: targets})
    np.testing.assert_allclose(outputs[SCORE_OUTPUT], expected[SCORE_OUTPUT], atol=1e-4)
    np.testing.assert_allclose(
        outputs[TOKEN_SCORES_OUTPUT], expected[TOKEN_SCORES_OUTPUT], atol=1e-4
    )
    assert outputs[TARGET_TOKENS_OUTPUT] == [
        _decoded(row) for row in expected[TARGET_TOKENS_OUTPUT]
    ]
