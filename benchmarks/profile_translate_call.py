"""Where a translation call's time goes: `python -m benchmarks.profile_translate_call`.

translate-text spends its time past start-up in calls of the run's greedy signature on batches
of sentences. One such call is timed whole, with the word repair off, and its source side
alone (`Translator.source_lengths`: the cut to what the model reads, renaming, placeholders and
tokenization, as the signatures run them); what the repair costs and what is left for the
decoding loop and the detokenization are the differences. Each function is traced once and
called on the same batch of everyday test sentences, the calls interleaved after a warm-up.

`--peer_lines N` then compares the decoding with CTranslate2's on the same weights
(`inference.export_ctranslate2`, float32), batch by batch: the first N lines of
`bench_translate`'s file (the everyday and Bible test sentences and their variations), cut into
translate-text's batches (`length_batches`), each translated by the greedy signature without
what CTranslate2 does not do (the word repair, the n-gram block) and by CTranslate2's
`translate_batch` on the same subword pieces, interleaved. Which batches the gap is in says
what it grows with.
"""

import argparse
import contextlib
import dataclasses
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import tensorflow as tf

from benchmarks.bench_decode import time_cases
from benchmarks.bench_translate import generated_lines, sentencepiece_models
from benchmarks.report import command_line, machine_description, publish
from model.translator import Translator, traced
from run_directory import artifacts
from training.batched_translation import length_batches
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


# Times CTranslate2 on batches of subword pieces in a process of its own, as its users run it:
# in this process, beside TensorFlow's thread pools, it ran slower and more unevenly.
_PEER_CHILD = """
import json, statistics, sys, time
import ctranslate2
model_dir, batches_path, positions, rounds = sys.argv[1:]
with open(batches_path, encoding="utf-8") as handle:
    batches = json.load(handle)
peer = ctranslate2.Translator(model_dir, device="cpu", compute_type="float32")
def run(tokens):
    return peer.translate_batch(
        tokens, max_batch_size=len(tokens), max_input_length=int(positions) - 2,
        max_decoding_length=int(positions), suppress_sequences=[["[PAD]"]])
outputs = [statistics.mean(len(r.hypotheses[0]) for r in run(tokens)) for tokens in batches]
times = [[] for _ in batches]
for _ in range(int(rounds)):
    for tokens, seconds in zip(batches, times):
        started = time.perf_counter()
        run(tokens)
        seconds.append(time.perf_counter() - started)
print(json.dumps([outputs, [statistics.median(seconds) for seconds in times]]))
"""


def peer_batches(run_dir, translator, lines, rounds):
    """`[(sentences, mean source pieces, mean output pieces, seconds, CTranslate2's seconds)]`
    per translate-text batch of `lines`, each side warmed up on every batch, then `rounds`
    rounds over the batches (medians): `translator`'s greedy signature (`[batch]` strings) here,
    CTranslate2 float32 on the same weights and subword pieces in a child process
    (`_PEER_CHILD`)."""
    import sentencepiece

    from inference.export_ctranslate2 import main as export_ctranslate2

    pieces = sentencepiece.SentencePieceProcessor(model_file=str(sentencepiece_models(run_dir)[0]))
    greedy = traced(translator.greedy, tf.TensorSpec([None], tf.string))
    batches = [[lines[index] for index in batch] for batch in length_batches(lines)]
    inputs = [tf.constant(texts) for texts in batches]
    for text in inputs:
        greedy(text)["translation"].numpy()
    seconds = [[] for _ in batches]
    for _ in range(rounds):
        for text, times in zip(inputs, seconds):
            started = time.perf_counter()
            greedy(text)["translation"].numpy()
            times.append(time.perf_counter() - started)
    tokens = [[pieces.encode_as_pieces(text) for text in texts] for texts in batches]
    with tempfile.TemporaryDirectory() as directory:
        with contextlib.redirect_stdout(io.StringIO()):  # its how-to-call notes
            export_ctranslate2(["--run_dir", run_dir, "--output_dir", directory + "/ct2"])
        with open(os.path.join(directory, "batches.json"), "w", encoding="utf-8") as handle:
            json.dump(tokens, handle)
        positions = str(artifacts.read_config(run_dir)["max_sequence_length"])
        arguments = [directory + "/ct2", os.path.join(directory, "batches.json"), positions]
        result = subprocess.run(
            [sys.executable, "-c", _PEER_CHILD, *arguments, str(rounds)],
            capture_output=True,
            text=True,
            check=True,
        )
    outputs, peer_seconds = json.loads(result.stdout.strip().splitlines()[-1])
    return [
        (len(texts), statistics.mean(map(len, batch)), output, statistics.median(times), peer)
        for texts, batch, output, times, peer in zip(
            batches, tokens, outputs, seconds, peer_seconds, strict=True
        )
    ]


def peer_markdown(rows, lines):
    """The batch-by-batch comparison's table and totals."""
    ours, theirs = sum(row[3] for row in rows), sum(row[4] for row in rows)
    table = [
        "",
        f"The first {lines} lines of `benchmarks.bench_translate`'s file in translate-text's "
        "batches, shortest first; greedy, the word repair and the n-gram block off; CTranslate2 "
        "float32 on the same weights and subword pieces (`translate_batch`, every core, in a "
        "process of its own); each side warmed up on every batch, then medians of the rounds "
        "over them, seconds a batch:",
        "",
        "| sentences | source pieces | output pieces (CTranslate2's) | greedy signature | "
        "CTranslate2 | × CTranslate2's time |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
        *(
            f"| {count} | {source:.1f} | {output:.1f} | {mine:.3f} | {peer:.3f} | "
            f"{mine / peer:.2f}× |"
            for count, source, output, mine, peer in rows
        ),
        f"| all {sum(row[0] for row in rows)} | | | {ours:.3f} | {theirs:.3f} | "
        f"{ours / theirs:.2f}× |",
    ]
    return "\n".join(table)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.profile_translate_call", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--run_dir", default=artifacts.PRETRAINED_RUN)
    parser.add_argument("--sentences", type=int, default=256, help="the batch's sentences")
    parser.add_argument("--rounds", type=int, default=5, help="timed calls of each part")
    parser.add_argument(
        "--peer_lines",
        type=int,
        default=0,
        help="also compare with CTranslate2 float32 batch by batch on this many lines of "
        "bench_translate's file (0: not)",
    )
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
    if args.peer_lines:
        sentences = [source for source, _ in load_pairs(EVERYDAY, "test")]
        sentences += [source for source, _ in load_pairs("bible", "test")]
        lines = generated_lines(sentences, args.peer_lines)
        bare = translator(repair_words=False, no_repeat_ngram_size=0)
        text += "\n" + peer_markdown(
            peer_batches(args.run_dir, bare, lines, args.rounds), len(lines)
        )
    publish(text, args.output, SECTION)
    return 0


if __name__ == "__main__":
    sys.exit(main())
