"""benchmarks/profile_translate_call.py: a section with a row per part of one call, in its area,
the parts adding up to the whole."""

import re

import pytest

from tests.benchmarks.test_report import section_written_by


@pytest.mark.large
def test_profile_translate_call_writes_the_parts_of_one_call(tmp_path):
    from benchmarks.profile_translate_call import SECTION
    from benchmarks.profile_translate_call import main as profile_translate_call

    # Written into a copy of the results page: the section lands in its area, the rest stays.
    written = section_written_by(
        profile_translate_call,
        ["--sentences", "16", "--rounds", "1"],
        SECTION,
        "Translating files",
        tmp_path,
    )
    assert "first 16 everyday test sentences" in written
    seconds = [float(value) for value in re.findall(r"^\| [^|]+ \| (-?[0-9.]+) \|", written, re.M)]
    whole, repair, source_side, rest = seconds
    # The parts are the whole: the repair, the source side and the rest add up to it.
    assert repair + source_side + rest == pytest.approx(whole, abs=0.002)
    assert whole > 0 and source_side > 0 and rest > 0


@pytest.mark.large
def test_profile_translate_call_compares_each_batch_with_ctranslate2(tmp_path):
    from benchmarks.profile_translate_call import SECTION
    from benchmarks.profile_translate_call import main as profile_translate_call

    written = section_written_by(
        profile_translate_call,
        ["--sentences", "8", "--rounds", "1", "--peer_lines", "600"],
        SECTION,
        "Translating files",
        tmp_path,
    )
    rows = re.findall(
        r"^\| (\d+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+)× \|$",
        written,
        re.M,
    )
    total = re.search(
        r"^\| all (\d+) \| \| \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+)× \|$", written, re.M
    )
    assert len(rows) >= 2 and total, written
    # Every line in one batch, shortest first (translate-text's batches).
    assert sum(int(row[0]) for row in rows) == int(total[1]) == 600
    sources = [float(row[1]) for row in rows]
    assert sources == sorted(sources)
    for *_, ours, theirs, ratio in rows:
        assert float(ratio) == pytest.approx(float(ours) / float(theirs), abs=0.006)
    assert float(total[2]) == pytest.approx(
        sum(float(row[3]) for row in rows), abs=0.002 * len(rows)
    )
