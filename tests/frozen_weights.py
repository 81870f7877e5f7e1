"""A process started with TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 (serving/DEPLOY.md, "Weights kept
packed") against one that is not, on the same export."""

import os

import numpy as np

from benchmarks.bench_decode import SessionSignatures, SessionWorker
from model.dense import FROZEN_WEIGHTS_VARIABLE


def assert_frozen_weights_change_nothing(export_dir, signatures, texts, tolerance):
    """Serves `export_dir` from a Session worker started with the variable and from a Session
    in this process without it, and asserts both answer each signature of `signatures` alike
    (strings and integers equal, floats within `tolerance`) on requests of `texts` (three at
    least) that change batch size from one to the next: a fused product whose second operand
    were not a weight would reuse the first request's."""
    assert len(texts) >= 3, "three texts at least, for three batch sizes"
    requests = [texts[:1], texts[1:], texts[2:3], texts, texts[-1:]]
    here = SessionSignatures(export_dir, threads=1)
    environment = {FROZEN_WEIGHTS_VARIABLE: "1"}
    with SessionWorker(export_dir, threads=1, environment=environment) as frozen:
        assert f"{FROZEN_WEIGHTS_VARIABLE}=1".encode() in process_environment(frozen.pid)
        assert FROZEN_WEIGHTS_VARIABLE not in os.environ
        for signature in signatures:
            for request in requests:
                expected, answered = here(signature, request), frozen(signature, request)
                for name, value in expected.items():
                    if value.dtype.kind == "f":
                        np.testing.assert_allclose(
                            answered[name], value, rtol=tolerance, atol=tolerance, err_msg=name
                        )
                    else:
                        np.testing.assert_array_equal(answered[name], value, err_msg=name)


def process_environment(pid):
    """The `NAME=value` entries (bytes) a Linux process was started with."""
    with open(f"/proc/{pid}/environ", "rb") as file:
        return file.read().split(b"\0")
