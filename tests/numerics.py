"""What a bfloat16 product gives on this CPU (common/cpu.py says which kernel runs it), for the
tests that check bfloat16 arithmetic: the property every CPU gives, and the stronger one that
only oneDNN's kernel gives, tested where it runs and skipped, with the reason, elsewhere.

Measured (tests/model/test_transformer.py's bfloat16 test, under `TF_ENABLE_ONEDNN_OPTS=0`, which runs
TensorFlow's Eigen kernel as an AVX2-only CPU does): every logit of the Eigen kernel's bfloat16
product is the float32 sum truncated to bfloat16, where oneDNN's rounds it to nearest.
"""

import numpy as np
import pytest
import tensorflow as tf

from common.cpu import bfloat16_products_round_once

# bfloat16 keeps 8 significant bits: rounding to nearest moves a value by at most half a unit
# in the last place (2**-8 of it), rounding toward zero by less than one unit (2**-7 of it).
BFLOAT16_HALF_ULP = 2.0**-8
BFLOAT16_ULP = 2.0**-7

ROUND_ONCE_TO_NEAREST = bfloat16_products_round_once()
ROUND_ONCE_REASON = (
    "bfloat16 products run in TensorFlow's Eigen kernel here (no AVX-512F or AVX-NE-CONVERT, or "
    "TF_ENABLE_ONEDNN_OPTS=0), which truncates the float32 sum: the one-rounding-to-nearest "
    "property is oneDNN's and is tested where oneDNN multiplies"
)
requires_onednn_bfloat16 = pytest.mark.skipif(not ROUND_ONCE_TO_NEAREST, reason=ROUND_ONCE_REASON)


def rounded_to_nearest_bfloat16(values):
    """float32 `values` rounded to bfloat16 to nearest, ties to even (as float32)."""
    return tf.cast(tf.cast(np.asarray(values, np.float32), tf.bfloat16), tf.float32).numpy()


def truncated_to_bfloat16(values):
    """float32 `values` rounded to bfloat16 toward zero: their low 16 bits cleared."""
    bits = np.asarray(values, np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    return bits.view(np.float32)


def share_rounded_once(given, exact_sums):
    """`(to nearest, toward zero)`: the shares of `given` equal to `exact_sums` rounded once to
    bfloat16 each way."""
    given = np.asarray(given, np.float32)
    return (
        float(np.mean(given == rounded_to_nearest_bfloat16(exact_sums))),
        float(np.mean(given == truncated_to_bfloat16(exact_sums))),
    )
