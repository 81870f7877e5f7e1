"""Translate a split and score it: `python -m training.evaluate --run_dir runs/small`.

Reports sacreBLEU's BLEU and chrF on detokenized text, with their signatures so the numbers can
be compared with other systems, and writes the hypotheses and a JSON report to
`<run_dir>/eval/` (or `--output_dir`); for a bundled model such as `pretrained/es-en`,
whose `eval/` is committed, to `runs/eval/<name>/` instead.

A run directory is translated by `model.translator.Translator`, the same code (tokenization,
truncation, output-length bound, decoding, detokenization) that the export's signatures run, so
its BLEU is the BLEU of what TF Serving serves; its traced translation path is kept for the next
start, as translate-text keeps it (`run_directory.traced_cache`; `--no_cache`: kept nowhere).
`--export_dir` scores an exported SavedModel version instead, through its own signatures
(`serving_default`, or `beam_search` with `--beam_width` > 1, whose width is the export's).

A run on several corpora (`--data bible:1,catalogs:3`, `training.mixture`) is scored on each
corpus's split apart, its files in `<output dir>/<corpus name>/`.

`--perturb NAME` (a `training.noise` perturbation, or `all` of them and the split as written)
scores the split with its sources perturbed as people type them (references unchanged), into
files named by the perturbation (`test.greedy.lowercase.report.json`), and prints a table of
BLEU, chrF and the share of looping outputs (`is_looping`) per perturbation.
"""

import argparse
import dataclasses
import json
import os
import re
import sys
import time

import numpy as np
import sacrebleu
import tensorflow as tf
from tqdm import tqdm

from common.serving_contract import (
    BEAM_SIGNATURE,
    EXPORT_INFO_PATH,
    GREEDY_SIGNATURE,
    N_BEST_SIGNATURE,
    TEXT_INPUT,
    TRANSLATION_OUTPUT,
)
from model.translator import DecodingOptions
from run_directory import artifacts, traced_cache
from training import decoding_flags
from training.copying import KINDS, copy_rate_sets, copy_rates, corpus_words, proper_names
from training.corpus import CorpusError, apertium, corpus_is_at_hand
from training.made_up_words import MadeUpWords, english_words, spanish_words, words
from training.mixture import load_splits, parse_data
from training.noise import PERTURBATIONS, perturbation

# Sentences per decoding call. A batch decodes up to a length bound set by its longest source, so
# a sentence that never produces [END] is cut where its batch says: scores compare only at the
# same batch size (training's dev BLEU uses this one too).
BATCH_SIZE = 32


def run_signature(run_dir, beam_width=1, cache=True, **overrides):
    """`(signature, config)` for a training run: `signature` maps a `[batch]` string tensor to the
    dict of its outputs (`common.serving_contract.TRANSLATION_OUTPUTS`): `Translator.greedy`, or
    `beam_search` when `beam_width` > 1, or `n_best` when `overrides` sets `num_hypotheses`
    (`common.serving_contract.SIGNATURE_OUTPUTS`), as the export's signature of that name does;
    the traced signature a previous process kept, else traced here and, with `cache`, kept for
    the next (`run_directory.traced_cache.load_or_trace`).

    The decoding options are the run's (`run_directory.artifacts.decoding_options`: its
    `decoding.json`, or the defaults), with `overrides` (`DecodingOptions` fields, None: the
    run's) in their place.

    Raises:
        FileNotFoundError: `run_dir` holds no config: it is no training run.
    """
    # First: a directory without a config is named as no run at all.
    config = artifacts.read_config(run_dir)
    return traced_cache.load_or_trace(run_dir, beam_width, cache, **overrides), config


def run_translate_function(run_dir, beam_width=1, cache=True, **overrides):
    """`(translate, config)` for a training run: `translate` maps a `[batch]` string tensor to
    translations (`run_signature`'s translation output)."""
    signature, config = run_signature(run_dir, beam_width, cache, **overrides)
    return (lambda text: signature(text)[TRANSLATION_OUTPUT]), config


def read_export_info(export_dir):
    """An export's `export_info.json` (`inference.export.make_export_info`)."""
    with open(os.path.join(export_dir, EXPORT_INFO_PATH), encoding="utf-8") as info_file:
        return json.load(info_file)


def load_export(export_dir):
    """`tf.saved_model.load` of an export, tensorflow-text's ops registered for its tokenizers."""
    import tensorflow_text  # noqa: F401  (registers the exported tokenizer's ops)

    return tf.saved_model.load(export_dir)


def export_signature(export_dir, beam_width=1, **expected):
    """`(signature, export_info)` for an exported SavedModel version: `signature` maps a
    `[batch]` string tensor to the dict of its outputs (`serving_default`, or `beam_search` when
    `beam_width` > 1, or `n_best` when `expected` sets `num_hypotheses`).

    Args:
        expected: `DecodingOptions` fields (None: any) the export must have been traced with.

    Raises:
        ValueError: `beam_width` > 1, or a value of `expected`, differs from the export's.
    """
    info = read_export_info(export_dir)
    exported = {**dataclasses.asdict(DecodingOptions()), **info["decoding"]}
    # The n_best signature's width: num_hypotheses, or the beam width when it is None.
    exported["num_hypotheses"] = DecodingOptions(**info["decoding"]).n_best_size
    if beam_width > 1:
        expected["beam_width"] = beam_width
    for name, value in expected.items():
        if value is not None and value != exported[name]:
            raise ValueError(
                f"{export_dir} was exported with {name} {exported[name]}, not {value}: "
                f"re-export it with --{name} {value}."
            )
    if expected.get("num_hypotheses") is not None:
        name = N_BEST_SIGNATURE
    else:
        name = GREEDY_SIGNATURE if beam_width == 1 else BEAM_SIGNATURE
    signature = load_export(export_dir).signatures[name]
    return (lambda text: signature(**{TEXT_INPUT: text})), info


def export_translate_function(export_dir, beam_width=1, **expected):
    """`(translate, export_info)` for an exported SavedModel version: `translate` maps a
    `[batch]` string tensor to translations (`export_signature`'s translation output).

    Raises:
        ValueError: as `export_signature`.
    """
    signature, info = export_signature(export_dir, beam_width, **expected)
    return (lambda text: signature(text)[TRANSLATION_OUTPUT]), info


@dataclasses.dataclass(frozen=True)
class EvaluatedModel:
    """A run or an export, ready to translate (`load_for_evaluation`).

    Attributes:
        translate_batch: `[batch]` tf.string → `[batch]` tf.string translations.
        config: the run's config dict (an export's `run_config`, or {}).
        source_spelling: the spelling its source tokenizer reads (`run_directory.artifacts`).
        source: the run or export directory.
        decoding: how it decodes, for reports ("greedy", "beam 4, alpha 0.6", and the
            repetition controls when on).
    """

    translate_batch: object
    config: dict
    source_spelling: str | None
    source: str
    decoding: str

    def corpus_splits(self, split, data=None, tfds_data_dir=None):
        """`{corpus name: (source, target) pairs}` of `split` of each corpus of the model's data
        (or of `data`, one corpus or several, `training.mixture`), in the spelling its source
        tokenizer reads.

        Raises:
            ValueError: no `data` and the model does not say which corpus it was trained on, or
                a bad data spec.
            CorpusError: a corpus cannot be read.
        """
        if not (data or self.config.get("data")):
            raise ValueError(
                f"{self.source} does not say which corpus it was trained on: pass data."
            )
        return load_splits(
            parse_data(data or self.config["data"]),
            split,
            run_source_spelling=self.source_spelling,
            reverse=self.reverse,
            tfds_data_dir=tfds_data_dir or self.config.get("tfds_data_dir") or None,
        )

    @property
    def reverse(self):
        """Whether the model translates its corpora's pairs the other way round (the run's
        `reverse`): they are read swapped, and its translations are Spanish."""
        return bool(self.config.get("reverse"))

    def split_pairs(self, split, data=None, tfds_data_dir=None):
        """The pairs of `corpus_splits`, every corpus's in the order of the data spec."""
        splits = self.corpus_splits(split, data, tfds_data_dir)
        return [pair for pairs in splits.values() for pair in pairs]

    def made_up_words(self):
        """`made_up_words_for` the model's training data and direction."""
        return made_up_words_for(self.config.get("data"), self.reverse)


def made_up_words_for(data, reverse=False):
    """`(MadeUpWords, what it knows)`: the word lists of the target language (English; Spanish
    for a `reverse` run, whose translations are Spanish) and the target side of the training
    corpora of `data` (a data spec, or None) that are at hand, as the run reads them; a corpus
    that would have to be built or downloaded first is left out, and named in what it knows.
    `(None, why)` where the word lists cannot be had (no apt, offline before their first
    download): reports then hold no rate (`made_up_report`)."""
    lists = (
        "Spanish word list (wspanish)" if reverse else "English word lists (wamerican, wbritish)"
    )
    try:
        listed = spanish_words() if reverse else english_words()
    except CorpusError as error:
        return None, f"not measured: the {lists} could not be had ({error})"
    corpora = parse_data(data) if data else []
    at_hand = [corpus for corpus in corpora if corpus_is_at_hand(corpus.spec)]
    targets = [
        target
        for pairs in (load_splits(at_hand, "train", reverse=reverse).values() if at_hand else ())
        for _, target in pairs
    ]
    known = lists
    if at_hand:
        known += ", training targets of " + ", ".join(corpus.name for corpus in at_hand)
    missing = [corpus.name for corpus in corpora if corpus not in at_hand]
    if missing:
        known += f" (not built here: {', '.join(missing)})"
    return MadeUpWords(listed | {word for text in targets for word in words(text)}), known


def apertium_report(pairs, made_up, reverse=False):
    """Apertium `spa-eng` (`eng-spa` for a `reverse` run's pairs, English first; `apertium
    -u`: unknown words copied unmarked, as a user reads them), the peer a Debian user could
    pick, on the sources of `pairs`, scored like a run's report (`decoding` "Apertium <version>
    <direction>"; `seconds` the whole command's, its start included), with `made_up` as
    `made_up_words_for` gives it; and its outputs. `(None, message)` where Apertium is missing
    and cannot be installed (`training.corpus.apertium.ensure_apertium`)."""
    try:
        apertium.ensure_apertium()
    except CorpusError as error:
        return None, f"Apertium skipped: {error}"
    sources = [source for source, _ in pairs]
    direction = apertium.run_direction(reverse)
    started = time.perf_counter()
    hypotheses = apertium.translate(sources, direction, mark_unknown=False)
    seconds = time.perf_counter() - started
    report = {
        "decoding": f"Apertium {apertium.apertium_version()} {direction}",
        "seconds": round(seconds, 1),
        **score(hypotheses, [target for _, target in pairs]),
        **made_up_report(made_up, hypotheses, sources),
    }
    return report, hypotheses


def made_up_report(made_up, translations, sources):
    """The made-up-word fields of a report (`MadeUpWords.report`, and "made_up_known_words"),
    for `made_up` as `made_up_words_for` gives it; None rates where it could not be measured."""
    checker, known = made_up
    if checker is None:
        empty = {"made_up_rate": None, "made_up_words": None, "output_words": None}
        return {**empty, "made_up_examples": {}, "made_up_known_words": known}
    return {**checker.report(translations, sources), "made_up_known_words": known}


def made_up_cell(report):
    """A table cell of a report's made-up-word rate: "3.4% (99)", or "n/a"."""
    if report.get("made_up_rate") is None:
        return "n/a"
    return f"{100 * report['made_up_rate']:.1f}% ({report['made_up_words']})"


def describe_decoding(options, beam_width):
    """ "greedy" or "beam W, alpha A", then the repetition controls that are on."""
    text = "greedy" if beam_width == 1 else f"beam {beam_width}, alpha {options.alpha}"
    if options.repetition_penalty != 1:
        text += f", repetition_penalty {options.repetition_penalty}"
    if options.no_repeat_ngram_size:
        text += f", no_repeat_ngram_size {options.no_repeat_ngram_size}"
    if not options.limit_placeholders:
        text += ", placeholders not limited"
    if not options.repair_words:
        text += ", made-up words kept"
    return text


def load_for_evaluation(
    run_dir=None, export_dir=None, beam_width=1, alpha=None, cache=True, **overrides
):
    """An `EvaluatedModel` of a run directory (decoding with its `decoding.json`, `alpha` and
    `overrides` in their place when not None) or of an export (its own decoding; `overrides`
    must match it).

    A run's translation is the traced signature a previous process kept, else traced here
    and, with `cache`, kept for the next (`run_directory.traced_cache.load_or_trace`).

    Raises:
        ValueError: neither or both directories given; an override an export does not have.
    """
    if (run_dir is None) == (export_dir is None):
        raise ValueError("Give exactly one of run_dir and export_dir.")
    if export_dir is not None:
        translate_batch, info = export_translate_function(export_dir, beam_width, **overrides)
        options = DecodingOptions(**info["decoding"])
        return EvaluatedModel(
            translate_batch,
            info.get("run_config") or {},
            info.get("source_spelling"),
            export_dir,
            describe_decoding(options, beam_width),
        )
    translate_batch, config = run_translate_function(
        run_dir, beam_width, cache, alpha=alpha, **overrides
    )
    options = artifacts.decoding_options(run_dir, beam_width=beam_width, alpha=alpha, **overrides)
    return EvaluatedModel(
        translate_batch,
        config,
        artifacts.source_spelling(run_dir),
        run_dir,
        describe_decoding(options, beam_width),
    )


def translate(sources, translate_batch, batch_size=BATCH_SIZE, show_progress=True):
    """Translates strings in batches of similar length; returns the translations in order.

    Args:
        sources: list of str.
        translate_batch: `[batch]` tf.string → `[batch]` tf.string translations (from
            `run_translate_function` or `export_translate_function`).
        batch_size: sentences per call.
    """
    order = np.argsort([len(source) for source in sources], kind="stable")
    translations = [None] * len(sources)
    batches = range(0, len(order), batch_size)
    for start in tqdm(batches, desc="translating", unit="batch", disable=not show_progress):
        rows = order[start : start + batch_size]
        texts = translate_batch(tf.constant([sources[row] for row in rows], tf.string)).numpy()
        for row, text in zip(rows, texts):
            translations[row] = text.decode("utf-8")
    return translations


def score(hypotheses, references):
    """sacreBLEU corpus BLEU and chrF with their signatures."""
    bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    return {
        "bleu": round(bleu_score.score, 2),
        "bleu_signature": str(bleu.get_signature()),
        "bleu_details": str(bleu_score),
        "chrf": round(chrf_score.score, 2),
        "chrf_signature": str(chrf.get_signature()),
    }


# The split as written, in `--perturb all` and in the reports (`perturbation`).
UNPERTURBED = "none"
_LOOP_TOKEN = re.compile(r"\w+|[^\w\s]")
_LOOP_CHARACTER = re.compile(r"(\w)\1{3}")


def _loops(text):
    tokens = _LOOP_TOKEN.findall(text.lower())
    trigrams = list(zip(tokens, tokens[1:], tokens[2:]))
    return bool(
        _LOOP_CHARACTER.search(text.lower())
        or any(len(set(tokens[i : i + 4])) == 1 for i in range(len(tokens) - 3))
        or any(trigrams.count(trigram) >= 3 for trigram in set(trigrams))
    )


def is_looping(hypothesis, source):
    """Whether a translation loops where its source does not.

    Counted on words (runs of letters and digits, case-insensitive) and punctuation marks, and on
    characters: a text loops when a word or mark comes more than 3 times in a row, a 3-gram of
    them occurs 3 times or more, or a letter comes more than 3 times in a row inside a word
    (how a runaway one-letter piece reads: "AOOOOOOOO"). A hypothesis that loops is not counted
    when its source loops too (a repetition the text asked for).
    """
    return _loops(hypothesis) and not _loops(source)


def default_output_dir(run_dir=None, export_dir=None):
    """`<run_dir>/eval`; `runs/eval/<name>` for a bundle (its committed `eval/` stays as it is);
    for an export, next to its versions, not inside one (TF Serving ignores the non-numeric name):
    `<model dir>/eval/<version>`."""
    if export_dir is not None:
        export_dir = os.path.normpath(export_dir)
        return os.path.join(os.path.dirname(export_dir), "eval", os.path.basename(export_dir))
    if artifacts.is_bundle(run_dir):
        return os.path.join(artifacts.BUNDLE_EVAL_BASE, os.path.basename(os.path.normpath(run_dir)))
    return os.path.join(run_dir, "eval")


def evaluate(
    run_dir=None,
    split="test",
    beam_width=1,
    alpha=None,
    batch_size=BATCH_SIZE,
    limit=None,
    output_dir=None,
    data=None,
    export_dir=None,
    perturb=None,
    tfds_data_dir=None,
    cache=True,
    **repetition_controls,
):
    """Translates `split` of the run's corpus (or `data`), scores it, writes the outputs.

    Args:
        run_dir: a training run directory; or None with `export_dir`.
        alpha: beam search's length-penalty exponent (default: the run's own,
            `run_directory.artifacts.decoding_options`; an export always uses its own).
        export_dir: an exported SavedModel version (`<export_base>/<model>/<version>`), scored
            through its signatures instead of a run directory.
        perturb: a `training.noise` perturbation name (or "+"-composition) applied to the
            sources; None or "none": the split as written.
        tfds_data_dir: TFDS data directory for a `tfds:NAME` corpus (default: the run's own).
        cache: keep a run's traced translation for the next process, and load the one kept
            (`load_for_evaluation`).
        repetition_controls: `repetition_penalty`, `no_repeat_ngram_size`,
            `limit_placeholders`, `repair_words` (default: the run's own; an export must have
            been traced with them).

    Returns:
        the report dict (also written as `<split>.<decoding>[.<perturb>].report.json`); for data
        of several corpora, the first corpus's (`evaluate_perturbations` has every one).
    """
    return evaluate_perturbations(
        [perturb or UNPERTURBED],
        run_dir,
        split,
        beam_width,
        alpha,
        batch_size,
        limit,
        output_dir,
        data,
        export_dir,
        tfds_data_dir,
        cache=cache,
        **repetition_controls,
    )[0]


def evaluate_perturbations(
    perturbations,
    run_dir=None,
    split="test",
    beam_width=1,
    alpha=None,
    batch_size=BATCH_SIZE,
    limit=None,
    output_dir=None,
    data=None,
    export_dir=None,
    tfds_data_dir=None,
    changed_only=False,
    cache=True,
    **repetition_controls,
):
    """`evaluate` for each name of `perturbations` ("none": as written), the model loaded once.

    With `changed_only`, every row scores the same subset of the split: the pairs whose source
    one of the perturbations changes (a perturbation that touches few sources, such as
    "modern_names", is otherwise diluted by the rest); its outputs are written as
    `<split>.<decoding>[.<perturb>].changed.*`.

    With data of several corpora (the run's, or `data`: `training.mixture`), each corpus is
    scored apart, its reports holding its "corpus" name and written to `<output_dir>/<name>/`.

    Returns:
        the report dicts, in the order of `perturbations` (for each corpus in turn).

    Raises:
        ValueError: an unknown perturbation (before any translating); `changed_only` and no
            source changed.
    """
    functions = {
        name: None if name == UNPERTURBED else perturbation(name) for name in perturbations
    }
    model = load_for_evaluation(
        run_dir, export_dir, beam_width, alpha, cache=cache, **repetition_controls
    )
    splits = model.corpus_splits(split, data, tfds_data_dir)
    made_up = model.made_up_words()
    directory = _output_dir(output_dir, run_dir, export_dir)
    reports = []
    for corpus, pairs in splits.items():
        corpus_directory, corpus_name = directory, None
        if len(splits) > 1:
            corpus_directory, corpus_name = os.path.join(directory, corpus), corpus
        pairs = pairs[:limit]
        if changed_only:
            pairs = _changed_pairs(pairs, [f for f in functions.values() if f is not None])
            if not pairs:
                raise ValueError(
                    f"no source of the {split} split{f' of {corpus}' * bool(corpus_name)} is "
                    f"changed by {perturbations}"
                )
        for name, function in functions.items():
            report = _evaluate_pairs(pairs, function, model, batch_size, made_up)
            report = {
                "run_dir" if export_dir is None else "export_dir": os.path.basename(
                    os.path.normpath(model.source)
                ),
                **({"corpus": corpus_name} if corpus_name else {}),
                "split": split,
                "perturbation": name,
                **report,
            }
            stem = output_stem(split, beam_width)
            if name != UNPERTURBED:
                stem += f".{name}"
            if changed_only:
                stem += ".changed"
                report["changed_only"] = True
            write_outputs(corpus_directory, stem, report.pop("hypotheses"), report)
            reports.append(report)
    return reports


def _evaluate_pairs(pairs, perturb_function, model, batch_size, made_up):
    """Translates the sources of `pairs` (perturbed by `perturb_function` unless None) and scores
    them: the report's measured part, and the "hypotheses". `made_up` is `(MadeUpWords, what it
    knows)` (`EvaluationModel.made_up_words`)."""
    sources = [source_text for source_text, _ in pairs]
    if perturb_function is not None:
        sources = [text.decode("utf-8") for text in perturb_function(tf.constant(sources)).numpy()]
    started = time.time()
    hypotheses = translate(sources, model.translate_batch, batch_size)
    seconds = time.time() - started
    looping = sum(map(is_looping, hypotheses, sources))
    return {
        "sentences": len(pairs),
        "decoding": model.decoding,
        "seconds": round(seconds, 1),
        **score(hypotheses, [target for _, target in pairs]),
        "looping": round(looping / max(len(pairs), 1), 4),
        "looping_sentences": looping,
        **made_up_report(made_up, hypotheses, sources),
        "hypotheses": hypotheses,
    }


def evaluate_copy_rates(
    run_dir=None,
    split="test",
    beam_width=1,
    alpha=None,
    batch_size=BATCH_SIZE,
    output_dir=None,
    data=None,
    export_dir=None,
    tfds_data_dir=None,
    training_data=None,
    cache=True,
    **repetition_controls,
):
    """How often translations copy a name or a number never seen in training
    (`training.copying`): the `split`'s pairs with a copy slot, filled with generated names
    (none a word of the training corpora) and with numbers in digits.

    Arguments as `evaluate`'s; `training_data`: the corpora whose training words the generated
    names avoid (default: `data`, else the run's; pass the run's whole mixture when `data` is
    one corpus of it). Returns the report (also written as
    `<split>.<decoding>.copy.report.json`): per kind ("names", "numbers") the sentences, how
    many translations hold the value, the rate and a few misses.
    """
    model = load_for_evaluation(
        run_dir, export_dir, beam_width, alpha, cache=cache, **repetition_controls
    )
    pairs = model.split_pairs(split, data, tfds_data_dir)
    training_pairs = model.split_pairs("train", training_data or data, tfds_data_dir)
    sets = copy_rate_sets(
        pairs, proper_names(training_pairs + pairs), excluded_words=corpus_words(training_pairs)
    )
    report = {
        "run_dir" if export_dir is None else "export_dir": os.path.basename(
            os.path.normpath(model.source)
        ),
        "split": split,
        "decoding": model.decoding,
        **copy_rates(sets, lambda texts: translate(texts, model.translate_batch, batch_size)),
    }
    directory = _output_dir(output_dir, run_dir, export_dir)
    os.makedirs(directory, exist_ok=True)
    stem = f"{output_stem(split, beam_width)}.copy"
    with open(os.path.join(directory, f"{stem}.report.json"), "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=2, ensure_ascii=False)
    return report


def copy_rate_table(*reports):
    """Markdown table of `evaluate_copy_rates` reports; with a corpus column when they hold one
    (each corpus's report)."""
    mixed = any("corpus" in report for report in reports)
    lines = [
        ("| corpus " if mixed else "") + "| copied | sentences | copy rate |",
        ("|---" if mixed else "") + "|---|---:|---:|",
    ]
    for report in reports:
        for kind in KINDS:
            rates = report[kind]
            lines.append(
                (f"| {report['corpus']} " if mixed else "")
                + f"| {kind} | {rates['sentences']} | {100 * rates['rate']:.1f}% |"
            )
    return "\n".join(lines)


def _output_dir(output_dir, run_dir, export_dir):
    if output_dir is None:
        output_dir = default_output_dir(run_dir, export_dir)
    return output_dir


def output_stem(split, beam_width):
    """The file-name stem of `split`'s outputs decoded with `beam_width`: "test.greedy",
    "test.beam4"; `write_outputs` adds ".hyp.txt" and ".report.json"."""
    return f"{split}.{'greedy' if beam_width == 1 else f'beam{beam_width}'}"


def write_outputs(output_dir, stem, hypotheses, report):
    """`<stem>.hyp.txt` (one translation a line) and `<stem>.report.json` in `output_dir`."""
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, f"{stem}.hyp.txt"), "w", encoding="utf-8") as handle:
        handle.writelines(f"{line}\n" for line in hypotheses)
    with open(os.path.join(output_dir, f"{stem}.report.json"), "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=2, ensure_ascii=False)


def _changed_pairs(pairs, functions):
    """The pairs of `pairs` whose source one of `functions` (perturbations) changes."""
    sources = [source for source, _ in pairs]
    changed = [False] * len(pairs)
    for function in functions:
        perturbed = function(tf.constant(sources, tf.string)).numpy() if sources else []
        changed = [
            was or text.decode("utf-8") != source
            for was, text, source in zip(changed, perturbed, sources)
        ]
    return [pair for pair, keep in zip(pairs, changed) if keep]


def robustness_table(reports):
    """Markdown table of perturbation reports: BLEU, chrF, looping share, made-up-word rate, and
    the change in BLEU from the unperturbed split when it is among them; with a corpus column
    (each corpus's change from its own unperturbed split) when the reports are of several
    corpora."""
    mixed = any("corpus" in report for report in reports)
    clean = {
        report.get("corpus"): report["bleu"]
        for report in reports
        if report["perturbation"] == UNPERTURBED
    }
    lines = [
        ("| corpus " if mixed else "")
        + "| perturbation | BLEU | chrF | looping outputs | made-up words |"
        + (" BLEU change |" if clean else ""),
        ("|---" if mixed else "") + "|---|---:|---:|---:|---:|" + ("---:|" if clean else ""),
    ]
    for report in reports:
        corpus = report.get("corpus")
        change = (
            f" {report['bleu'] - clean[corpus]:+.2f} |" if corpus in clean else " |" * bool(clean)
        )
        lines.append(
            (f"| {corpus} " if mixed else "")
            + f"| {report['perturbation']} | {report['bleu']:.2f} | {report['chrf']:.2f} | "
            f"{100 * report['looping']:.1f}% ({report['looping_sentences']}) | "
            f"{made_up_cell(report)} |{change}"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m training.evaluate", description=__doc__)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--run_dir", help="a training run directory")
    where.add_argument("--export_dir", help="an exported SavedModel version directory")
    parser.add_argument("--split", default="test", choices=("train", "dev", "test"))
    parser.add_argument(
        "--data",
        help="corpus to evaluate on (default: the run's own); several (CORPUS[:WEIGHT],...; "
        "weights ignored) are scored apart, each into OUTPUT_DIR/<corpus name>/",
    )
    parser.add_argument(
        "--tfds_data_dir", help="TFDS data directory for a tfds:NAME corpus (default: the run's)"
    )
    decoding_flags.add_decoding_arguments(
        parser,
        ("beam_width", "alpha", *decoding_flags.OUTPUT_RULE_FLAGS),
        decoding_flags.RUN_OR_EXPORT_DEFAULTS,
        greedy=True,
    )
    parser.add_argument("--batch_size", type=int, default=BATCH_SIZE)
    parser.add_argument("--limit", type=int, help="only the first N sentences")
    parser.add_argument(
        "--output_dir",
        help="default <run_dir>/eval (runs/eval/<name> for a bundled model such as "
        "pretrained/es-en), or <model dir>/eval/<version> for an export",
    )
    parser.add_argument(
        "--copy_rate",
        action="store_true",
        help="instead of BLEU, score how often unseen names and numbers are copied "
        "(training.copying)",
    )
    parser.add_argument(
        "--perturb",
        help=f"score with the sources perturbed: {' | '.join(PERTURBATIONS)} (or several "
        "joined by '+'), a comma-separated list of those and none (as written), or all: each "
        "of them and the split as written",
    )
    parser.add_argument(
        "--changed_only",
        action="store_true",
        help="with --perturb, score only the pairs whose source a perturbation changes (every "
        "row on the same pairs)",
    )
    traced_cache.add_no_cache_argument(parser)
    args = parser.parse_args(argv)
    if args.beam_width < 1:
        parser.error("--beam_width must be at least 1")
    if args.changed_only and not args.perturb:
        parser.error("--changed_only needs --perturb")
    names = [name.strip() for name in (args.perturb or UNPERTURBED).split(",")]
    if args.perturb == "all":
        names = [UNPERTURBED, *PERTURBATIONS]
    repetition_controls = decoding_flags.output_rules(args)
    try:
        if args.copy_rate:
            report = evaluate_copy_rates(
                args.run_dir,
                args.split,
                args.beam_width,
                args.alpha,
                args.batch_size,
                args.output_dir,
                args.data,
                args.export_dir,
                args.tfds_data_dir,
                cache=not args.no_cache,
                **repetition_controls,
            )
            print(copy_rate_table(report))
            print(f"{report['split']} split, {report['decoding']}")
            return 0
        reports = evaluate_perturbations(
            names,
            args.run_dir,
            args.split,
            args.beam_width,
            args.alpha,
            args.batch_size,
            args.limit,
            args.output_dir,
            args.data,
            args.export_dir,
            args.tfds_data_dir,
            args.changed_only,
            cache=not args.no_cache,
            **repetition_controls,
        )
    except (CorpusError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for position in range(0, len(reports), len(names)):
        print_reports(reports[position : position + len(names)], bool(args.perturb))
    return 0


def print_reports(reports, perturbed):
    """Prints the reports of one corpus: the robustness table when `perturbed`, then the first
    report's scores (under the corpus's name in a run on several)."""
    report = reports[0]
    if "corpus" in report:
        print(f"{report['corpus']}:")
    if perturbed:
        print(robustness_table(reports))
    print(f"BLEU {report['bleu']}  ({report['bleu_signature']})")
    print(f"chrF {report['chrf']}  ({report['chrf_signature']})")
    print(f"made-up words {made_up_cell(report)} of {report['output_words']} words")
    print(f"{report['sentences']} sentences, {report['decoding']}, {report['seconds']} s")


if __name__ == "__main__":
    sys.exit(main())
