"""Everyday Spanish beside Apertium: `make bench-everyday` (into BENCHMARKS.md).

Sentences of home, food, travel, work, school, health, weather, time, prices, shopping,
family, feelings, phones and computers, directions, sport and animals, written for the purpose
with their reference translations and never trained on (`training/everyday`: some lowercase,
unaccented or in capitals, with names and figures). `test.tsv` (370, the first 40 the set
this benchmark started with)
is for reporting, once a recipe is chosen; `dev.tsv` (212) is for choosing (`--split dev`).

Scores a run (default: the bundled model) with `training.evaluate` at each beam width, and
Apertium (`apertium -u spa-eng`, the rule-based translator Debian ships: installed from
Debian's package when missing and run as root, else skipped with a message) on the same
sentences: sacreBLEU BLEU and chrF, the made-up-word rate (`training.made_up_words`, the same
known words for every system: the word lists and the run's training targets) and the time for
the set. Lists the outputs of the first `--list` sentences, and measures how much of their
Spanish the training sources know: the share of their words seen at least `MIN_COUNT` times in
the Spanish side of each named corpus's train split.
"""

import argparse
import collections
import os
import re
import shlex
import sys
import tempfile

from benchmarks.report import machine_description, shown_path, write_section
from common.flags import parse_bool
from run_directory import artifacts
from training.corpus import load_pairs
from training.corpus.loading import DEFAULT_CATALOGS_DIR, EVERYDAY_DIR
from training.corpus.tsv import read_tsv
from training.evaluate import (
    UNPERTURBED,
    apertium_report,
    evaluate_perturbations,
    made_up_cell,
    made_up_words_for,
    output_stem,
)

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


def markdown(pairs, split, reports, outputs, coverage, command, listed, notes=()):
    """The section: scores per system and decoding, coverage, then the first `listed`
    sentences and their outputs."""
    first = reports[0]
    lines = [
        f"Machine: {machine_description()}.",
        f"Command: `{command}`.",
        "",
        f"`{first['run_dir']}` and its peer on the {len(pairs)} sentences of "
        f"`training/everyday/{split}.tsv` (sacreBLEU, `{first['bleu_signature']}`; made-up "
        "words: `training.made_up_words`, known words "
        f"{first['made_up_known_words']}; time: translating the set, loading not counted, "
        "Apertium's process start counted).",
        "",
        "| system | BLEU | chrF | made-up words | time for the set |",
        "| --- | ---: | ---: | ---: | ---: |",
        *(
            f"| {r.get('run_dir', 'Apertium')}: {r['decoding']} | {r['bleu']:.2f} | "
            f"{r['chrf']:.2f} | {made_up_cell(r)} | "
            f"{r['seconds']:.1f} s |"
            for r in reports
        ),
        *notes,
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
        f"The first {min(listed, len(pairs))} sentences:",
        "",
        f"| Spanish | reference | {header} |",
        "| --- | --- |" + " --- |" * len(reports),
    ]
    for index, (source, reference) in enumerate(pairs[:listed]):
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
        "--split",
        choices=("dev", "test"),
        default="test",
        help="dev: for choosing a recipe; test: for reporting, once (default: %(default)s)",
    )
    parser.add_argument(
        "--apertium",
        type=parse_bool,
        default=True,
        help="translate the same sentences with Apertium spa-eng (default: %(default)s)",
    )
    parser.add_argument(
        "--list", type=int, default=40, help="sentences whose outputs are listed (default: 40)"
    )
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
    if artifacts.read_config(args.run_dir).get("reverse"):
        # Its coverage, its table and its peer read the sentences as Spanish sources.
        parser.error(
            f"{args.run_dir} is a reversed run (English→Spanish): this benchmark scores "
            "Spanish→English runs; score it with .venv/bin/python -m training.evaluate "
            f"--run_dir {args.run_dir} --data training/everyday"
        )
    pairs = read_tsv(EVERYDAY_DIR / f"{args.split}.tsv", strict=True)
    reports, outputs = [], []
    with tempfile.TemporaryDirectory() as output_dir:
        for width in (int(w) for w in args.beam_widths.split(",")):
            (report,) = evaluate_perturbations(
                [UNPERTURBED],
                args.run_dir,
                args.split,
                width,
                data=str(EVERYDAY_DIR),
                output_dir=output_dir,
            )
            stem = output_stem(args.split, width)
            with open(os.path.join(output_dir, f"{stem}.hyp.txt"), encoding="utf-8") as handle:
                outputs.append(handle.read().splitlines())
            reports.append(report)
    notes = []
    if args.apertium:
        made_up = made_up_words_for(artifacts.read_config(args.run_dir).get("data"))
        report, hypotheses = apertium_report(pairs, made_up)
        if report is None:
            notes.append(f"\n{hypotheses}")
            print(hypotheses, file=sys.stderr)
        else:
            reports.append(report)
            outputs.append(hypotheses)
    specs = [spec.strip() for spec in args.coverage.split(",") if spec.strip()]
    coverage = coverage_rows([source for source, _ in pairs], specs, args.catalogs_dir)
    shown = [shown_path(arg) if os.path.exists(arg) else arg for arg in (argv or sys.argv[1:])]
    command = shlex.join(["python", "-m", "benchmarks.bench_everyday", *shown])
    text = markdown(pairs, args.split, reports, outputs, coverage, command, args.list, notes)
    print(text)
    if args.output:
        name = os.path.basename(os.path.normpath(args.run_dir))
        write_section(args.output, args.section or f"{SECTION_PREFIX}: {name}", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
