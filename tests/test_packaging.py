"""The installable project: `pip install -e .` (make setup) and its console commands."""

import importlib.metadata
import os
import re
import subprocess
import sys

import pytest

DISTRIBUTION = "attention-translate"
BIN_DIR = os.path.dirname(sys.executable)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def console_scripts():
    return [
        entry
        for entry in importlib.metadata.distribution(DISTRIBUTION).entry_points
        if entry.group == "console_scripts"
    ]


def test_every_console_command_loads_a_main_function():
    scripts = console_scripts()
    assert {entry.name for entry in scripts} >= {
        "translate-train",
        "translate-evaluate",
        "translate-export",
        "translate-serve",
        "translate-client",
        "translate-demo",
    }
    for entry in scripts:
        assert callable(entry.load()), entry.name


@pytest.mark.large
@pytest.mark.parametrize("command", ["translate-train", "translate-serve", "translate-client"])
def test_console_commands_run_outside_the_repository(command, tmp_path):
    result = subprocess.run(
        [os.path.join(BIN_DIR, command), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("usage:") and result.stderr == ""


@pytest.mark.large
@pytest.mark.parametrize(
    "target, status", [("export", 2), ("export-ctranslate2", 2), ("evaluate", 1)]
)
def test_make_targets_without_a_run_directory_say_so_in_one_line(target, status, tmp_path):
    missing = tmp_path / "runs" / "small"
    result = subprocess.run(
        ["make", "-s", "-o", ".venv/.installed", target, f"RUN_DIR={missing}",
         f"CT2_DIR={tmp_path / 'ct2'}", f"EXPORT_BASE={tmp_path / 'exports'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    lines = result.stderr.splitlines()
    assert lines[:-1] == [
        f"error: {missing}/config.json not found: {missing} is not a training run directory."
    ], result.stderr[-3000:]
    # "make[1]: ***" when the suite itself runs under make (`make test`).
    assert re.match(r"make(\[\d+\])?: \*\*\*", lines[-1]) and lines[-1].endswith(f"Error {status}")
