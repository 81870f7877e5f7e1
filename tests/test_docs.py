"""The docs' commands run as written in a fresh shell after the Quickstart (no activated venv).

Every shell command in the Markdown docs (fenced and indented code blocks, inline code) must call
the venv's programs by path: `.venv/bin/python -m MODULE` with a MODULE of this repository,
`.venv/bin/tensorboard`, `.venv/bin/translate-NAME` with a NAME of pyproject.toml's
[project.scripts] (or a `make` target). A bare `python`, `tensorboard` or `translate-*` gives
"No module named 'tensorflow'" or "command not found" in a shell where the venv is not active.
"""

import glob
import os
import re
import tomllib

import pytest

from training.bundle import model_card

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = [
    "README.md",
    "serving/DEPLOY.md",
    "training/CORPUS.md",
    "pretrained/bible-es-en/README.md",
    *sorted(
        os.path.relpath(path, ROOT)
        for path in glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
    ),
]

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


def declared_scripts():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as handle:
        return set(tomllib.load(handle)["project"]["scripts"])


def command_problems(text, name):
    """`NAME:LINE: problem` for each command of `text` that would not run as written."""
    scripts = declared_scripts()
    problems = []
    for offset, code in code_spans(text):
        code = code.replace("\\\n", " ")  # continued lines: one command

        def report(where, problem):
            line = text.count("\n", 0, offset + where) + 1
            problems.append(f"{name}:{line}: {problem}")

        for kind, pattern in BARE.items():
            for match in pattern.finditer(code):
                report(match.start(), f"bare {kind}: {match.group()!r} (use .venv/bin/...)")
        for match in MODULE.finditer(code):
            if not module_exists(match.group(1)):
                report(match.start(), f"no module {match.group(1)!r} in this repository")
        for match in SCRIPT.finditer(code):
            if match.group(1) not in scripts:
                report(match.start(), f"{match.group(1)!r} is not in [project.scripts]")
    return problems


@pytest.mark.parametrize("doc", DOCS)
def test_every_command_runs_as_written_in_a_fresh_shell(doc):
    with open(os.path.join(ROOT, doc), encoding="utf-8") as handle:
        text = handle.read()
    assert command_problems(text, doc) == []


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
    with open(os.path.join(ROOT, "pretrained/bible-es-en/README.md"), encoding="utf-8") as handle:
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
