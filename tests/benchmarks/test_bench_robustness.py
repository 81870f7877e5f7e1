"""benchmarks/bench_robustness.py: a section with a row per perturbation."""

import json
import shutil

from tests.benchmarks.test_report import (
    RESULTS_PAGE,
    area_around,
    read_results_page,
    section_text,
)


def test_bench_robustness_writes_a_section_with_a_row_per_perturbation(tiny_run, tmp_path):
    from benchmarks.bench_robustness import main as bench_robustness
    from training.noise import PERTURBATIONS

    # Written into a copy of the results page: the section lands in its area, the rest stays.
    output = tmp_path / "BENCHMARKS.md"
    shutil.copyfile(RESULTS_PAGE, output)
    section = "Robustness to how people type: a run of mine"
    argv = ["--run_dir", tiny_run["run_dir"], "--limit", "4", "--output", str(output)]
    bench_robustness([*argv, "--section", section])
    text = output.read_text(encoding="utf-8")
    written = section_text(text, section)
    assert "the 4 sentences of its test split" in written
    assert area_around(text, section) == "Translation quality"
    assert text.replace(written, "") == read_results_page()
    # The command as a shell runs it: the section title quoted.
    assert f"--section '{section}'`." in text
    for name in ["none", *PERTURBATIONS]:
        report = json.loads(
            open(
                f"{tiny_run['run_dir']}/eval/test.greedy"
                + ("" if name == "none" else f".{name}")
                + ".report.json"
            ).read()
        )
        assert f"| {name} | {report['bleu']:.2f} | {report['chrf']:.2f} |" in text
    copy_report = json.loads(
        open(f"{tiny_run['run_dir']}/eval/test.greedy.copy.report.json").read()
    )
    for kind in ("names", "numbers"):
        rates = copy_report[kind]
        assert f"| {kind} | {rates['sentences']} | {100 * rates['rate']:.1f}% |" in text
