"""Training-recipe sweep at equal wall-clock budgets: `make bench-sweep` (into BENCHMARKS.md).

Each point is a preset (`--preset`, default `small`) with one or two settings changed, trained in its own run
directory for the same number of minutes (`--train_minutes`), each in a fresh process, one after
the other (optionally pinned to a CPU set with `taskset`, so that a long run elsewhere on the
machine does not share its cores). Every point is then scored on the held-out test split with
greedy decoding (the checkpoint `training.evaluate` picks: best dev BLEU). The table ranks
points by test BLEU; the plot draws each point's dev BLEU against wall-clock minutes. A point
whose run directory already holds a result is not run again, so an interrupted sweep resumes.

`--perturbed_dev` also scores each point on the dev split as written and perturbed by each
`training.noise` perturbation (`training.evaluate --perturb all`), and the table gains the dev
BLEU as written, its mean over the perturbations and the share of looping outputs: what the
robustness points (`source_noise=…`, `subword_regularization`, `source_casing=…`) pay for.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

from benchmarks.report import machine_description, write_section
from training.curves import read_scalars
from training.evaluate import UNPERTURBED
from training.noise import PERTURBATIONS

# name → (settings changed from the preset, what the point asks)
POINTS = {
    "baseline": ({}, "the preset as it is"),
    "lr_scale=1.0": ({"lr_scale": 1.0}, "learning rate 1.0× the paper's"),
    "lr_scale=2.0": ({"lr_scale": 2.0}, "learning rate 2× the paper's"),
    "vocab=4000": ({"vocab_size": 4000}, "half the shared vocabulary"),
    "2x128": ({"num_layers": 2, "d_model": 128, "dff": 512}, "narrower and shallower"),
    "vocab=2000": ({"vocab_size": 2000}, "a 2,000-piece shared vocabulary"),
    "batch=2048": ({"batch_tokens": 2048}, "2,048 tokens per step"),
    "batch=4096": ({"batch_tokens": 4096}, "4,096 tokens per step"),
    "warmup=100": ({"warmup_steps": 100}, "warmup of 100 steps"),
    "warmup=400": ({"warmup_steps": 400}, "warmup of 400 steps"),
    "untied": ({"tie_embeddings": False}, "own output projection"),
    "dropout=0": ({"dropout": 0.0}, "no dropout"),
    "label_smoothing=0": ({"label_smoothing": 0.0}, "no label smoothing"),
    "no_regularization": ({"dropout": 0.0, "label_smoothing": 0.0}, "no dropout, no smoothing"),
    "norm_first": ({"norm_first": True}, "pre-layer normalization"),
    # The changes that each helped the demo preset, together.
    "combined": (
        {"norm_first": True, "dropout": 0.0, "label_smoothing": 0.0, "vocab_size": 2000},
        "pre-LN, no regularization, 2,000 pieces",
    ),
    "jit_compile": ({"jit_compile": True}, "XLA training step"),
    "bfloat16": ({"mixed_precision": "mixed_bfloat16"}, "bfloat16 compute"),
    # Robustness to how people type (issue #23): score these with --perturbed_dev.
    "source_noise=0.1": ({"source_noise": 0.1}, "10% of sources noised per epoch"),
    "source_noise=0.3": ({"source_noise": 0.3}, "30% of sources noised per epoch"),
    "subword_regularization": (
        {"subword_nbest_size": -1, "subword_alpha": 0.1},
        "sampled segmentations (Kudo 2018)",
    ),
    "source_casing=lower": ({"source_casing": "lower"}, "sources lowercased"),
    "source_casing=lower_all_caps": (
        {"source_casing": "lower_all_caps"},
        "sources in capitals lowercased",
    ),
    "source_noise=0.3+subword_regularization": (
        {"source_noise": 0.3, "subword_nbest_size": -1, "subword_alpha": 0.1},
        "noise and sampled segmentations",
    ),
}
RESULT_FILE = "sweep_result.json"


def run_command(command, cpus, log_path):
    prefix = ["taskset", "-c", cpus] if cpus else []
    with open(log_path, "a", encoding="utf-8") as log:
        subprocess.run(prefix + command, stdout=log, stderr=subprocess.STDOUT, check=True)


def perturbed_dev_scores(run_dir, cpus, log_path):
    """Dev BLEU as written, its mean over every perturbation, and the looping share over all."""
    run_command(
        [
            sys.executable,
            "-m",
            "training.evaluate",
            "--run_dir",
            run_dir,
            "--split",
            "dev",
            "--perturb",
            "all",
        ],
        cpus,
        log_path,
    )
    reports = []
    for name in [UNPERTURBED, *PERTURBATIONS]:
        stem = "dev.greedy" + ("" if name == UNPERTURBED else f".{name}")
        with open(os.path.join(run_dir, "eval", f"{stem}.report.json"), encoding="utf-8") as file:
            reports.append(json.load(file))
    perturbed = [report["bleu"] for report in reports[1:]]
    return {
        "dev_bleu": reports[0]["bleu"],
        "dev_bleu_perturbed": round(sum(perturbed) / len(perturbed), 2),
        "dev_bleu_by_perturbation": {r["perturbation"]: r["bleu"] for r in reports},
        "dev_looping": round(sum(r["looping"] for r in reports) / len(reports), 4),
    }


def run_point(
    name,
    sweep_dir,
    preset,
    minutes,
    cpus,
    settings,
    dev_sentences,
    checkpoint_every,
    perturbed_dev=False,
):
    run_dir = os.path.join(sweep_dir, name)
    result_path = os.path.join(run_dir, RESULT_FILE)
    if os.path.exists(result_path):
        with open(result_path, encoding="utf-8") as handle:
            result = json.load(handle)
        if perturbed_dev and "dev_bleu_perturbed" not in result:
            result.update(
                perturbed_dev_scores(run_dir, cpus, os.path.join(sweep_dir, f"{name}.log"))
            )
            with open(result_path, "w", encoding="utf-8") as handle:
                json.dump(result, handle, indent=2)
        return result
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    log_path = os.path.join(sweep_dir, f"{name}.log")
    flags = {
        "train_minutes": minutes,
        "train_steps": 1_000_000,
        "dev_bleu_sentences": dev_sentences,
        "checkpoint_every": checkpoint_every,
        **settings,
    }
    command = [sys.executable, "-m", "training.train", "--preset", preset, "--run_dir", run_dir]
    for flag, value in flags.items():
        command += [f"--{flag}", str(value).lower() if isinstance(value, bool) else str(value)]
    started = time.time()
    run_command(command, cpus, log_path)
    train_seconds = time.time() - started
    run_command(
        [sys.executable, "-m", "training.evaluate", "--run_dir", run_dir, "--split", "test"],
        cpus,
        log_path,
    )
    with open(os.path.join(run_dir, "eval", "test.greedy.report.json"), encoding="utf-8") as handle:
        report = json.load(handle)
    steps, bleus, walls = read_scalars(os.path.join(run_dir, "logs", "dev"), wall_time=True)["bleu"]
    dev_curve = [
        (round((wall - started) / 60, 2), step, bleu)
        for step, bleu, wall in zip(steps, bleus, walls)
    ]
    result = {
        "name": name,
        "preset": preset,
        "settings": settings,
        "minutes": minutes,
        "cpus": cpus or "all",
        "train_seconds": round(train_seconds, 1),
        "steps": dev_curve[-1][1] if dev_curve else 0,
        "dev_curve": dev_curve,
        "test_bleu": report["bleu"],
        "test_chrf": report["chrf"],
        "bleu_signature": report["bleu_signature"],
    }
    if perturbed_dev:
        result.update(perturbed_dev_scores(run_dir, cpus, log_path))
    with open(result_path, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2)
    return result


def plot(results, path, preset):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5))
    for result in sorted(results, key=lambda r: -r["test_bleu"]):
        curve = result["dev_curve"]
        axes.plot(
            [m for m, _, _ in curve],
            [b for _, _, b in curve],
            marker=".",
            label=f"{result['name']} (test {result['test_bleu']:.1f})",
        )
    axes.set_xlabel("wall-clock minutes (setup and dev evaluations included)")
    axes.set_ylabel("dev BLEU (greedy)")
    axes.set_title(f"Training recipes at equal time budgets ({preset} preset)")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


ROBUSTNESS_COLUMNS = " dev BLEU | dev BLEU perturbed | looping |"


def markdown(results, command, plot_path, preset):
    robust = all("dev_bleu_perturbed" in result for result in results)
    lines = [
        f"Machine: {machine_description()}.",
        f"Command: `{command}`.",
        "",
        f"Each point: the `{preset}` preset with the listed change, trained in a fresh process for "
        f"{results[0]['minutes']:g} minutes of wall clock (CPUs: {results[0]['cpus']}), then "
        "scored on the 637 held-out test sentences with greedy decoding (sacreBLEU, "
        f"`{results[0]['bleu_signature']}`), at its best dev-BLEU checkpoint.",
        "",
        "| point | change | steps | test BLEU | test chrF | best dev BLEU |"
        + (ROBUSTNESS_COLUMNS if robust else ""),
        "|---|---|---:|---:|---:|---:|" + ("---:|---:|---:|" if robust else ""),
    ]
    for result in sorted(results, key=lambda r: -r["test_bleu"]):
        change = ", ".join(f"{k}={v}" for k, v in result["settings"].items()) or "—"
        best_dev = max((b for _, _, b in result["dev_curve"]), default=float("nan"))
        line = (
            f"| {result['name']} | {change} | {result['steps']} | "
            f"{result['test_bleu']:.2f} | {result['test_chrf']:.2f} | {best_dev:.2f} |"
        )
        if robust:
            line += (
                f" {result['dev_bleu']:.2f} | {result['dev_bleu_perturbed']:.2f} | "
                f"{100 * result['dev_looping']:.1f}% |"
            )
        lines.append(line)
    if robust:
        lines += [
            "",
            "Dev BLEU perturbed: the mean over the perturbations of `training/noise.py` ("
            + ", ".join(PERTURBATIONS)
            + ") of the dev BLEU with the sources perturbed; looping: the share of looping "
            "outputs (`training.evaluate.is_looping`) over the dev split as written and perturbed.",
        ]
    lines += ["", f"![dev BLEU against minutes]({plot_path})"]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sweep_recipe", description=__doc__)
    parser.add_argument(
        "--points", default=",".join(POINTS), help=f"comma-separated subset of: {', '.join(POINTS)}"
    )
    parser.add_argument("--preset", default="small", help="the preset every point changes")
    parser.add_argument("--minutes", type=float, default=12.0, help="training budget per point")
    parser.add_argument("--cpus", help="taskset CPU list for every point, e.g. 1 (default: all)")
    parser.add_argument("--sweep_dir", help="run directories (default: runs/sweep[-PRESET])")
    parser.add_argument("--dev_bleu_sentences", type=int, default=100)
    parser.add_argument("--checkpoint_every", type=int, default=200)
    parser.add_argument(
        "--perturbed_dev",
        action="store_true",
        help="also score each point on the dev split perturbed (training.evaluate --perturb all)",
    )
    parser.add_argument("--output", help="Markdown file to write the section into")
    parser.add_argument(
        "--section",
        help="its title (default: 'Training recipe sweep', plus the preset unless small)",
    )
    parser.add_argument("--plot", help="the plot's path (default: docs/recipe_sweep[_PRESET].png)")
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.points.split(",") if name.strip()]
    unknown = [name for name in names if name not in POINTS]
    if unknown:
        parser.error(f"unknown point(s): {', '.join(unknown)}")
    suffix = "" if args.preset == "small" else f"-{args.preset}"
    args.sweep_dir = args.sweep_dir or os.path.join("runs", f"sweep{suffix}")
    os.makedirs(args.sweep_dir, exist_ok=True)
    results = []
    for index, name in enumerate(names, 1):
        print(f"[{index}/{len(names)}] {name}: {POINTS[name][1]}", flush=True)
        result = run_point(
            name,
            args.sweep_dir,
            args.preset,
            args.minutes,
            args.cpus,
            POINTS[name][0],
            args.dev_bleu_sentences,
            args.checkpoint_every,
            args.perturbed_dev,
        )
        results.append(result)
        print(f"    {result['steps']} steps, test BLEU {result['test_bleu']:.2f}", flush=True)
    plot_path = args.plot or os.path.join("docs", f"recipe_sweep{suffix.replace('-', '_')}.png")
    plot(results, plot_path, args.preset)
    command = "python -m benchmarks.sweep_recipe " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    text = markdown(results, command.strip(), plot_path, args.preset)
    print(text)
    if args.output:
        title = "Training recipe sweep" + ("" if args.preset == "small" else f", {args.preset}")
        write_section(args.output, args.section or title, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
