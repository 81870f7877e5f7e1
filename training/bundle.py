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
        eval/                  test-split hypotheses and sacreBLEU reports, greedy and beam;
                               eval/everyday/: the same on the everyday sentences
        README.md              the model card: its training data (sources, sizes, licences),
                               what it knows and what it does not (everyday examples), recipe,
                               scores with their signatures, and the command that reproduces it

It is a run directory like any other (evaluate, export, the notebooks and `make demo` load it
with `load_trained`) without the checkpoints, so it stays small enough to commit. The
directory is built beside the target and swapped in at the end: a failure leaves the previous
bundle as it was.
"""

import argparse
import collections
import json
import os
import re
import shutil
import sys
import uuid

from model.translator import DecodingOptions
from training import artifacts
from training.corpus.loading import DEFAULT_BIBLE_DIR, DEFAULT_CATALOGS_DIR, EVERYDAY_DIR
from training.corpus.outputs import read_corpus_stats
from training.corpus.tsv import SPLITS, read_tsv
from training.curves import plot_training_curves
from training.evaluate import evaluate

_BUILT_CORPORA = {"bible": DEFAULT_BIBLE_DIR, "catalogs": DEFAULT_CATALOGS_DIR}
_CORPUS_TITLES = {"bible": "Bible", "catalogs": "message catalogs"}
# A corpus's weight in a mixed `--data` spec ("bible:1,catalogs:3").
_MIX_WEIGHT = re.compile(r":\d+(?:\.\d+)?$")
# How the card sums up the catalogs' per-package licences (stats.json has each one).
_LICENCE_FAMILIES = ("GPL", "LGPL", "MPL", "CC-BY-SA", "public domain")
# Everyday sentences shown in the card: every fourth, which spreads them over the topics.
EVERYDAY_EXAMPLE_STEP = 4


def directory_bytes(path):
    return sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(path)
        for name in names
    )


def corpus_names(data_spec):
    """The corpora of a run's `data` setting: one spec, or several with weights
    ("bible:1,catalogs:3" gives ["bible", "catalogs"])."""
    return [_MIX_WEIGHT.sub("", part.strip()) for part in str(data_spec or "").split(",") if part]


def _licence_summary(manifests):
    families = collections.Counter(
        family
        for manifest in manifests
        for family in _LICENCE_FAMILIES
        if re.search(rf"(?<![A-Za-z]){re.escape(family)}", manifest["licence"], re.IGNORECASE)
    )
    counted = ", ".join(f"{family} {count}" for family, count in families.most_common())
    return f"packages under {counted} (one package may count under several)"


def corpus_row(name):
    """A Markdown row for the card's training-data table: source, pairs per split, licence, as
    the corpus's stats.json records them (a corpus without one is named only)."""
    directory = _BUILT_CORPORA.get(name, name)
    stats = read_corpus_stats(directory) if os.path.isdir(directory) else None
    if not stats or "split_pairs" not in stats:
        return f"| `{name}` | your corpus | | not recorded |"
    pairs = " / ".join(f"{stats['split_pairs'].get(split, 0):,}" for split in SPLITS)
    if "packages" in stats:
        packages = [manifest for manifest in stats["packages"] if "error" not in manifest]
        source = (
            f"Spanish message catalogs of {len(packages)} Debian packages "
            f"({stats['download_megabytes']:,.0f} MB): games' dialogue and applications"
        )
        licence = _licence_summary(packages)
    else:
        versions = stats.get("package_versions", {})
        source, target = stats["source"], stats["target"]
        source = " → ".join(
            f"{side['module']} (`{side['package']}` {versions.get(side['package'], '')})"
            for side in (source, target)
        )
        licence = "public domain"
    return f"| `{name}` | {source} | {pairs} | {licence} |"


def everyday_section(report, pairs, hypotheses):
    """What the model knows and what it does not, shown on the everyday sentences."""
    lines = [
        "## What it knows and what it does not",
        "",
        "The test split above is the register of its training data. Everyday Spanish (home, "
        "food, travel, work, time, weather, shopping, family, phones and computers): the "
        f"{report['sentences']} sentences of `training/everyday/test.tsv`, written for issue 47 "
        f"and never trained or tuned on, score BLEU {report['bleu']:.2f}, chrF "
        f"{report['chrf']:.2f} ({report['decoding']}). Every fourth of them:",
        "",
        "| Spanish | reference | translation |",
        "|---|---|---|",
    ]
    for (source, reference), hypothesis in list(zip(pairs, hypotheses))[::EVERYDAY_EXAMPLE_STEP]:
        cells = (text.replace("|", chr(92) + "|") for text in (source, reference, hypothesis))
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def model_card(
    config,
    weights,
    reports,
    reproduce,
    size_bytes,
    notes="",
    bundle_dir=artifacts.PRETRAINED_RUN,
    everyday=None,
):
    """The bundle's README.md; its commands run from the repository root as written.

    `everyday`: `(report, pairs, hypotheses)` of the everyday sentences, or None.
    """
    name = os.path.basename(os.path.normpath(bundle_dir))
    corpora = corpus_names(config.get("data"))
    lines = [
        "# Pretrained Spanish→English Transformer "
        f"({' + '.join(_CORPUS_TITLES.get(c, c) for c in corpora) or 'own'} corpus)",
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
        "## Training data",
        "",
        "| corpus | source | train / dev / test pairs | licence |",
        "|---|---|---|---|",
        *(corpus_row(corpus) for corpus in corpora),
        "",
        "Built on the user's machine from Debian packages by `make data` "
        "([training/CORPUS.md](../../training/CORPUS.md)); no text of them is committed.",
        "",
        *(everyday_section(*everyday) if everyday else []),
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


def evaluate_everyday(run_dir, beam_width, alpha):
    """`(report, pairs, hypotheses)` of `run_dir` on the everyday sentences, its outputs written
    to `run_dir/eval/everyday/`."""
    output_dir = os.path.join(run_dir, "eval", "everyday")
    report = evaluate(
        run_dir, "test", beam_width, alpha, output_dir=output_dir, data=str(EVERYDAY_DIR)
    )
    stem = "test.greedy" if beam_width == 1 else f"test.beam{beam_width}"
    with open(os.path.join(output_dir, f"{stem}.hyp.txt"), encoding="utf-8") as handle:
        hypotheses = handle.read().splitlines()
    return report, read_tsv(EVERYDAY_DIR / "test.tsv"), hypotheses


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
        everyday = evaluate_everyday(staging, beam_width, alpha)
        card = model_card(
            config,
            weights,
            reports,
            reproduce,
            directory_bytes(staging),
            notes,
            output_dir,
            everyday,
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
