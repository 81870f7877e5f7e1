"""common/cpu.py: the CPU's model and flags read from a /proc/cpuinfo, and what they decide."""

import pytest

from common import cpu

# Flags lines as two CPUs' /proc/cpuinfo write them (shortened to what matters here).
ZEN3_FLAGS = "fpu sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 bmi2 sha_ni vaes vpclmulqdq"
SAPPHIRE_RAPIDS_FLAGS = (
    "fpu sse2 fma avx avx2 avx512f avx512dq avx512bw avx512vl avx512_vnni avx512_bf16 "
    "avx_vnni amx_bf16 amx_tile amx_int8"
)
CASCADE_LAKE_FLAGS = "fpu sse2 fma avx avx2 avx512f avx512dq avx512bw avx512vl avx512_vnni"


def write_cpuinfo(tmp_path, model, flags, processors=2):
    """A /proc/cpuinfo of `processors` identical blocks, as Linux writes it."""
    block = f"processor\t: {{}}\nvendor_id\t: X\nmodel name\t: {model}\nflags\t\t: {flags}\n\n"
    path = tmp_path / "cpuinfo"
    path.write_text("".join(block.format(index) for index in range(processors)))
    return str(path)


def test_model_and_flags_are_read_from_the_first_processor(tmp_path):
    path = write_cpuinfo(tmp_path, "AMD EPYC 7B13 64-Core Processor", ZEN3_FLAGS)
    assert cpu.cpu_model(path) == "AMD EPYC 7B13 64-Core Processor"
    assert cpu.cpu_flags(path) == frozenset(ZEN3_FLAGS.split())
    assert cpu.describe_cpu(path) == "AMD EPYC 7B13 64-Core Processor (avx2 fma)"


def test_a_missing_cpuinfo_gives_no_flags_and_names_none_of_them(tmp_path):
    missing = str(tmp_path / "absent")
    assert cpu.cpu_flags(missing) == frozenset()
    assert "none of avx2" in cpu.describe_cpu(missing)


@pytest.mark.parametrize(
    ("flags", "round_once", "native"),
    [
        (ZEN3_FLAGS, False, False),
        (CASCADE_LAKE_FLAGS, True, False),
        (SAPPHIRE_RAPIDS_FLAGS, True, True),
    ],
    ids=["avx2-only", "avx512-without-bf16", "avx512-bf16-amx"],
)
def test_which_kernel_multiplies_bfloat16_and_whether_it_is_native(flags, round_once, native):
    """oneDNN takes bfloat16 products on AVX-512F CPUs (rounding once to nearest, in hardware or
    converted in software); Eigen on AVX2-only ones, and wherever oneDNN's rewrite is off."""
    flags = frozenset(flags.split())
    assert cpu.bfloat16_products_round_once(flags, environ={}) is round_once
    assert cpu.bfloat16_products_round_once(flags, {"TF_ENABLE_ONEDNN_OPTS": "0"}) is False
    assert cpu.bfloat16_products_round_once(flags, {"TF_ENABLE_ONEDNN_OPTS": "1"}) is round_once
    assert cpu.has_native_bfloat16(flags) is native
    warning = cpu.bfloat16_slow_warning(flags)
    assert (warning is None) is native
    if warning:
        assert "--compute_dtype float32" in warning and "DEPLOY.md" in warning


def test_this_machine_is_described_with_its_flags_in_benchmark_reports():
    from benchmarks.report import machine_description

    description = machine_description()
    assert description.startswith(cpu.cpu_model())
    for flag in cpu.RELEVANT_FLAGS:
        assert (f" {flag}" in description or f"({flag}" in description) is (flag in cpu.cpu_flags())
