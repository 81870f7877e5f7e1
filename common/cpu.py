"""What this process's CPU offers TensorFlow, read from `/proc/cpuinfo` and the environment.

Two things depend on the CPU, and they are not the same test:

- **Which kernel runs a bfloat16 product, and so its arithmetic.** TensorFlow hands bfloat16
  products to oneDNN where the CPU has AVX-512F (or AVX-NE-CONVERT) and oneDNN's graph rewrite is
  on (`TF_ENABLE_ONEDNN_OPTS`, on by default on x86 Linux); oneDNN accumulates in float32 and
  rounds the sum to bfloat16 once, whether the CPU has bfloat16 instructions or converts in
  software. Elsewhere (AVX2-only CPUs such as AMD Zen 3, or with oneDNN's rewrite off)
  TensorFlow's Eigen kernel runs it, which sums in float32 and truncates the sum to bfloat16
  (rounds toward zero): up to one bfloat16 unit off where oneDNN is half a unit off
  (tests/numerics.py). `TF_ENABLE_ONEDNN_OPTS=0` reproduces that path on any CPU (`make test`
  runs the CPU-dependent tests again under it); `ONEDNN_MAX_CPU_ISA=AVX2` does not: TensorFlow
  still sends bfloat16 products to oneDNN, which then has no kernel for them, and the process
  dies with a segmentation fault.
- **Whether bfloat16 is fast.** Only AVX-512 BF16 or AMX-BF16 instructions make bfloat16
  products cheaper than float32 ones; converted in software they are slower (BENCHMARKS.md,
  "Decoding speed by CPU kind"), which is why `inference.export --compute_dtype bfloat16` and the
  server warn on such CPUs.

Standard library only: the server (which imports only `common`) warns with it too.
"""

import os
import platform

# The flags the benchmarks record with every table: what decides TensorFlow's and oneDNN's
# kernels for float32, bfloat16 and int8 products.
RELEVANT_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "avx_vnni",
    "avx_ne_convert",
    "amx_bf16",
    "amx_int8",
)
NATIVE_BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16")
ONEDNN_BFLOAT16_FLAGS = ("avx512f", "avx_ne_convert")
CPUINFO_PATH = "/proc/cpuinfo"


def _cpuinfo_field(name, path=CPUINFO_PATH):
    """The first `name : value` of `path`'s processor blocks, or None where there is none."""
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == name:
                    return value.strip()
    except OSError:
        pass
    return None


def cpu_model(path=CPUINFO_PATH):
    """The CPU's model name (`model name` of /proc/cpuinfo), else what `platform` knows."""
    return _cpuinfo_field("model name", path) or platform.processor() or "unknown CPU"


def cpu_flags(path=CPUINFO_PATH):
    """The set of the CPU's feature flags as /proc/cpuinfo names them (`avx2`, `avx512_bf16`,
    `amx_bf16`...); empty where the file is missing (not Linux, or not x86)."""
    return frozenset((_cpuinfo_field("flags", path) or "").split())


def onednn_rewrite_enabled(environ=None):
    """Whether TensorFlow's oneDNN graph rewrite is on: `TF_ENABLE_ONEDNN_OPTS` unset (its
    default on x86 Linux) or set to a true value."""
    value = (os.environ if environ is None else environ).get("TF_ENABLE_ONEDNN_OPTS", "1")
    return value.strip().lower() not in ("0", "false", "no", "off")


def bfloat16_products_round_once(flags=None, environ=None):
    """Whether a bfloat16 product in this process is oneDNN's: the float32 sum rounded once to
    bfloat16. False means Eigen's kernel, whose result is only within
    `bfloat16_inner_product_bound` of the exact sum."""
    flags = cpu_flags() if flags is None else flags
    return onednn_rewrite_enabled(environ) and any(flag in flags for flag in ONEDNN_BFLOAT16_FLAGS)


def has_native_bfloat16(flags=None):
    """Whether the CPU has bfloat16 instructions (AVX-512 BF16 or AMX-BF16), without which
    bfloat16 products are converted in software and run slower than float32 ones."""
    flags = cpu_flags() if flags is None else flags
    return any(flag in flags for flag in NATIVE_BFLOAT16_FLAGS)


def describe_cpu(path=CPUINFO_PATH):
    """One line for reports and logs: the model, then the relevant flags it has (or "none of
    ..." when it has none of them), e.g. "AMD EPYC 7B13 (avx2 fma)"."""
    flags = cpu_flags(path)
    present = [flag for flag in RELEVANT_FLAGS if flag in flags]
    shown = " ".join(present) if present else "none of " + ", ".join(RELEVANT_FLAGS)
    return f"{cpu_model(path)} ({shown})"


def bfloat16_slow_warning(flags=None):
    """The warning to log when a bfloat16 model is about to run on this CPU, or None where the
    CPU has bfloat16 instructions."""
    if has_native_bfloat16(flags):
        return None
    return (
        f"this CPU ({cpu_model()}) has no bfloat16 instructions (AVX-512 BF16 or AMX-BF16): "
        "bfloat16 products are converted in software and run slower than float32 here; export "
        "with --compute_dtype float32 for this CPU (serving/DEPLOY.md, 'Choosing an export for "
        "the CPU')"
    )
