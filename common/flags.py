"""Command-line values shared by the training CLIs and the model server."""

import argparse


def parse_bool(text):
    """A boolean command-line value: true/false, 1/0, yes/no, on/off (any case).

    The one parser of boolean flags, for the training CLIs and the model server's.
    """
    lowered = str(text).lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
