"""Benchmarks: each writes its section of BENCHMARKS.md."""

import model  # noqa: F401  (first: TensorFlow without its start-up notices; common/startup.py)
