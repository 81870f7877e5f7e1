"""Translate a file, offline: `translate-text --model pretrained/es-en < in.txt > out.txt`.

Reads one sentence a line (stdin or `--input_file`, UTF-8) and writes one line per input line,
in order (stdout or `--output_file`); a blank line gives an empty line and is not translated. The
model runs in this process, no server: a training run directory or a bundle such as
`pretrained/es-en` (through `model.translator.Translator`, with its `decoding.json` and the
flags in its place), or an exported SavedModel version (through its own signatures, whose
decoding the flags must match), as `training.evaluate` loads them. A run's translation path is
traced once and kept (`run_directory.traced_cache`, in `<run>/.traced/`): later starts load it
instead of tracing it again (`--no_cache`: trace it here, keep nothing).

The input is read in windows of `--window_lines` lines: each window's sentences are sorted by
length into batches of at most `--batch_tokens` padded source tokens (estimated from the
characters) and `--max_batch_sentences` sentences (`training.batched_translation`), translated,
and the window's lines are written in input order and flushed before the next window is read, so
memory stays flat on any file and the output grows as it goes. A source longer than the model's positional encodings is cut to
them (its last kept token becomes [END]), as the export cuts it.
"""

import argparse
import contextlib
import functools
import itertools
import json
import os
import sys

import tensorflow as tf
from tqdm import tqdm

from run_directory import artifacts, traced_cache
from training import decoding_flags
from training.batched_translation import BATCH_TOKENS, MAX_BATCH_SENTENCES, translate_window

WINDOW_LINES = 10_000
OUTPUT_FORMATS = ("text", "jsonl")
STDIN_NAME = "<stdin>"


class InputError(Exception):
    """A line of the input that is not UTF-8; the message names the file and the line."""


def load_signature(model_dir, beam_width=1, n_best=1, cache=True, **overrides):
    """`[batch]` tf.string → `{translation, score}` of an export version (its `serving_default`,
    or `beam_search` when `beam_width` > 1, whose options must equal `overrides`) or of a run
    directory (its decoding options with `overrides` in their place); with `n_best` > 1,
    `{translations, scores}` `[batch, n_best]` of the `n_best` signature (`Translator.n_best`
    with `num_hypotheses` `n_best`; an export's must have been traced with it).

    A run's signature is loaded from the traced copy a previous start kept
    (`run_directory.traced_cache`), else traced, and kept with `cache`.

    Raises:
        ValueError: an override an export was not traced with; an invalid decoding option.
    """
    if n_best > 1:
        overrides["num_hypotheses"] = n_best
    if tf.saved_model.contains_saved_model(model_dir):
        # Here, not at the top: training.evaluate's imports cost a run's start what it never
        # uses.
        from training.evaluate import export_signature

        return export_signature(model_dir, beam_width, **overrides)[0]
    return traced_cache.load_or_trace(model_dir, beam_width, cache, **overrides)


def format_record(source, hypotheses, output_format="text", with_scores=False, n_best=1):
    """The output lines (one string, newline-terminated) of one source line.

    text: one line per hypothesis, best first (`n_best` lines): the translation, or
    `score<TAB>translation` with `with_scores`. jsonl: one object,
    `{"source", "translation", "score"}`, or `{"source", "hypotheses": [{"translation",
    "score"}, ...]}` with `n_best` > 1. A blank source (`hypotheses` None) gives as many empty
    lines, or an empty translation with a null score.
    """
    if output_format == "jsonl":
        if n_best > 1:
            record = {
                "source": source,
                "hypotheses": [
                    {"translation": translation, "score": round(score, 4)}
                    for translation, score in hypotheses or []
                ],
            }
        else:
            translation, score = hypotheses[0] if hypotheses else ("", None)
            record = {
                "source": source,
                "translation": translation,
                "score": None if score is None else round(score, 4),
            }
        return json.dumps(record, ensure_ascii=False) + "\n"
    if hypotheses is None:
        return "\n" * n_best
    return "".join(
        f"{score:.4f}\t{translation}\n" if with_scores else translation + "\n"
        for translation, score in hypotheses
    )


def translate_lines(
    lines,
    output,
    translate,
    input_name=STDIN_NAME,
    window_lines=WINDOW_LINES,
    format_options=None,
    progress=None,
):
    """Translates `lines` (bytes, one source each, line ends kept or not) window by window into
    `output` (a binary file), flushed after each window.

    Args:
        translate: list of str → per source, its hypotheses or None (`translate_window`).
        format_options: `format_record`'s keyword arguments.
        progress: a tqdm bar advanced by the lines written, or None.

    Raises:
        InputError: a line is not UTF-8; every line before it is written and flushed.
    """
    format_line = functools.partial(format_record, **(format_options or {}))
    lines = iter(lines)
    line_number = 0
    while True:
        window, error = [], None
        for raw in itertools.islice(lines, window_lines):
            line_number += 1
            try:
                window.append(raw.rstrip(b"\r\n").decode("utf-8"))
            except UnicodeDecodeError as decode_error:
                error = InputError(
                    f"{input_name}:{line_number}: invalid UTF-8 (byte "
                    f"{decode_error.object[decode_error.start]:#04x} at byte {decode_error.start + 1} "
                    f"of the line); the output holds the translations of lines 1-{line_number - 1}."
                )
                break
        if window:
            records = map(format_line, window, translate(window))
            output.write("".join(records).encode("utf-8"))
            output.flush()
            if progress is not None:
                progress.update(len(window))
        if error is not None:
            raise error
        if len(window) < window_lines:
            return


def count_lines(path):
    """The number of lines of a regular file (for the progress bar's total), None otherwise."""
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as handle:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))


def build_parser():
    parser = argparse.ArgumentParser(prog="translate-text", description=__doc__)
    parser.add_argument(
        "--model",
        required=True,
        help="a training run directory, a bundle such as pretrained/es-en, or an "
        "exported SavedModel version (exports/translator/N)",
    )
    parser.add_argument("--input_file", help="one sentence a line, UTF-8 (default: stdin)")
    parser.add_argument("--output_file", help="default: stdout")
    decoding_flags.add_decoding_arguments(
        parser,
        ("beam_width", "alpha", *decoding_flags.OUTPUT_RULE_FLAGS),
        decoding_flags.RUN_OR_EXPORT_DEFAULTS,
        greedy=True,
    )
    parser.add_argument(
        "--with_scores",
        action="store_true",
        help="text output as score<TAB>translation: the signature's score (greedy: summed "
        "log-probability; beam search: length-normalized)",
    )
    parser.add_argument("--output_format", choices=OUTPUT_FORMATS, default="text")
    parser.add_argument(
        "--n_best",
        type=int,
        default=1,
        help="hypotheses per source, best first (beam search's N best, N at most --beam_width; "
        "an export's n_best signature must return N): N lines a source (an empty source: N "
        "empty lines), score<TAB>translation with --with_scores, or a jsonl 'hypotheses' list",
    )
    parser.add_argument(
        "--batch_tokens",
        type=int,
        default=BATCH_TOKENS,
        help="padded source tokens per batch, estimated from the characters",
    )
    parser.add_argument("--max_batch_sentences", type=int, default=MAX_BATCH_SENTENCES)
    parser.add_argument(
        "--window_lines",
        type=int,
        default=WINDOW_LINES,
        help="lines read, sorted and translated together before they are written",
    )
    parser.add_argument("--no_progress", action="store_true", help="no progress bar on stderr")
    traced_cache.add_no_cache_argument(parser)
    return parser


def check_arguments(parser, args):
    """Exits with status 2 and a usage error for flags that cannot work together."""
    for name in ("beam_width", "n_best", "batch_tokens", "max_batch_sentences", "window_lines"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.n_best > args.beam_width:
        parser.error(f"--n_best {args.n_best} needs --beam_width {args.n_best} or more")


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    if not os.path.isdir(args.model):
        print(
            f"error: {args.model} not found: give a training run directory, a bundle such as "
            "pretrained/es-en, or an exported SavedModel version.",
            file=sys.stderr,
        )
        return 2
    if not tf.saved_model.contains_saved_model(args.model):
        artifacts.require_trained_run(args.model)
    if args.input_file is not None and not os.path.isfile(args.input_file):
        print(f"error: {args.input_file}: no such file.", file=sys.stderr)
        return 2
    try:
        signature = load_signature(
            args.model,
            args.beam_width,
            args.n_best,
            not args.no_cache,
            alpha=args.alpha,
            **decoding_flags.output_rules(args),
        )
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1

    def translate(sources):
        return translate_window(sources, signature, args.batch_tokens, args.max_batch_sentences)

    format_options = {
        "output_format": args.output_format,
        "with_scores": args.with_scores,
        "n_best": args.n_best,
    }
    input_name = args.input_file or STDIN_NAME
    total = count_lines(args.input_file) if args.input_file else None
    with (
        open(args.input_file, "rb")
        if args.input_file
        else contextlib.nullcontext(sys.stdin.buffer) as source,
        open(args.output_file, "wb")
        if args.output_file
        else contextlib.nullcontext(sys.stdout.buffer) as sink,
        tqdm(
            total=total,
            desc="translating",
            unit="line",
            file=sys.stderr,
            disable=args.no_progress,
        ) as progress,
    ):
        try:
            translate_lines(
                source, sink, translate, input_name, args.window_lines, format_options, progress
            )
        except InputError as error:
            progress.close()
            print(f"error: {error}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
