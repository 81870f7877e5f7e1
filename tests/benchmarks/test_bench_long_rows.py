"""benchmarks/bench_long_rows.py: a section with a row per kind of 64 rows, in its area."""

import pytest

from tests.benchmarks.test_report import section_written_by


@pytest.mark.large
def test_bench_long_rows_writes_a_section_with_a_row_per_kind(tmp_path):
    from benchmarks.bench_long_rows import CUT, EVERYDAY, LONG, SECTION
    from benchmarks.bench_long_rows import main as bench_long_rows

    # Written into a copy of the results page: the section lands in its area, the rest stays.
    written = section_written_by(
        bench_long_rows, ["--rounds", "1"], SECTION, "Serving performance", tmp_path
    )
    assert "Command: `python -m benchmarks.bench_long_rows --rounds 1 --output " in written
    for kind in (EVERYDAY, LONG, CUT):
        assert f"| {kind} | " in written
    assert "what the model reads of them does." in written
