"""Builds `wordnet-bt-own`: WordNet's English usage examples back-translated into Spanish by an
English→Spanish run of this project (`training.train --reverse true`) instead of Apertium.

Back-translation by a model trained the other way round (Sennrich et al., 2016) is the usual
way; `wordnet-bt` (`training.corpus.backtranslation`) uses Apertium's rules because the project
had no such model. Both corpora have the same English: the same examples, the same cleaning and
the same split, keyed on the English (`wordnet_english`, `write_backtranslated_corpus`). An
English sentence held out in one is never trained on in the other, and the two can be swapped
in a mixture and compared on the same dev sets. Only the Spanish differs. Here it is the run's
translation through the project's own path: the `Translator` signature of
`training.evaluate.run_signature`, traced once and kept (`run_directory.traced_cache`), batched
by length as translate-text batches (`training.batched_translation`), with the run's decoding
(its decoding.json, else `DecodingOptions`' defaults) and the overrides given in its place.

A pair is dropped when its Spanish is empty or loops (`training.evaluate.is_looping`): such a
source would teach the model to write good English from garbage. Unlike Apertium, the model
leaves no mark on a word it does not know, so nothing else is dropped.

stats.json records the run: its directory, which weights it used and their step, and the
SHA-256 of its config, tokenizer and those weights (`traced_cache.run_files_digest`). It also
records the decoding. A corpus whose run files or decoding differ is rebuilt without `--force`:
the run trained on, was averaged, or another run was given.

Command line: `python -m training.prepare_data --corpus wordnet-bt-own --backtranslator
runs/en-es --out data/wordnet-bt-own`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from tqdm import tqdm

from run_directory import artifacts, traced_cache
from training.batched_translation import translate_window
from training.corpus.backtranslation import (
    WORDNET_ORIGIN,
    wordnet_english,
    wordnet_manifest,
    write_backtranslated_corpus,
)
from training.corpus.debian import DEFAULT_CACHE_DIR
from training.corpus.loading import OWN_BACKTRANSLATION_SPEC
from training.corpus.outputs import needs_build, stale_unless
from training.corpus.tsv import CorpusError, Pair
from training.evaluate import describe_decoding, is_looping, run_signature

# Bumped when the corpus's layout or the rules that make it change.
CORPUS_FORMAT_VERSION = 1


def require_reversed_run(run_dir: str) -> None:
    """Returns when `run_dir` is a training run that translates English into Spanish (its
    config's `reverse` true) and has weights to translate with.

    Raises:
      CorpusError: it is no run, a Spanish→English run (the message says what to pass), or it
        has no weights yet.
    """
    try:
        config = artifacts.read_config(run_dir)
    except FileNotFoundError as error:
        raise CorpusError(f"--backtranslator: {error}") from error
    if not config.get("reverse"):
        raise CorpusError(
            f"{run_dir} translates Spanish into English (its {artifacts.CONFIG_FILE} has reverse "
            f"false): {OWN_BACKTRANSLATION_SPEC} needs a run trained the other way round, "
            "`training.train --reverse true` (docs/training.md, 'Training the other "
            "direction'); pass such a run's directory as --backtranslator, e.g. runs/en-es"
        )
    try:
        artifacts.select_weights(run_dir)
    except FileNotFoundError as error:
        raise CorpusError(f"--backtranslator: {error}") from error


def backtranslator_provenance(run_dir: str, options) -> dict:
    """What stats.json records of the run that wrote the Spanish (`options`: its
    `DecodingOptions`): its directory, the weights `artifacts.select_weights` picks (their
    description, file and training step) and the decoding, in words."""
    checkpoint_path, description = artifacts.select_weights(run_dir)
    return {
        "run_dir": os.path.abspath(run_dir),
        "weights": description,
        "weights_file": artifacts.MODEL_FILE
        if checkpoint_path is None
        else os.path.relpath(checkpoint_path, run_dir),
        "step": artifacts.weights_step(run_dir, checkpoint_path),
        "decoding": describe_decoding(options, options.beam_width),
    }


def translate_examples(english: list[str], signature) -> list[str]:
    """The best translation of each of `english` by `signature` (`[batch]` tf.string → the
    dict of a signature's outputs), batched by length (`translate_window`), with a progress bar;
    "" for a blank sentence."""
    with tqdm(total=len(english), desc="back-translating", unit="sentence") as progress:
        results = translate_window(english, signature, progress=progress.update)
    return [hypotheses[0][0] if hypotheses else "" for hypotheses in results]


def keep_translated(english: list[str], spanish: list[str]) -> tuple[list[Pair], dict[str, int]]:
    """`(Spanish, English)` pairs of the translations fit to train on, in order.

    Returns:
      `(pairs, dropped counts)`: `empty_translation` (nothing but spaces) and
      `looping_translation` (`is_looping`: a Spanish that loops where its English does not).
    """
    pairs = []
    dropped = {"empty_translation": 0, "looping_translation": 0}
    for source, target in zip(spanish, english, strict=True):
        if not source.strip():
            dropped["empty_translation"] += 1
        elif is_looping(source, target):
            dropped["looping_translation"] += 1
        else:
            pairs.append((source, target))
    return pairs, dropped


def build_own_backtranslation_corpus(
    out_dir: Path | str,
    backtranslator: str,
    cache_dir: Path | str = DEFAULT_CACHE_DIR / "wordnet",
    force: bool = False,
    limit: int | None = None,
    cache: bool = True,
    **overrides,
) -> dict:
    """Builds train/dev/test.tsv and stats.json (the run, its weights, the decoding, counts) in
    `out_dir`, the Spanish by the run `backtranslator`.

    Args:
      out_dir: output directory (created).
      backtranslator: a run directory trained with `reverse` (`require_reversed_run`).
      cache_dir: where `wordnet-base` is downloaded and unpacked once (`wordnet-bt`'s cache).
      force: rebuild even if all outputs exist; a corpus of another format version, or
        written by other run files (config, tokenizer, weights) or another decoding, is always
        rebuilt.
      limit: back-translate only the first `limit` examples (a quick build for the tests).
      cache: keep the run's traced translation for the next start (`traced_cache`).
      overrides: `DecodingOptions` fields in place of the run's (None: the run's); `beam_width`
        1 translates greedily.

    Returns:
      The statistics written (empty if the corpus was already there and current).

    Raises:
      CorpusError: the run is not a reversed run with weights, a decoding option is invalid,
        WordNet cannot be had, the run's files changed while it translated, or no pair is left.
      FileExistsError: some, but not all, outputs exist and `force` is off.
    """
    out_dir, cache_dir = Path(out_dir), Path(cache_dir)
    require_reversed_run(backtranslator)
    try:
        options = artifacts.decoding_options(backtranslator, **overrides)
    except ValueError as error:
        raise CorpusError(f"{backtranslator}: {error}") from error
    identity = {
        "format_version": CORPUS_FORMAT_VERSION,
        "limit": limit,
        "backtranslator_sha256": traced_cache.run_files_digest(backtranslator),
        "decoding_options": dataclasses.asdict(options),
    }
    what = "format, back-translating run (config, tokenizer, weights) or decoding"
    if not needs_build(out_dir, force, stale_unless(out_dir, identity, what)):
        return {}
    started = time.monotonic()
    provenance = backtranslator_provenance(backtranslator, options)
    wordnet = wordnet_english(cache_dir, limit)
    fields = dataclasses.asdict(options)
    signature, _ = run_signature(backtranslator, fields.pop("beam_width"), cache, **fields)
    spanish = translate_examples(wordnet["english"], signature)
    # A run still training replaces its best weights as it goes: the Spanish must be that of
    # the weights recorded.
    if traced_cache.run_files_digest(backtranslator) != identity["backtranslator_sha256"]:
        raise CorpusError(
            f"the files of {backtranslator} changed while it translated (is it still "
            "training?): build the corpus again once they stay as they are"
        )
    pairs, dropped = keep_translated(wordnet["english"], spanish)
    stats = {
        **identity,
        "backtranslator": provenance,
        "source": {
            "language": "es",
            "origin": f"this project's English→Spanish run {provenance['run_dir']} "
            f"({provenance['weights']}; {provenance['decoding']})",
        },
        "target": {"language": "en", "origin": WORDNET_ORIGIN},
        "packages": [wordnet_manifest(cache_dir, wordnet["wordnet_dir"])],
        "examples_read": wordnet["examples_read"],
        "dropped": {**wordnet["dropped"], **dropped},
    }
    return write_backtranslated_corpus(out_dir, pairs, stats, started, OWN_BACKTRANSLATION_SPEC)
