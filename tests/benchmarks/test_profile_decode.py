"""benchmarks/profile_decode.py: a traced Session run summed by op type, an XLA program by
instruction."""

import json
import os
import re

import numpy as np
import tensorflow as tf

from tests.paths import REPO_ROOT


def test_profile_decode_sums_a_traced_session_run_by_op_type():
    from benchmarks.profile_decode import op_times

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 8])
        y = tf.nn.relu(tf.matmul(x, tf.ones([8, 8])))
        z = tf.matmul(y, tf.ones([8, 4]))
    with tf.compat.v1.Session(graph=graph) as session:
        run_metadata = tf.compat.v1.RunMetadata()
        session.run(
            z,
            {x: np.ones([2, 8], np.float32)},
            options=tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
            run_metadata=run_metadata,
        )
    times = op_times(run_metadata)
    matmuls = {op: value for op, value in times.items() if "MatMul" in op}
    assert sum(count for _, count in matmuls.values()) == 2
    assert all(micros >= 0 for micros, _ in times.values())


XLA_PROFILE_SCRIPT = """
import json, os
from benchmarks.profile_decode import XLA_TRACE_FLAG, traced_xla_call
os.environ["XLA_FLAGS"] = XLA_TRACE_FLAG
import tensorflow as tf

@tf.function(jit_compile=True)
def loop(x, w):
    return tf.while_loop(lambda i, x: i < 5, lambda i, x: (i + 1, tf.tanh(x @ w)), [0, x])[1]

x, w = tf.ones([64, 256]), tf.ones([256, 256]) / 256
loop(x, w)  # compiled before the trace, as the profile's warm-up calls do
print(json.dumps(traced_xla_call(lambda: loop(x, w).numpy())))
"""


def test_profile_decode_sums_a_traced_xla_program_by_instruction():
    import subprocess
    import sys

    from benchmarks.profile_decode import MATRIX_PRODUCT

    # A fresh process: XLA reads XLA_FLAGS once, at its first compilation.
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    environment.pop("XLA_FLAGS", None)
    completed = subprocess.run(
        [sys.executable, "-c", XLA_PROFILE_SCRIPT],
        capture_output=True,
        text=True,
        env=environment,
        cwd=str(REPO_ROOT),
        check=True,
    )
    times = json.loads(completed.stdout.strip().splitlines()[-1])
    products = {name: value for name, value in times.items() if MATRIX_PRODUCT.search(name)}
    # The loop's body multiplies once an iteration; the loop itself is one instruction.
    assert sum(count for _, count in products.values()) == 5
    assert times["while"][1] == 1
    assert all(micros >= 0 for micros, _ in times.values())
    # Self times: the loop's own excludes its body's, of which the products alone take more.
    assert times["while"][0] < sum(micros for micros, _ in products.values())
    # Only the program's instructions: no Python, TensorFlow or XLA runtime events.
    runtime = re.compile(r"::|Execute|lambda|^end: |BlockUntilReady")
    assert not [name for name in times if runtime.search(name)]
