"""Robustness to how people type: `make bench-robustness` (into BENCHMARKS.md, its section
"Robustness to how people type: <run name>").

Scores a run (default: the bundled model) on its test split as written and with the sources
perturbed by each `training.noise` perturbation (`training.evaluate --perturb all`): BLEU, chrF
and the share of looping outputs (`training.evaluate.is_looping`) per perturbation; then how
often it copies names and numbers it never saw (`training.evaluate --copy_rate`).
"""

import argparse
import os
import shlex
import sys

from benchmarks.report import machine_description, write_section
from run_directory import artifacts
from training import decoding_flags
from training.evaluate import (
    UNPERTURBED,
    copy_rate_table,
    default_output_dir,
    evaluate_copy_rates,
    evaluate_perturbations,
    robustness_table,
)
from training.mixture import parse_data
from training.noise import PERTURBATIONS

SECTION_PREFIX = "Robustness to how people type"


def default_section(run_dir):
    """The section a run's report goes to without --section: one per model, as bench-everyday's."""
    return f"{SECTION_PREFIX}: {os.path.basename(os.path.normpath(run_dir))}"


def markdown(reports, copy_reports, command):
    first = reports[0]
    corpora = list(dict.fromkeys(report.get("corpus") for report in reports))
    sentences = " and ".join(
        f"{report['sentences']} sentences"
        + (f" of `{report['corpus']}`" if "corpus" in report else "")
        for report in reports
        if report["perturbation"] == first["perturbation"]
    )
    return "\n".join(
        [
            f"Machine: {machine_description()}.",
            f"Command: `{command}`.",
            "",
            f"`{first['run_dir']}` on the {sentences} of its {first['split']} "
            f"split{'s' * (len(corpora) > 1)}, {first['decoding']} decoding (sacreBLEU, `{first['bleu_signature']}`), the "
            "sources perturbed as named (`training/noise.py`) and the references as written. "
            "Looping outputs: `training.evaluate.is_looping`.",
            "",
            robustness_table(reports),
            "",
            "Names and numbers it never saw (`training/copying.py`): the split's pairs with a name "
            "or a number on both sides, the name replaced by generated ones that occur nowhere "
            "in the corpus and the number by figures, each three times; the share of "
            "translations that hold the name or figure.",
            "",
            copy_rate_table(*copy_reports),
        ]
    )


def copy_rates_per_corpus(run_dir, split, beam_width):
    """`evaluate_copy_rates` of the run's corpus; of each corpus apart for a mixed run (its
    report holding its "corpus" name, written to `<eval dir>/<corpus>/`), the generated names
    avoiding the words of every corpus trained on."""
    data = artifacts.read_config(run_dir)["data"]
    corpora = parse_data(data)
    if len(corpora) == 1:
        return [evaluate_copy_rates(run_dir, split, beam_width=beam_width)]
    return [
        {
            "corpus": corpus.name,
            **evaluate_copy_rates(
                run_dir,
                split,
                beam_width=beam_width,
                data=corpus.spec,
                training_data=data,
                output_dir=os.path.join(default_output_dir(run_dir), corpus.name),
            ),
        }
        for corpus in corpora
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_robustness", description=__doc__
    )
    parser.add_argument("--run_dir", default=artifacts.PRETRAINED_RUN)
    parser.add_argument("--split", default="test", choices=("dev", "test"))
    decoding_flags.add_decoding_arguments(parser, ("beam_width",), greedy=True)
    parser.add_argument("--limit", type=int, help="only the first N sentences")
    parser.add_argument(
        "--perturbations",
        default=",".join(PERTURBATIONS),
        help="comma-separated perturbations, after the split as written",
    )
    parser.add_argument("--output", help="Markdown file to write the section into")
    parser.add_argument("--section", help=f"default: '{SECTION_PREFIX}: <run name>'")
    args = parser.parse_args(argv)
    names = [UNPERTURBED] + [name.strip() for name in args.perturbations.split(",") if name.strip()]
    reports = evaluate_perturbations(
        names, args.run_dir, args.split, beam_width=args.beam_width, limit=args.limit
    )
    copy_reports = copy_rates_per_corpus(args.run_dir, args.split, args.beam_width)
    # Quoted as a shell needs it (a --section title has spaces), so the command runs as shown.
    command = shlex.join(
        [
            "python",
            "-m",
            "benchmarks.bench_robustness",
            *(argv if argv is not None else sys.argv[1:]),
        ]
    )
    text = markdown(reports, copy_reports, command)
    print(text)
    if args.output:
        write_section(args.output, args.section or default_section(args.run_dir), text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
