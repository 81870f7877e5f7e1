"""benchmarks/bench_translate.py: the files it translates, throughput and peak memory, lines
counted."""

import os

import pytest


def test_bench_translate_repeats_the_sources_with_each_variation_in_turn():
    from benchmarks.bench_translate import generated_lines

    sources = ["Hola, amigo.", "¿Dónde?"]
    assert generated_lines(sources, 9) == [
        "Hola, amigo.",
        "¿Dónde?",
        "hola, amigo.",
        "¿dónde?",
        "Hola, amigo",
        "¿Dónde",
        "Hola",
        "¿Dónde?",
        "Hola, amigo.",
    ]


def test_bench_translate_reports_throughput_past_start_up_and_the_growth_of_peak_memory():
    from benchmarks.bench_translate import markdown

    mib = 2**20
    body = markdown("pretrained/bible-es-en", [(500, 35.0, 1200 * mib), (2000, 65.0, 1210 * mib)],
                    500, "cmd")  # fmt: skip
    assert "| 500 | 35.0 | 14.3 | 1200 |" in body and "| 2,000 | 65.0 | 30.8 | 1210 |" in body
    assert "Past start-up (the difference of the two runs): 50.0 sentences/s" in body
    assert "Peak RSS from 500 to 2,000 lines: +10 MiB." in body


def test_bench_translate_reads_the_test_splits_of_every_corpus_a_mixed_run_trained_on(tmp_path):
    """The bundle trains on a mix (`bible:1,catalogs:1,...`): its data spec is several corpora,
    not one."""
    import json

    from benchmarks.bench_translate import run_test_sources
    from training.toy_corpus import ES_EN_OFFICE, write_corpus

    house = write_corpus(tmp_path / "house", dev=5, test=6)
    office = write_corpus(tmp_path / "office", train=20, dev=5, test=4, glossary=ES_EN_OFFICE)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps({"data": f"{house}:1,{office}:0.5"}))
    test_sources = [
        line.split("\t")[0]
        for corpus in (house, office)
        for line in (corpus / "test.tsv").read_text(encoding="utf-8").splitlines()
    ]
    assert run_test_sources(str(run_dir)) == test_sources
    assert len(test_sources) == 10


def test_bench_translate_counts_written_lines_incrementally_across_appends(tmp_path):
    from benchmarks.bench_translate import ProgressSampler

    output = tmp_path / "out.txt"
    sampler = ProgressSampler(os.getpid(), str(output), seconds=60)
    assert sampler.lines_written() == 0  # not created yet
    output.write_bytes(b"one\ntwo\nhalf")
    assert sampler.lines_written() == 2
    with open(output, "ab") as handle:
        handle.write(b" a line\n\nfour\n")
    assert sampler.lines_written() == 5
    assert sampler.lines_written() == 5


@pytest.mark.large
def test_bench_translate_puts_ctranslate2_and_apertium_beside_translate_text(tiny_run, tmp_path):
    """`--peers`: every system translates every line of both files, each in a process of its
    own; the CTranslate2 children load no TensorFlow (a peak far below translate-text's)."""
    from benchmarks.bench_translate import PEERS_SECTION, TRANSLATE_TEXT, compare, peers_markdown
    from tests.apertium_fixtures import require_apertium

    require_apertium()

    directory = tmp_path / "work"
    directory.mkdir()
    results = compare(tiny_run["run_dir"], [8, 24], 1, 1000, str(directory))
    systems = list(results)
    assert systems[:3] == [TRANSLATE_TEXT, "CTranslate2 float32", "CTranslate2 int8"]
    assert systems[3].startswith("Apertium ") and len(systems) == 4
    for runs in results.values():
        assert [lines for lines, _, _ in runs] == [8, 24]
        assert all(seconds > 0 and peak > 0 for _, seconds, peak in runs)
    ours = max(peak for _, _, peak in results[TRANSLATE_TEXT])
    assert max(peak for _, _, peak in results["CTranslate2 float32"]) < ours / 2
    text = peers_markdown(tiny_run["run_dir"], results, 1, "cmd")
    for system in systems:
        assert f"| {system} | " in text
    assert "against CTranslate2 float32 on the 24-line file" in text
    assert PEERS_SECTION.startswith("Translating a file offline")
