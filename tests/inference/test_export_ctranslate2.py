"""The CTranslate2 export (inference/export_ctranslate2.py) against the project's own decoders.

A tiny trained run (tests/export_fixtures.py), post-LN and pre-LN, is converted with the command
line; CTranslate2 then translates a batch of sentences of different lengths (one cut to the
model's source length), and its tokens and scores must equal those of `model.decoding` on the
same weights: greedy, and beam 4 with the length penalty off on both sides and on (where the
two normalize differently; see the export's docstring). Beam search may find a better-scored
hypothesis than CTranslate2's, which registers fewer of those that end
(`_assert_equal_or_ours_better`). tests/inference/test_export.py shows that those
decoders give what the SavedModel gives, and the text comparison here goes through the same
`model.translator.Translator` methods the SavedModel's signatures are traced from.
"""

import contextlib
import io
import json
import os
import re

import ctranslate2
import numpy as np
import pytest
import tensorflow as tf

from common.serving_contract import (
    SCORE_OUTPUT,
    TRANSLATION_OUTPUT,
)
from inference import export
from inference.export_ctranslate2 import (
    decoding_options,
    main,
    source_pieces,
    target_ids,
    transformer_spec_of,
)
from model.decoding import (
    alternatives_decode,
    beam_search_decode,
    greedy_decode,
    max_decoding_length_for,
    sequence_log_prob,
    token_log_probs,
)
from model.special_tokens import END_ID, START_ID
from model.translator import Translator
from run_directory.artifacts import load_trained
from tests.export_fixtures import build_tiny_run
from tests.paths import REPO_ROOT

BEAM_WIDTH = 4
ALPHA = 0.6
# Different lengths, sentences outside the training pairs, and one longer than the model's
# 24 source positions (cut, keeping [END], by both). CTranslate2 answers an empty source with an
# empty translation without decoding, where the project decodes "[START] [END]": not compared.
TEXTS = [
    "¿Dónde está el gato?",
    "Hola.",
    "El perro negro está en la casa pequeña.",
    "Tengo un libro.",
    "Me gusta el pan.",
    "Ella bebe agua fría y él come pan en la mesa de la casa grande con mi hermano alto "
    "y mi hermana alta.",
    "Gracias.",
]


@pytest.fixture(scope="module", params=[False, True], ids=["post_ln", "pre_ln"])
def run(request, tmp_path_factory):
    """A trained tiny run (post-LN or pre-LN), loaded, and its CTranslate2 export."""
    run_dir = tmp_path_factory.mktemp("run")
    build_tiny_run(run_dir, config={"norm_first": request.param})
    output_dir = str(tmp_path_factory.mktemp("ct2") / "model")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        main(["--run_dir", str(run_dir), "--output_dir", output_dir])
    assert output_dir in printed.getvalue()
    model, source_tokenizer, target_tokenizer, _ = load_trained(run_dir)
    assert model.norm_first is request.param
    translator = ctranslate2.Translator(output_dir, device="cpu", inter_threads=1, intra_threads=1)
    return {
        "run_dir": run_dir,
        "output_dir": output_dir,
        "model": model,
        "source": source_tokenizer,
        "target": target_tokenizer,
        "translator": translator,
        "printed": printed.getvalue(),
    }


def _source_ids(run, texts):
    """Padded source ids as the SavedModel makes them (cut to the model's length)."""
    endpoints = Translator(run["model"], run["source"], run["target"])
    return endpoints.source_ids(tf.constant(texts))


def _translate_ct2(run, texts, beam_size, length_penalty, max_decoding_length, **options):
    """CTranslate2's best hypotheses: `(list of id lists, each ending with [END] if it ended;
    scores)`; `options`: more of `translate_batch`'s."""
    vocab = run["target"].vocab
    results = run["translator"].translate_batch(
        source_pieces(run["source"], texts),
        beam_size=beam_size,
        length_penalty=length_penalty,
        max_decoding_length=max_decoding_length,
        max_input_length=run["model"].pe_input,
        return_scores=True,
        return_end_token=True,
        **decoding_options(vocab),
        **options,
    )
    ids = target_ids(vocab, [result.hypotheses[0] for result in results])
    return ids, np.array([result.scores[0] for result in results])


def _ours(decoded):
    """Our decoders' `(id lists up to and including [END], scores)`."""
    rows = [[int(token) for token in row if token != 0] for row in decoded["tokens"].numpy()]
    return rows, decoded["scores"].numpy()


# Of the 7 texts, beam search may find a better hypothesis than CTranslate2's on at most this
# many (`_assert_equal_or_ours_better`); the others must be equal, or the comparison tests little.
MAX_BETTER_THAN_CT2 = 2


def _forced_score(run, source_ids, text, ids, skip=0):
    """The log-probability the model gives `ids` (an id list) after `text`'s source,
    teacher-forced, summed over the tokens after the first `skip` (a prefix)."""
    log_probs = token_log_probs(
        run["model"], source_ids[text : text + 1], tf.constant([ids], tf.int32), START_ID
    )
    return float(tf.reduce_sum(log_probs[0, skip:]))


def _assert_equal_or_ours_better(run, source_ids, ct2, ours, prefixes=None, atol=1e-3):
    """Per text, CTranslate2's hypotheses and scores equal ours, or ours score as high or
    higher, both as the model scores them teacher-forced.

    Before max_decoding_length and without length penalty, CTranslate2's beam search registers
    a hypothesis that ends only when its `</s>` is among the step's `beam_size` best candidates
    (`BeamSearch::search`, src/decoding.cc); ours takes one among the 2 × beam best
    (`model.decoding.beam`). The two keep the same alive beams, the best `beam_size` candidates
    that did not end, so ours registers every hypothesis CTranslate2 does and sometimes one
    more: where the two differ, each of ours scores at least as high as CTranslate2's of the
    same rank. Teacher-forced, the model must score ours better by as much, so that a better
    score is a better hypothesis, not a miscounted one.

    Args:
        ct2, ours: `(per text an id list or a list of them (ranks), (texts,) or (texts, n)
            scores)`.
        prefixes: per text the forced prefix (id list), its tokens unscored, or None.
    """
    (ct2_ids, ct2_scores), (ours_ids, ours_scores) = ct2, ours
    assert len(ct2_ids) == len(ours_ids)
    differing = [
        text for text, (theirs, mine) in enumerate(zip(ct2_ids, ours_ids)) if theirs != mine
    ]
    for text in range(len(ours_ids)):
        theirs, mine = np.asarray(ct2_scores[text]), np.asarray(ours_scores[text])
        if text not in differing:
            np.testing.assert_allclose(theirs, mine, atol=atol)
            continue
        assert theirs.shape == mine.shape and np.all(mine >= theirs - atol), (
            f"text {text}: ours {ours_ids[text]} scores {mine}, below CTranslate2's "
            f"{ct2_ids[text]} at {theirs}"
        )
        # By the model, ours is better by as much as the scores say (a difference, so that it
        # holds whatever the scores leave out of the prefix and the alternatives' first token).
        skip = len(prefixes[text]) if prefixes else 0
        ranked = mine.ndim == 1
        forced = [
            [
                _forced_score(run, source_ids, text, ids, skip)
                for ids in (hyps if ranked else [hyps])
            ]
            for hyps in (ct2_ids[text], ours_ids[text])
        ]
        np.testing.assert_allclose(
            np.subtract(forced[1], forced[0]), np.atleast_1d(mine - theirs), atol=atol
        )
    assert len(differing) <= MAX_BETTER_THAN_CT2, (
        f"texts {differing} differ from CTranslate2's: {ct2_ids} against {ours_ids}"
    )


def _max_decoding_length(run, source_ids):
    options = export.DecodingOptions()
    return int(
        max_decoding_length_for(
            source_ids,
            options.max_length_ratio,
            options.max_length_offset,
            limit=run["model"].pe_target - 1,
        )
    )


def test_export_writes_the_spec_config_and_vocabularies(run):
    with open(os.path.join(run["output_dir"], "config.json"), encoding="utf-8") as config_file:
        config = json.load(config_file)
    assert (
        config["unk_token"],
        config["bos_token"],
        config["eos_token"],
        config["decoder_start_token"],
    ) == ("[UNK]", "[START]", "[END]", "[START]")
    assert config["add_source_bos"] and config["add_source_eos"]
    assert config["layer_norm_epsilon"] == pytest.approx(1e-6)
    for side, tokenizer in (("source", run["source"]), ("target", run["target"])):
        with open(
            os.path.join(run["output_dir"], f"{side}_vocabulary.json"), encoding="utf-8"
        ) as vocab_file:
            assert json.load(vocab_file) == tokenizer.vocab  # every id the same


def test_greedy_equals_ours_token_for_token(run):
    source_ids = _source_ids(run, TEXTS)
    max_decoding_length = _max_decoding_length(run, source_ids)
    ours_ids, ours_scores = _ours(
        greedy_decode(
            run["model"], source_ids, START_ID, END_ID, max_decoding_length=max_decoding_length
        )
    )
    ct2_ids, ct2_scores = _translate_ct2(run, TEXTS, 1, 0.0, max_decoding_length)
    assert ct2_ids == ours_ids
    assert len({len(row) for row in ours_ids}) > 2  # the batch really has different lengths
    # Summed log-probabilities, [PAD] left out of the softmax by both.
    np.testing.assert_allclose(ct2_scores, ours_scores, atol=1e-3)


def test_greedy_translations_equal_the_saved_model_functions(run):
    endpoints = Translator(run["model"], run["source"], run["target"])
    served = endpoints.greedy(tf.constant(TEXTS))
    max_decoding_length = _max_decoding_length(run, _source_ids(run, TEXTS))
    ct2_ids, ct2_scores = _translate_ct2(run, TEXTS, 1, 0.0, max_decoding_length)
    padded = tf.ragged.constant(ct2_ids).to_tensor()
    assert list(run["target"].detokenize(padded).numpy()) == list(
        served[TRANSLATION_OUTPUT].numpy()
    )
    np.testing.assert_allclose(ct2_scores, served[SCORE_OUTPUT].numpy(), atol=1e-3)


def readme_recipe():
    """The Python block of docs/serving.md's CTranslate2 section."""
    root = str(REPO_ROOT)
    with open(os.path.join(root, "docs", "serving.md"), encoding="utf-8") as doc:
        section = doc.read().split("\n## CTranslate2\n", 1)[1].split("\n## ", 1)[0]
    (recipe,) = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    return recipe


def test_the_readme_recipe_prints_the_greedy_translations(run):
    recipe = readme_recipe()
    paths = re.compile(r"^RUN_DIR, CT2_DIR = .*$", flags=re.MULTILINE)
    assert len(paths.findall(recipe)) == 1
    recipe = paths.sub(f"RUN_DIR, CT2_DIR = {str(run['run_dir'])!r}, {run['output_dir']!r}", recipe)
    namespace = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(recipe, "docs/serving.md (CTranslate2)", "exec"), namespace)
    endpoints = Translator(run["model"], run["source"], run["target"])
    greedy = endpoints.greedy(tf.constant(namespace["texts"]))[TRANSLATION_OUTPUT].numpy()
    assert printed.getvalue().splitlines() == [text.decode("utf-8") for text in greedy]
    # The command line's hint says the same.
    assert "**greedy_options(" in run["printed"] and "load_tokenizers(" in run["printed"]


def test_beam_search_without_length_penalty_equals_ours_or_ours_finds_better(run):
    """Ours may find a better hypothesis than CTranslate2's (`_assert_equal_or_ours_better`)."""
    source_ids = _source_ids(run, TEXTS)
    max_decoding_length = _max_decoding_length(run, source_ids)
    ours_ids, ours_scores = _ours(
        beam_search_decode(
            run["model"],
            source_ids,
            START_ID,
            END_ID,
            beam_width=BEAM_WIDTH,
            alpha=0.0,
            max_decoding_length=max_decoding_length,
        )
    )
    ct2_ids, ct2_scores = _translate_ct2(run, TEXTS, BEAM_WIDTH, 0.0, max_decoding_length)
    _assert_equal_or_ours_better(run, source_ids, (ct2_ids, ct2_scores), (ours_ids, ours_scores))


def _confident_texts(run, threshold=-1.0):
    """The texts the model translates greedily with a summed log-probability above
    `threshold`: there one hypothesis wins by far, so search details cannot reorder them."""
    source_ids = _source_ids(run, TEXTS)
    scores = greedy_decode(run["model"], source_ids, START_ID, END_ID)["scores"].numpy()
    confident = [text for text, score in zip(TEXTS, scores) if score > threshold]
    assert len(confident) >= 3, f"the tiny run is unsure of most texts: {scores}"
    return confident


# How far, in log-probability, every greedy choice of a text must beat the runner-up for int8
# weights (logits about 1% off) to choose alike.
DECISIVE_MARGIN = 0.5


def _decisive_texts(run, hypotheses, margin=DECISIVE_MARGIN):
    """The indices of `TEXTS` whose `hypotheses` (CTranslate2's pieces, float32 greedy) the
    model chooses at every step by more than `margin` over the runner-up, scored
    teacher-forced by our model on the same weights."""
    vocab = run["target"].vocab
    source_ids = _source_ids(run, TEXTS)
    decisive = []
    for text, pieces in enumerate(hypotheses):
        ids = target_ids(vocab, [pieces])[0]
        if len(ids) >= run["model"].pe_target:
            continue  # It ran to the length bound: a loop, decided by no margin.
        # Each choice, the last one ([END]) included.
        target_in = tf.constant([[START_ID, *ids]], tf.int32)
        logits = run["model"]((source_ids[text : text + 1], target_in))[0]
        top_two = tf.math.top_k(tf.nn.log_softmax(logits), k=2).values.numpy()
        if np.min(top_two[:, 0] - top_two[:, 1]) > margin:
            decisive.append(text)
    return decisive


def test_beam_search_with_length_penalty_differs_only_in_the_normalization(run):
    """Ours: log P / ((5 + |y|) / 6)^alpha (GNMT); CTranslate2: log P / |y|^alpha; |y| counts
    [END] in both. Where the model is confident, both rank the same hypothesis first."""
    texts = _confident_texts(run)
    source_ids = _source_ids(run, texts)
    max_decoding_length = _max_decoding_length(run, source_ids)
    ours_ids, ours_scores = _ours(
        beam_search_decode(
            run["model"],
            source_ids,
            START_ID,
            END_ID,
            beam_width=BEAM_WIDTH,
            alpha=ALPHA,
            max_decoding_length=max_decoding_length,
        )
    )
    ct2_ids, ct2_scores = _translate_ct2(run, texts, BEAM_WIDTH, ALPHA, max_decoding_length)
    assert ct2_ids == ours_ids
    lengths = np.array([len(row) for row in ours_ids], np.float64)
    np.testing.assert_allclose(
        ct2_scores * lengths**ALPHA, ours_scores * ((5 + lengths) / 6) ** ALPHA, atol=1e-3
    )


def _n_best_ct2(
    run, texts, beam_size, length_penalty, max_decoding_length, num_hypotheses, **options
):
    """CTranslate2's `num_hypotheses` best hypotheses per text: (per text a list of id lists,
    each ending with [END] if it ended; `(texts, num_hypotheses)` scores)."""
    vocab = run["target"].vocab
    results = run["translator"].translate_batch(
        source_pieces(run["source"], texts),
        beam_size=beam_size,
        length_penalty=length_penalty,
        max_decoding_length=max_decoding_length,
        max_input_length=run["model"].pe_input,
        num_hypotheses=num_hypotheses,
        return_scores=True,
        return_end_token=True,
        **decoding_options(vocab),
        **options,
    )
    return (
        [target_ids(vocab, result.hypotheses) for result in results],
        np.array([result.scores for result in results]),
    )


def _n_best_ours(decoded):
    """Our n-best outputs as `_n_best_ct2`'s."""
    tokens = decoded["tokens"].numpy()
    ids = [
        [[int(token) for token in row if token != 0] for row in hypotheses] for hypotheses in tokens
    ]
    return ids, decoded["scores"].numpy()


def test_n_best_without_length_penalty_equals_ctranslate2(run):
    """`num_hypotheses` 3 of a beam of 4: the same hypotheses in the same order, with the same
    scores (or ours better: `_assert_equal_or_ours_better`).

    CTranslate2 stops a sentence early once its best candidate is `</s>` and `num_hypotheses`
    have finished: the 2nd and 3rd it returns are then the first found, not the best (seen on
    2 of the 7 texts). A length penalty of 1e-6 (|y|^1e-6 = 1 to 4e-6) and a patience of 4 make
    it search as ours does, until no alive hypothesis can enter the n best. With a length
    penalty the two normalizations rank the lower hypotheses differently (the 1-best comparison
    above); ours's ranking under GNMT's is checked against an exhaustive search in
    tests/model/decoding/test_beam.py.
    """
    source_ids = _source_ids(run, TEXTS)
    max_decoding_length = _max_decoding_length(run, source_ids)
    ours_ids, ours_scores = _n_best_ours(
        beam_search_decode(
            run["model"],
            source_ids,
            START_ID,
            END_ID,
            beam_width=BEAM_WIDTH,
            alpha=0.0,
            max_decoding_length=max_decoding_length,
            num_hypotheses=3,
        )
    )
    ct2_n_best = _n_best_ct2(run, TEXTS, BEAM_WIDTH, 1e-6, max_decoding_length, 3, patience=4)
    _assert_equal_or_ours_better(run, source_ids, ct2_n_best, (ours_ids, ours_scores))
    assert all(len(set(map(tuple, hypotheses))) == 3 for hypotheses in ours_ids)
    assert np.all(np.diff(ours_scores, axis=1) <= 0), "hypotheses not best first"


def test_token_log_probs_equal_ctranslate2s_score_batch(run):
    """Forced decoding of given targets (the greedy outputs and each text's 3rd best beam
    hypothesis, less likely tokens): `token_log_probs` equals CTranslate2's `score_batch`,
    which scores each target token and the `</s>` it appends, unnormalized (a softmax over the
    whole vocabulary, [PAD] in it: its mass is below 1e-3 here), and sums to `sequence_log_prob`
    and to the greedy decoder's own scores."""
    source_ids = _source_ids(run, TEXTS)
    max_decoding_length = _max_decoding_length(run, source_ids)
    greedy = greedy_decode(
        run["model"], source_ids, START_ID, END_ID, max_decoding_length=max_decoding_length
    )
    third = _third_best_hypotheses(run, source_ids, max_decoding_length)
    vocab = run["target"].vocab
    for tokens in (greedy["tokens"], third):
        ours = token_log_probs(run["model"], source_ids, tokens, START_ID).numpy()
        targets = [[int(token) for token in row if token != 0] for row in tokens.numpy()]
        # CTranslate2 appends `</s>` to every target: compared on the outputs that ended.
        ended = [row for row, target in enumerate(targets) if target[-1] == END_ID]
        assert len(ended) >= 5, targets
        results = run["translator"].score_batch(
            source_pieces(run["source"], [TEXTS[row] for row in ended]),
            [[vocab[token] for token in targets[row][:-1]] for row in ended],
            max_input_length=run["model"].pe_input,
        )
        for row, result in zip(ended, results):
            target = targets[row]
            assert result.tokens == [vocab[token] for token in target]  # </s> scored too
            np.testing.assert_allclose(result.log_probs, ours[row, : len(target)], atol=1e-3)
            assert not ours[row, len(target) :].any()
        np.testing.assert_allclose(
            ours.sum(axis=1),
            sequence_log_prob(run["model"], source_ids, tokens, START_ID),
            rtol=1e-6,
        )
    np.testing.assert_allclose(
        token_log_probs(run["model"], source_ids, greedy["tokens"], START_ID).numpy().sum(1),
        greedy["scores"],
        atol=1e-4,
    )


def _third_best_hypotheses(run, source_ids, max_decoding_length):
    """`(texts, length)` int32: each text's 3rd best beam hypothesis (α = 0), padded with 0."""
    return beam_search_decode(
        run["model"],
        source_ids,
        START_ID,
        END_ID,
        BEAM_WIDTH,
        0.0,
        max_decoding_length,
        num_hypotheses=3,
    )["tokens"][:, 2]


# Per text the length of its prefix: rows with none among rows with some, in one batch.
PREFIX_LENGTHS = [2, 0, 3, 1, 4, 0, 3]


def _prefixes(run, source_ids, max_decoding_length):
    """Per text a prefix of `PREFIX_LENGTHS` tokens of the next text's 3rd best beam hypothesis
    (so that decoding continues what it would not have chosen); the 3rd text's has [END] in
    the middle. Returns `(list of id lists, (texts, P) ids padded with 0)`."""
    third = _third_best_hypotheses(run, source_ids, max_decoding_length).numpy()
    prefixes = [
        [int(token) for token in row if token != 0][:length]
        for row, length in zip(np.roll(third, -1, axis=0), PREFIX_LENGTHS)
    ]
    prefixes[2] = [prefixes[2][0], END_ID, prefixes[2][1]]
    padded = np.zeros((len(prefixes), max(PREFIX_LENGTHS)), np.int32)
    for row, prefix in enumerate(prefixes):
        padded[row, : len(prefix)] = prefix
    return prefixes, padded


@pytest.mark.large
@pytest.mark.parametrize("beam_size", [1, BEAM_WIDTH])
def test_target_prefix_equals_ctranslate2(run, beam_size):
    """Prefixes of 0 to 4 tokens in one batch, one holding [END]: the same outputs as
    CTranslate2's `target_prefix` (the prefix returned, then decoding on from it, [END] inside
    it not ending it) and the same scores (of the tokens after the prefix); beam search without
    length penalty, where the two normalize alike."""
    source_ids = _source_ids(run, TEXTS)
    max_decoding_length = _max_decoding_length(run, source_ids)
    prefixes, padded = _prefixes(run, source_ids, max_decoding_length)
    options = {"max_decoding_length": max_decoding_length, "prefix": tf.constant(padded)}
    if beam_size == 1:
        decoded = greedy_decode(run["model"], source_ids, START_ID, END_ID, **options)
    else:
        decoded = beam_search_decode(
            run["model"], source_ids, START_ID, END_ID, beam_size, 0.0, **options
        )
    ours_ids, ours_scores = _ours(decoded)
    vocab = run["target"].vocab
    ct2_ids, ct2_scores = _translate_ct2(
        run,
        TEXTS,
        beam_size,
        0.0,
        max_decoding_length,
        target_prefix=[[vocab[token] for token in prefix] for prefix in prefixes],
    )
    if beam_size == 1:
        assert ct2_ids == ours_ids
        np.testing.assert_allclose(ct2_scores, ours_scores, atol=1e-3)
    else:
        _assert_equal_or_ours_better(
            run, source_ids, (ct2_ids, ct2_scores), (ours_ids, ours_scores), prefixes
        )
    for prefix, output in zip(prefixes, ours_ids):
        assert output[: len(prefix)] == prefix
    assert sum(output[-1] == END_ID for output in ours_ids) >= 5
    unprefixed = _ours(
        greedy_decode(run["model"], source_ids, START_ID, END_ID, max_decoding_length)
    )[0]
    assert sum(ours != free for ours, free in zip(ours_ids, unprefixed)) >= 4


ALTERNATIVES = 4


@pytest.mark.large
@pytest.mark.parametrize("beam_size", [1, BEAM_WIDTH])
def test_return_alternatives_equals_ctranslate2(run, beam_size):
    """`return_alternatives` with 4 alternatives after the prefixes above (some none, one
    holding [END]; the last text's its own greedy output but [END], where [END] is likely
    next and is left out of the alternatives' softmax), those below probability 0.02 dropped:
    per text the same alternatives, each continued as CTranslate2 continues it (greedy, or
    beam 4 without length penalty, where ours may find better), with the same scores, in
    CTranslate2's order."""
    source_ids = _source_ids(run, TEXTS)
    max_decoding_length = _max_decoding_length(run, source_ids)
    prefixes, padded = _prefixes(run, source_ids, max_decoding_length)
    greedy = _ours(greedy_decode(run["model"], source_ids, START_ID, END_ID, max_decoding_length))[
        0
    ]
    prefixes[-1] = greedy[-1][:-1]
    padded[-1] = 0
    padded = np.pad(padded, [(0, 0), (0, max(0, len(prefixes[-1]) - padded.shape[1]))])
    padded[-1, : len(prefixes[-1])] = prefixes[-1]
    ours = alternatives_decode(
        run["model"],
        source_ids,
        START_ID,
        END_ID,
        tf.constant(padded),
        ALTERNATIVES,
        min_alternative_expansion_prob=0.02,
        beam_width=beam_size,
        max_decoding_length=max_decoding_length,
    )
    ours_ids, ours_scores = _n_best_ours(ours)
    counts = ours["count"].numpy()
    vocab = run["target"].vocab
    results = run["translator"].translate_batch(
        source_pieces(run["source"], TEXTS),
        target_prefix=[[vocab[token] for token in prefix] for prefix in prefixes],
        return_alternatives=True,
        min_alternative_expansion_prob=0.02,
        num_hypotheses=ALTERNATIVES,
        beam_size=beam_size,
        length_penalty=0.0,
        max_decoding_length=max_decoding_length,
        max_input_length=run["model"].pe_input,
        return_scores=True,
        return_end_token=True,
        **decoding_options(vocab),
    )
    assert len(set(counts)) > 1, f"no alternative dropped: {counts}"
    assert [len(result.hypotheses) for result in results] == list(counts)
    for text, count in enumerate(counts):
        assert not ours["tokens"][text, count:].numpy().any()
    ct2_alternatives = [target_ids(vocab, result.hypotheses) for result in results]
    ours_alternatives = [ours_ids[text][:count] for text, count in enumerate(counts)]
    # The same alternatives in the same order: each hypothesis's first token after the prefix.
    assert [
        [ids[: len(prefix) + 1] for ids in hypotheses]
        for prefix, hypotheses in zip(prefixes, ct2_alternatives)
    ] == [
        [ids[: len(prefix) + 1] for ids in hypotheses]
        for prefix, hypotheses in zip(prefixes, ours_alternatives)
    ]
    ct2 = (ct2_alternatives, [result.scores for result in results])
    ours = (ours_alternatives, [ours_scores[text, :count] for text, count in enumerate(counts)])
    if beam_size == 1:
        assert ct2[0] == ours[0]
        for theirs, mine in zip(ct2[1], ours[1]):
            np.testing.assert_allclose(theirs, mine, atol=1e-3)
    else:
        # Each alternative continued by its own beam search: ours may find a better one.
        _assert_equal_or_ours_better(run, source_ids, ct2, ours, prefixes)


REPETITION_CONTROLS = {
    "penalty-3": {"repetition_penalty": 3.0},
    "penalty-0.5": {"repetition_penalty": 0.5},
    "no-repeat-1": {"no_repeat_ngram_size": 1},
    "no-repeat-2-penalty-1.5": {"no_repeat_ngram_size": 2, "repetition_penalty": 1.5},
}


@pytest.mark.large
@pytest.mark.parametrize(
    "beam_size, controls",
    [(1, name) for name in REPETITION_CONTROLS]
    # A penalty below 1 rewards repeats: beams loop to max_decoding_length, where the two beam
    # searches differ by design (see below).
    + [(BEAM_WIDTH, name) for name in REPETITION_CONTROLS if name != "penalty-0.5"],
)
def test_repetition_controls_equal_ctranslate2(run, controls, beam_size):
    """`repetition_penalty` and `no_repeat_ngram_size` have CTranslate2's semantics: the same
    tokens and scores (beam search without length penalty, where the two normalize alike), on
    settings strong enough to change outputs."""
    source_ids = _source_ids(run, TEXTS)
    max_decoding_length = _max_decoding_length(run, source_ids)

    def decode(**options):
        if beam_size == 1:
            return greedy_decode(
                run["model"], source_ids, START_ID, END_ID, max_decoding_length, **options
            )
        return beam_search_decode(
            run["model"],
            source_ids,
            START_ID,
            END_ID,
            beam_size,
            0.0,
            max_decoding_length,
            **options,
        )

    controls = REPETITION_CONTROLS[controls]
    ours_ids, ours_scores = _ours(decode(**controls))
    assert ours_ids != _ours(decode())[0], "the controls change no output: the test tests little"
    ct2_ids, ct2_scores = _translate_ct2(
        run, TEXTS, beam_size, 0.0, max_decoding_length, **controls
    )
    # The two beam searches end differently at max_decoding_length (CTranslate2 closes every beam
    # at its last step and ranks them with the finished ones; ours prefers a finished
    # hypothesis): compared where both ended with [END].
    ended = [
        row
        for row, (ours, theirs) in enumerate(zip(ours_ids, ct2_ids))
        if beam_size == 1 or ours[-1] == theirs[-1] == END_ID
    ]
    assert len(ended) >= 3, f"too few outputs ended: {ours_ids}"
    assert [ct2_ids[row] for row in ended] == [ours_ids[row] for row in ended]
    np.testing.assert_allclose(ct2_scores[ended], ours_scores[ended], atol=1e-3)


def _largest_log_prob_shift(translator, other, sources, targets, max_input_length):
    """The largest difference between two translators' log-probabilities of the same tokens,
    each target scored teacher-forced on its source (CTranslate2's `score_batch`)."""
    options = {"max_input_length": max_input_length}
    return max(
        float(np.max(np.abs(np.subtract(ours.log_probs, theirs.log_probs))))
        for ours, theirs in zip(
            translator.score_batch(sources, targets, **options),
            other.score_batch(sources, targets, **options),
        )
    )


def test_int8_export_translates_like_float32(run, tmp_path):
    int8_dir = str(tmp_path / "int8")
    with contextlib.redirect_stdout(io.StringIO()):
        main(["--run_dir", str(run["run_dir"]), "--output_dir", int8_dir, "--quantization", "int8"])
    # int8 weights take a quarter of float32's room (model.bin is mostly weights).
    sizes = [
        os.path.getsize(os.path.join(path, "model.bin")) for path in (run["output_dir"], int8_dir)
    ]
    assert sizes[1] < 0.5 * sizes[0]
    translator = ctranslate2.Translator(
        int8_dir, device="cpu", compute_type="int8", inter_threads=1, intra_threads=1
    )
    options = dict(
        beam_size=1,
        max_decoding_length=_max_decoding_length(run, _source_ids(run, TEXTS)),
        max_input_length=run["model"].pe_input,
        **decoding_options(run["target"].vocab),
    )
    sources = source_pieces(run["source"], TEXTS)
    float32 = run["translator"].translate_batch(sources, **options)
    hypotheses = [result.hypotheses[0] for result in float32]
    # Compare where every greedy choice wins by more than int8 can move it. How far int8 moves
    # a log-probability depends on the CPU's int8 kernels (AVX2, AVX-512 VNNI) and on the model
    # the tiny run trained to, which depends on the thread count: measured here, on float32's
    # own choices scored by both models, it sets the margin (a fixed margin of 0.5 once let a
    # choice flip beside other tests).
    # A loop that ran to the length bound is no candidate (nor can it be scored past it).
    ended = [i for i, pieces in enumerate(hypotheses) if len(pieces) < run["model"].pe_target - 1]
    shift = _largest_log_prob_shift(
        run["translator"],
        translator,
        [sources[i] for i in ended],
        [hypotheses[i] for i in ended],
        run["model"].pe_input,
    )
    # Measured: at most 0.12 with AVX-512 VNNI's int8 kernels, 1.65 held to AVX2
    # (CT2_FORCE_CPU_ISA=AVX2) on the same CPU, the tiny model's logits being small. An export
    # whose int8 weights were wrong would move them by more than any kernel does.
    assert shift < 3.0, f"int8 moves a log-probability by {shift:.2f}: its weights are wrong"
    decisive = _decisive_texts(run, hypotheses, margin=max(DECISIVE_MARGIN, 3 * shift))
    assert decisive, f"the tiny run decides no text by more than int8 moves ({shift:.2f})"
    texts = [TEXTS[text] for text in decisive]
    int8 = translator.translate_batch(source_pieces(run["source"], texts), **options)
    assert [result.hypotheses for result in int8] == [float32[text].hypotheses for text in decisive]


def test_command_line_refuses_an_existing_output_dir(run, capsys):
    with pytest.raises(SystemExit):
        main(["--run_dir", str(run["run_dir"]), "--output_dir", run["output_dir"]])
    assert "already exists; pass --force" in capsys.readouterr().err


def test_vocabulary_of_another_run_or_with_repeats_is_refused(run):
    model, vocab = run["model"], run["source"].vocab
    with pytest.raises(ValueError, match="source vocabulary has 5 tokens but the model expects"):
        transformer_spec_of(model, vocab[:5], run["target"].vocab)
    repeated = vocab[:-1] + [vocab[10]]
    with pytest.raises(ValueError, match=r"holds .* twice \(ids 10 and"):
        transformer_spec_of(model, repeated, run["target"].vocab)
