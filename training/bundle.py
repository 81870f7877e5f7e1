"""Package a trained run as a self-contained pretrained model directory, with its evaluation.

`.venv/bin/python -m training.bundle --run_dir runs/bundle --output_dir pretrained/bible-es-en
--reproduce "make pretrained"` writes:

    <output_dir>/
        config.json            the run's configuration
        decoding.json          the beam width and length penalty chosen for it (export uses them)
        tokenizer/             its vocabulary
        model.keras            the weights `training.artifacts.load_trained` picks (averaged >
                               best dev BLEU > final), float32
        logs/                  the run's TensorBoard logs (training curves, dev BLEU)
        training_curves.png
        eval/                  test-split hypotheses and sacreBLEU reports, greedy and beam
        README.md              the model card: recipe, scores with their signatures, and the
                               command that reproduces it

It is a run directory like any other (evaluate, export, the notebooks and `make demo` load it
with `load_trained`) without the checkpoints, so it stays small enough to commit. The
directory is built beside the target and swapped in at the end: a failure leaves the previous
bundle as it was.
"""

import argparse
import json
import os
import shutil
import sys
import uuid

from model.translator import DecodingOptions
from training import artifacts
from training.curves import plot_training_curves
from training.evaluate import evaluate


def directory_bytes(path):
    return sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(path)
        for name in names
    )


def model_card(
    config, weights, reports, reproduce, size_bytes, notes="", bundle_dir=artifacts.PRETRAINED_RUN
):
    """The bundle's README.md; its commands run from the repository root as written."""
    name = os.path.basename(os.path.normpath(bundle_dir))
    lines = [
        "# Pretrained Spanish→English Transformer (Bible corpus)",
        "",
        f"Weights: {weights}. Size on disk: {size_bytes / 2**20:.1f} MiB.",
        "",
        "| decoding | test BLEU | test chrF | sentences | sacreBLEU signature (BLEU) |",
        "|---|---:|---:|---:|---|",
    ]
    for report in reports:
        lines.append(
            f"| {report['decoding']} | {report['bleu']:.2f} | {report['chrf']:.2f} | "
            # A pipe inside a table cell must be escaped, even within code.
            f"{report['sentences']} | `{report['bleu_signature'].replace('|', chr(92) + '|')}` |"
        )
    settings = ", ".join(
        f"{name}={value}" for name, value in config.items() if name not in ("data", "tfds_data_dir")
    )
    lines += [
        "",
        "The test split is the held-out chapters of `make data` (never seen in training); "
        "chrF signature: `" + reports[0]["chrf_signature"] + "`.",
        "",
        *([notes, ""] if notes else []),
        "## Use",
        "",
        "From the repository root, after the README's Quickstart:",
        "",
        "```bash",
        f"make export RUN_DIR={bundle_dir}      # exports/translator/<next version>/",
        f"make evaluate RUN_DIR={bundle_dir}    # its test-split scores, into runs/eval/{name}/",
        f".venv/bin/python -m training.evaluate --run_dir {bundle_dir} --beam_width 4",
        "```",
        "",
        "## Recipe",
        "",
        settings,
        "",
        "## Reproduce",
        "",
        "```",
        reproduce,
        "```",
        "",
        "![training curves](training_curves.png)",
    ]
    return "\n".join(lines) + "\n"


def bundle(
    run_dir,
    output_dir,
    reproduce,
    beam_width=4,
    alpha=0.6,
    notes="",
    repetition_penalty=1.0,
    no_repeat_ngram_size=0,
):
    """Writes the bundle of `run_dir` to `output_dir` (replacing it) and returns its reports.

    `beam_width`, `alpha` and the repetition controls (choose them on the dev split) go to
    `decoding.json`, so that exports of the bundle serve the decoding its card reports.
    """
    decoding = DecodingOptions(
        beam_width=beam_width,
        alpha=alpha,
        repetition_penalty=repetition_penalty,
        no_repeat_ngram_size=no_repeat_ngram_size,
    )
    model, _, _, config = artifacts.load_trained(run_dir)
    weights = artifacts.select_weights(run_dir)[1]
    parent = os.path.dirname(os.path.abspath(output_dir))
    os.makedirs(parent, exist_ok=True)
    staging = os.path.join(parent, f".{os.path.basename(output_dir)}.{uuid.uuid4().hex}")
    try:
        os.makedirs(staging)
        model.save(os.path.join(staging, artifacts.MODEL_FILE))
        shutil.copy(os.path.join(run_dir, artifacts.CONFIG_FILE), staging)
        for name in (artifacts.TOKENIZER_DIR, artifacts.LOG_DIR):
            shutil.copytree(os.path.join(run_dir, name), os.path.join(staging, name))
        with open(os.path.join(staging, artifacts.DECODING_FILE), "w", encoding="utf-8") as f:
            json.dump(
                {
                    "beam_width": decoding.beam_width,
                    "alpha": decoding.alpha,
                    **decoding.repetition_controls,
                },
                f,
                indent=2,
            )
        plot_training_curves(
            staging, os.path.join(staging, "training_curves.png"), os.path.basename(output_dir)
        )
        reports = [
            evaluate(staging, "test", width, alpha, output_dir=os.path.join(staging, "eval"))
            for width in (1, beam_width)
        ]
        card = model_card(
            config, weights, reports, reproduce, directory_bytes(staging), notes, output_dir
        )
        with open(
            os.path.join(staging, artifacts.BUNDLE_CARD_FILE), "w", encoding="utf-8"
        ) as handle:
            handle.write(card)
        previous = None
        if os.path.exists(output_dir):
            previous = f"{staging}.old"
            os.rename(output_dir, previous)
        os.rename(staging, output_dir)
        if previous:
            shutil.rmtree(previous)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return reports


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m training.bundle", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--run_dir", required=True)
    parser.add_argument("--output_dir", default=os.path.join("pretrained", "bible-es-en"))
    parser.add_argument(
        "--reproduce",
        required=True,
        help="the command(s) that reproduce the run, for the model card",
    )
    parser.add_argument("--beam_width", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--notes", default="", help="a paragraph for the model card")
    parser.add_argument("--repetition_penalty", type=float, default=1.0, help="1: off")
    parser.add_argument("--no_repeat_ngram_size", type=int, default=0, help="0: off")
    args = parser.parse_args(argv)
    try:
        reports = bundle(
            args.run_dir,
            args.output_dir,
            args.reproduce,
            args.beam_width,
            args.alpha,
            args.notes,
            args.repetition_penalty,
            args.no_repeat_ngram_size,
        )
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for report in reports:
        print(f"{report['decoding']}: BLEU {report['bleu']:.2f}, chrF {report['chrf']:.2f}")
    print(f"wrote {args.output_dir} ({directory_bytes(args.output_dir) / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
