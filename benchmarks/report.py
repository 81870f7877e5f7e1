"""Writes a benchmark's Markdown section into BENCHMARKS.md, replacing that section only."""

import os
import platform
import re

import tensorflow as tf

from common import cpu


def machine_description():
    """CPU model with the flags that decide TensorFlow's kernels (common/cpu.py), which kernel
    multiplies bfloat16 here, core count, OS and TensorFlow version: figures of one CPU kind do
    not hold for another (serving/DEPLOY.md, "Choosing an export for the CPU")."""
    gpus = tf.config.list_physical_devices("GPU")
    accelerator = f", {len(gpus)} GPU(s)" if gpus else ", no GPU"
    if cpu.has_native_bfloat16():
        bfloat16 = "bfloat16 in hardware"
    elif cpu.bfloat16_products_round_once():
        bfloat16 = "bfloat16 converted in software by oneDNN"
    else:
        bfloat16 = "bfloat16 in TensorFlow's Eigen kernels"
    isa_cap = os.environ.get("ONEDNN_MAX_CPU_ISA")
    capped = f", oneDNN held to {isa_cap}" if isa_cap else ""
    return (
        f"{cpu.describe_cpu()}, {os.cpu_count()} cores{accelerator}; {bfloat16}{capped}; "
        f"{platform.system()}; TensorFlow {tf.__version__}"
    )


def write_section(path, title, body):
    """Replaces (or appends) the `## title` section of the Markdown file at `path`."""
    text = ""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    if not text.startswith("# Benchmarks"):
        text = (
            "# Benchmarks\n\nEvery number here was measured by the command shown with it.\n\n"
            + text
        )
    section = f"## {title}\n\n{body.strip()}\n\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = (
        pattern.sub(lambda _: section, text)
        if pattern.search(text)
        else text.rstrip() + "\n\n" + section
    )
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text.rstrip() + "\n")


def shown_path(path):
    """`path` as a report shows it: relative to the repository when inside it, so that no
    path of the machine that ran the benchmark lands in BENCHMARKS.md."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    absolute = os.path.abspath(path)
    return os.path.relpath(absolute, root) if absolute.startswith(root + os.sep) else path
