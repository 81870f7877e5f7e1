"""Every command's decoding flags come from `training.decoding_flags.add_decoding_arguments`,
each with one default: its `DecodingOptions` field's (parsed as that value, or as None, which
the run's decoding.json or that value replaces), or greedy search's width where the width picks
the signature; and each flag's help says which."""

import argparse
import ast
import dataclasses
import importlib

import pytest

from model.translator import DecodingOptions
from tests.paths import REPO_ROOT
from tests.test_structure import LAYERS
from training.decoding_flags import (
    DECODING_FLAGS,
    GREEDY_BEAM_WIDTH,
    default_text,
    field_default,
)

REPO = REPO_ROOT
FLAGS_MODULE = REPO / "training" / "decoding_flags.py"

# The commands that decode, and how each builds its parser (`main` or `parse_args` with no
# arguments: stopped at the parse).
COMMANDS = {
    "training.evaluate": "main",
    "training.bundle": "main",
    "training.prepare_data": "main",
    "inference.export": "main",
    "inference.translate_text": "main",
    "benchmarks.bench_robustness": "main",
    "benchmarks.bench_length": "parse_args",
    "benchmarks.bench_decode": "parse_args",
    "benchmarks.profile_decode": "main",
}


class _Parsing(Exception):
    """Raised in place of parsing, with the parser a command built."""

    def __init__(self, parser):
        super().__init__()
        self.parser = parser


def parser_of(command, monkeypatch):
    """The `argparse.ArgumentParser` the command `command` (`COMMANDS`) builds."""

    def stop(parser, args=None, namespace=None):
        raise _Parsing(parser)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", stop)
    with pytest.raises(_Parsing) as parsing:
        getattr(importlib.import_module(command), COMMANDS[command])([])
    return parsing.value.parser


def declared_flags(path):
    """The flags `--name` a Python file passes to `add_argument` as a string literal."""
    flags = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            flags.append(node.args[0].value)
    return flags


def test_every_decoding_option_has_a_flag():
    assert set(DECODING_FLAGS) == {field.name for field in dataclasses.fields(DecodingOptions)}


def test_no_command_declares_a_decoding_flag_of_its_own():
    """A decoding flag is declared only in `training.decoding_flags`, and every command that
    declares one through it is among `COMMANDS` (whose defaults the next test checks)."""
    own, users = [], set()
    for package in LAYERS:
        for path in sorted((REPO / package).rglob("*.py")):
            if path == FLAGS_MODULE:
                continue
            own += [
                f"{path.relative_to(REPO)}: {flag}"
                for flag in declared_flags(path)
                if flag.removeprefix("--") in DECODING_FLAGS
            ]
            if "add_decoding_arguments(" in path.read_text(encoding="utf-8"):
                users.add(".".join(path.relative_to(REPO).with_suffix("").parts))
    assert own == []
    assert users == set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_each_decoding_flag_has_one_default_and_says_it(command, monkeypatch):
    # `_actions`: argparse has no public list of a parser's arguments.
    actions = [
        action
        for action in parser_of(command, monkeypatch)._actions
        if action.dest in DECODING_FLAGS
    ]
    assert actions, f"{command} declares no decoding flag"
    for action in actions:
        name, flag = action.dest, DECODING_FLAGS[action.dest]
        assert action.option_strings == [f"--{name}"]
        assert (action.help or "").startswith(flag.help), (command, name)
        if flag.type is None:  # A switch: off unless given.
            assert action.default is False and action.nargs == 0, (command, name)
            continue
        assert action.type is flag.type, (command, name)
        if action.default is None:
            stated = f"default: the run's decoding.json, else {default_text(name)}"
        elif name == "beam_width" and action.default == GREEDY_BEAM_WIDTH:
            stated = f"{GREEDY_BEAM_WIDTH}: greedy search (default: {GREEDY_BEAM_WIDTH}, not"
        else:
            assert action.default == field_default(name), (command, name, action.default)
            stated = f"(default: {default_text(name)})"
        assert stated in action.help, (command, name, action.help)
