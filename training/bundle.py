"""Package a trained run as a self-contained pretrained model directory, with its evaluation.

`.venv/bin/python -m training.bundle --run_dir runs/bundle --output_dir pretrained/es-en
--reproduce "make pretrained"` writes:

    <output_dir>/
        config.json            the run's configuration
        decoding.json          the beam width and length penalty chosen for it (export uses them)
        tokenizer/             its vocabulary
        model.keras            the weights `run_directory.artifacts.load_trained` picks (averaged >
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

from model.decoding.beam import DEFAULT_ALPHA, DEFAULT_BEAM_WIDTH
from model.translator import DecodingOptions
from run_directory import artifacts
from training import decoding_flags
from training.corpus.apertium import run_direction
from training.corpus.loading import (
    BACKTRANSLATION_SPEC,
    CATALOG_FILLS_SPEC,
    DEFAULT_BACKTRANSLATION_DIR,
    DEFAULT_BIBLE_DIR,
    DEFAULT_CATALOG_FILLS_DIR,
    DEFAULT_CATALOGS_DIR,
    DEFAULT_LEXICON_DIR,
    DEFAULT_MORE_CATALOG_FILLS_DIR,
    DEFAULT_MORE_CATALOGS_DIR,
    DEFAULT_OWN_BACKTRANSLATION_DIR,
    EVERYDAY_DIR,
    LEXICON_SPEC,
    MORE_CATALOG_FILLS_SPEC,
    MORE_CATALOGS_SPEC,
    OWN_BACKTRANSLATION_SPEC,
    load_run_pairs,
    run_languages,
)
from training.corpus.outputs import read_corpus_stats
from training.corpus.tsv import SPLITS
from training.curves import plot_training_curves
from training.evaluate import (
    UNPERTURBED,
    apertium_report,
    evaluate,
    evaluate_perturbations,
    load_for_evaluation,
    made_up_cell,
    made_up_words_for,
    output_stem,
    translate,
)

_BUILT_CORPORA = {
    "bible": DEFAULT_BIBLE_DIR,
    "catalogs": DEFAULT_CATALOGS_DIR,
    MORE_CATALOGS_SPEC: DEFAULT_MORE_CATALOGS_DIR,
    CATALOG_FILLS_SPEC: DEFAULT_CATALOG_FILLS_DIR,
    MORE_CATALOG_FILLS_SPEC: DEFAULT_MORE_CATALOG_FILLS_DIR,
    BACKTRANSLATION_SPEC: DEFAULT_BACKTRANSLATION_DIR,
    OWN_BACKTRANSLATION_SPEC: DEFAULT_OWN_BACKTRANSLATION_DIR,
    LEXICON_SPEC: DEFAULT_LEXICON_DIR,
}
_CORPUS_TITLES = {
    "bible": "Bible",
    "catalogs": "message catalogs",
    MORE_CATALOGS_SPEC: "more message catalogs",
    CATALOG_FILLS_SPEC: "message catalogs' filled placeholders",
    MORE_CATALOG_FILLS_SPEC: "more message catalogs' filled placeholders",
    BACKTRANSLATION_SPEC: "back-translated WordNet",
    OWN_BACKTRANSLATION_SPEC: "WordNet back-translated by a run of ours",
    LEXICON_SPEC: "lexicon",
}
# A corpus's weight in a mixed `--data` spec ("bible:1,catalogs:3").
_MIX_WEIGHT = re.compile(r":\d+(?:\.\d+)?$")
# How the card sums up the catalogs' per-package licences (stats.json has each one).
_LICENCE_FAMILIES = ("GPL", "LGPL", "MPL", "CC-BY-SA", "GFDL", "WordNet", "public domain")
# Everyday sentences shown in the card, spread evenly over the set (and so over its topics).
EVERYDAY_EXAMPLES = 20


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
        if re.search(
            rf"(?<![A-Za-z]){re.escape(family).replace(chr(92) + ' ', '[ -]')}",
            manifest["licence"],
            re.IGNORECASE,
        )
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
    if "origin" in stats.get("source", {}):
        packages = stats["packages"]
        source = (
            f"English: {stats['target']['origin']}; Spanish: {stats['source']['origin']} ("
            + ", ".join(f"`{m['package']}` {m['version']}" for m in packages)
            + ")"
        )
        licence = _licence_summary(packages)
    elif "packages" in stats:
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


# What each corpus teaches, for the card's intended use and limitations.
_CORPUS_DOMAINS = {
    "bible": "Bible verses in the language of the 1909 Reina-Valera (modern spelling)",
    "catalogs": "the text of software and games: menus, messages, help and game dialogue",
    MORE_CATALOGS_SPEC: "more software and games: money, family history, notes, chat, mail",
    CATALOG_FILLS_SPEC: "software's and games' messages with names, figures, dates and times",
    MORE_CATALOG_FILLS_SPEC: "more software's messages with names, figures, dates and times",
    BACKTRANSLATION_SPEC: "everyday English phrasing (WordNet's usage examples)",
    OWN_BACKTRANSLATION_SPEC: "everyday English phrasing (WordNet's usage examples)",
    LEXICON_SPEC: "the words of everyday talk, one by one (dictionaries)",
}
# Test-split translations the card shows per corpus, as examples of what the model knows.
KNOWN_EXAMPLES = 3
# Corpora whose text the bundle does not hold (their licences ask for their sources beside
# it; `make data` builds them on the user's machine): the card shows sentences of their kind
# written for it instead of their test pairs (in the run's source language), and their
# translations of the test split are not kept in `eval/`, only the scores.
UNQUOTED_CORPORA = {
    "catalogs": {
        "Spanish": [
            "No se pudo abrir el archivo.",
            "¿Desea guardar los cambios antes de salir?",
            "La contraseña debe tener al menos ocho caracteres.",
        ],
        "English": [
            "Could not open the file.",
            "Do you want to save the changes before quitting?",
            "The password must be at least eight characters long.",
        ],
    },
    BACKTRANSLATION_SPEC: {
        "Spanish": [
            "Siempre llega tarde a las reuniones.",
            "El niño se escondió detrás del árbol.",
            "Ella habla tres idiomas con fluidez.",
        ],
        "English": [
            "She always arrives late to meetings.",
            "The boy hid behind the tree.",
            "She speaks three languages fluently.",
        ],
    },
    LEXICON_SPEC: {
        "Spanish": ["tenedor", "almohada", "bombilla"],
        "English": ["fork", "pillow", "light bulb"],
    },
    CATALOG_FILLS_SPEC: {
        "Spanish": [
            "Se copiaron 12 archivos en la carpeta Documentos.",
            "María se ha unido a la conversación.",
            "La descarga terminará a las 21:15.",
        ],
        "English": [
            "12 files were copied to the Documents folder.",
            "María has joined the conversation.",
            "The download will finish at 21:15.",
        ],
    },
    MORE_CATALOG_FILLS_SPEC: {
        "Spanish": [
            "Tiene 3 recordatorios para el 6 de junio.",
            "Pedro le ha enviado 2 mensajes nuevos.",
            "El saldo de la cuenta es de 1.250,75 euros.",
        ],
        "English": [
            "You have 3 reminders for June 6.",
            "Pedro has sent you 2 new messages.",
            "The account balance is 1,250.75 euros.",
        ],
    },
}
# The same English as wordnet-bt, under the same licence; only its Spanish's writer differs.
UNQUOTED_CORPORA[OWN_BACKTRANSLATION_SPEC] = UNQUOTED_CORPORA[BACKTRANSLATION_SPEC]


def _cell(text):
    # A pipe inside a table cell must be escaped, even within code.
    return text.replace("|", chr(92) + "|")


def _example_table(rows, source_language, peer=False):
    lines = [
        f"| {source_language} | reference | translation |" + (" Apertium |" if peer else ""),
        "|---|---|---|" + ("---|" if peer else ""),
    ]
    lines += ["| " + " | ".join(_cell(text) for text in row) + " |" for row in rows]
    return lines + [""]


def _model_section(config, weights, size_bytes, parameters, decoding):
    layers = config.get("num_layers")
    shape = (
        f"{layers} encoder and {layers} decoder layers, d_model {config.get('d_model')}, "
        f"{config.get('num_heads')} heads, feed-forward {config.get('dff')}, "
        f"{'pre' if config.get('norm_first') else 'post'}-layer normalization"
        if layers
        else "the run's configuration (Training procedure)"
    )
    lines = [
        "## Model",
        "",
        '- Architecture: the Transformer encoder–decoder of "Attention Is All You Need" '
        f"(`model/`): {shape}" + (f"; {parameters:,} parameters" if parameters else "") + ".",
    ]
    if config.get("vocab_size"):
        lines.append(
            f"- Vocabulary: {config.get('tokenizer')} ({config.get('subword_model')}), "
            f"{config['vocab_size']:,} pieces"
            + (", shared by both languages" if config.get("shared_vocab") else "")
            + " (`tokenizer/`)."
        )
    lines.append(f"- Weights: {weights}, float32; {size_bytes / 2**20:.1f} MiB on disk.")
    if decoding:
        lines.append(
            "- Decoding served by its exports (`decoding.json`): "
            + ", ".join(f"{name} {value}" for name, value in decoding.items())
            + "."
        )
    return lines + [""]


def _intended_use_section(corpora, languages):
    domains = [f"{_CORPUS_DOMAINS.get(name, f'the text of `{name}`')}" for name in corpora]
    return [
        "## Intended use",
        "",
        f"{' → '.join(languages)} translation of sentences like those it was trained on: "
        + "; and ".join(domains)
        + ". A small model (it trains on 2 CPU cores) to serve, study and fine-tune "
        "(`--init_from`, docs/training.md) on a corpus of your own. Not for text whose "
        "translation matters without a human check: it knows little outside its corpora "
        "(Limitations).",
        "",
    ]


def _evaluation_section(reports, everyday, languages, apertium_direction):
    mixed = any("corpus" in report for report in reports)
    lines = [
        "## Evaluation",
        "",
        "Each corpus's test split, held out by `make data` (training/CORPUS.md) and never "
        "trained or tuned on (sacreBLEU):",
        "",
        ("| corpus " if mixed else "") + "| decoding | test BLEU | test chrF | sentences |",
        ("|---" if mixed else "") + "|---|---:|---:|---:|",
    ]
    for report in reports:
        lines.append(
            (f"| {report['corpus']} " if mixed else "")
            + f"| {report['decoding']} | {report['bleu']:.2f} | {report['chrf']:.2f} | "
            f"{report['sentences']} |"
        )
    lines += [
        "",
        f"Signatures: BLEU `{reports[0]['bleu_signature']}`, chrF "
        f"`{reports[0]['chrf_signature']}`.",
        "",
    ]
    if everyday:
        everyday_reports, pairs, _, peer_hypotheses = everyday
        peer = (
            f" beside Apertium (`apertium {apertium_direction}`, the rule-based translator "
            "Debian ships)"
            if peer_hypotheses
            else ""
        )
        lines += [
            f"Everyday {languages[0]} (home, food, travel, work, school, health, weather, time, "
            "prices, "
            "shopping, family, feelings, phones and computers, directions, sport, animals; "
            f"some typed in lowercase, without accents or in capitals): the {len(pairs)} "
            "sentences of `training/everyday/test.tsv`, written for the purpose and never "
            f"trained or tuned on{peer}. Made-up words: the share of output words neither "
            f"{languages[1]} nor copied from the source (`training.made_up_words`; known words: "
            f"{everyday_reports[0]['made_up_known_words']}).",
            "",
            "| system | BLEU | chrF | made-up words |",
            "|---|---:|---:|---:|",
            *(
                f"| {report['decoding']} | {report['bleu']:.2f} | {report['chrf']:.2f} | "
                f"{made_up_cell(report)} |"
                for report in everyday_reports
            ),
            "",
        ]
    return lines


def _limitations_section(known_examples, everyday, source_language):
    lines = ["## Limitations", ""]
    if known_examples:
        lines += [
            "What it knows: translations of the first test sentences of each corpus (of "
            "sentences of its kind, for a corpus whose text the bundle does not hold).",
            "",
        ]
        for corpus, rows in known_examples.items():
            lines += ([f"`{corpus}`:", ""] if corpus else []) + _example_table(
                rows, source_language
            )
    if everyday:
        _, pairs, hypotheses, peer_hypotheses = everyday
        step = max(1, -(-len(pairs) // EVERYDAY_EXAMPLES))
        rows = [
            (source, reference, hypothesis, *([peer_hypotheses[index]] if peer_hypotheses else []))
            for index, ((source, reference), hypothesis) in enumerate(zip(pairs, hypotheses))
        ][::step]
        lines += [
            f"What it does not know as well: everyday {source_language} beyond its corpora; "
            f"{len(rows)} of the everyday sentences (Evaluation)"
            + (", with Apertium's translations:" if peer_hypotheses else ":"),
            "",
            *_example_table(rows, source_language, peer=bool(peer_hypotheses)),
        ]
    lines += [
        "Words its corpora never hold are guessed from their pieces or copied; a sentence "
        "longer than its longest training sentences is translated in part; names and numbers "
        "it never saw are carried through as placeholders, which a sentence can only hold "
        "as often as its source does.",
        "",
    ]
    return lines


def model_card(
    config,
    weights,
    reports,
    reproduce,
    size_bytes,
    notes="",
    bundle_dir=artifacts.PRETRAINED_RUN,
    everyday=None,
    known_examples=None,
    parameters=None,
    decoding=None,
):
    """The bundle's README.md in a model card's sections (model, intended use, training data,
    evaluation, limitations, use, training procedure, reproduce); its commands run from the
    repository root as written.

    `reports`: test-split reports of `training.evaluate` (with a "corpus" each for a mixed run).
    `everyday`: `evaluate_everyday`'s `(reports, pairs, hypotheses, peer hypotheses)`, or None.
    `known_examples`: `{corpus name or "": [(source, reference, translation), ...]}`, or None.
    `parameters`: the model's parameter count; `decoding`: `decoding.json`'s options.
    The languages are the run's (`training.corpus.run_languages`: `config`'s `reverse`).
    """
    languages = run_languages(config.get("reverse", False))
    name = os.path.basename(os.path.normpath(bundle_dir))
    corpora = corpus_names(config.get("data"))
    settings = [
        f"- {key}: {value}" for key, value in config.items() if key not in ("data", "tfds_data_dir")
    ]
    lines = [
        f"# {'→'.join(languages)} Transformer "
        f"({' + '.join(_CORPUS_TITLES.get(c, c) for c in corpora) or 'own'} corpus)",
        "",
        *_model_section(config, weights, size_bytes, parameters, decoding),
        *_intended_use_section(corpora, languages),
        "## Training data",
        "",
        "| corpus | source | train / dev / test pairs | licence |",
        "|---|---|---|---|",
        *(corpus_row(corpus) for corpus in corpora),
        "",
        "Built on the user's machine from Debian packages by `make data` "
        "([training/CORPUS.md](../../training/CORPUS.md)); no text of them is committed.",
        "",
        *_evaluation_section(
            reports, everyday, languages, run_direction(config.get("reverse", False))
        ),
        *_limitations_section(known_examples, everyday, languages[0]),
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
        "## Training procedure",
        "",
        *([notes, ""] if notes else []),
        "The run's configuration (`config.json`):",
        "",
        *settings,
        "",
        "![training curves](training_curves.png)",
        "",
        "## Reproduce",
        "",
        "```",
        # One command a line, its words single-spaced (a Makefile's continuations leave tabs).
        *(" ".join(line.split()) for line in reproduce.splitlines()),
        "```",
    ]
    return "\n".join(lines) + "\n"


def known_examples(
    output_dir,
    reports,
    pairs_by_corpus,
    stem,
    translate_texts,
    count=KNOWN_EXAMPLES,
    source_language="Spanish",
):
    """`{corpus name or "": [(source, reference, translation)] * count}`: the first test pairs
    of each corpus with the translations `evaluate` wrote to `output_dir` (a mixed run's in
    `<output_dir>/<corpus>/`); for a corpus whose text is not committed (`UNQUOTED_CORPORA`),
    sentences of its kind in `source_language` written for the card instead, translated by
    `translate_texts` (reference "")."""
    examples = {}
    for report in reports:
        corpus = report.get("corpus", "")
        if corpus in UNQUOTED_CORPORA:
            sources = UNQUOTED_CORPORA[corpus][source_language]
            examples[corpus] = [
                (source, "", translation)
                for source, translation in zip(sources, translate_texts(sources))
            ]
            continue
        path = os.path.join(output_dir, corpus, f"{stem}.hyp.txt")
        with open(path, encoding="utf-8") as handle:
            hypotheses = handle.read().splitlines()[:count]
        pairs = pairs_by_corpus[corpus or next(iter(pairs_by_corpus))]
        examples[corpus] = [
            (source, reference, hypothesis)
            for (source, reference), hypothesis in zip(pairs, hypotheses)
        ]
    return examples


def drop_unquoted_translations(output_dir):
    """Deletes the translations of the corpora whose text is not committed (`UNQUOTED_CORPORA`)
    from a bundle's `eval/` directory `output_dir`, keeping their reports (the scores)."""
    for corpus in UNQUOTED_CORPORA:
        directory = os.path.join(output_dir, corpus)
        if os.path.isdir(directory):
            for name in os.listdir(directory):
                if name.endswith(".hyp.txt"):
                    os.remove(os.path.join(directory, name))


def evaluate_everyday(run_dir, beam_width, alpha):
    """`(reports, pairs, hypotheses, peer hypotheses)` of `run_dir` on the everyday test
    sentences: the reports of greedy search, of beam `beam_width` and of Apertium beside them
    (`training.evaluate.apertium_report`; left out, its hypotheses None, where it cannot run),
    the hypotheses the beam's, the pairs as the run reads them (`training.corpus.load_run_pairs`).
    The run's outputs are written to `run_dir/eval/everyday/`."""
    output_dir = os.path.join(run_dir, "eval", "everyday")
    reports = [
        evaluate(
            run_dir,
            "test",
            width,
            alpha,
            output_dir=output_dir,
            data=str(EVERYDAY_DIR),
            cache=False,
        )
        for width in sorted({1, beam_width})
    ]
    with open(
        os.path.join(output_dir, f"{output_stem('test', beam_width)}.hyp.txt"), encoding="utf-8"
    ) as handle:
        hypotheses = handle.read().splitlines()
    config = artifacts.read_config(run_dir)
    reverse = config.get("reverse", False)
    pairs = load_run_pairs(str(EVERYDAY_DIR), "test", reverse=reverse)
    made_up = made_up_words_for(config.get("data"), reverse)
    peer, peer_hypotheses = apertium_report(pairs, made_up, reverse)
    if peer is None:
        return reports, pairs, hypotheses, None
    return [*reports, peer], pairs, hypotheses, peer_hypotheses


def bundle(
    run_dir,
    output_dir,
    reproduce,
    beam_width=DEFAULT_BEAM_WIDTH,
    alpha=DEFAULT_ALPHA,
    notes="",
    repetition_penalty=1.0,
    no_repeat_ngram_size=0,
):
    """Writes the bundle of `run_dir` to `output_dir` (replacing it) and returns its test-split
    reports (greedy, then `beam_width`; each corpus's apart for a mixed run).

    `beam_width`, `alpha` and the repetition controls (choose them on the dev split) go to
    `decoding.json`, so that exports of the bundle serve the decoding its card reports.
    """
    options = DecodingOptions(
        beam_width=beam_width,
        alpha=alpha,
        repetition_penalty=repetition_penalty,
        no_repeat_ngram_size=no_repeat_ngram_size,
    )
    decoding = {"beam_width": beam_width, "alpha": alpha, **options.repetition_controls}
    model, _, _, config = artifacts.load_trained(run_dir)
    parent = os.path.dirname(os.path.abspath(output_dir))
    os.makedirs(parent, exist_ok=True)
    name = os.path.basename(os.path.normpath(output_dir))
    work = os.path.join(parent, f".{name}.{uuid.uuid4().hex}")
    # Staged under the bundle's own name, which its evaluation reports record.
    staging = os.path.join(work, name)
    try:
        os.makedirs(staging)
        model.save(os.path.join(staging, artifacts.MODEL_FILE))
        shutil.copy(os.path.join(run_dir, artifacts.CONFIG_FILE), staging)
        for name in (artifacts.TOKENIZER_DIR, artifacts.LOG_DIR):
            shutil.copytree(os.path.join(run_dir, name), os.path.join(staging, name))
        with open(os.path.join(staging, artifacts.DECODING_FILE), "w", encoding="utf-8") as f:
            json.dump(decoding, f, indent=2)
        plot_training_curves(
            staging, os.path.join(staging, "training_curves.png"), os.path.basename(output_dir)
        )
        reports, card = _evaluate_and_describe(
            staging,
            output_dir,
            decoding,
            model_card_options={
                "config": config,
                "weights": artifacts.select_weights(run_dir)[1],
                "parameters": model.count_params(),
                "notes": notes,
                "reproduce": reproduce,
            },
        )
        with open(os.path.join(staging, artifacts.BUNDLE_CARD_FILE), "w", encoding="utf-8") as f:
            f.write(card)
        previous = os.path.join(work, "previous")
        replacing = os.path.exists(output_dir)
        if replacing:
            os.rename(output_dir, previous)
        try:
            os.rename(staging, output_dir)
        except OSError:
            # The bundle that was there stays there.
            if replacing:
                os.rename(previous, output_dir)
            raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return reports


def _evaluate_and_describe(staging, output_dir, decoding, model_card_options):
    """`(reports, model card)` of the bundle being written in `staging`: its test splits
    (greedy and the bundle's beam), examples of each and the everyday sentences;
    `model_card_options` are `model_card`'s other arguments."""
    beam_width, alpha = decoding["beam_width"], decoding["alpha"]
    # Nothing traced is kept: a bundle holds its files alone, and its size counts them.
    evaluation = load_for_evaluation(staging, beam_width=beam_width, cache=False)
    eval_dir = os.path.join(staging, "eval")
    reports = [
        report
        for width in sorted({1, beam_width})
        for report in evaluate_perturbations(
            [UNPERTURBED], staging, "test", width, alpha, output_dir=eval_dir, cache=False
        )
    ]
    beam_reports = [report for report in reports if report["decoding"] == reports[-1]["decoding"]]
    examples = known_examples(
        eval_dir,
        beam_reports,
        evaluation.corpus_splits("test"),
        output_stem("test", beam_width),
        lambda texts: translate(texts, evaluation.translate_batch, show_progress=False),
        source_language=run_languages(evaluation.reverse)[0],
    )
    drop_unquoted_translations(eval_dir)
    everyday = evaluate_everyday(staging, beam_width, alpha)
    card = model_card(
        reports=reports,
        size_bytes=directory_bytes(staging),
        bundle_dir=output_dir,
        everyday=everyday,
        known_examples=examples,
        decoding=decoding,
        **model_card_options,
    )
    return reports, card


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m training.bundle", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--run_dir", required=True)
    parser.add_argument(
        "--output_dir",
        help="default pretrained/es-en; pretrained/en-es for a reversed run (never the other "
        "direction's bundle)",
    )
    parser.add_argument(
        "--reproduce",
        required=True,
        help="the command(s) that reproduce the run, for the model card",
    )
    # Written into the bundle's decoding.json (choose them on the dev split).
    decoding_flags.add_decoding_arguments(
        parser,
        ("beam_width", "alpha", "repetition_penalty", "no_repeat_ngram_size"),
        decoding_flags.FIELD_DEFAULTS,
    )
    parser.add_argument("--notes", default="", help="a paragraph for the model card")
    args = parser.parse_args(argv)
    try:
        reverse = artifacts.read_config(args.run_dir).get("reverse", False)
        args.output_dir = args.output_dir or os.path.join(
            "pretrained", "en-es" if reverse else "es-en"
        )
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
