"""Training-pipeline benchmark: `make bench-train` (numbers into BENCHMARKS.md).

Compares, on the same model, data and training step:
- this project's pipeline: tokenized once, bucketed by length, batches of about `batch_tokens`;
- the classic tutorial's: shuffled sentences in fixed batches of 64, tokenized on the fly
  every batch and padded to the longest member (no bucketing, no XLA).
Reports real (non-pad) tokens per second, the padding fraction, the model's FLOPs per token
counted from the layer shapes, and the achieved FLOP/s against a dense float32 matmul measured
in the same run.

With `--variants`, it also times this project's training step as `--jit_compile` and
`--mixed_precision mixed_bfloat16` run it (alone and together), in interleaved rounds (section
"Training step: XLA and bfloat16"): the steady-state step time and real tokens per second, and
the time spent compiling (the steps that took over 3× the median).
"""

import argparse
import dataclasses
import statistics
import sys
import time

import keras
import tensorflow as tf

from benchmarks.report import machine_description, write_section
from run_directory import artifacts
from training.config import resolve_config
from training.corpus import load_pairs
from training.pipeline import bound_lengths, make_dataset, tokenize_pairs
from training.train import Trainer, make_optimizer
from training.vocabulary import build_run_tokenizers


def step_flops(config, source_len, target_len, batch, source_vocab, target_vocab):
    """Training FLOPs of one batch: 3 × forward (backward ≈ 2 × forward), 2 FLOPs per MAC.

    Counts the matrix multiplications of §3: projections, attention scores and weighted sums,
    feed-forward layers, and the output layer (embedding lookups are free).
    """
    d, dff, layers = config.d_model, config.dff, config.num_layers
    encoder = source_len * (4 * d * d + 2 * source_len * d + 2 * d * dff)
    decoder = (
        target_len * (4 * d * d + 2 * target_len * d)  # masked self-attention
        + target_len * 2 * d * d
        + source_len * 2 * d * d  # cross-attention projections
        + 2 * target_len * source_len * d  # cross-attention
        + target_len * 2 * d * dff
    )  # feed-forward
    output_layer = target_len * d * target_vocab
    forward_macs = batch * (layers * (encoder + decoder) + output_layer)
    return 3 * 2 * forward_macs


def dense_matmul_flops_per_second(size=1024, repeats=30):
    a = tf.random.normal((size, size))
    b = tf.random.normal((size, size))
    matmul = tf.function(lambda x, y: tf.matmul(x, y))
    matmul(a, b).numpy()
    started = time.perf_counter()
    for _ in range(repeats):
        result = matmul(a, b)
    result.numpy()
    return repeats * 2 * size**3 / (time.perf_counter() - started)


def tutorial_dataset(
    pairs, source_tokenizer, target_tokenizer, max_sequence_length, batch_size=64, seed=0
):
    """The classic tutorial's pipeline, tokenizing each batch as it goes."""

    def prepare_batch(source, target):
        source_ids = source_tokenizer.tokenize(source)[:, :max_sequence_length].to_tensor()
        target_ids = target_tokenizer.tokenize(target)[:, : max_sequence_length + 1].to_tensor()
        return (
            (tf.cast(source_ids, tf.int32), tf.cast(target_ids[:, :-1], tf.int32)),
            tf.cast(target_ids[:, 1:], tf.int32),
        )

    dataset = tf.data.Dataset.from_tensor_slices(([s for s, _ in pairs], [t for _, t in pairs]))
    return (
        dataset.shuffle(20_000, seed=seed)
        .repeat()
        .batch(batch_size)
        .map(prepare_batch, tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )


def measure(trainer, dataset, config, source_vocab, target_vocab, steps, warmup_steps):
    """Trains `steps` steps after `warmup_steps`; returns tokens/s, padding fraction, FLOP/s."""
    # Both pipelines are deterministic for a seed: a second iterator sees the same batches, so
    # counting tokens stays out of the timed loop.
    iterator, mirror = iter(dataset), iter(dataset)
    for _ in range(warmup_steps):
        trainer.train_step(iterator)
        next(mirror)
    started = time.perf_counter()
    for _ in range(steps):
        loss_sum, *_ = trainer.train_step(iterator)
    float(loss_sum)
    seconds = time.perf_counter() - started
    real_tokens = positions = flops = 0.0
    for _ in range(steps):
        (source, _), labels = next(mirror)
        for ids in (source, labels):
            real_tokens += float(tf.math.count_nonzero(ids))
            positions += float(tf.size(ids))
        flops += step_flops(
            config, source.shape[1], labels.shape[1], source.shape[0], source_vocab, target_vocab
        )
    return {
        "tokens_per_second": real_tokens / seconds,
        "padding": 1 - real_tokens / positions,
        "flops_per_second": flops / seconds,
        "flops_per_token": flops / real_tokens,
        "seconds": seconds,
    }


# name -> TrainConfig overrides
STEP_VARIANTS = {
    "float32": {},
    "XLA (--jit_compile)": {"jit_compile": True},
    "bfloat16 (--mixed_precision mixed_bfloat16)": {"mixed_precision": "mixed_bfloat16"},
    "XLA + bfloat16": {"jit_compile": True, "mixed_precision": "mixed_bfloat16"},
}
COMPILING_STEP = 3.0  # a step this many times the median is counted as compilation


def measure_variants(config, source_ids, target_ids, source_vocab, target_vocab, rounds, steps):
    """Times the training step of each `STEP_VARIANTS` entry, `steps` steps per variant in
    each of `rounds` interleaved rounds (each variant has its own model, optimizer and data).

    Returns:
        `{name: {"median_ms", "tokens_per_second", "compile_seconds", "compiling_steps"}}`;
        tokens per second counts real tokens over the steps that did not compile.
    """
    runs = {}
    for name, overrides in STEP_VARIANTS.items():
        variant = dataclasses.replace(config, **overrides)
        # The policy is read when layers are built; each model keeps the one it was built with.
        keras.config.set_dtype_policy(
            "float32" if variant.mixed_precision == "none" else variant.mixed_precision
        )
        model = artifacts.build_model(vars(variant), source_vocab, target_vocab)
        model.build(((None, None), (None, None)))
        optimizer, _ = make_optimizer(variant)
        dataset = make_dataset(
            source_ids,
            target_ids,
            variant.max_sequence_length,
            variant.batch_tokens,
            pad_to_bucket=variant.jit_compile,
        )
        runs[name] = {
            "trainer": Trainer(variant, tf.distribute.get_strategy(), model, optimizer),
            "iterator": iter(dataset),
            "mirror": iter(dataset),
            "times": [],
            "tokens": [],
        }
    keras.config.set_dtype_policy("float32")
    for _ in range(rounds):
        for run in runs.values():
            for _ in range(steps):
                started = time.perf_counter()
                float(run["trainer"].train_step(run["iterator"])[0])
                run["times"].append(time.perf_counter() - started)
                (source, _), labels = next(run["mirror"])
                run["tokens"].append(
                    float(tf.math.count_nonzero(source)) + float(tf.math.count_nonzero(labels))
                )
    results = {}
    for name, run in runs.items():
        median = statistics.median(run["times"])
        compiling = [t > COMPILING_STEP * median for t in run["times"]]
        steady = [(t, n) for t, n, c in zip(run["times"], run["tokens"], compiling) if not c]
        results[name] = {
            "median_ms": 1000 * median,
            "tokens_per_second": sum(n for _, n in steady) / sum(t for t, _ in steady),
            "compile_seconds": sum(t for t, c in zip(run["times"], compiling) if c),
            "compiling_steps": sum(compiling),
        }
    return results


def variants_section(results, command, config, preset, rounds, steps):
    reference = results["float32"]["tokens_per_second"]
    rows = "\n".join(
        f"| {name} | {r['median_ms']:,.0f} | {r['tokens_per_second']:,.0f} | "
        f"{r['tokens_per_second'] / reference:.2f}× | {r['compiling_steps']} | "
        f"{r['compile_seconds']:.1f} |"
        for name, r in results.items()
    )
    return f"""Command: `{command}`
Machine: {machine_description()}
Model: preset `{preset}` ({config.num_layers}+{config.num_layers} layers, d_model {config.d_model}), dropout off, batch_tokens {config.batch_tokens}; each variant its own model and data iterator, {rounds} interleaved rounds of {steps} steps. XLA batches are padded to their length bucket's bound (`pad_to_bucket`: one compiled program per bucket), so its real tokens per step are fewer; "compiling" steps took over {COMPILING_STEP:g}× the median and are left out of tokens/s.

| training step | median ms/step | real tokens/s | vs float32 | compiling steps | compiling s |
| --- | ---: | ---: | ---: | ---: | ---: |
{rows}
"""


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_train", description=__doc__)
    parser.add_argument("--preset", default="small")
    parser.add_argument("--data", default="bible")
    parser.add_argument(
        "--vocab_dir",
        default="runs/small/tokenizer",
        help="reuse these vocabularies (built there from the data when missing)",
    )
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup_steps", type=int, default=8)
    parser.add_argument("--output", help="write the results into this Markdown file")
    parser.add_argument(
        "--variants",
        action="store_true",
        help="time the XLA and bfloat16 training steps instead of the pipelines",
    )
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds (--variants)")
    args = parser.parse_args(argv)

    config = resolve_config(args.preset, overrides={"data": args.data, "dropout": 0.0})
    pairs = load_pairs(args.data, "train")
    source_tokenizer, target_tokenizer = build_run_tokenizers(pairs, config, args.vocab_dir)
    source_ids, target_ids, _ = bound_lengths(
        *tokenize_pairs(pairs, source_tokenizer, target_tokenizer), config.max_sequence_length
    )
    source_vocab, target_vocab = source_tokenizer.vocab_size, target_tokenizer.vocab_size
    if args.variants:
        results = measure_variants(
            config, source_ids, target_ids, source_vocab, target_vocab, args.rounds, args.steps
        )
        command = "python -m benchmarks.bench_train " + " ".join(
            argv if argv is not None else sys.argv[1:]
        )
        body = variants_section(
            results, command.strip(), config, args.preset, args.rounds, args.steps
        )
        print(body)
        if args.output:
            write_section(args.output, "Training step: XLA and bfloat16", body)
        return

    results = {}
    pipelines = {
        f"this project (bucketed, batch_tokens={config.batch_tokens})": make_dataset(
            source_ids, target_ids, config.max_sequence_length, config.batch_tokens
        ),
        "classic tutorial (padded batches of 64)": tutorial_dataset(
            pairs, source_tokenizer, target_tokenizer, config.max_sequence_length
        ),
    }
    for name, dataset in pipelines.items():
        model = artifacts.build_model(vars(config), source_vocab, target_vocab)
        model.build(((None, None), (None, None)))
        optimizer, _ = make_optimizer(config)
        trainer = Trainer(config, tf.distribute.get_strategy(), model, optimizer)
        results[name] = measure(
            trainer, dataset, config, source_vocab, target_vocab, args.steps, args.warmup_steps
        )
        print(name, {key: round(value, 3) for key, value in results[name].items()}, flush=True)
    matmul = dense_matmul_flops_per_second()

    ours, tutorial = results.values()
    rows = "\n".join(
        f"| {name} | {r['tokens_per_second']:,.0f} | {100 * r['padding']:.1f}% | "
        f"{r['flops_per_token'] / 1e6:.1f} | {r['flops_per_second'] / 1e9:.1f} | "
        f"{100 * r['flops_per_second'] / matmul:.0f}% |"
        for name, r in results.items()
    )
    body = f"""Command: `make bench-train` (`python -m benchmarks.bench_train --preset {args.preset} --data {args.data} --steps {args.steps}`)
Machine: {machine_description()}
Model: preset `{args.preset}` ({config.num_layers}+{config.num_layers} layers, d_model {config.d_model}, dff {config.dff}, vocab {source_vocab}/{target_vocab}), dropout off, same train step for both; {args.steps} timed steps after {args.warmup_steps} warm-up steps.

| pipeline | real tokens/s | padding | model MFLOP/token | achieved GFLOP/s | of dense matmul |
| --- | ---: | ---: | ---: | ---: | ---: |
{rows}

Dense float32 matmul (1024×1024) in the same run: {matmul / 1e9:.1f} GFLOP/s.
Speed-up of this project's pipeline over the tutorial's: **{ours["tokens_per_second"] / tutorial["tokens_per_second"]:.2f}×** real tokens/s (goal ≥ 1.5×).
"""
    print(body)
    if args.output:
        write_section(args.output, "Training pipeline", body)


if __name__ == "__main__":
    main()
