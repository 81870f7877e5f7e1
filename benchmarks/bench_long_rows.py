"""What a long row costs: 64 rows of 16 KiB against 64 everyday sentences (into BENCHMARKS.md,
its section "Serving: long rows").

The local server accepts strings of up to 16 KiB (`--max_input_string_bytes`) and 64 rows in a
run (`--max_rows_per_run`); the model reads a source's first tokens only (its positional
encodings). This times the served greedy signature's graph (`Translator.greedy`, traced as the
export traces it) on 64 rows of each kind, in interleaved rounds (`bench_decode.time_cases`):

- everyday sentences (`benchmarks.sentences`), a few tokens each;
- `LONG_ROWS`, rows of up to 16 KiB of every kind the steps before the model's cut find costly;
- the same rows cut to what the model reads of them (`model.translator.cut_to_words`): what
  they cost the model itself, decoding included, and the least they can cost.
"""

import argparse
import sys

import tensorflow as tf

from benchmarks.bench_decode import time_cases
from benchmarks.report import command_line, machine_description, publish
from benchmarks.sentences import SPANISH_SENTENCES
from model.translator import READ_WORDS_PER_TOKEN, Translator, cut_to_words, traced
from run_directory import artifacts

SECTION = "Serving: long rows"
ROWS = 64
# Rows of up to 16 KiB (the local server's --max_input_string_bytes) of every kind the steps
# before the model's cut find costly: many words, many capitalized or unknown ones to protect,
# numbers, no whitespace, one word, whitespace runs.
LONG_ROWS = (
    "a " * 8191,
    "A " * 8191,
    ("la casa de mi padre tiene muchas moradas, dijo Kalomir. " * 300)[:16382],
    " ".join(f"Nombre{index} {index}" for index in range(1500))[:16382],
    "a," * 8191,
    "a" * 16382,
    " " * 8000 + "Dónde está mi hermano? " * 300,
    "¿Dónde está mi hermano? " * 600,
)
EVERYDAY, LONG, CUT = "64 everyday sentences", "64 rows of up to 16 KiB", "the same rows, cut"


def batches(translator: Translator) -> dict[str, list[str]]:
    """The 64 rows of each kind, by name."""
    long_rows = [LONG_ROWS[index % len(LONG_ROWS)] for index in range(ROWS)]
    count = READ_WORDS_PER_TOKEN * translator.model.pe_input
    cut = [row.decode("utf-8") for row in cut_to_words(tf.constant(long_rows), count).numpy()]
    everyday = [SPANISH_SENTENCES[index % len(SPANISH_SENTENCES)] for index in range(ROWS)]
    return {EVERYDAY: everyday, LONG: long_rows, CUT: cut}


def markdown(run_dir: str, seconds: dict, rounds: int, command: str) -> str:
    """The section: a row per kind, median and fastest of `seconds` ({name: (median, least)})."""
    rows = [f"| {name} | {median:.3f} | {least:.3f} |" for name, (median, least) in seconds.items()]
    long_median, cut_median = seconds[LONG][0], seconds[CUT][0]
    return "\n".join(
        [
            f"Machine: {machine_description()}.",
            f"Command: `{command}`.",
            "",
            f"`{run_dir}`'s greedy signature (`Translator.greedy`, traced as the export traces "
            f"it), one call of 64 rows of each kind a round, {rounds} interleaved rounds after "
            "one warm-up call; seconds a call. The long rows are `benchmarks.bench_long_rows."
            "LONG_ROWS`; cut, each is what the model reads of it (`cut_to_words`), which "
            "decodes to the longest outputs the model gives.",
            "",
            "| 64 rows | median s | fastest s |",
            "| --- | ---: | ---: |",
            *rows,
            "",
            f"The long rows cost **{long_median / cut_median:.2f}×** what the model reads of "
            "them does.",
        ]
    )


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_long_rows", description=__doc__
    )
    parser.add_argument("--run_dir", default=artifacts.PRETRAINED_RUN)
    parser.add_argument("--rounds", type=int, default=5, help="timed calls of each kind")
    parser.add_argument("--output", help="Markdown file to write the section into")
    args = parser.parse_args(argv)
    model, source_tokenizer, target_tokenizer, _ = artifacts.load_trained(args.run_dir)
    options = artifacts.decoding_options(args.run_dir)  # Its decoding.json, as its export.
    translator = Translator(model, source_tokenizer, target_tokenizer, options)
    greedy = traced(translator.greedy, tf.TensorSpec([None], tf.string))
    cases = [
        (name, greedy, ROWS, tf.constant(texts)) for name, texts in batches(translator).items()
    ]
    timed = time_cases(cases, args.rounds, warmup=1)
    seconds = {name: timed[(name, ROWS)] for name, *_ in cases}
    command = command_line("benchmarks.bench_long_rows", argv)
    text = markdown(args.run_dir, seconds, args.rounds, command)
    publish(text, args.output, SECTION)
    return 0


if __name__ == "__main__":
    sys.exit(main())
