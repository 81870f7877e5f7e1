"""benchmarks/report.py: each benchmark rewrites its own section of the results page, in its area."""

import os
import re
import shutil

import pytest

from benchmarks import bench_decode, bench_serve
from tests.paths import REPO_ROOT

RESULTS_PAGE = os.path.join(str(REPO_ROOT), "BENCHMARKS.md")
SECTION_HEADING = re.compile(r"^(#{2,3}) (.+?)[ \t]*$", re.M)


def read_results_page():
    with open(RESULTS_PAGE, encoding="utf-8") as handle:
        return handle.read()


def section_text(text, title):
    """The section `title` of a results page, from its heading to the next heading of its level
    or above, found independently of benchmarks.report."""
    headings = list(SECTION_HEADING.finditer(text))
    (found,) = [match for match in headings if match.group(2) == title]
    level = len(found.group(1))
    ends = [
        match.start()
        for match in headings
        if match.start() > found.start() and len(match.group(1)) <= level
    ]
    return text[found.start() : ends[0] if ends else len(text)]


def area_around(text, title):
    """The `## ` area whose part of the page holds the `### ` section `title`."""
    area = None
    for match in SECTION_HEADING.finditer(text):
        if match.group(1) == "##":
            area = match.group(2)
        elif match.group(2) == title:
            return area
    raise AssertionError(f"no ### {title} in the page")


def section_written_by(run, arguments, title, area, tmp_path):
    """Runs a benchmark's `main` (`run`) with `arguments` and `--output` a copy of the results
    page, checks that its section `title` lands in `area` and that the rest of the page stays as
    it was; returns the section."""
    output = tmp_path / "BENCHMARKS.md"
    shutil.copyfile(RESULTS_PAGE, output)
    run([*arguments, "--output", str(output)])
    text = output.read_text(encoding="utf-8")
    written = section_text(text, title)
    assert area_around(text, title) == area
    assert text.replace(written, "") == read_results_page().replace(
        section_text(read_results_page(), title), ""
    )
    return written


def test_write_section_replaces_its_section_of_the_results_page_and_nothing_else(tmp_path):
    from benchmarks.report import write_section

    page = read_results_page()
    output = tmp_path / "BENCHMARKS.md"
    output.write_text(page, encoding="utf-8")
    old = section_text(page, "Decoding")
    write_section(str(output), "Decoding", "A new table.\n")
    text = output.read_text(encoding="utf-8")
    # Same heading level, same place in its area; every other byte of the page as it was.
    assert section_text(text, "Decoding") == "### Decoding\n\nA new table.\n\n"
    assert area_around(text, "Decoding") == "Decoding speed"
    assert text == page.replace(old, "### Decoding\n\nA new table.\n\n")
    # A section's own subsections (`#### `) go with it.
    presets = "Training: the presets on the embedded corpus"
    old = section_text(text, presets)
    assert "\n#### `small`\n" in old
    write_section(str(output), presets, "Two presets.")
    assert output.read_text(encoding="utf-8") == text.replace(
        old, f"### {presets}\n\nTwo presets.\n\n"
    )


def test_write_section_puts_a_new_section_at_the_end_of_its_area(tmp_path):
    from benchmarks.report import write_section

    page = read_results_page()
    output = tmp_path / "BENCHMARKS.md"
    output.write_text(page, encoding="utf-8")
    write_section(str(output), "Everyday sentences: another-model", "Its table.")
    text = output.read_text(encoding="utf-8")
    quality = section_text(text, "Translation quality")
    assert quality.endswith("### Everyday sentences: another-model\n\nIts table.\n\n")
    assert text.replace("### Everyday sentences: another-model\n\nIts table.\n\n", "") == page
    # A title of no area goes at the end, as its own `## ` part; an area's title is refused.
    write_section(str(output), "Something else", "Its text.")
    assert output.read_text(encoding="utf-8").endswith("\n## Something else\n\nIts text.\n")
    with pytest.raises(ValueError, match="an area"):
        write_section(str(output), "Training", "Would replace the whole area.")


def test_write_section_starts_a_page_with_the_area_of_its_first_section(tmp_path):
    from benchmarks.report import write_section

    output = tmp_path / "BENCHMARKS.md"
    write_section(str(output), "Decoding", "Decoders.")
    write_section(str(output), "Robustness to how people type: x", "Scores.")
    write_section(str(output), "Decoding cost as work grows", "Curves.")
    text = output.read_text(encoding="utf-8")
    assert text.startswith("# Benchmarks\n")
    assert [match.group(0) for match in SECTION_HEADING.finditer(text)] == [
        "## Decoding speed",
        "### Decoding",
        "### Decoding cost as work grows",
        "## Translation quality",
        "### Robustness to how people type: x",
    ]


def test_every_benchmark_writes_into_an_area_of_the_results_page():
    from benchmarks import (
        bench_everyday,
        bench_length,
        bench_memory_limit,
        bench_robustness,
        bench_soak,
        bench_tokenizer,
        bench_translate,
    )
    from benchmarks.report import AREAS, area_of

    page = read_results_page()
    # The page: the summary, then the areas in order, each `###` section in the area it belongs
    # to, so that a benchmark rerun replaces it in place.
    areas = [match.group(2) for match in SECTION_HEADING.finditer(page) if match.group(1) == "##"]
    assert areas == ["Current figures", *[area for area, _ in AREAS]]
    for match in SECTION_HEADING.finditer(page):
        if match.group(1) == "###":
            assert area_of(match.group(2)) == area_around(page, match.group(2)), match.group(2)
    # Every benchmark's default section has an area (profile_decode, sweep_recipe and bench_train
    # build theirs in place: "Op profile: <signature>, batch <n>", "Training recipe sweep[, preset]").
    defaults = [
        bench_decode.SECTION_TITLE,
        bench_length.SECTION_TITLE,
        bench_memory_limit.SECTION,
        bench_serve.SECTION,
        bench_soak.SECTION,
        bench_tokenizer.SECTION_TITLE,
        bench_translate.SECTION,
        bench_robustness.default_section("pretrained/bible-es-en"),
        f"{bench_everyday.SECTION_PREFIX}: bible-es-en",
        "Op profile: beam_search, batch 32",
        "Training recipe sweep, demo",
        "Training pipeline",
        "Training step: XLA and bfloat16",
    ]
    assert [title for title in defaults if area_of(title) is None] == []
    assert bench_robustness.default_section("runs/mine/") == "Robustness to how people type: mine"
