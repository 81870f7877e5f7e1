"""`python -m training.train` run as a user runs it: a subprocess from the repository root; and
a tiny run in this process."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_training_cli(*args, env=None, **kwargs):
    """Runs the training CLI with `args`; returns the `CompletedProcess` (output as text).

    Args:
        env: the environment (default: this process's), to which TF_CPP_MIN_LOG_LEVEL=2 and
            unbuffered output are added.
        kwargs: passed to `subprocess.run` (e.g. `timeout`).
    """
    environment = {
        **(os.environ if env is None else env),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONUNBUFFERED": "1",
    }
    return subprocess.run(
        [sys.executable, "-m", "training.train", *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        **kwargs,
    )


def train_tiny(run_dir, **overrides):
    """Trains the tiny preset with `overrides` (`data` among them) into `run_dir`, in this
    process; returns `run_dir`."""
    from training.config import resolve_config
    from training.train import train

    train(resolve_config("tiny", overrides=overrides), run_dir, preset="tiny")
    return run_dir
