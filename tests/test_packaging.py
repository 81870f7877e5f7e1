"""The installable project: `pip install -e .` (make setup) and its console commands."""

import importlib.metadata
import os
import subprocess
import sys

import pytest

DISTRIBUTION = "attention-translate"
BIN_DIR = os.path.dirname(sys.executable)


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
