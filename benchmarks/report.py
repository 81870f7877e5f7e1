"""Writes a benchmark's Markdown section into BENCHMARKS.md, the results page, replacing that
section only; the page's history is docs/benchmark-log.md, which no benchmark writes."""

import os
import platform
import re
import shlex
import sys

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


# The results page: a summary of the current figures, then one `## ` heading per area, each
# holding its benchmarks' sections as `### ` headings. An area and the starts of the titles of the
# sections it holds: a section not on the page yet goes at the end of its area.
AREAS = (
    (
        "Translation quality",
        (
            "Robustness to how people type",
            "Names in today's spelling",
            "bfloat16 export: BLEU",
            "Everyday sentences",
        ),
    ),
    ("Decoding speed", ("Decoding", "Speed goals", "Op profile")),
    ("Serving performance", ("Serving",)),
    ("Training", ("Training", "Tokenization")),
    ("Translating files", ("Translating a file offline",)),
    ("First run and test suite", ("First run", "Test suite")),
)
PAGE_HEADER = "# Benchmarks\n\nEvery number here was measured by the command shown with it.\n\n"


def area_of(title):
    """The area whose section titles `title` starts with, or None."""
    for area, starts in AREAS:
        if any(title.startswith(start) for start in starts):
            return area
    return None


def heading(title):
    """A pattern for a `## ` or `### ` heading of exactly `title` (group 1: its hashes)."""
    return re.compile(rf"^(#{{2,3}}) {re.escape(title)}[ \t]*$", re.M)


def section_span(text, match):
    """Where the section whose heading `match` found ends: at the next heading of its level or
    above, or at the end of the text."""
    level = len(match.group(1))
    following = re.compile(rf"^#{{1,{level}}} ", re.M).search(text, match.end())
    return match.start(), following.start() if following else len(text)


def write_section(path, title, body):
    """Writes `body` as the section `title` of the results page at `path`, replacing that
    section only (its heading, at the level it has, and its text up to the next heading of that
    level or above). A section not on the page yet goes at the end of its area (`AREAS`) as a
    `### ` heading, the area's `## ` heading added at the end if the page has none; a title of
    no area, at the end of the page as a `## ` heading. Raises ValueError for a title that is an
    area's: writing it would replace the whole area."""
    if any(title == area for area, _ in AREAS):
        raise ValueError(f"{title!r} is an area of the results page, not a section")
    text = ""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    if not text.startswith("# Benchmarks"):
        text = PAGE_HEADER + text
    found = heading(title).search(text)
    if found:
        start, end = section_span(text, found)
        section = f"{found.group(1)} {title}\n\n{body.strip()}\n\n"
        text = text[:start] + section + text[end:]
    else:
        area = area_of(title)
        area_match = area and re.compile(rf"^(##) {re.escape(area)}[ \t]*$", re.M).search(text)
        if area_match:
            _, end = section_span(text, area_match)
            section = f"### {title}\n\n{body.strip()}\n\n"
            text = text[:end].rstrip() + "\n\n" + section + text[end:]
        elif area:
            text = text.rstrip() + f"\n\n## {area}\n\n### {title}\n\n{body.strip()}\n\n"
        else:
            text = text.rstrip() + f"\n\n## {title}\n\n{body.strip()}\n\n"
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text.rstrip() + "\n")


def shown_path(path):
    """`path` as a report shows it: relative to the repository when inside it, so that no
    path of the machine that ran the benchmark lands in BENCHMARKS.md."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    absolute = os.path.abspath(path)
    return os.path.relpath(absolute, root) if absolute.startswith(root + os.sep) else path


def command_line(module, argv):
    """The command a benchmark ran as, for its section: `python -m module` and its arguments
    (`argv`, or the process's own when None)."""
    return shlex.join(["python", "-m", module, *(argv if argv is not None else sys.argv[1:])])


def publish(text, output, title):
    """Prints a benchmark's section `text`, and writes it as the section `title` of the results
    page `output` when one is given (`write_section`)."""
    print(text)
    if output:
        write_section(output, title, text)
