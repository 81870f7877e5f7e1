"""Everyday Spanish: `make bench-everyday` (into BENCHMARKS.md).

Forty sentences of home, food, travel, work, time, weather, shopping, family, phones and
computers (`training/everyday/test.tsv`: some lowercase, unaccented or in capitals, with names
and figures), written for issue 47 with their reference translations and never tuned on.
Scores a run (default: the bundled model) on them with `training.evaluate` at each beam width
(sacreBLEU BLEU and chrF), lists every output, and measures how much of their Spanish the
training sources know: the share of their words seen at least `MIN_COUNT` times in the Spanish
side of each named corpus's train split.
"""

import argparse
import collections
import os
import re
import shlex
import sys
import tempfile

from benchmarks.report import machine_description, shown_path, write_section
from run_directory import artifacts
from training.corpus import load_pairs
from training.corpus.loading import DEFAULT_CATALOGS_DIR, EVERYDAY_DIR
from training.corpus.tsv import read_tsv
from training.evaluate import UNPERTURBED, evaluate_perturbations, output_stem

SECTION_PREFIX = "Everyday sentences"
# A word the model saw this often in training is one it may have learned.
MIN_COUNT = 3
_WORD = re.compile(r"[^\W\d_]+")


def spanish_words(text):
    """The lowercased words of `text` (letters only: figures are carried, not learned)."""
    return [word.lower() for word in _WORD.findall(text)]


def vocabulary_coverage(sentences, training_sources, min_count=MIN_COUNT):
    """The share of the words of `sentences` (each occurrence counted) seen at least
    `min_count` times in `training_sources`, as written: an unaccented or misspelled word
    counts as unseen unless the corpus has it so."""
    counts = collections.Counter(
        word for source in training_sources for word in spanish_words(source)
    )
    words = [word for sentence in sentences for word in spanish_words(sentence)]
    return sum(counts[word] >= min_count for word in words) / len(words)


def coverage_rows(sentences, corpus_specs, catalogs_dir):
    """`[(spec, coverage), ...]`; a spec joins corpora with "+" ("bible+catalogs")."""
    rows = []
    for spec in corpus_specs:
        sources = [
            source
            for name in spec.split("+")
            for source, _ in load_pairs(name, "train", catalogs_dir=catalogs_dir)
        ]
        rows.append((spec, vocabulary_coverage(sentences, sources)))
    return rows


def _cell(text):
    return text.replace("|", "\\|")


def markdown(pairs, reports, outputs, coverage, command):
    """The section: scores per decoding, coverage, then every sentence and its outputs."""
    first = reports[0]
    lines = [
        f"Machine: {machine_description()}.",
        f"Command: `{command}`.",
        "",
        f"`{first['run_dir']}` on the {len(pairs)} sentences of `training/everyday/test.tsv` "
        f"(sacreBLEU, `{first['bleu_signature']}`).",
        "",
        "| decoding | BLEU | chrF |",
        "| --- | ---: | ---: |",
        *(f"| {r['decoding']} | {r['bleu']:.2f} | {r['chrf']:.2f} |" for r in reports),
        "",
    ]
    if coverage:
        lines += [
            f"Their Spanish words seen at least {MIN_COUNT} times in the train split's sources:",
            "",
            "| training sources | words covered |",
            "| --- | ---: |",
            *(f"| {spec} | {share:.1%} |" for spec, share in coverage),
            "",
        ]
    header = " | ".join(r["decoding"] for r in reports)
    lines += [
        f"| Spanish | reference | {header} |",
        "| --- | --- |" + " --- |" * len(reports),
    ]
    for index, (source, reference) in enumerate(pairs):
        row = [source, reference, *(hypotheses[index] for hypotheses in outputs)]
        lines.append("| " + " | ".join(_cell(cell) for cell in row) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_everyday", description=__doc__
    )
    parser.add_argument("--run_dir", default=artifacts.PRETRAINED_RUN)
    parser.add_argument("--beam_widths", default="1,4", help="comma-separated; 1 = greedy")
    parser.add_argument(
        "--coverage",
        default="bible,bible+catalogs",
        help="comma-separated corpora whose train split's vocabulary coverage is reported "
        "('+' joins corpora; empty: none)",
    )
    parser.add_argument(
        "--catalogs_dir",
        default=DEFAULT_CATALOGS_DIR,
        help="where the catalogs corpus is (built there if missing; default: %(default)s)",
    )
    parser.add_argument("--output", help="Markdown file to write the section into")
    parser.add_argument("--section", help=f"default: '{SECTION_PREFIX}: <run name>'")
    args = parser.parse_args(argv)
    pairs = read_tsv(EVERYDAY_DIR / "test.tsv", strict=True)
    reports, outputs = [], []
    with tempfile.TemporaryDirectory() as output_dir:
        for width in (int(w) for w in args.beam_widths.split(",")):
            (report,) = evaluate_perturbations(
                [UNPERTURBED],
                args.run_dir,
                "test",
                width,
                data=str(EVERYDAY_DIR),
                output_dir=output_dir,
            )
            stem = output_stem("test", width)
            with open(os.path.join(output_dir, f"{stem}.hyp.txt"), encoding="utf-8") as handle:
                outputs.append(handle.read().splitlines())
            reports.append(report)
    specs = [spec.strip() for spec in args.coverage.split(",") if spec.strip()]
    coverage = coverage_rows([source for source, _ in pairs], specs, args.catalogs_dir)
    shown = [shown_path(arg) if os.path.exists(arg) else arg for arg in (argv or sys.argv[1:])]
    command = shlex.join(["python", "-m", "benchmarks.bench_everyday", *shown])
    text = markdown(pairs, reports, outputs, coverage, command)
    print(text)
    if args.output:
        name = os.path.basename(os.path.normpath(args.run_dir))
        write_section(args.output, args.section or f"{SECTION_PREFIX}: {name}", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
