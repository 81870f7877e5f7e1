"""Serving in bfloat16 with the weight matrices stored in bfloat16 (Keras's "bfloat16" policy).

Keras's mixed_bfloat16 policy keeps every variable float32 and casts it to bfloat16 each time a
layer reads it: inside a decoding loop, every weight matrix is read in float32, cast, and written
again at every step. Under "bfloat16" the variables are bfloat16, rounded once when the float32
weights are set, and a step reads half the bytes (docs/benchmark-log.md, "bfloat16 weights:
stored, not cast").

Some layers keep float32 variables (`float32_weights_policy`), as under mixed_bfloat16:
- layer norms, which normalize in float32 with a float32 scale and offset;
- the token embeddings (their lookups round the rows to bfloat16 either way, and a tied output
  projection copies the matrix once per call, below);
- the positional embedding layer that looks the tokens up, which has no variable of its own.
  Keras's embedding layer asks not to be autocast, and called inside a mixed caller's autocast
  scope it closes that scope; called outside any (by a "bfloat16" caller), it opens one like
  any mixed layer, and Keras then casts the whole float32 matrix at every step to look up a
  few rows.
Up to the logits, a model under "bfloat16" computes exactly what the same weights compute under
mixed_bfloat16. The pre-softmax linear transformation is where they part (`logits_product_dtype`):
under mixed_bfloat16 (training) it multiplies in float32, which the loss's gradients want; under
"bfloat16" (serving) it multiplies in bfloat16 by a copy of W made once per call, the step's
largest product at half the bytes, and adds the float32 bias to the float32 result (the decoding
step adds b rounded to bfloat16 inside the product, then the rest of b:
`model.embedding.project_to_logits`; BENCHMARKS.md, "bfloat16 export: BLEU", and
docs/benchmark-log.md, "bfloat16 output product").
"""

import keras

BFLOAT16_WEIGHTS = "bfloat16"


def float32_weights_policy(policy):
    """The dtype policy of a layer that keeps float32 variables in a model under `policy`:
    mixed_bfloat16 (bfloat16 compute, float32 variables) where `policy` stores the weights in
    bfloat16, else `policy` itself (None: the global policy)."""
    if _stores_weights_in_bfloat16(policy):
        return keras.dtype_policies.DTypePolicy("mixed_bfloat16")
    return policy


def logits_product_dtype(policy):
    """The dtype of the pre-softmax linear transformation's product (`x·W`) in a model under
    `policy`: bfloat16 where `policy` stores the weights in bfloat16, else float32. The logits
    themselves are float32 either way."""
    return "bfloat16" if _stores_weights_in_bfloat16(policy) else "float32"


def _stores_weights_in_bfloat16(policy):
    return policy is not None and keras.dtype_policies.get(policy).name == BFLOAT16_WEIGHTS
