"""Where the repository is, for tests at any depth of tests/ (they mirror the source tree)."""

import pathlib

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
