"""Translating a large file offline: `make bench-translate` (into BENCHMARKS.md).

Runs `translate-text` (`inference.translate_text`, greedy, its default batching) as a child
process on two generated files, the test split's sources of the model's corpus repeated with
variations (as written, lower-cased, without the final mark, cut at the first comma), and reports
for each the wall time, the sentences per second and the child's peak resident memory
(`ru_maxrss`): the larger file's throughput past start-up is the difference of the two runs, and
equal peaks show that memory does not grow with the file. With `--plot`, the child's resident
memory sampled while it runs, against the lines it has written, is drawn into a PNG.
"""

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import threading
import time

import psutil

from benchmarks.report import machine_description, shown_path, write_section
from run_directory import artifacts
from training.corpus import load_run_pairs

SECTION = "Translating a file offline (translate-text)"
VARIATIONS = (
    ("as written", lambda source: source),
    ("lower-cased", str.lower),
    ("without its final mark", lambda source: source.rstrip(".;:!?»”")),
    ("cut at its first comma", lambda source: source.split(",")[0]),
)


def generated_lines(sources, count):
    """`count` lines: `sources` in order as written, then each variation of `VARIATIONS` of them,
    and again."""
    variants = itertools.cycle([[vary(source) for source in sources] for _, vary in VARIATIONS])
    return list(itertools.islice(itertools.chain.from_iterable(variants), count))


class ProgressSampler:
    """Samples a child's resident memory and the lines of its output file every `seconds`, on a
    thread of its own, so that the caller can block in `os.wait4` for the exact exit time."""

    def __init__(self, pid, output_path, seconds):
        self.pid, self.output_path, self.seconds = pid, output_path, seconds
        self.samples = []  # (seconds since start, lines written, resident bytes)
        self._lines, self._offset = 0, 0
        self._stop = threading.Event()
        self._started = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._stop.set()
        self._thread.join()

    def lines_written(self):
        """Newlines in the output file so far, reading only what was appended since last time."""
        try:
            with open(self.output_path, "rb") as handle:
                handle.seek(self._offset)
                appended = handle.read()
        except FileNotFoundError:
            return 0
        self._offset += len(appended)
        self._lines += appended.count(b"\n")
        return self._lines

    def _run(self):
        while not self._stop.wait(self.seconds):
            try:
                resident = psutil.Process(self.pid).memory_info().rss
            except psutil.Error:  # Exited between two samples.
                return
            elapsed = time.perf_counter() - self._started
            self.samples.append((elapsed, self.lines_written(), resident))


def translate_file(model_dir, input_path, output_path, window_lines, sample_seconds=5.0):
    """`(seconds, peak RSS in bytes, samples)` of `translate-text` run as a child process on the
    file; `samples` as `ProgressSampler.samples`."""
    command = [
        sys.executable,
        "-m",
        "inference.translate_text",
        "--model",
        model_dir,
        "--input_file",
        input_path,
        "--output_file",
        output_path,
        "--window_lines",
        str(window_lines),
        "--no_progress",
    ]
    started = time.perf_counter()
    child = subprocess.Popen(command)
    with ProgressSampler(child.pid, output_path, sample_seconds) as sampler:
        _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited with status {child.returncode}")
    return seconds, usage.ru_maxrss * 1024, sampler.samples  # ru_maxrss: kilobytes on Linux


def measure(model_dir, sizes, window_lines, sample_seconds=5.0):
    """`[(lines, seconds, peak RSS bytes), ...]` per file size of `sizes`, and the memory samples
    of each run (`ProgressSampler.samples`) in the same order."""
    config = artifacts.read_config(model_dir)
    pairs = load_run_pairs(config["data"], "test", artifacts.source_spelling(model_dir))
    sources = [source for source, _ in pairs]
    results, traces = [], []
    with tempfile.TemporaryDirectory() as directory:
        for count in sizes:
            input_path = os.path.join(directory, f"{count}.txt")
            output_path = os.path.join(directory, f"{count}.out.txt")
            with open(input_path, "w", encoding="utf-8") as handle:
                handle.writelines(line + "\n" for line in generated_lines(sources, count))
            seconds, peak, samples = translate_file(
                model_dir, input_path, output_path, window_lines, sample_seconds
            )
            with open(output_path, "rb") as handle:
                written = sum(1 for _ in handle)
            if written != count:
                raise RuntimeError(f"{count} lines in, {written} lines out")
            results.append((count, seconds, peak))
            traces.append(samples)
    return results, traces


def plot(results, traces, path):
    """Resident memory against lines written, one line a run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mib = 2**20
    figure, axis = plt.subplots(figsize=(8, 4))
    for (lines, _, peak), samples in zip(results, traces, strict=True):
        axis.plot([written for _, written, _ in samples],
                  [resident / mib for _, _, resident in samples],
                  ".-", markersize=3, label=f"{lines:,}-line file (peak {peak / mib:,.0f} MiB)")  # fmt: skip
    axis.set_xlabel("lines written")
    axis.set_ylabel("resident memory (MiB)")
    axis.set_ylim(bottom=0)
    axis.legend(loc="lower right")
    axis.set_title("translate-text: memory while translating a file")
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)


def markdown(model_dir, results, window_lines, command, plot_link=None):
    mib = 2**20
    rows = [
        f"| {lines:,} | {seconds:.1f} | {lines / seconds:.1f} | {peak / mib:.0f} |"
        for lines, seconds, peak in results
    ]
    (small, small_seconds, small_peak), (large, large_seconds, large_peak) = results[0], results[-1]
    marginal = (large - small) / max(large_seconds - small_seconds, 1e-9)
    return "\n".join(
        [
            f"Machine: {machine_description()}.",
            f"Command: `{command}`.",
            "",
            f"`translate-text --model {model_dir}`, greedy, its default batching, windows of "
            f"{window_lines:,} lines, on files of the test split's sources repeated with "
            "variations (as written, lower-cased, without the final mark, cut at the first "
            "comma); wall time of the whole process, start-up (TensorFlow, the model, tracing) "
            "included, and its peak resident memory (`ru_maxrss`).",
            "",
            "| lines | seconds | sentences/s | peak RSS (MiB) |",
            "|---:|---:|---:|---:|",
            *rows,
            "",
            f"Past start-up (the difference of the two runs): {marginal:.1f} sentences/s. Peak "
            f"RSS from {small:,} to {large:,} lines: {(large_peak - small_peak) / mib:+.0f} MiB.",
            *(["", f"![Resident memory against lines written]({plot_link})"] if plot_link else []),
        ]
    )


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_translate", description=__doc__
    )
    parser.add_argument(
        "--model", default=artifacts.PRETRAINED_RUN, help="a run directory or bundle"
    )
    parser.add_argument("--lines", type=int, default=4000, help="lines of the larger file")
    parser.add_argument(
        "--small_lines", type=int, help="lines of the smaller file (default: a quarter of --lines)"
    )
    parser.add_argument(
        "--window_lines",
        type=int,
        default=1000,
        help="translate-text --window_lines (its default, 10000, for a million lines)",
    )
    parser.add_argument(
        "--sample_seconds", type=float, default=5.0, help="memory sampling period for --plot"
    )
    parser.add_argument("--plot", help="PNG of resident memory against lines written")
    parser.add_argument("--output", help="Markdown file to write the section into")
    parser.add_argument("--section", default=SECTION)
    args = parser.parse_args(argv)
    small_lines = args.small_lines or max(args.lines // 4, 1)
    results, traces = measure(
        args.model, [small_lines, args.lines], args.window_lines, args.sample_seconds
    )
    plot_link = None
    if args.plot:
        plot(results, traces, args.plot)
        plot_link = shown_path(args.plot)
    command = "python -m benchmarks.bench_translate " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    text = markdown(args.model, results, args.window_lines, command.strip(), plot_link)
    print(text)
    if args.output:
        write_section(args.output, args.section, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
