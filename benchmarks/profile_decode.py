"""Op profile of an exported decoding signature, as TF Serving runs it: `make bench-profile`.

The benchmark model of `benchmarks.bench_decode` (same sizes, forced output length) is exported
by `inference.export`, loaded into a TF1 Session as the model server loads it (`SessionSignatures`),
warmed up, then one call of the signature is traced (`RunOptions.FULL_TRACE`). The step stats
give each op's time (function bodies and while-loop iterations included), summed here by op
type: where a decoding step spends its time, to compare with CTranslate2's total for the same
batch (BENCHMARKS.md, "Decoding").

With `--jit_compile` the export is compiled by XLA, whose program is one op for the Session's
step stats; the call is then traced by TensorFlow's profiler with XLA's per-instruction trace
events on (`--xla_cpu_enable_xprof_traceme`), and the time is summed by XLA instruction
(`xla_op_times`): each fusion, matrix product, gather or loop of the compiled program.
"""

import argparse
import collections
import glob
import os
import re
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
from training import decoding_flags

# Op types and XLA instructions that multiply matrices: MatMul, BatchMatMulV2, _MklMatMul;
# XLA's dot, and the fusions it names after one (dot_add_fusion).
MATRIX_PRODUCT = re.compile(r"matmul|dot", re.IGNORECASE)


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


# XLA reads its flags from the environment when it first compiles; this one makes the compiled
# program emit a trace event per instruction.
XLA_TRACE_FLAG = "--xla_cpu_enable_xprof_traceme=true"
# The trace event that runs one compiled XLA program on the CPU: its instructions run within it,
# as do the runtime's own events (named `Class::Method`, `end: instruction`, or these).
XLA_PROGRAM_EVENT = "CpuExecutable::ExecuteAsyncOnStream"
XLA_RUNTIME_EVENTS = ("BlockUntilReady",)


def xla_op_times(space):
    """`{XLA instruction: (self microseconds, count)}` over the programs in a profiler XSpace.

    Instructions are named `kind.N` (`dot.96`, `gather_bitcast_fusion.3`, `while.10`); they are
    summed by name, `.N` dropped, with the time of the events nested in them (a loop's body)
    taken off their own. An instruction is an event that runs while a program does (on any
    thread: XLA may hand a loop to another one) and is not one of the runtime's own events
    (`ThunkExecutor::Execute`, TensorFlow's `name:Op`).
    """
    programs = [
        (event.offset_ps, event.offset_ps + event.duration_ps)
        for plane in space.planes
        for line in plane.lines
        for event in line.events
        if plane.event_metadata[event.metadata_id].name == XLA_PROGRAM_EVENT
    ]
    totals, counts = collections.Counter(), collections.Counter()
    for plane in space.planes:
        names = {key: metadata.name for key, metadata in plane.event_metadata.items()}
        for line in plane.lines:
            events = sorted(line.events, key=lambda event: (event.offset_ps, -event.duration_ps))
            open_events = []  # [name, start, end, self picoseconds]
            for event in events:
                end = event.offset_ps + event.duration_ps
                while open_events and open_events[-1][2] <= event.offset_ps:
                    _close(open_events.pop(), programs, totals, counts)
                if open_events:
                    open_events[-1][3] -= event.duration_ps
                name = names.get(event.metadata_id, "")
                open_events.append([name, event.offset_ps, end, event.duration_ps])
            while open_events:
                _close(open_events.pop(), programs, totals, counts)
    return {name: (totals[name] / 1e6, counts[name]) for name in totals}


def _close(event, programs, totals, counts):
    name, start, end, self_picoseconds = event
    runtime = ":" in name or name in XLA_RUNTIME_EVENTS
    if not runtime and any(first <= start and end <= last for first, last in programs):
        kind = re.sub(r"\.\d+$", "", name)
        totals[kind] += self_picoseconds
        counts[kind] += 1


def traced_xla_call(call):
    """`call()` traced by TensorFlow's profiler: `{XLA instruction: (self µs, count)}`."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # The profiler's trace format.

    with tempfile.TemporaryDirectory() as log_dir:
        tf.profiler.experimental.start(log_dir)
        try:
            call()
        finally:
            tf.profiler.experimental.stop()
        (path,) = glob.glob(os.path.join(log_dir, "plugins", "profile", "*", "*.xplane.pb"))
        space = xplane_pb2.XSpace()
        with open(path, "rb") as handle:
            space.ParseFromString(handle.read())
    times = xla_op_times(space)
    if not times:
        raise RuntimeError(
            "The trace holds no XLA instruction: XLA had read its flags before "
            f"{XLA_TRACE_FLAG} was set. Run the profile in a fresh process."
        )
    return times


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.profile_decode", description=__doc__
    )
    parser.add_argument("--signature", default=BEAM_SIGNATURE)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="Session intra/inter-op threads")
    parser.add_argument("--top", type=int, default=12, help="op types listed")
    # The profiled export's: with it, the profile lists XLA instructions (the module docstring).
    decoding_flags.add_decoding_arguments(parser, ("jit_compile",), decoding_flags.FIELD_DEFAULTS)
    parser.add_argument("--output", help="write the section into this Markdown file")
    args = parser.parse_args(argv)
    command = shlex.join(
        ["python", "-m", "benchmarks.profile_decode", *(argv if argv is not None else sys.argv[1:])]
    )
    if args.jit_compile:
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {XLA_TRACE_FLAG}".strip()
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
        path = bench_decode.export_benchmark_model(
            model, tokenizer, model_args, work_dir, jit_compile=args.jit_compile
        )
        signatures = bench_decode.SessionSignatures(path, args.threads)
        for _ in range(2):
            signatures(args.signature, texts)
        started = time.perf_counter()
        signatures(args.signature, texts)
        untraced = time.perf_counter() - started
        if args.jit_compile:
            times = traced_xla_call(lambda: signatures(args.signature, texts))
        else:
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
    unit = "XLA instruction" if args.jit_compile else "op type"
    export_kind = "the --jit_compile export" if args.jit_compile else "the plain export"
    products = sum(micros for op, (micros, _) in times.items() if MATRIX_PRODUCT.search(op))
    body = f"""Command: `{command}`
Machine: {machine_description()}; load average {os.getloadavg()[0]:.2f}.
Signature `{args.signature}` of the bench model (as in "Decoding": {model_args.num_layers}+{model_args.num_layers} layers, d_model {model_args.d_model}, vocab {model_args.vocab_size}, {model_args.output_tokens} forced output tokens, beam {model_args.beam_width}), {export_kind}, batch {args.batch}, {args.threads} thread(s), TF1 Session. One call: {1000 * untraced:,.0f} ms untraced; traced, the {unit}s' own times sum to {total / 1000:,.0f} ms over {sum(c for _, c in times.values()):,} runs, of which matrix products ({unit}s named dot or MatMul) {products / 1000:,.0f} ms ({100 * products / total:.0f}%).

| {unit} | ms | share | runs |
| --- | ---: | ---: | ---: |
{rows}
| (the other {len(ranked) - args.top} {unit}s) | {rest / 1000:,.1f} | {100 * rest / total:.1f}% | |
"""
    print(body)
    if args.output:
        title = f"Op profile: {args.signature}, batch {args.batch}"
        write_section(args.output, title + (", --jit_compile" if args.jit_compile else ""), body)


if __name__ == "__main__":
    main()
