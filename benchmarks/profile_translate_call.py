"""Where a translation call's time goes: `python -m benchmarks.profile_translate_call`.

translate-text spends its time past start-up in calls of the run's greedy signature on batches
of sentences. One such call is timed whole, with the word repair off, and its source side
alone (`Translator.source_lengths`: the cut to what the model reads, renaming, placeholders and
tokenization, as the signatures run them); what the repair costs and what is left for the
decoding loop and the detokenization are the differences. Each function is traced once and
called on the same batch of everyday test sentences, the calls interleaved after a warm-up.
"""

import argparse
import dataclasses
import sys

import tensorflow as tf

from benchmarks.bench_decode import time_cases
from benchmarks.report import command_line, machine_description, publish
from model.translator import Translator, traced
from run_directory import artifacts
from training.corpus import load_pairs

SECTION = "Translating a file offline: where a call's time goes"
EVERYDAY = "training/everyday"
WHOLE, NO_REPAIR, SOURCE_SIDE = "the whole greedy call", "the same, repair off", "source side"


def markdown(run_dir, sentences, seconds, rounds, command):
    """The section: a row per part of the call, the measured ones and the differences."""
    whole, no_repair, source_side = (seconds[name][0] for name in (WHOLE, NO_REPAIR, SOURCE_SIDE))
    parts = [
        (WHOLE, whole),
        ("the word repair (whole − repair off)", whole - no_repair),
        ("source side: cut, renaming, placeholders, tokenization", source_side),
        ("decoding loop and detokenization (repair off − source side)", no_repair - source_side),
    ]
    rows = [f"| {name} | {value:.3f} | {100 * value / whole:.0f}% |" for name, value in parts]
    return "\n".join(
        [
            f"Machine: {machine_description()}.",
            f"Command: `{command}`.",
            "",
            f"`{run_dir}`'s greedy signature (`Translator.greedy`, with its decoding.json, traced "
            f"as the export traces it) on one batch of the first {sentences} everyday test "
            f"sentences; medians of {rounds} interleaved rounds after a warm-up call, seconds a "
            "call. The last two rows are differences of measured calls.",
            "",
            "| part of the call | s | share |",
            "| --- | ---: | ---: |",
            *rows,
        ]
    )


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.profile_translate_call", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--run_dir", default=artifacts.PRETRAINED_RUN)
    parser.add_argument("--sentences", type=int, default=256, help="the batch's sentences")
    parser.add_argument("--rounds", type=int, default=5, help="timed calls of each part")
    parser.add_argument("--output", help="Markdown file to write the section into")
    args = parser.parse_args(argv)
    model, source_tokenizer, target_tokenizer, _ = artifacts.load_trained(args.run_dir)
    options = artifacts.decoding_options(args.run_dir)
    text_spec = tf.TensorSpec([None], tf.string)

    def translator(**changes):
        return Translator(
            model, source_tokenizer, target_tokenizer, dataclasses.replace(options, **changes)
        )

    sources = [source for source, _ in load_pairs(EVERYDAY, "test")[: args.sentences]]
    batch = tf.constant(sources)
    cases = [
        (WHOLE, traced(translator().greedy, text_spec), len(sources), batch),
        (NO_REPAIR, traced(translator(repair_words=False).greedy, text_spec), len(sources), batch),
        (SOURCE_SIDE, traced(translator().source_lengths, text_spec), len(sources), batch),
    ]
    timed = time_cases(cases, args.rounds, warmup=1)
    seconds = {name: timed[(name, len(sources))] for name, *_ in cases}
    command = command_line("benchmarks.profile_translate_call", argv)
    text = markdown(args.run_dir, len(sources), seconds, args.rounds, command)
    publish(text, args.output, SECTION)
    return 0


if __name__ == "__main__":
    sys.exit(main())
