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
