"""benchmarks/profile_translate_call.py: a section with a row per part of one call, in its area,
the parts adding up to the whole."""

import re
import shutil

import pytest

from tests.benchmarks.test_report import (
    RESULTS_PAGE,
    area_around,
    read_results_page,
    section_text,
)


@pytest.mark.large
def test_profile_translate_call_writes_the_parts_of_one_call(tmp_path):
    from benchmarks.profile_translate_call import SECTION
    from benchmarks.profile_translate_call import main as profile_translate_call

    output = tmp_path / "BENCHMARKS.md"
    shutil.copyfile(RESULTS_PAGE, output)
    profile_translate_call(["--sentences", "16", "--rounds", "1", "--output", str(output)])
    text = output.read_text(encoding="utf-8")
    written = section_text(text, SECTION)
    assert area_around(text, SECTION) == "Translating files"
    assert text.replace(written, "") == read_results_page().replace(
        section_text(read_results_page(), SECTION), ""
    )
    assert "first 16 everyday test sentences" in written
    seconds = [float(value) for value in re.findall(r"^\| [^|]+ \| (-?[0-9.]+) \|", written, re.M)]
    whole, repair, source_side, rest = seconds
    # The parts are the whole: the repair, the source side and the rest add up to it.
    assert repair + source_side + rest == pytest.approx(whole, abs=0.002)
    assert whole > 0 and source_side > 0 and rest > 0
