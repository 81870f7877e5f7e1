"""The export's n-best, score, sample, prefix and alternatives signatures against the decoders
they are traced from and against CTranslate2 on the same weights, through `tf.saved_model.load`
and through the local model server (the gRPC client and REST).

The tiny trained run (tests/export_fixtures.py) is exported once with the command line, beam 4
without length penalty, where CTranslate2's beam search ranks hypotheses as ours does
(tests/inference/test_export_ctranslate2.py compares the decoders themselves), with sampling restricted
by top-k, top-p and temperature and 3 alternatives.
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
    TARGET_INPUT,
    TARGET_PREFIX_INPUT,
    TARGET_TOKENS_OUTPUT,
    TEXT_INPUT,
    TOKEN_SCORES_OUTPUT,
    TRANSLATION_OUTPUT,
    TRANSLATIONS_OUTPUT,
)
from inference import export, export_ctranslate2
from inference.export_ctranslate2 import decoding_options, source_pieces, target_ids
from model.decoding import (
    beam_search_decode,
    sampling_decode,
    sequence_log_prob,
    teacher_forced_logits,
    token_log_probs,
)
from model.special_tokens import END_ID, PAD_ID, START_ID
from model.translator import DecodingOptions, Translator
from run_directory.artifacts import load_trained
from serving import client as client_module
from tests.export_fixtures import PAIRS
from tests.frozen_weights import assert_frozen_weights_change_nothing
from tests.graphs import products_with_bias
from tests.inference.test_export_ctranslate2 import (
    TEXTS,
    _max_decoding_length,
    _n_best_ct2,
    _source_ids,
    _translate_ct2,
)
from training import score as score_cli

MODEL_NAME = "translator"
BEAM_WIDTH, NUM_HYPOTHESES = 4, 3
SAMPLING = {"sampling_topk": 10, "sampling_topp": 0.95, "sampling_temperature": 1.2}
NUM_ALTERNATIVES = 3


def _decoded(strings):
    return [value.decode("utf-8") for value in np.asarray(strings).ravel()]


@pytest.fixture(scope="module")
def run(tiny_export_run, tmp_path_factory):
    """The tiny run loaded, exported (beam 4, alpha 0, 3 hypotheses, `SAMPLING`, 3
    alternatives) and converted to
    CTranslate2: the keys of tests/inference/test_export_ctranslate2.py's `run`, plus `export_dir` and
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
                *[f"--{name}={value}" for name, value in SAMPLING.items()],
                "--num_alternatives",
                str(NUM_ALTERNATIVES),
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
    from inference.demo import wait_until_serving
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
        max_decoding_length=_max_decoding_length(run, source_ids),
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
    `num_hypotheses` (searching as ours: see tests/inference/test_export_ctranslate2.py)."""
    served = _signature(run, N_BEST_SIGNATURE, text=TEXTS)
    max_decoding_length = _max_decoding_length(run, _source_ids(run, TEXTS))
    ct2_ids, ct2_scores = _n_best_ct2(
        run, TEXTS, BEAM_WIDTH, 1e-6, max_decoding_length, NUM_HYPOTHESES, patience=4
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
    # CTranslate2 appends [END] to each target itself, and keeps [PAD] in its softmax where our
    # decoders leave it out: its log-probabilities are ours plus log(1 - P(PAD)), P(PAD) the
    # model's raw softmax. The looping targets cut at the output limit are left out.
    raw = tf.nn.log_softmax(
        tf.cast(teacher_forced_logits(run["model"], source_ids, target_ids, START_ID), tf.float32)
    ).numpy()
    with_pad = served[TOKEN_SCORES_OUTPUT] + np.log1p(-np.exp(raw[:, :, PAD_ID]))
    kept = [row for row, p in enumerate(pieces) if len(p) < run["model"].pe_target - 1]
    assert len(kept) >= 8, pieces
    results = run["translator"].score_batch(
        source_pieces(run["source"], [sources[row] for row in kept]),
        [pieces[row][:-1] for row in kept],
        max_input_length=run["model"].pe_input,
    )
    for row, result in zip(kept, results):
        assert result.tokens == pieces[row]
        np.testing.assert_allclose(result.log_probs, with_pad[row, : len(pieces[row])], atol=1e-3)
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


# --------------------------------------------------------------------------------- sampling

SEEDS = [11, 12, 13, 14, 15, 16, 17]


def test_sample_signature_equals_sampling_decode_for_the_same_seeds(run):
    served = _signature(run, SAMPLE_SIGNATURE, text=TEXTS, seed=np.int32(SEEDS))
    source_ids = _source_ids(run, TEXTS)
    decoded = sampling_decode(
        run["model"],
        source_ids,
        START_ID,
        END_ID,
        tf.constant(SEEDS, tf.int32),
        max_decoding_length=_max_decoding_length(run, source_ids),
        **SAMPLING,
    )
    expected = _detokenize_rows(run, [[t for t in row if t] for row in decoded["tokens"].numpy()])
    assert _decoded(served[TRANSLATION_OUTPUT]) == expected
    np.testing.assert_allclose(served[SCORE_OUTPUT], decoded["scores"], atol=1e-5)
    # Sampling, not greedy search: some draws leave greedy's path, and other seeds draw others.
    greedy = _decoded(_signature(run, GREEDY_SIGNATURE, text=TEXTS)[TRANSLATION_OUTPUT])
    assert sum(a != b for a, b in zip(expected, greedy)) >= 2, (expected, greedy)
    reseeded = _signature(run, SAMPLE_SIGNATURE, text=TEXTS, seed=np.int32(SEEDS) + 100)
    assert _decoded(reseeded[TRANSLATION_OUTPUT]) != expected
    with open(os.path.join(run["export_dir"], export.EXPORT_INFO_PATH), encoding="utf-8") as f:
        options = json.load(f)["signature_options"][SAMPLE_SIGNATURE]
    assert {name: options[name] for name in SAMPLING} == SAMPLING


def test_a_sentences_sample_depends_only_on_its_text_and_seed(run):
    """The same (text, seed) pairs in another order, as duplicates with other seeds, and with
    fewer batch-mates give the same translations. Every batch keeps the longest text: the
    output-length bound follows a batch's longest source, for sampling as for every decoder."""
    pairs = list(zip(TEXTS, SEEDS))
    longest = max(pairs, key=lambda pair: len(pair[0]))
    batches = [
        pairs,
        pairs[::-1],
        [longest, (TEXTS[2], 99), pairs[2], (TEXTS[2], 98), pairs[3]],
        [pairs[1], longest],
    ]
    drawn = {}
    for batch in batches:
        texts, seeds = zip(*batch)
        outputs = _signature(run, SAMPLE_SIGNATURE, text=list(texts), seed=np.int32(seeds))
        for pair, translation, score in zip(
            batch, _decoded(outputs[TRANSLATION_OUTPUT]), outputs[SCORE_OUTPUT]
        ):
            first = drawn.setdefault(pair, (translation, score))
            assert translation == first[0], pair
            np.testing.assert_allclose(score, first[1], atol=1e-4)
    assert len({drawn[(TEXTS[2], seed)][0] for seed in (SEEDS[2], 98, 99)}) > 1


def test_sampling_top_k_one_is_the_greedy_signature(run):
    """The `sample` method the export traces, with top-k 1, answers what the exported greedy
    signature answers, whatever the seeds."""
    options = DecodingOptions(beam_width=BEAM_WIDTH, alpha=0.0, sampling_topk=1)
    translator = Translator(run["model"], run["source"], run["target"], options)
    sample = tf.function(translator.sample)
    greedy = _signature(run, GREEDY_SIGNATURE, text=TEXTS)
    for seeds in (SEEDS, SEEDS[::-1]):
        outputs = sample(tf.constant(TEXTS), tf.constant(seeds, tf.int32))
        assert _decoded(outputs[TRANSLATION_OUTPUT]) == _decoded(greedy[TRANSLATION_OUTPUT])
        np.testing.assert_allclose(outputs[SCORE_OUTPUT], greedy[SCORE_OUTPUT], atol=1e-5)


# ------------------------------------------------------------------ prefix and alternatives

# Per text a word-level prefix: none, whole words, one ending mid-word ("The ca").
PREFIXES = ["The", "", "The ca", "I have", "The dog is", "", "Thank"]


def _prefix_pieces(run, prefixes):
    """The pieces each prefix forces, as the export tokenizes it."""
    translator = Translator(run["model"], run["source"], run["target"])
    ids = translator.target_prefix_ids(tf.constant(prefixes)).numpy()
    return [[run["target"].vocab[i] for i in row if i] for row in ids]


def test_prefix_signature_equals_ctranslate2s_target_prefix(run):
    served = _signature(run, PREFIX_SIGNATURE, text=TEXTS, target_prefix=PREFIXES)
    pieces = _prefix_pieces(run, PREFIXES)
    assert pieces[2][-2:] == ["c", "a"] or pieces[2][-1] == "▁ca", pieces[2]
    ct2_ids, ct2_scores = _translate_ct2(
        run,
        TEXTS,
        BEAM_WIDTH,
        0.0,
        _max_decoding_length(run, _source_ids(run, TEXTS)),
        target_prefix=pieces,
    )
    translations = _decoded(served[TRANSLATION_OUTPUT])
    assert translations == _detokenize_rows(run, ct2_ids)
    np.testing.assert_allclose(served[SCORE_OUTPUT], ct2_scores, atol=1e-3)
    for prefix, translation in zip(PREFIXES, translations):
        assert translation.startswith(prefix), (prefix, translation)
    # No prefix is beam search's translation; the prefixes change the others.
    beam = _decoded(_signature(run, BEAM_SIGNATURE, text=TEXTS)[TRANSLATION_OUTPUT])
    assert [translations[i] for i in (1, 5)] == [beam[i] for i in (1, 5)]
    assert sum(a != b for a, b in zip(translations, beam)) >= 3, (translations, beam)


def test_alternatives_signature_equals_ctranslate2s_return_alternatives(run):
    served = _signature(run, ALTERNATIVES_SIGNATURE, text=TEXTS, target_prefix=PREFIXES)
    vocab = run["target"].vocab
    results = run["translator"].translate_batch(
        source_pieces(run["source"], TEXTS),
        target_prefix=_prefix_pieces(run, PREFIXES),
        return_alternatives=True,
        num_hypotheses=NUM_ALTERNATIVES,
        beam_size=BEAM_WIDTH,
        length_penalty=0.0,
        max_decoding_length=_max_decoding_length(run, _source_ids(run, TEXTS)),
        max_input_length=run["model"].pe_input,
        return_scores=True,
        return_end_token=True,
        **decoding_options(vocab),
    )
    assert served[TRANSLATIONS_OUTPUT].shape == (len(TEXTS), NUM_ALTERNATIVES)
    # Each alternative is continued by beam search, whose ended hypotheses ours takes among the
    # 2 x beam best candidates and CTranslate2 among the beam best: where an alternative differs,
    # ours must score at least as high (tests/inference/test_export_ctranslate2.py's
    # `_assert_equal_or_ours_better` checks such scores teacher-forced). Which model the tiny run
    # trains to varies with the machine's load, so whether any differs does too.
    differing = 0
    for row, result in enumerate(results):
        expected = _detokenize_rows(run, target_ids(vocab, result.hypotheses))
        translations, scores = (
            _decoded(served[TRANSLATIONS_OUTPUT][row]),
            served[SCORES_OUTPUT][row],
        )
        assert len(translations) == len(expected) == len(result.scores)
        for mine, theirs, my_score, their_score in zip(
            translations, expected, scores, result.scores
        ):
            if mine == theirs:
                np.testing.assert_allclose(my_score, their_score, atol=1e-3)
            else:
                differing += 1
                assert my_score >= their_score - 1e-3, (row, mine, my_score, theirs, their_score)
    assert differing <= len(TEXTS) * NUM_ALTERNATIVES // 4, differing
    # Where no alternative is dropped, each sentence's are distinct continuations of its prefix.
    for prefix, row in zip(PREFIXES, served[TRANSLATIONS_OUTPUT]):
        assert len(set(_decoded(row))) == NUM_ALTERNATIVES, row
        assert all(translation.startswith(prefix) for translation in _decoded(row)), row
    with open(os.path.join(run["export_dir"], export.EXPORT_INFO_PATH), encoding="utf-8") as f:
        options = json.load(f)["signature_options"][ALTERNATIVES_SIGNATURE]
    assert (options["num_alternatives"], options["beam_width"]) == (NUM_ALTERNATIVES, BEAM_WIDTH)


def test_served_sample_prefix_and_alternatives_through_grpc_the_command_line_and_rest(
    run, served, capsys
):
    address, rest_url = served
    sample = _signature(run, SAMPLE_SIGNATURE, text=TEXTS, seed=np.int32(SEEDS))
    prefixed = _signature(run, PREFIX_SIGNATURE, text=TEXTS, target_prefix=PREFIXES)
    alternatives = _signature(run, ALTERNATIVES_SIGNATURE, text=TEXTS, target_prefix=PREFIXES)
    with client_module.TranslationClient(address, MODEL_NAME, timeout=120) as client:
        drawn = client.sample(TEXTS, SEEDS)
        continued = client.translate_with_prefix(TEXTS, PREFIXES)
        listed = client.alternatives(TEXTS, PREFIXES)
    assert [t.translation for t in drawn] == _decoded(sample[TRANSLATION_OUTPUT])
    np.testing.assert_allclose([t.score for t in drawn], sample[SCORE_OUTPUT], atol=1e-5)
    assert [t.translation for t in continued] == _decoded(prefixed[TRANSLATION_OUTPUT])
    assert [[t.translation for t in row] for row in listed] == [
        _decoded(row) for row in alternatives[TRANSLATIONS_OUTPUT]
    ]
    np.testing.assert_allclose(
        [[t.score for t in row] for row in listed], alternatives[SCORES_OUTPUT], atol=1e-5
    )

    # The command line: sentence i drawn with seed SEED + i, whatever the batches.
    for batch_size in ("1", "32"):
        argv = ["--server", address, "--sample", "--seed", str(SEEDS[0]), *TEXTS]
        assert client_module.main([*argv, "--batch_size", batch_size]) == 0
        assert capsys.readouterr().out.splitlines() == _decoded(sample[TRANSLATION_OUTPUT])
    assert client_module.main(["--server", address, "--target_prefix", "The", TEXTS[0]]) == 0
    assert capsys.readouterr().out.splitlines() == _decoded(prefixed[TRANSLATION_OUTPUT][:1])
    argv = ["--server", address, "--alternatives", "--target_prefix", "The", TEXTS[0]]
    assert client_module.main(argv) == 0
    lines = [line.split(" ||| ")[:2] for line in capsys.readouterr().out.splitlines()]
    assert lines == [["0", t] for t in _decoded(alternatives[TRANSLATIONS_OUTPUT][0])]
    assert client_module.main(["--server", address, "--seed", "3", TEXTS[0]]) == 2
    assert "--seed goes with --sample" in capsys.readouterr().err

    outputs = _rest_predict(rest_url, SAMPLE_SIGNATURE, {TEXT_INPUT: TEXTS, SEED_INPUT: SEEDS})
    assert outputs[TRANSLATION_OUTPUT] == _decoded(sample[TRANSLATION_OUTPUT])
    outputs = _rest_predict(
        rest_url, PREFIX_SIGNATURE, {TEXT_INPUT: TEXTS, TARGET_PREFIX_INPUT: PREFIXES}
    )
    assert outputs[TRANSLATION_OUTPUT] == _decoded(prefixed[TRANSLATION_OUTPUT])
    outputs = _rest_predict(
        rest_url, ALTERNATIVES_SIGNATURE, {TEXT_INPUT: TEXTS, TARGET_PREFIX_INPUT: PREFIXES}
    )
    assert outputs[TRANSLATIONS_OUTPUT] == [
        _decoded(row) for row in alternatives[TRANSLATIONS_OUTPUT]
    ]
    np.testing.assert_allclose(outputs[SCORES_OUTPUT], alternatives[SCORES_OUTPUT], atol=1e-5)


def test_a_process_assuming_frozen_weights_decodes_as_one_that_does_not(run):
    """A process started with TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 (serving/DEPLOY.md) reuses the
    second operand of each fused product's first call: the decoding step's fused products
    (`model.dense`) must all multiply by weights, so that requests of other texts and batch
    sizes, in any order, get the translations and scores of a process without it."""
    from tensorflow.core.protobuf import saved_model_pb2

    with open(os.path.join(run["export_dir"], "saved_model.pb"), "rb") as file:
        graph_def = saved_model_pb2.SavedModel.FromString(file.read()).meta_graphs[0].graph_def
    # Each decoding loop's body holds each decoder layer's 8 products (Q, K, V, O;
    # cross-attention's Q, O; the FFN's 2) and the logits', all fused; no other function holds
    # any.
    per_function = products_with_bias(graph_def)
    step_products = 8 * run["model"].num_layers + 1
    assert set(per_function.values()) == {step_products}, per_function

    assert_frozen_weights_change_nothing(
        run["export_dir"],
        (GREEDY_SIGNATURE, BEAM_SIGNATURE, N_BEST_SIGNATURE),
        ["Buenos días.", "Gracias.", "Buenas noches.", "Hola."],
        tolerance=1e-4,
    )
