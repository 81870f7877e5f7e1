"""A cold start of the offline tools: `make bench-cold-start` (into BENCHMARKS.md).

How long a user waits for `translate-text` (`inference.translate_text`) to print its first
translation, in fresh processes, greedy and beam search: the whole command on a few typed lines
(wall time to the first line printed, and to the end), and a breakdown of the same work in a
child that times each part: `import tensorflow`, the project's imports, loading the model
(`load_signature`: weights and tokenizers), the first call (which traces the translation path
into a graph, has TensorFlow optimize it, and runs it) and the calls after it.

A run directory's translation path is traced once and kept (`run_directory.traced_cache`,
in `<run>/.traced/`); the rows of this tree load the kept copy, as every start after the first
does, and the row "this tree, first start" measures the first one, which traces the path and
keeps it (the kept copy is deleted before each of its runs).

The other offline tools load a run the same way: `training.evaluate` (greedy, on the first of
the everyday dev sentences) and `translate-score` (the same pairs) are timed as whole commands,
each with the kept translation path and with `--no_cache` (traced at every start, as before it
was kept).

`--baseline_root DIR` runs the breakdown, interleaved with this tree's, on another checkout of
the project (e.g. `git worktree add DIR COMMIT`), so that a change's gain is measured beside the
same background load. Every breakdown's translations are compared: the section says whether
they are the same, byte for byte, in every run of every checkout.
"""

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.report import machine_description, publish, shown_path
from run_directory import artifacts
from run_directory.traced_cache import TRACED_DIR
from training.corpus.loading import EVERYDAY_DIR

SECTION = "First run: translate-text from a cold start"
LINES = (
    "¿A qué hora cierra el supermercado?",
    "Necesito un taxi para ir al aeropuerto.",
    "mi hijo tiene fiebre",
    "No se pudo abrir el archivo.",
)
PARTS = ("import tensorflow", "project imports", "load", "first call", "other calls")
# Translated after the typed lines, in translate-text's batches: that the start's gain costs the
# later calls nothing.
LATER_FILE = EVERYDAY_DIR / "test.tsv"

# The child of the breakdown: times each part of what translate-text does before its first line.
_BREAKDOWN = """
import json, sys, time
started = time.perf_counter()
import tensorflow as tf
imported = time.perf_counter()
from inference.translate_text import load_signature
project = time.perf_counter()
signature = load_signature(sys.argv[1], int(sys.argv[2]))
loaded = time.perf_counter()
lines = json.loads(sys.argv[3])
translations = [signature(tf.constant(lines[:1]))["translation"].numpy()[0].decode("utf-8")]
first = time.perf_counter()
for line in lines[1:]:
    translations.append(signature(tf.constant([line]))["translation"].numpy()[0].decode("utf-8"))
done = time.perf_counter()
from inference.translate_text import BATCH_TOKENS, MAX_BATCH_SENTENCES, translate_window
with open(sys.argv[4], encoding="utf-8") as handle:
    sources = [line.split("\t")[0] for line in handle]
results = translate_window(sources, signature, BATCH_TOKENS, MAX_BATCH_SENTENCES)
later = time.perf_counter()
translations += [hypotheses[0][0] for hypotheses in results]
print(json.dumps([[imported - started, project - imported, loaded - project, first - loaded,
                   done - first, later - done], translations]))
"""
FIRST_START = "this tree, first start"


def breakdown(root, model, beam_width):
    """`(seconds of each of PARTS and of the later file, translations of LINES and of the
    file)` in a fresh child run from the project checkout `root`."""
    environment = {**os.environ, "PYTHONPATH": root, "TF_CPP_MIN_LOG_LEVEL": "3"}
    later = [str(LATER_FILE)]
    result = subprocess.run(
        [sys.executable, "-c", _BREAKDOWN, model, str(beam_width), json.dumps(LINES), *later],
        cwd=root,
        env=environment,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"the breakdown in {root} failed: {result.stderr.strip()[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def whole_command(model, beam_width):
    """`(seconds to the first line printed, seconds to the end)` of `translate-text` on
    `LINES`, as a user runs it."""
    command = [
        sys.executable,
        "-m",
        "inference.translate_text",
        "--model",
        model,
        "--beam_width",
        str(beam_width),
        "--no_progress",
    ]
    started = time.perf_counter()
    process = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    process.stdin.write(("\n".join(LINES) + "\n").encode("utf-8"))
    process.stdin.close()
    process.stdout.readline()
    first_line = time.perf_counter() - started
    process.stdout.read()
    if process.wait() != 0:
        raise RuntimeError(f"{shlex.join(command)} failed with exit code {process.returncode}")
    return first_line, time.perf_counter() - started


def tool_commands(model, pairs_file, output_dir):
    """`{tool: command}` of the other offline tools on `pairs_file` (`source<TAB>target`)."""
    return {
        "python -m training.evaluate": [
            *("-m", "training.evaluate", "--run_dir", model, "--data", str(EVERYDAY_DIR)),
            *("--split", "dev", "--limit", str(len(LINES)), "--output_dir", output_dir),
        ],
        "translate-score": ["-m", "training.score", "--run_dir", model, "--input_file", pairs_file],
    }


def tool_seconds(arguments, cache):
    """Wall seconds of `python <arguments>` (with `--no_cache` unless `cache`)."""
    command = [sys.executable, *arguments, *([] if cache else ["--no_cache"])]
    started = time.perf_counter()
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    if result.returncode != 0:
        raise RuntimeError(f"{shlex.join(command)} failed: {result.stderr.strip()[-2000:]}")
    return time.perf_counter() - started


def time_tools(model, repeats, work_dir):
    """`{(tool, kept): [seconds]}` of each of `tool_commands`, kept and `--no_cache`
    interleaved, `repeats` each (after one start that keeps what the kept rows load)."""
    pairs_file = os.path.join(work_dir, "pairs.tsv")
    with (
        open(EVERYDAY_DIR / "dev.tsv", encoding="utf-8") as source,
        open(pairs_file, "w", encoding="utf-8") as pairs,
    ):
        pairs.writelines(line for line, _ in zip(source, LINES))
    commands = tool_commands(model, pairs_file, os.path.join(work_dir, "eval"))
    for arguments in commands.values():
        tool_seconds(arguments, cache=True)
    times = {(tool, kept): [] for tool in commands for kept in (True, False)}
    for _ in range(repeats):
        for (tool, kept), seconds in times.items():
            seconds.append(tool_seconds(commands[tool], cache=kept))
    return times


def later_sentences():
    with open(LATER_FILE, encoding="utf-8") as handle:
        return sum(1 for line in handle if line.strip())


def markdown(rows, commands, tools, command, repeats, baseline, identical):
    """The section: the breakdown's medians per checkout and decoding, then the whole command,
    then the other tools' (`time_tools`); `identical`: whether every run of every checkout
    translated `LINES` the same."""
    lines = [
        f"Machine: {machine_description()}.",
        f"Command: `{command}`.",
        "",
        f"Medians of {repeats} fresh processes each, the checkouts interleaved; {len(LINES)} "
        'typed lines, one call each. The first translation is printed after "import '
        'tensorflow" + the rest up to "first call". This tree loads the translation path an '
        f"earlier start traced and kept (`<run>/{TRACED_DIR}/`); its first start traces it and "
        f"keeps it. Then each process translates the sources of `{shown_path(str(LATER_FILE))}` "
        "as translate-text batches them, so that the later calls are timed too. The "
        "translations of every run of every checkout: "
        + ("the same, byte for byte." if identical else "**not all the same**."),
        "",
        "| checkout | decoding | "
        + " | ".join(PARTS)
        + f" | first translation after the import | then {later_sentences()} sentences |",
        "| --- | --- |" + " ---: |" * (len(PARTS) + 2),
    ]
    for (checkout, width), times in rows.items():
        medians = [statistics.median(part) for part in zip(*times)]
        after_import = sum(medians[1:4])
        lines.append(
            f"| {checkout} | {'greedy' if width == 1 else f'beam {width}'} | "
            + " | ".join(f"{seconds:.2f} s" for seconds in medians[: len(PARTS)])
            + f" | **{after_import:.2f} s** | {medians[len(PARTS)]:.2f} s |"
        )
    lines += [
        "",
        "The whole command (`translate-text`, this tree), wall time from the start of the process:",
        "",
        "| decoding | first line printed | all lines |",
        "| --- | ---: | ---: |",
    ]
    for width, times in commands.items():
        first, total = (statistics.median(part) for part in zip(*times))
        name = "greedy" if width == 1 else f"beam {width}"
        lines.append(f"| {name} | {first:.1f} s | {total:.1f} s |")
    lines += [
        "",
        f"The other offline tools, whole command on the first {len(LINES)} everyday dev "
        "sentences (greedy; translate-score on their pairs), wall time:",
        "",
        "| command | translation path kept | traced at every start (`--no_cache`) |",
        "| --- | ---: | ---: |",
    ]
    for tool in dict.fromkeys(tool for tool, _ in tools):
        kept, traced = (statistics.median(tools[tool, cache]) for cache in (True, False))
        lines.append(f"| `{tool}` | {kept:.1f} s | {traced:.1f} s |")
    if baseline:
        lines += ["", f"Baseline: {baseline}."]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_cold_start", description=__doc__
    )
    parser.add_argument("--model", default=artifacts.PRETRAINED_RUN)
    parser.add_argument("--beam_widths", default="1,4", help="comma-separated; 1 = greedy")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline_root", help="another checkout of the project to compare with")
    parser.add_argument("--baseline_name", default="baseline", help="its name in the table")
    parser.add_argument("--output", help="Markdown file to write the section into")
    args = parser.parse_args(argv)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    model = os.path.abspath(args.model)
    widths = [int(width) for width in args.beam_widths.split(",")]
    checkouts = [("this tree", root)]
    if args.baseline_root:
        checkouts.append((args.baseline_name, os.path.abspath(args.baseline_root)))
    names = [checkouts[0][0], FIRST_START, *(name for name, _ in checkouts[1:])]
    rows = {(name, width): [] for name in names for width in widths}
    translations = {width: set() for width in widths}
    commands = {width: [] for width in widths}
    for _ in range(args.repeats):
        for width in widths:
            shutil.rmtree(os.path.join(model, TRACED_DIR), ignore_errors=True)
            for name, checkout in [(FIRST_START, root), *checkouts]:
                times, translated = breakdown(checkout, model, width)
                rows[name, width].append(times)
                translations[width].add(tuple(translated))
            commands[width].append(whole_command(model, width))
    with tempfile.TemporaryDirectory() as work_dir:
        tools = time_tools(model, args.repeats, work_dir)
    # Another checkout is named by its role, not by where it lies on this machine.
    baseline_forms = {args.baseline_root, f"--baseline_root={args.baseline_root}"}
    shown = [
        arg.replace(args.baseline_root, "BASELINE_CHECKOUT")
        if args.baseline_root and arg in baseline_forms
        else shown_path(arg)
        if os.path.exists(arg)
        else arg
        for arg in (argv or sys.argv[1:])
    ]
    command = shlex.join(["python", "-m", "benchmarks.bench_cold_start", *shown])
    baseline = (
        args.baseline_root and f"{args.baseline_name}, a checkout of the project beside this one"
    )
    identical = all(len(translated) == 1 for translated in translations.values())
    text = markdown(rows, commands, tools, command, args.repeats, baseline, identical)
    publish(text, args.output, SECTION)
    return 0


if __name__ == "__main__":
    sys.exit(main())
