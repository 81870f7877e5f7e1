"""Evaluation: translations from the trained run, scored with sacreBLEU."""

import json
import os
import shutil

import pytest
import sacrebleu
import tensorflow as tf

from inference.export import export_run
from model.decoding import beam_search_decode, greedy_decode
from model.special_tokens import END_ID, START_ID
from run_directory import artifacts
from training.corpus import load_pairs
from training.evaluate import evaluate, is_looping, main
from training.made_up_words import MadeUpWords, words
from training.noise import PERTURBATIONS

# End to end over trained runs: `make test-large` (tests/collection.py).
pytestmark = pytest.mark.large


def test_report_matches_sacrebleu_on_the_written_hypotheses(tiny_run, tmp_path):
    run_dir = tiny_run["run_dir"]
    report = evaluate(run_dir, "test", output_dir=str(tmp_path))
    hypotheses = (tmp_path / "test.greedy.hyp.txt").read_text(encoding="utf-8").splitlines()
    config = artifacts.read_config(run_dir)
    references = [target for _, target in load_pairs(config["data"], "test")]
    assert len(hypotheses) == len(references) == report["sentences"] == 40
    assert report["bleu"] == round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2)
    assert report["chrf"] == round(sacrebleu.corpus_chrf(hypotheses, [references]).score, 2)
    assert report["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert json.loads((tmp_path / "test.greedy.report.json").read_text())["bleu"] == report["bleu"]
    # Made-up words: the toy corpus's training targets and the word lists are its English.
    sources = [source for source, _ in load_pairs(config["data"], "test")]
    checker = MadeUpWords.for_training_targets(
        target for _, target in load_pairs(config["data"], "train")
    )
    made_up = [word for h, s in zip(hypotheses, sources) for word in checker.made_up(h, s)]
    assert report["made_up_words"] == len(made_up)
    assert report["output_words"] == sum(len(words(h)) for h in hypotheses)
    assert report["made_up_rate"] == round(len(made_up) / report["output_words"], 4)
    assert report["made_up_known_words"].endswith(
        "training targets of " + os.path.basename(config["data"].rstrip("/")).removesuffix(".tsv")
    )


def test_hypotheses_are_the_models_greedy_translations(tiny_run, tmp_path):
    """Independent path: tokenize, decode and detokenize one sentence at a time."""
    run_dir = tiny_run["run_dir"]
    # One sentence per batch: a batch's output-length bound follows its longest source, so a
    # sentence that never ends is cut at the same length only when it is decoded alone.
    evaluate(run_dir, "test", limit=5, batch_size=1, output_dir=str(tmp_path))
    hypotheses = (tmp_path / "test.greedy.hyp.txt").read_text(encoding="utf-8").splitlines()
    model, source_tokenizer, target_tokenizer, config = artifacts.load_trained(run_dir)
    for (source, _), hypothesis in zip(load_pairs(config["data"], "test")[:5], hypotheses):
        ids = source_tokenizer.tokenize(tf.constant([source])).to_tensor()
        tokens = greedy_decode(model, tf.cast(ids, tf.int32), START_ID, END_ID)["tokens"]
        assert target_tokenizer.detokenize(tokens).numpy()[0].decode() == hypothesis


def test_beam_search_evaluation_and_cli(tiny_run, tmp_path, capsys):
    assert (
        main(
            [
                "--run_dir",
                tiny_run["run_dir"],
                "--beam_width",
                "3",
                "--limit",
                "8",
                "--output_dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "test.beam3.report.json").read_text())
    hypotheses = (tmp_path / "test.beam3.hyp.txt").read_text(encoding="utf-8").splitlines()
    config = artifacts.read_config(tiny_run["run_dir"])
    references = [target for _, target in load_pairs(config["data"], "test")[:8]]
    assert report["sentences"] == len(hypotheses) == 8
    assert (
        report["decoding"]
        == f"beam 3, alpha {artifacts.decoding_options(tiny_run['run_dir']).alpha}"
    )
    assert report["bleu"] == round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2)
    assert f"BLEU {report['bleu']}  (" in out and "beam 3" in out


def test_beam_hypotheses_are_beam_search_decode_one_sentence_at_a_time(tiny_run, tmp_path):
    run_dir = tiny_run["run_dir"]
    evaluate(
        run_dir, "test", beam_width=3, alpha=1.0, limit=6, batch_size=1, output_dir=str(tmp_path)
    )
    hypotheses = (tmp_path / "test.beam3.hyp.txt").read_text(encoding="utf-8").splitlines()
    model, source_tokenizer, target_tokenizer, config = artifacts.load_trained(run_dir)
    for (source, _), hypothesis in zip(
        load_pairs(config["data"], "test")[:6], hypotheses, strict=True
    ):
        ids = source_tokenizer.tokenize(tf.constant([source])).to_tensor()
        tokens = beam_search_decode(
            model, tf.cast(ids, tf.int32), START_ID, END_ID, beam_width=3, alpha=1.0
        )["tokens"]
        assert target_tokenizer.detokenize(tokens).numpy()[0].decode() == hypothesis


@pytest.fixture(scope="module")
def exported_version(tiny_run, tmp_path_factory):
    """The tiny run exported with its own decoding options: the only version of its model
    directory, which the evaluations below add their `eval/` folder to."""
    return export_run(tiny_run["run_dir"], export_base=str(tmp_path_factory.mktemp("exports")))


@pytest.mark.parametrize("beam_width", [1, 4], ids=["greedy", "beam4"])
def test_an_export_and_its_run_translate_the_test_split_identically(
    tiny_run, exported_version, tmp_path, beam_width
):
    """The BLEU the project reports is the BLEU of what TF Serving serves."""
    version_dir = exported_version
    from_run = evaluate(
        tiny_run["run_dir"], "test", beam_width=beam_width, output_dir=str(tmp_path / "run")
    )
    from_export = evaluate(export_dir=version_dir, split="test", beam_width=beam_width)
    stem = f"test.{'greedy' if beam_width == 1 else 'beam4'}.hyp.txt"
    run_lines = (tmp_path / "run" / stem).read_text(encoding="utf-8").splitlines()
    export_eval = os.path.join(os.path.dirname(version_dir), "eval", os.path.basename(version_dir))
    export_lines = open(os.path.join(export_eval, stem), encoding="utf-8").read().splitlines()
    assert len(run_lines) == from_run["sentences"] == 40
    assert export_lines == run_lines
    assert from_export["bleu"] == from_run["bleu"] and from_export["chrf"] == from_run["chrf"]
    assert sorted(os.listdir(os.path.dirname(version_dir))) == ["1", "eval"]


def test_an_export_with_another_beam_width_is_refused(exported_version, capsys):
    assert main(["--export_dir", exported_version, "--beam_width", "3"]) == 1
    assert "exported with beam_width 4, not 3: re-export it with --beam_width 3" in (
        capsys.readouterr().err
    )


def test_repetition_controls_from_the_cli_decode_as_the_decoder_does(tiny_run, tmp_path, capsys):
    run_dir = tiny_run["run_dir"]
    controls = {"repetition_penalty": 1.5, "no_repeat_ngram_size": 1}
    flags = ["--repetition_penalty", "1.5", "--no_repeat_ngram_size", "1"]
    arguments = ["--run_dir", run_dir, "--limit", "6", "--batch_size", "1"]
    assert main([*arguments, *flags, "--output_dir", str(tmp_path)]) == 0
    assert "greedy, repetition_penalty 1.5, no_repeat_ngram_size 1" in capsys.readouterr().out
    hypotheses = (tmp_path / "test.greedy.hyp.txt").read_text(encoding="utf-8").splitlines()
    model, source_tokenizer, target_tokenizer, config = artifacts.load_trained(run_dir)
    for (source, _), hypothesis in zip(load_pairs(config["data"], "test")[:6], hypotheses):
        ids = tf.cast(source_tokenizer.tokenize(tf.constant([source])).to_tensor(), tf.int32)
        tokens = greedy_decode(model, ids, START_ID, END_ID, **controls)["tokens"]
        assert target_tokenizer.detokenize(tokens).numpy()[0].decode() == hypothesis
        pieces = [int(token) for token in tokens[0] if token not in (0, END_ID)]
        assert len(set(pieces)) == len(pieces)


def test_exports_bake_the_repetition_controls_that_evaluation_checks(tiny_run, tmp_path, capsys):
    from common.serving_contract import EXPORT_INFO_PATH
    from inference.export import main as export_main

    run_dir = tiny_run["run_dir"]
    rules = {"no_repeat_ngram_size": 2, "limit_placeholders": False}
    export_main(
        [
            *("--run_dir", run_dir, "--export_base", str(tmp_path)),
            *("--no_repeat_ngram_size", "2", "--limit_placeholders", "false"),
        ]
    )
    version_dir = capsys.readouterr().out.strip().splitlines()[-1]
    decoding = json.load(open(os.path.join(version_dir, EXPORT_INFO_PATH)))["decoding"]
    assert (decoding["no_repeat_ngram_size"], decoding["repetition_penalty"]) == (2, 1.0)
    assert decoding["limit_placeholders"] is False
    assert main(["--export_dir", version_dir, "--no_repeat_ngram_size", "3"]) == 1
    assert "exported with no_repeat_ngram_size 2, not 3" in capsys.readouterr().err
    assert main(["--export_dir", version_dir, "--limit_placeholders", "true"]) == 1
    assert "exported with limit_placeholders False, not True" in capsys.readouterr().err
    from_export = evaluate(export_dir=version_dir, split="test", **rules)
    from_run = evaluate(run_dir, "test", output_dir=str(tmp_path / "run"), **rules)
    plain = evaluate(run_dir, "test", output_dir=str(tmp_path / "plain"))
    assert from_export["decoding"] == from_run["decoding"]
    assert from_run["decoding"] == "greedy, no_repeat_ngram_size 2, placeholders not limited"
    assert from_export["bleu"] == from_run["bleu"] and plain["decoding"] == "greedy"


def test_a_bad_decoding_json_is_named(tiny_run, tmp_path, capsys):
    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run["run_dir"], run_dir)
    (run_dir / artifacts.DECODING_FILE).write_text('{"no_repeat_ngram_size": -1}')
    assert main(["--run_dir", str(run_dir), "--limit", "2"]) == 1
    error = capsys.readouterr().err
    assert str(run_dir / artifacts.DECODING_FILE) in error and "no_repeat_ngram_size" in error


def test_copy_rate_report_counts_the_unseen_names_and_numbers_translated(tiny_run, tmp_path):
    from tests.training.test_copying import VERSES
    from training.copying import NAMES, NUMBERS, copied, copy_rate_sets, corpus_words, proper_names
    from training.evaluate import evaluate_copy_rates, run_translate_function, translate

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    train, test = VERSES[:3], VERSES[3:] + VERSES[:1]
    for split, pairs in (("train", train), ("dev", test), ("test", test)):
        lines = "".join(f"{source}\t{target}\n" for source, target in pairs)
        (corpus / f"{split}.tsv").write_text(lines, encoding="utf-8")
    report = evaluate_copy_rates(
        tiny_run["run_dir"], "test", data=str(corpus), output_dir=str(tmp_path / "eval")
    )
    sets = copy_rate_sets(test, proper_names(train + test), excluded_words=corpus_words(train))
    translate_batch, _ = run_translate_function(tiny_run["run_dir"])
    for kind in (NAMES, NUMBERS):
        translations = translate([s for s, _ in sets[kind]], translate_batch, show_progress=False)
        hits = sum(copied(out, value) for out, (_, value) in zip(translations, sets[kind]))
        assert report[kind]["sentences"] == len(sets[kind]) > 0
        assert report[kind]["copied"] == hits
    written = json.loads((tmp_path / "eval" / "test.greedy.copy.report.json").read_text())
    assert written[NAMES] == json.loads(json.dumps(report[NAMES]))


def test_missing_run_directory_is_a_clear_error(tmp_path, capsys):
    assert main(["--run_dir", str(tmp_path / "missing")]) == 1
    assert "is not a training run directory" in capsys.readouterr().err


@pytest.mark.parametrize(
    "hypothesis, source, looping",
    [
        ("AOOOOOOOOOOOOOOOOOOOO", "DIOS ES AMOR", True),
        ("the the the the lord", "el señor", True),
        ("the the the lord", "el señor", False),
        ("and the LORD and the LORD said and the LORD", "y Jehová dijo", True),
        ("and the LORD said and the LORD", "y Jehová dijo", False),
        ("where my brother was this,", "donde esta mi hermano", False),
        ("Holy, holy, holy, holy is the LORD", "Santo, santo, santo, santo es Jehová", False),
        ("Holy, holy, holy, holy is the LORD", "Santo es Jehová", True),
        ("a thousand thousand", "mil millares", False),
    ],
)
def test_looping_outputs_are_repeats_the_source_does_not_have(hypothesis, source, looping):
    assert is_looping(hypothesis, source) is looping


def test_perturbed_evaluation_scores_perturbed_sources_against_unchanged_references(
    tiny_run, tmp_path, capsys
):
    """`--perturb all`: one report per perturbation, named by it; the hypotheses are the
    translations of the perturbed sources; the table lists each."""
    assert (
        main(
            [
                "--run_dir",
                tiny_run["run_dir"],
                "--perturb",
                "all",
                "--limit",
                "12",
                "--output_dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    config = artifacts.read_config(tiny_run["run_dir"])
    pairs = load_pairs(config["data"], "test")[:12]
    references = [target for _, target in pairs]
    for name in ["none", *PERTURBATIONS]:
        stem = "test.greedy" + ("" if name == "none" else f".{name}")
        report = json.loads((tmp_path / f"{stem}.report.json").read_text())
        hypotheses = (tmp_path / f"{stem}.hyp.txt").read_text(encoding="utf-8").splitlines()
        assert report["perturbation"] == name and report["sentences"] == 12
        assert report["bleu"] == round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2)
        assert (
            f"| {name} | {report['bleu']:.2f} | {report['chrf']:.2f} | "
            f"{100 * report['looping']:.1f}% ({report['looping_sentences']}) | "
            f"{100 * report['made_up_rate']:.1f}% ({report['made_up_words']}) |"
        ) in out
    # The toy corpus is lowercase and unpunctuated: uppercase is the perturbation that bites.
    clean = (tmp_path / "test.greedy.hyp.txt").read_text(encoding="utf-8").splitlines()
    upper = (tmp_path / "test.greedy.uppercase.hyp.txt").read_text(encoding="utf-8").splitlines()
    assert clean != upper
    perturbed = evaluate(
        tiny_run["run_dir"], "test", limit=12, output_dir=str(tmp_path / "one"), perturb="uppercase"
    )
    assert (
        perturbed["bleu"]
        == json.loads((tmp_path / "test.greedy.uppercase.report.json").read_text())["bleu"]
    )
    upper_sources = [source.upper() for source, _ in pairs]
    from training.evaluate import run_translate_function, translate

    translate_batch, _ = run_translate_function(tiny_run["run_dir"])
    assert translate(upper_sources, translate_batch, show_progress=False) == upper


def test_changed_only_scores_every_row_on_the_pairs_a_perturbation_changes(tiny_run, tmp_path):
    from training.evaluate import _changed_pairs
    from training.noise import perturbation

    pairs = [("Fue a Belén.", "a"), ("casa", "b"), ("Bethlehem", "c")]
    functions = [perturbation("modern_names"), perturbation("no_final_punct")]
    assert _changed_pairs(pairs, functions) == [pairs[0], pairs[2]]
    assert _changed_pairs(pairs, [perturbation("modern_names")]) == [pairs[2]]

    arguments = ["--run_dir", tiny_run["run_dir"], "--limit", "5", "--output_dir", str(tmp_path)]
    assert main([*arguments, "--perturb", "none,uppercase", "--changed_only"]) == 0
    for stem in ("test.greedy.changed", "test.greedy.uppercase.changed"):
        report = json.loads((tmp_path / f"{stem}.report.json").read_text())
        assert report["changed_only"] and report["sentences"] == 5
    assert _changed_pairs(pairs[1:2], functions) == []  # then evaluate refuses: nothing to score


def test_an_unknown_perturbation_is_a_clear_error(tiny_run, capsys):
    assert main(["--run_dir", tiny_run["run_dir"], "--perturb", "shout"]) == 1
    assert "unknown perturbation 'shout'" in capsys.readouterr().err


def test_evaluating_a_bundle_leaves_its_files_as_they_are(tiny_run, tmp_path, monkeypatch, capsys):
    bundle = tmp_path / "pretrained" / "tiny-es-en"
    shutil.copytree(tiny_run["run_dir"], bundle)
    (bundle / artifacts.BUNDLE_CARD_FILE).write_text("# model card\n", encoding="utf-8")
    (bundle / "eval").mkdir(exist_ok=True)
    (bundle / "eval" / "test.greedy.report.json").write_text('{"bleu": 31.67}\n')

    def contents():
        return {
            path.relative_to(bundle): path.read_bytes()
            for path in sorted(bundle.rglob("*"))
            if path.is_file()
        }

    before = contents()
    monkeypatch.chdir(tmp_path)
    assert main(["--run_dir", str(bundle), "--limit", "3"]) == 0
    assert contents() == before
    report = json.loads((tmp_path / "runs/eval/tiny-es-en/test.greedy.report.json").read_text())
    assert report["sentences"] == 3 and report["run_dir"] == "tiny-es-en"
    assert "3 sentences, greedy" in capsys.readouterr().out
