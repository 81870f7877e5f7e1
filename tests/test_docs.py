"""The docs' commands run as written, their links lead somewhere, and a measured figure has one home.

Every shell command in the Markdown docs (fenced and indented code blocks, inline code) must call
the venv's programs by path: `.venv/bin/python -m MODULE` with a MODULE of this repository,
`.venv/bin/tensorboard`, `.venv/bin/translate-NAME` with a NAME of pyproject.toml's
[project.scripts] (or a `make` target). A bare `python`, `tensorboard` or `translate-*` gives
"No module named 'tensorflow'" or "command not found" in a shell where the venv is not active.

Every relative Markdown link (and image) of the docs points to a file of the repository and, with
a `#fragment`, to a heading of that file under GitHub's anchor rule. A measured figure (a ratio
such as `3.2×`, a percentage, a score such as `31.67`) written in BENCHMARKS.md appears in no other
doc: they link to its section instead.
"""

import datetime
import glob
import json
import os
import re
import tomllib

import pytest

from training.bundle import model_card

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# BENCHMARKS.md, the results page, quotes each benchmark's own command line as the benchmark
# wrote it (`python -m ...`): its links are checked, and that its modules and make targets exist.
# Its history, docs/benchmark-log.md, quotes commands as they ran then: its links are checked.
BENCHMARKS = "BENCHMARKS.md"
BENCHMARK_LOG = "docs/benchmark-log.md"
DOCS = [
    "README.md",
    "CONTRIBUTING.md",
    "serving/DEPLOY.md",
    "training/CORPUS.md",
    "pretrained/es-en/README.md",
    *sorted(
        os.path.relpath(path, ROOT)
        for path in glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
        if os.path.relpath(path, ROOT) != BENCHMARK_LOG
    ),
]
LINKED_DOCS = [*DOCS, BENCHMARKS, BENCHMARK_LOG]

FENCED = re.compile(r"^ {0,3}```[^\n]*\n(.*?)^ {0,3}```", re.MULTILINE | re.DOTALL)
INDENTED = re.compile(r"(?:(?<=\n\n)|\A)((?: {4}[^\n]*\n)+)")
INLINE = re.compile(r"`([^`]+)`")
# A program name at the start of a word, not after a path (`.venv/bin/`) or inside a name.
NOT_A_PATH = r"(?<![\w/.-])"
BARE = {
    "python": re.compile(NOT_A_PATH + r"python3?(?=\s)"),
    "tensorboard": re.compile(NOT_A_PATH + r"tensorboard(?=\s|$)"),
    "translate-*": re.compile(NOT_A_PATH + r"translate-[\w-]+"),
}
MODULE = re.compile(r"python3?\s+-m\s+([\w.]+)")
# `make TARGET`, after any VARIABLE=value arguments; `make -C ...` and the like are not checked.
MAKE = re.compile(r"(?<![\w./-])make[ \t]+(?:\w+=\S*[ \t]+)*([A-Za-z][\w.-]*)(?![\w.-]|=)")
MAKE_RULE = re.compile(r"^([A-Za-z0-9][\w.-]*)[ \t]*:(?!=)", re.MULTILINE)
SCRIPT = re.compile(r"(?<![\w-])(translate-[\w-]+)")


def code_spans(text):
    """`(offset, code)` of every fenced block, indented block and inline code span of `text`."""
    spans = [(match.start(1), match.group(1)) for match in FENCED.finditer(text)]
    prose = FENCED.sub(lambda match: " " * len(match.group()), text)  # offsets kept
    spans += [(match.start(1), match.group(1)) for match in INDENTED.finditer(prose)]
    spans += [(match.start(1), match.group(1)) for match in INLINE.finditer(prose)]
    return spans


def module_exists(name):
    path = os.path.join(ROOT, *name.split("."))
    return os.path.isfile(path + ".py") or os.path.isfile(os.path.join(path, "__main__.py"))


def makefile_targets():
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as handle:
        return set(MAKE_RULE.findall(handle.read()))


def declared_scripts():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as handle:
        return set(tomllib.load(handle)["project"]["scripts"])


def command_problems(text, name, bare_programs=True):
    """`NAME:LINE: problem` for each command of `text` that would not run as written: a module,
    script or make target that does not exist and, unless `bare_programs` is false (a command
    quoted as a benchmark wrote it), a program that a fresh shell would not find."""
    scripts, targets = declared_scripts(), makefile_targets()
    problems = []
    for offset, code in code_spans(text):
        code = code.replace("\\\n", " ")  # continued lines: one command

        def report(where, problem):
            line = text.count("\n", 0, offset + where) + 1
            problems.append(f"{name}:{line}: {problem}")

        for kind, pattern in BARE.items() if bare_programs else ():
            for match in pattern.finditer(code):
                report(match.start(), f"bare {kind}: {match.group()!r} (use .venv/bin/...)")
        for match in MODULE.finditer(code):
            if not module_exists(match.group(1)):
                report(match.start(), f"no module {match.group(1)!r} in this repository")
        for match in SCRIPT.finditer(code):
            if match.group(1) not in scripts:
                report(match.start(), f"{match.group(1)!r} is not in [project.scripts]")
        for match in MAKE.finditer(code):
            if match.group(1) not in targets:
                report(match.start(), f"no make target {match.group(1)!r} in the Makefile")
    return problems


@pytest.mark.parametrize("doc", DOCS)
def test_every_command_runs_as_written_in_a_fresh_shell(doc):
    with open(os.path.join(ROOT, doc), encoding="utf-8") as handle:
        text = handle.read()
    assert command_problems(text, doc) == []


def test_every_command_of_the_results_page_names_a_module_and_a_make_target_that_exist():
    with open(os.path.join(ROOT, BENCHMARKS), encoding="utf-8") as handle:
        text = handle.read()
    assert command_problems(text, BENCHMARKS, bare_programs=False) == []


def test_the_model_card_template_writes_runnable_commands():
    report = {
        "decoding": "greedy",
        "bleu": 1.0,
        "chrf": 2.0,
        "sentences": 3,
        "bleu_signature": "nrefs:1",
        "chrf_signature": "nrefs:1",
    }
    card = model_card({"preset": "small"}, "model.keras", [report], "make pretrained", 2**20)
    assert command_problems(card, "model card") == []
    # The committed card's commands are the template's.
    with open(os.path.join(ROOT, "pretrained/es-en/README.md"), encoding="utf-8") as handle:
        committed = handle.read()

    def use_section(text):
        return text.split("## Use\n", 1)[1].split("\n## ", 1)[0]

    assert ".venv/bin/python -m training.evaluate" in use_section(card)
    assert use_section(committed) == use_section(card)


@pytest.mark.parametrize(
    "snippet, problem",
    [
        ("`python -m training.train --help`", "doc:3: bare python"),
        ("```bash\nmake data\npython3 -m serving.client 'Hola'\n```", "doc:5: bare python"),
        ("`tensorboard --logdir runs/`", "doc:3: bare tensorboard"),
        ("    translate-serve --port=8500\n", "doc:3: bare translate-*"),
        ("`.venv/bin/python -m training.no_such`", "doc:3: no module 'training.no_such'"),
        ("`.venv/bin/translate-nothing --help`", "doc:3: 'translate-nothing' is not in"),
        ("`make bench-nothing`", "doc:3: no make target 'bench-nothing'"),
        ("`make data && make trian`", "doc:3: no make target 'trian'"),
        ("`make translate MODEL=x < in.txt` and `make TEST_WORKERS=0 test`", None),
        ("`PYTEST_ADDOPTS=-x make test-under-load`, `make -C docs html`", None),
        ("```\n.venv/bin/python -m serving.server \\\n  --port=0\n```", None),
        ("`.venv/bin/tensorboard --logdir runs/` and `.venv/bin/translate-train`", None),
    ],
)
def test_the_checker_finds_what_a_fresh_shell_cannot_run(snippet, problem):
    problems = command_problems("Some prose.\n\n" + snippet + "\n", "doc")
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problems[0].startswith(problem), problems


# A link's target: "](target)" outside code; a scheme (https:, mailto:) makes it external.
LINK = re.compile(r"\]\(([^()\s]+)\)")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
# A measurement as the docs write one: a ratio (3.2×, not the 2×128 of a shape), a percentage,
# or a score with two decimals (31.67, not a version such as 2.6.0).
FIGURE = re.compile(r"(?<![\w.,])(?:\d+(?:\.\d+)?×(?!\d)|\d+(?:\.\d+)?%|\d+\.\d{2,}(?!\.?\d))")


def without_code(text):
    """`text` with every code block and inline code span blanked out (offsets kept)."""
    spans = code_spans(text)
    chars = list(text)
    for offset, code in spans:
        for index in range(offset, offset + len(code)):
            if chars[index] != "\n":
                chars[index] = " "
    return "".join(chars)


def github_anchor(heading):
    """The anchor GitHub gives a heading: its text lowercased, without characters other than
    letters, digits, `_`, `-` and spaces, then spaces turned into hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").replace("*", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def heading_anchors(text):
    """Every anchor of `text`'s headings, GitHub's `-1`, `-2`, ... after repeated ones."""
    anchors, seen = set(), {}
    prose = FENCED.sub(lambda match: " " * len(match.group()), text)
    for match in HEADING.finditer(prose):
        anchor = github_anchor(match.group(1))
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        anchors.add(anchor if count == 0 else f"{anchor}-{count}")
    return anchors


def read_doc(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def link_problems(text, name, root=ROOT):
    """`NAME:LINE: problem` for each relative link of `text` (the doc `name`, relative to `root`)
    to a missing file, or to a heading its target file does not have."""
    problems = []
    prose = without_code(text)
    for match in LINK.finditer(prose):
        target = match.group(1)
        if EXTERNAL.match(target):
            continue
        line = text.count("\n", 0, match.start()) + 1
        path, _, fragment = target.partition("#")
        target_path = os.path.normpath(os.path.join(root, os.path.dirname(name), path))
        if path and not os.path.exists(target_path):
            problems.append(
                f"{name}:{line}: {target!r}: no file {os.path.relpath(target_path, root)}"
            )
            continue
        if fragment and fragment not in heading_anchors(read_doc(target_path) if path else text):
            problems.append(f"{name}:{line}: {target!r}: no heading #{fragment} there")
    return problems


@pytest.mark.parametrize("doc", LINKED_DOCS)
def test_every_relative_link_leads_to_a_file_and_a_heading(doc):
    assert link_problems(read_doc(os.path.join(ROOT, doc)), doc) == []


@pytest.mark.parametrize(
    "snippet, problem",
    [
        ("[the corpus](training/CORPUS.md)", None),
        ("[decoding](BENCHMARKS.md#decoding)", None),
        ("[model](docs/model.md#decoding-the-step-function-contract)", None),
        ("## Own heading\n\nSee [it](#own-heading).", None),
        ("[site](https://example.org/a.md) and `[code](missing.md)`", None),
        ("[gone](docs/no_such.md)", "doc.md:3: 'docs/no_such.md': no file docs/no_such.md"),
        ("![plot](docs/no_such.png)", "doc.md:3: 'docs/no_such.png': no file"),
        ("[x](BENCHMARKS.md#no-such-section)", "doc.md:3: 'BENCHMARKS.md#no-such-section': no"),
        ("## Own heading\n\n[it](#own_heading)", "doc.md:5: '#own_heading': no heading"),
    ],
)
def test_the_link_checker_finds_missing_files_and_headings(snippet, problem):
    # The snippet stands for a doc at the repository root, next to README.md (only the targets
    # of its links are read from disk).
    problems = link_problems("Some prose.\n\n" + snippet + "\n", "doc.md")
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problems[0].startswith(problem), problems


@pytest.mark.parametrize(
    "heading, anchor",
    [
        ("Serving the --jit_compile export (one-off)", "serving-the---jit_compile-export-one-off"),
        ("Op profile: beam_search, batch 32", "op-profile-beam_search-batch-32"),
        ("Typing perturbations: `--perturb`", "typing-perturbations---perturb"),
        (
            "Quickstart (a fresh machine: Python 3.11, no GPU needed)",
            "quickstart-a-fresh-machine-python-311-no-gpu-needed",
        ),
        ("The Spanish → English corpus", "the-spanish--english-corpus"),
        ("`--copy_rate`: [names](x.md) *never* seen", "--copy_rate-names-never-seen"),
    ],
)
def test_anchors_follow_githubs_rule(heading, anchor):
    assert github_anchor(heading) == anchor


def test_a_repeated_heading_gets_a_numbered_anchor():
    anchors = heading_anchors("# Serving\n\n## Serving\n\n```\n# Serving\n```\n\n### Serving\n")
    assert anchors == {"serving", "serving-1", "serving-2"}


def measured_figures(text):
    """The measurements written in `text`'s prose (code spans and blocks left out)."""
    return set(FIGURE.findall(without_code(text)))


@pytest.mark.parametrize("doc", [doc for doc in DOCS if not doc.startswith("pretrained/")])
def test_a_figure_of_benchmarks_md_is_written_nowhere_else(doc):
    """The model card is the bundle's own record of its scores, which the README's table shows.
    The benchmark log, BENCHMARKS.md's history, counts as BENCHMARKS.md."""
    recorded = measured_figures(read_doc(os.path.join(ROOT, BENCHMARKS))) | measured_figures(
        read_doc(os.path.join(ROOT, BENCHMARK_LOG))
    )
    repeated = measured_figures(read_doc(os.path.join(ROOT, doc))) & recorded
    assert sorted(repeated) == [], f"{doc} repeats BENCHMARKS.md: link its section instead"


@pytest.mark.parametrize(
    "snippet, figures",
    [
        ("3.2× faster, 14.1% padding, test BLEU 31.67.", {"3.2×", "14.1%", "31.67"}),
        ("the 2×128 model, sacreBLEU 2.6.0, TensorFlow 2.21.0", set()),
        ("`--lr_scale 0.70 --source_noise 0.35`\n\n```\n1.85×\n```", set()),
        ("a 8,000-piece vocabulary, α = 0.6, step 2,634", set()),
    ],
)
def test_measured_figures_are_ratios_percentages_and_scores_in_prose(snippet, figures):
    assert measured_figures("Some prose.\n\n" + snippet + "\n") == figures


# "issue 23", "Issue #25", "issues 23 and 25", "#25": this project's tracker, which a reader of the
# docs does not have. An upstream reference ("tensorflow/serving#2183") names its repository.
ISSUE_REFERENCE = re.compile(r"\b[Ii]ssues?\s*#?\s*\d+|(?<![\w/#&.-])#\d+\b")
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))
USER_FACING_DOCS = [doc for doc in LINKED_DOCS if not doc.startswith("pretrained/")]


def issue_references(text):
    """Every issue reference of `text`, a link's target left out (an anchor such as `#2026-11-27`)."""
    return [match.group() for match in ISSUE_REFERENCE.finditer(re.sub(r"\]\([^)]*\)", "]", text))]


def notebook_markdown(path):
    with open(path, encoding="utf-8") as handle:
        cells = json.load(handle)["cells"]
    return "\n\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown")


@pytest.mark.parametrize("doc", USER_FACING_DOCS)
def test_no_doc_names_an_issue_number(doc):
    """The model card is written by training/bundle.py from the Makefile's notes."""
    assert issue_references(read_doc(os.path.join(ROOT, doc))) == []


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=os.path.basename)
def test_no_notebook_names_an_issue_number(notebook):
    assert issue_references(notebook_markdown(notebook)) == []


@pytest.mark.parametrize(
    "snippet, found",
    [
        ("the bundle after issue 23, Issue #25's goals", ["issue 23", "Issue #25"]),
        ("(issues 23 and 25) and #48", ["issues 23", "#48"]),
        ("[tensorflow/serving#2183](https://github.com/tensorflow/serving/issues/2183)", []),
        ("a [link](#section-2), [dated](#2026-11-27-x), 3 issues, `--port=0`, C# 12, &#8212;", []),
    ],
)
def test_issue_references_are_found_in_prose_and_not_in_upstream_links(snippet, found):
    assert issue_references(snippet) == found


# The results page's summary: one bullet a figure, each linking the page's sections that hold it.
NUMBER = re.compile(r"(?<![\w.,])\d+(?:[.,]\d+)*(?![\w])")
SUMMARY = "Current figures"


def sections_by_anchor(text):
    """Each heading's anchor of `text`: the text from that heading to the next of its level or
    above (its subsections included)."""
    prose = FENCED.sub(lambda match: " " * len(match.group()), text)
    headings = [
        (match.start(), len(match.group(0)) - len(match.group(0).lstrip("#")), match.group(1))
        for match in HEADING.finditer(prose)
    ]
    sections = {}
    for index, (start, level, title) in enumerate(headings):
        ends = [other for other, other_level, _ in headings[index + 1 :] if other_level <= level]
        sections.setdefault(github_anchor(title), text[start : ends[0] if ends else len(text)])
    return sections


def numbers(text):
    """The numbers of `text`'s prose, code and link targets left out, signs dropped."""
    prose = re.sub(r"\]\([^)]*\)", "]", without_code(text))
    return set(NUMBER.findall(prose))


def summary_problems(text):
    """`problem` for each bullet of the summary that links no section of the page, or quotes a
    number that none of the sections it links holds."""
    sections = sections_by_anchor(text)
    summary = sections[github_anchor(SUMMARY)]
    problems = []
    for bullet in re.findall(r"^- .*(?:\n(?!- |\n|\*\*).*)*", summary, re.MULTILINE):
        anchors = re.findall(r"\]\(#([^)]+)\)", bullet)
        if not anchors or any(anchor not in sections for anchor in anchors):
            problems.append(f"links no section of the page: {bullet[:60]!r}")
            continue
        held = set().union(*(numbers(sections[anchor]) for anchor in anchors))
        missing = sorted(numbers(bullet) - held)
        if missing:
            problems.append(f"{missing} not in {anchors}: {bullet[:60]!r}")
    return problems


def test_every_figure_of_the_summary_is_the_one_of_the_section_it_links():
    text = read_doc(os.path.join(ROOT, BENCHMARKS))
    assert re.search(rf"^## {SUMMARY}\n", text, re.MULTILINE), "the page starts with its summary"
    assert summary_problems(text) == []


@pytest.mark.parametrize(
    "bullet, problem",
    [
        ("- BLEU 34.84, `make bench-x`. [Quality](#quality)", None),
        ("- BLEU 34.85. [Quality](#quality)", "['34.85'] not in ['quality']"),
        ("- BLEU 34.84, 2.0× faster.\n  [Quality](#quality), [Speed](#speed)", None),
        ("- BLEU 34.84. [Gone](#gone)", "links no section"),
        (
            "- BLEU 34.84 in the [model card](pretrained/es-en/README.md).",
            "links no section",
        ),
    ],
)
def test_the_summary_checker_finds_figures_its_sections_do_not_hold(bullet, problem):
    page = (
        f"# Page\n\n## {SUMMARY}\n\n{bullet}\n\n## Quality\n\nBLEU 34.84 (`make bench-x`).\n\n"
        "## Speed\n\n### Decoding\n\nIt is 2.0× faster.\n"
    )
    problems = summary_problems(page)
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problems[0].startswith(problem), problems


LOG_ENTRY = re.compile(r"^## (\d{4}-\d{2}-\d{2}): (.+)$", re.MULTILINE)


def test_the_benchmark_log_is_dated_entries_newest_first():
    text = read_doc(os.path.join(ROOT, BENCHMARK_LOG))
    headings = re.findall(r"^## .*$", text, re.MULTILINE)
    entries = LOG_ENTRY.findall(text)
    assert len(entries) == len(headings) > 0, "every entry's heading starts with its date"
    dates = [date for date, _ in entries]
    assert dates == sorted(dates, reverse=True)
    for date in dates:
        datetime.date.fromisoformat(date)
    # Its contents list every entry, in order.
    listed = re.findall(r"^- \[(\d{4}-\d{2}-\d{2}): (.+)\]\(#[^)]+\)$", text, re.MULTILINE)
    assert listed == entries


SIGNATURE_TABLE = re.compile(
    r"<!-- signature table: [^>]*-->\n(.*?)<!-- end of signature table -->", re.DOTALL
)


def test_the_signature_table_of_docs_serving_md_is_the_registrys():
    """docs/serving.md tables the signatures as `common.serving_contract.SIGNATURES` holds them
    (`signature_table()` writes the table: paste its output between the markers)."""
    from common.serving_contract import signature_table

    tables = SIGNATURE_TABLE.findall(read_doc(os.path.join(ROOT, "docs", "serving.md")))
    assert tables == [signature_table()]
