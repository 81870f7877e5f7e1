"""Apertium for the tests that run it (`make data-test` installs Debian's `apertium-en-es`)."""

import os

import pytest

from training.corpus import apertium


def require_apertium():
    """Returns when Apertium's English-Spanish pair runs here. Where it does not: a failure
    for root, whom `make data-test` installs it for (CI), and a skip naming the install for
    anyone else, who cannot have apt install it."""
    try:
        apertium.ensure_apertium(install=False)
    except apertium.CorpusError as error:
        if os.geteuid() == 0:
            pytest.fail(f"{error}; `make data-test` installs it")
        pytest.skip(f"{error} (as root, `make data-test` does)")
