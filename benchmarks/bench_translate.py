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
import contextlib
import io
import itertools
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from benchmarks.report import machine_description, shown_path, write_section
from inference.translate_text import BATCH_TOKENS
from run_directory import artifacts
from training.corpus import apertium, load_run_pairs
from training.corpus.loading import EVERYDAY_DIR
from training.mixture import load_splits, parse_data

SECTION = "Translating a file offline (translate-text)"
PEERS_SECTION = "Translating a file offline: beside CTranslate2 and Apertium"
TRANSLATE_TEXT = "translate-text (TensorFlow)"
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
                launcher = psutil.Process(self.pid)
                resident = sum(p.memory_info().rss for p in launcher.children(recursive=True))
            except psutil.Error:  # Exited between two samples.
                return
            elapsed = time.perf_counter() - self._started
            self.samples.append((elapsed, self.lines_written(), resident))


def translate_text_command(model_dir, input_path, output_path, window_lines, beam_width=1):
    """The `translate-text` command line of a file."""
    return [
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
        "--beam_width",
        str(beam_width),
        "--no_progress",
    ]


def translate_file(model_dir, input_path, output_path, window_lines, sample_seconds=5.0):
    """`(seconds, peak RSS in bytes, samples)` of `translate-text` run as a child process on the
    file; `samples` as `ProgressSampler.samples`."""
    command = translate_text_command(model_dir, input_path, output_path, window_lines)
    return run_child(command, output_path, sample_seconds)


# Runs a command and prints its peak resident memory (kilobytes) to stderr's last line. A
# process's peak counts what it held when it was forked: a command started straight from this
# process (TensorFlow loaded) would report at least this process's memory, so a small launcher
# that never loads anything starts it.
_LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(usage.ru_maxrss, file=sys.stderr)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_child(command, output_path, sample_seconds=5.0):
    """`(seconds, peak RSS in bytes, samples)` of `command`, a child process that writes
    `output_path`; `samples` as `ProgressSampler.samples`."""
    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-S", "-c", _LAUNCHER, *command], stderr=subprocess.PIPE
    )
    with ProgressSampler(child.pid, output_path, sample_seconds) as sampler:
        _, errors = child.communicate()
    seconds = time.perf_counter() - started
    lines = errors.decode("utf-8", "replace").strip().splitlines()
    if child.returncode != 0 or not lines:
        raise RuntimeError(
            f"{' '.join(command)} exited with status {child.returncode}: " + "\n".join(lines[-20:])
        )
    return seconds, int(lines[-1]) * 1024, sampler.samples  # ru_maxrss: kilobytes on Linux


def run_test_sources(model_dir):
    """The sources of the test splits of every corpus the run trained on (its `data`, a mix of
    several as the bundle's is), as the run reads them (`training.mixture.load_splits`)."""
    config = artifacts.read_config(model_dir)
    splits = load_splits(
        parse_data(config["data"]),
        "test",
        run_source_spelling=artifacts.source_spelling(model_dir),
        reverse=config.get("reverse", False),
    )
    return [source for pairs in splits.values() for source, _ in pairs]


def measure(model_dir, sizes, window_lines, sample_seconds=5.0):
    """`[(lines, seconds, peak RSS bytes), ...]` per file size of `sizes`, and the memory samples
    of each run (`ProgressSampler.samples`) in the same order."""
    sources = run_test_sources(model_dir)
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


# A file translated by CTranslate2 as its users translate one: `Translator.translate_file`
# on the converted model, SentencePiece in Python around it (the run's `spm.*.model`, whose
# pieces and ids are the run's vocabulary), batches of translate-text's token budget, every
# core (intra_threads 0), [PAD] never emitted as the project decodes. Run as `python -c`:
# nothing of the project (whose packages load TensorFlow) is imported, as nothing of it is in a
# CTranslate2 user's process; so neither are the run's casing, accent restoration and
# placeholders applied (the speed of the model, not of the same translations).
_CT2_CHILD = """
import sys
import ctranslate2, sentencepiece
(model_dir, source_model, target_model, source, output, compute_type, beam, positions,
 batch_tokens) = sys.argv[1:]
source_pieces = sentencepiece.SentencePieceProcessor(model_file=source_model)
target_pieces = sentencepiece.SentencePieceProcessor(model_file=target_model)
translator = ctranslate2.Translator(
    model_dir, device="cpu", compute_type=compute_type, inter_threads=1, intra_threads=0
)
translator.translate_file(
    source, output, max_batch_size=int(batch_tokens), batch_type="tokens",
    beam_size=int(beam), suppress_sequences=[["[PAD]"]],
    max_input_length=int(positions) - 2, max_decoding_length=int(positions),
    source_tokenize_fn=source_pieces.encode_as_pieces,
    target_detokenize_fn=target_pieces.decode_pieces,
)
"""


def sentencepiece_models(model_dir):
    """`(source model, target model)`: the paths of a run's SentencePiece models, the same file
    twice for a shared vocabulary."""
    tokenizer_dir = Path(model_dir) / artifacts.TOKENIZER_DIR
    shared = tokenizer_dir / "spm.shared.model"
    if shared.is_file():
        return shared, shared
    return tokenizer_dir / "spm.src.model", tokenizer_dir / "spm.tgt.model"


def peer_commands(model_dir, ct2_dirs, beam_width, window_lines):
    """`{system: command(input path, output path)}`: translate-text, CTranslate2 on the same
    weights at each compute type of `ct2_dirs` (`{compute type: converted model}`,
    `_CT2_CHILD`) at the same beam width, and Apertium in the run's direction (`spa-eng`, or
    `eng-spa` for a reversed run; when it runs here, `training.corpus.apertium`)."""
    config = artifacts.read_config(model_dir)
    positions = str(config["max_sequence_length"])
    source_model, target_model = sentencepiece_models(model_dir)
    commands = {
        TRANSLATE_TEXT: lambda source, output: translate_text_command(
            model_dir, source, output, window_lines, beam_width
        )
    }
    for compute_type, ct2_dir in ct2_dirs.items():
        commands[f"CTranslate2 {compute_type}"] = (
            lambda source, output, ct2_dir=ct2_dir, compute_type=compute_type: [
                sys.executable,
                "-c",
                _CT2_CHILD,
                ct2_dir,
                str(source_model),
                str(target_model),
                source,
                output,
                compute_type,
                str(beam_width),
                positions,
                str(BATCH_TOKENS),
            ]  # fmt: skip
        )
    try:
        apertium.ensure_apertium()
        direction = apertium.run_direction(config.get("reverse", False))
        commands[f"Apertium {apertium.apertium_version()} {direction}"] = lambda source, output: [
            "apertium",
            "-u",
            direction,
            source,
            output,
        ]
    except apertium.CorpusError as error:
        print(f"Apertium left out: {error}", file=sys.stderr)
    return commands


def compare(model_dir, sizes, beam_width, window_lines, directory):
    """`{system: [(lines, seconds, peak RSS bytes) per size]}` of `peer_commands` on files of
    the everyday test sentences and the Bible's test verses repeated with variations
    (`generated_lines`), the systems interleaved at each size; the CTranslate2 models are
    converted into `directory`."""
    from inference.export_ctranslate2 import main as export_ctranslate2

    ct2_dirs = {}
    for compute_type in ("float32", "int8"):
        ct2_dirs[compute_type] = os.path.join(directory, f"ct2-{compute_type}")
        arguments = ["--run_dir", model_dir, "--output_dir", ct2_dirs[compute_type]]
        with contextlib.redirect_stdout(io.StringIO()):  # its how-to-call notes, once per model
            export_ctranslate2([*arguments, "--quantization", compute_type])
    commands = peer_commands(model_dir, ct2_dirs, beam_width, window_lines)
    reverse = artifacts.read_config(model_dir).get("reverse", False)
    sources = [
        source
        for spec in (str(EVERYDAY_DIR), "bible")
        for source, _ in load_run_pairs(spec, "test", reverse=reverse)
    ]
    results = {system: [] for system in commands}
    for count in sizes:
        input_path = os.path.join(directory, f"{count}.txt")
        with open(input_path, "w", encoding="utf-8") as handle:
            handle.writelines(line + "\n" for line in generated_lines(sources, count))
        for system, command in commands.items():
            output_path = os.path.join(directory, f"{count}.out.txt")
            seconds, peak, _ = run_child(command(input_path, output_path), output_path)
            with open(output_path, "rb") as handle:
                written = sum(1 for _ in handle)
            if written != count:
                raise RuntimeError(f"{system}: {count} lines in, {written} lines out")
            results[system].append((count, seconds, peak))
    return results


def peers_markdown(model_dir, results, beam_width, command):
    """The comparison's section: a row per system, sentences/s with start-up and past it."""
    mib = 2**20
    lines = [
        f"Machine: {machine_description()}.",
        f"Command: `{command}`.",
        "",
        f"`{os.path.basename(os.path.normpath(model_dir))}` on files of the everyday test "
        "sentences and the Bible's test verses repeated with variations (as written, "
        "lower-cased, without the final mark, cut at the first comma), "
        f"{'greedy' if beam_width == 1 else f'beam {beam_width}'}, each system a fresh "
        "process, the systems interleaved; CTranslate2 on the same weights "
        "(`inference.export_ctranslate2`), SentencePiece in Python, every core, token-budget "
        "batches as translate-text's. Start-up is what the smaller file's time holds beyond "
        "its lines at the rate past start-up.",
        "",
        "| system | sentences/s, start-up included | sentences/s past start-up | start-up (s) "
        "| peak RSS (MiB) |",
        "|---|---:|---:|---:|---:|",
    ]
    for system, runs in results.items():
        (small, small_seconds, _), (large, large_seconds, _) = runs[0], runs[-1]
        rate = (large - small) / max(large_seconds - small_seconds, 1e-9)
        start_up = max(small_seconds - small / rate, 0.0)
        lines.append(
            f"| {system} | {large / large_seconds:.1f} | {rate:.1f} | {start_up:.1f} | "
            f"{max(r[2] for r in runs) / mib:.0f} |"
        )
    baseline = results.get("CTranslate2 float32")
    if baseline and TRANSLATE_TEXT in results:
        ours, theirs = results[TRANSLATE_TEXT][-1], baseline[-1]
        lines += [
            "",
            f"translate-text against CTranslate2 float32 on the {ours[0]:,}-line file, start-up "
            f"included: {theirs[1] / ours[1]:.2f}× its speed.",
        ]
    return "\n".join(lines)


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
            f"{window_lines:,} lines, on files of the test splits' sources repeated with "
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
    parser.add_argument(
        "--peers",
        action="store_true",
        help="instead: translate-text beside CTranslate2 float32 and int8 on the same weights "
        "and Apertium, on the everyday and Bible test sentences",
    )
    parser.add_argument(
        "--peers_beam", type=int, default=1, help="--peers: every system's beam (default: 1)"
    )
    args = parser.parse_args(argv)
    command = "python -m benchmarks.bench_translate " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    if args.peers:
        with tempfile.TemporaryDirectory() as directory:
            results = compare(
                args.model,
                [args.small_lines or max(args.lines // 4, 1), args.lines],
                args.peers_beam,
                args.window_lines,
                directory,
            )
        text = peers_markdown(args.model, results, args.peers_beam, command.strip())
        print(text)
        if args.output:
            write_section(args.output, PEERS_SECTION, text)
        return 0
    small_lines = args.small_lines or max(args.lines // 4, 1)
    results, traces = measure(
        args.model, [small_lines, args.lines], args.window_lines, args.sample_seconds
    )
    plot_link = None
    if args.plot:
        plot(results, traces, args.plot)
        plot_link = shown_path(args.plot)
    text = markdown(args.model, results, args.window_lines, command.strip(), plot_link)
    print(text)
    if args.output:
        write_section(args.output, args.section, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
