"""Decoding cost as work grows: `make bench-decode`'s length rows (into BENCHMARKS.md).

The model and the forced lengths of `benchmarks.bench_decode` (random weights, [END] made
impossible): ms per sentence against

- the output length (`--output_lengths`, sources of `--source_words` words): one export per
  length, since the served graph's output bound (`max_length_offset`) is baked at export;
- the source length (`--source_lengths` words, `--fixed_output` tokens out): one export,

for the served graph (the TF1 Session that TF Serving runs, greedy and beam search) and for
CTranslate2 float32 on the same weights (greedy and beam, `min_decoding_length =
max_decoding_length`), timed in interleaved rounds (`bench_decode.time_cases`). The section
gives the table, the time per output token (where it rises, the cost of a step grows with the
position), and a plot in docs/.
"""

import argparse
import copy
import functools
import os
import shlex
import sys
import tempfile

import keras
import tensorflow as tf

from benchmarks import bench_decode
from benchmarks.report import machine_description, write_section
from common.serving_contract import BEAM_SIGNATURE, GREEDY_SIGNATURE
from inference.export_ctranslate2 import source_pieces
from model.tokenizer import WordPieceTokenizer
from training import decoding_flags

SECTION_TITLE = "Decoding cost as work grows"
PLOT_PATH = os.path.join("docs", "decode_cost_vs_length.png")
SERVED_GREEDY, SERVED_BEAM = "served greedy", "served beam {beam}"
CT2_GREEDY, CT2_BEAM = "CTranslate2 float32 greedy", "CTranslate2 float32 beam {beam}"
OUTPUT, SOURCE = "output", "source"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_length",
        description="ms per sentence against output and source length, served graph and "
        "CTranslate2 float32 (see the module docstring).",
    )
    parser.add_argument("--output_lengths", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    parser.add_argument("--source_lengths", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    parser.add_argument("--source_words", type=int, default=20, help="words a source, output sweep")
    parser.add_argument("--fixed_output", type=int, default=64, help="tokens out, source sweep")
    parser.add_argument("--batch_size", type=int, default=1)
    decoding_flags.add_decoding_arguments(parser, ("beam_width",), decoding_flags.FIELD_DEFAULTS)
    parser.add_argument("--threads", type=int, default=1, help="TensorFlow and CTranslate2 threads")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per case (median)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--output", help="Markdown file to write the section into")
    parser.add_argument("--plot", default=PLOT_PATH, help="PNG of the curves")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for name in ("output_lengths", "source_lengths"):
        if min(getattr(args, name)) < 1:
            parser.error(f"--{name} must be positive")
    return args


def model_args(args):
    """`bench_decode`'s options (its model sizes) with positions for the longest case."""
    # Sources carry [START] and [END]; the margin keeps every position in range.
    sources = max(*args.source_lengths, args.source_words) + 2
    longest = max(*args.output_lengths, args.fixed_output, sources) + 8
    return bench_decode.parse_args(
        [
            "--max_positions",
            str(longest),
            "--output_tokens",
            str(args.fixed_output),
            "--beam_width",
            str(args.beam_width),
            "--threads",
            str(args.threads),
            "--seed",
            str(args.seed),
        ]
    )


def length_cases(args, model, tokenizer, vocab, work_dir):
    """`[(curve, length, decoder name, function, input)]` for `time_cases` (`curve`: OUTPUT or
    SOURCE), each served export checked to produce exactly its forced length."""
    base = model_args(args)
    beam = dict(beam=args.beam_width)
    ct2 = bench_decode.ctranslate2_decoders(model, vocab, base, work_dir)
    ct2 = {
        CT2_GREEDY: ct2[bench_decode.CT2_GREEDY.format(precision="float32")],
        CT2_BEAM.format(**beam): ct2[
            bench_decode.CT2_BEAM.format(precision="float32", beam=args.beam_width)
        ],
    }

    def served(output_tokens):
        options = copy.copy(base)
        options.output_tokens = output_tokens
        export_dir = bench_decode.export_benchmark_model(
            model, tokenizer, options, os.path.join(work_dir, f"out{output_tokens}")
        )
        return bench_decode.SessionSignatures(export_dir, args.threads)

    def texts(words):
        return bench_decode.random_sentences(vocab, args.batch_size, words, args.seed)

    def add(curve, length, signatures, sources, output_tokens):
        produced = bench_decode.mean_output_tokens(signatures, sources)
        if produced != output_tokens:
            raise RuntimeError(f"the export produced {produced} tokens, not {output_tokens}")
        pieces = source_pieces(tokenizer, sources)
        forced = dict(min_decoding_length=output_tokens, max_decoding_length=output_tokens)
        for name, signature in ((SERVED_GREEDY, GREEDY_SIGNATURE), (SERVED_BEAM, BEAM_SIGNATURE)):
            function = functools.partial(signatures, signature)
            cases.append((curve, length, name.format(**beam), function, sources))
        for name, decoder in ct2.items():
            cases.append((curve, length, name, functools.partial(decoder, **forced), pieces))

    cases = []
    for output_tokens in args.output_lengths:
        add(OUTPUT, output_tokens, served(output_tokens), texts(args.source_words), output_tokens)
    fixed = served(args.fixed_output)
    for words in args.source_lengths:
        add(SOURCE, words, fixed, texts(words), args.fixed_output)
    return cases


def measure(args):
    """`{(curve, length, decoder name): ms per sentence (median)}`."""
    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    keras.utils.set_random_seed(args.seed)
    base = model_args(args)
    vocab = bench_decode.synthetic_vocab(base.vocab_size)
    tokenizer = WordPieceTokenizer(vocab)
    model = bench_decode.build_model(base)
    with tempfile.TemporaryDirectory() as work_dir:
        cases = length_cases(args, model, tokenizer, vocab, work_dir)
        timed = bench_decode.time_cases(
            [
                ((curve, length, name), function, 0, argument)
                for curve, length, name, function, argument in cases
            ],
            args.repeats,
            args.warmup,
        )
    return {key: 1000 * median / args.batch_size for (key, _), (median, _) in timed.items()}


def decoder_names(results):
    return list(dict.fromkeys(name for _, _, name in results))


def plot(args, results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for axis, curve, lengths, label in (
        (axes[0], OUTPUT, args.output_lengths, f"output tokens (source {args.source_words} words)"),
        (axes[1], SOURCE, args.source_lengths, f"source words ({args.fixed_output} tokens out)"),
    ):
        for name in decoder_names(results):
            style = "--" if name.startswith("CTranslate2") else "-"
            axis.plot(
                lengths, [results[(curve, n, name)] for n in lengths], style, marker="o", label=name
            )
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xticks(lengths, [str(n) for n in lengths])
        axis.set_xlabel(label)
        axis.set_ylabel(f"ms per sentence (batch {args.batch_size})")
        axis.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    figure.suptitle("Decoding cost as work grows (same weights, one thread)")
    figure.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)


def markdown(args, results, command, plot_link):
    names = decoder_names(results)
    lines = [
        f"Command: `{command}`. Machine: {machine_description()}. Model and forcing as in "
        f"[Decoding](#decoding) (3+3 layers, d_model 256, random weights, [END] impossible); "
        f"batch {args.batch_size}, {args.threads} thread(s), median of {args.repeats} "
        "interleaved rounds.",
        "",
        f"![decoding cost against output and source length]({plot_link})",
        "",
        f"ms per sentence against the output length (sources of {args.source_words} words), "
        "and in brackets ms per output token:",
        "",
        "| output tokens | " + " | ".join(names) + " |",
        "| ---: |" + " ---: |" * len(names),
    ]
    for length in args.output_lengths:
        cells = [
            f"{results[(OUTPUT, length, name)]:.1f} ({results[(OUTPUT, length, name)] / length:.2f})"
            for name in names
        ]
        lines.append(f"| {length} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"ms per sentence against the source length ({args.fixed_output} output tokens):",
        "",
        "| source words | " + " | ".join(names) + " |",
        "| ---: |" + " ---: |" * len(names),
    ]
    for length in args.source_lengths:
        cells = [f"{results[(SOURCE, length, name)]:.1f}" for name in names]
        lines.append(f"| {length} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    command = shlex.join(
        ["python", "-m", "benchmarks.bench_length", *(argv if argv is not None else sys.argv[1:])]
    )
    results = measure(args)
    plot(args, results, args.plot)
    plot_link = os.path.relpath(args.plot, os.path.dirname(args.output or ".") or ".")
    body = markdown(args, results, command, plot_link)
    print(body)
    if args.output:
        write_section(args.output, SECTION_TITLE, body)


if __name__ == "__main__":
    main()
