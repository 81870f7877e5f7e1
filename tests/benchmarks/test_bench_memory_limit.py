"""benchmarks/bench_memory_limit.py: a section with a row per limit and probe, in its area, the
good calls lost and the stated bound (the toy model served: three servers start)."""

import pytest

from tests.benchmarks.test_report import section_written_by


@pytest.mark.large
def test_bench_memory_limit_writes_a_section_with_a_row_per_limit_and_probe(exports, tmp_path):
    from benchmarks.bench_memory_limit import ADDRESS_SPACE, CGROUP, SECTION, probes
    from benchmarks.bench_memory_limit import main as bench_memory_limit

    # Written into a copy of the results page: the section lands in its area, the rest stays.
    written = section_written_by(
        bench_memory_limit,
        ["--export_dir", exports[1], "--warm_calls", "2"],
        SECTION,
        "Serving performance",
        tmp_path,
    )
    assert "Command: `python -m benchmarks.bench_memory_limit --export_dir " in written
    # The probes' names do not depend on the budget.
    names = [probe.name for probe in probes("translator", 1)]
    for kind in (ADDRESS_SPACE, CGROUP):
        if f"- {kind}: not measured, no such limit can be set here" in written:
            continue
        rows = [line for line in written.splitlines() if line.startswith(f"| {kind}, ")]
        assert [row.split(" | ")[1] for row in rows] == names
        assert f"- {kind} of " in written
    assert written.count("good calls lost: **0** of ") == 2 - written.count("not measured")
    assert "(`MARGIN_BYTES`): met under every probe." in written
