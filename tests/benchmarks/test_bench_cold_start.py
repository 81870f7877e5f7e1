"""benchmarks/bench_cold_start.py: the parts of a cold start, timed in fresh processes of a real
run, and the section it writes."""

import shutil

import pytest

from tests.benchmarks.test_report import RESULTS_PAGE, section_text


@pytest.mark.large
def test_a_cold_start_is_timed_part_by_part_and_as_the_whole_command(tiny_run, tmp_path):
    from benchmarks.bench_cold_start import FIRST_START, LINES, PARTS, SECTION, main

    output = tmp_path / "BENCHMARKS.md"
    shutil.copyfile(RESULTS_PAGE, output)
    # A copy: the starts keep their traced translation in the run directory, which is shared.
    run_dir = str(tmp_path / "run")
    shutil.copytree(tiny_run["run_dir"], run_dir)
    assert main(["--model", run_dir, "--repeats", "1", "--beam_widths", "1,2",
                 "--baseline_root", ".", "--output", str(output)]) == 0  # fmt: skip
    written = section_text(output.read_text(encoding="utf-8"), SECTION)
    assert f"{len(LINES)} typed lines" in written and "--baseline_root BASELINE_CHECKOUT" in written
    rows = [line for line in written.splitlines() if line.startswith("| this tree |")]
    assert [row.split(" | ")[1] for row in rows] == ["greedy", "beam 2"]
    for row in rows:
        seconds = [float(cell.strip(" *s|")) for cell in row.split(" | ")[2:]]
        assert len(seconds) == len(PARTS) + 2 and all(value >= 0 for value in seconds)
        # The first translation after the import: project imports, load and first call.
        assert seconds[-2] == pytest.approx(sum(seconds[1:4]), abs=0.02)
        assert seconds[3] > seconds[4] / (len(LINES) - 1)  # the first call traces: the slowest
    assert "| greedy |" in written and "| beam 2 |" in written
    first_starts = [line for line in written.splitlines() if line.startswith(f"| {FIRST_START} |")]
    assert [row.split(" | ")[1] for row in first_starts] == ["greedy", "beam 2"]
    assert "The translations of every run of every checkout: the same, byte for byte." in written
    tools = [line for line in written.splitlines() if line.startswith("| `")]
    assert [row.split(" | ")[0] for row in tools] == [
        "| `python -m training.evaluate`",
        "| `translate-score`",
    ]
    for row in tools:
        kept, traced = (float(cell.strip(" s|")) for cell in row.split(" | ")[1:])
        assert 0 < kept and 0 < traced


def test_the_breakdown_child_times_what_translate_text_does_before_its_first_line():
    from benchmarks.bench_cold_start import _BREAKDOWN

    assert "from inference.translate_text import load_signature" in _BREAKDOWN
    compile(_BREAKDOWN, "breakdown", "exec")
