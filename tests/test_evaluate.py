"""Evaluation: translations from the trained run, scored with sacreBLEU."""

import json
import os

import numpy as np
import sacrebleu
import tensorflow as tf

from model.decoding import greedy_decode
from training import artifacts
from training.corpus import load_pairs
from training.evaluate import evaluate, main
from model.special_tokens import END_ID, START_ID


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


def test_hypotheses_are_the_models_greedy_translations(tiny_run, tmp_path):
    """Independent path: tokenize, decode and detokenize one sentence at a time."""
    run_dir = tiny_run["run_dir"]
    evaluate(run_dir, "test", limit=5, batch_size=2, output_dir=str(tmp_path))
    hypotheses = (tmp_path / "test.greedy.hyp.txt").read_text(encoding="utf-8").splitlines()
    model, source_tokenizer, target_tokenizer, config = artifacts.load_trained(run_dir)
    for (source, _), hypothesis in zip(load_pairs(config["data"], "test")[:5], hypotheses):
        ids = source_tokenizer.tokenize(tf.constant([source])).to_tensor()
        tokens = greedy_decode(model, tf.cast(ids, tf.int32), START_ID, END_ID)["tokens"]
        assert target_tokenizer.detokenize(tokens).numpy()[0].decode() == hypothesis


def test_beam_search_evaluation_and_cli(tiny_run, tmp_path, capsys):
    assert main(["--run_dir", tiny_run["run_dir"], "--beam_width", "3", "--limit", "8",
                 "--output_dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "BLEU" in out and "chrF" in out and "beam 3" in out
    report = json.loads((tmp_path / "test.beam3.report.json").read_text())
    assert report["sentences"] == 8 and np.isfinite(report["bleu"])


def test_missing_run_directory_is_a_clear_error(tmp_path, capsys):
    assert main(["--run_dir", str(tmp_path / "missing")]) == 1
    assert "is not a training run directory" in capsys.readouterr().err
