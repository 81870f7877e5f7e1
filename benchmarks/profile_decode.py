"""Op profile of an exported decoding signature, as TF Serving runs it: `make bench-profile`.

The benchmark model of `benchmarks.bench_decode` (same sizes, forced output length) is exported
by `serving.export`, loaded by the TF1 SavedModel loader into a Session (`SessionSignatures`),
warmed up, then one call of the signature is traced (`RunOptions.FULL_TRACE`). The step stats
give each op's time (function bodies and while-loop iterations included), summed here by op
type: where a decoding step spends its time, to compare with CTranslate2's total for the same
batch (BENCHMARKS.md, "Decoding").
"""

import argparse
import collections
import os
import shlex
import sys
import tempfile
import time

import keras
import tensorflow as tf

from benchmarks import bench_decode
from benchmarks.report import machine_description, write_section
from common.serving_contract import BEAM_SIGNATURE
from model.tokenizer import WordPieceTokenizer


def op_times(run_metadata):
    """`{op type: (total microseconds, count)}` over every node of a traced `Session.run`."""
    totals, counts = collections.Counter(), collections.Counter()
    for device in run_metadata.step_stats.dev_stats:
        for node in device.node_stats:
            # timeline_label: "name = OpType(inputs)"; nodes without one are the executor's own.
            label = node.timeline_label
            op = label.split(" = ", 1)[1].split("(", 1)[0] if " = " in label else node.node_name
            totals[op] += node.op_end_rel_micros - node.op_start_rel_micros
            counts[op] += 1
    return {op: (totals[op], counts[op]) for op in totals}


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.profile_decode", description=__doc__
    )
    parser.add_argument("--signature", default=BEAM_SIGNATURE)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="Session intra/inter-op threads")
    parser.add_argument("--top", type=int, default=12, help="op types listed")
    parser.add_argument("--output", help="write the section into this Markdown file")
    args = parser.parse_args(argv)
    command = shlex.join(
        ["python", "-m", "benchmarks.profile_decode", *(argv if argv is not None else sys.argv[1:])]
    )
    # bench_decode's defaults: the same model and forced length as its table.
    model_args = bench_decode.parse_args([f"--threads={args.threads}"])
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    keras.utils.set_random_seed(model_args.seed)
    vocab = bench_decode.synthetic_vocab(model_args.vocab_size)
    tokenizer = WordPieceTokenizer(vocab)
    model = bench_decode.build_model(model_args)
    texts = bench_decode.random_sentences(vocab, args.batch, model_args.source_words, 0)
    with tempfile.TemporaryDirectory() as work_dir:
        path = bench_decode.export_benchmark_model(model, tokenizer, model_args, work_dir)
        signatures = bench_decode.SessionSignatures(path, args.threads)
        for _ in range(2):
            signatures(args.signature, texts)
        started = time.perf_counter()
        signatures(args.signature, texts)
        untraced = time.perf_counter() - started
        run_metadata = tf.compat.v1.RunMetadata()
        signatures(
            args.signature,
            texts,
            options=tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
            run_metadata=run_metadata,
        )
    times = op_times(run_metadata)
    total = sum(micros for micros, _ in times.values())
    ranked = sorted(times.items(), key=lambda item: -item[1][0])
    rows = "\n".join(
        f"| {op} | {micros / 1000:,.1f} | {100 * micros / total:.1f}% | {count:,} |"
        for op, (micros, count) in ranked[: args.top]
    )
    rest = sum(micros for _, (micros, _) in ranked[args.top :])
    body = f"""Command: `{command}`
Machine: {machine_description()}; load average {os.getloadavg()[0]:.2f}.
Signature `{args.signature}` of the bench model (as in "Decoding": {model_args.num_layers}+{model_args.num_layers} layers, d_model {model_args.d_model}, vocab {model_args.vocab_size}, {model_args.output_tokens} forced output tokens, beam {model_args.beam_width}), batch {args.batch}, {args.threads} thread(s), TF1 Session. One call: {1000 * untraced:,.0f} ms untraced; traced, the ops' own times sum to {total / 1000:,.0f} ms over {sum(c for _, c in times.values()):,} op runs.

| op type | ms | share | runs |
| --- | ---: | ---: | ---: |
{rows}
| (the other {len(ranked) - args.top} op types) | {rest / 1000:,.1f} | {100 * rest / total:.1f}% | |
"""
    print(body)
    if args.output:
        write_section(args.output, f"Op profile: {args.signature}, batch {args.batch}", body)


if __name__ == "__main__":
    main()
