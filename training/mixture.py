"""Several corpora in one run, mixed by weight: `--data bible:1,catalogs:3`.

A data spec is one corpus as `training.corpus.load_pairs` reads it (`bible`, a directory with
train/dev/test.tsv, a `.tsv` file, `tfds:NAME`), or several joined by commas, each with an
optional weight after its last colon (`CORPUS:WEIGHT`, a positive number; 1 when left out). A
spec that names an existing file or directory is that one corpus, whatever it holds. As in
OpenNMT-tf's weighted datasets, the weights are normalized into the share of the training
examples drawn from each corpus (`training.pipeline.mix_examples`); every corpus keeps its own
dev and test split, scored apart (`training.dev_bleu`, `training.evaluate`).

What applies to which corpus (`names_corpora`, `mixture_source_spelling`): the vocabulary, the
accent and case restoration tables and the placeholders' known words are learned from the
training sources of every corpus. The 1909 Bible's own tables apply to the corpora built from
it, those whose build records the source spelling "modern" (`training.corpus.
corpus_source_spelling`: the 1909 text rewritten in today's spelling): the names table
(`model.spelling.name_table`: today's spelling of a name to the 1909 one) is learned from their
sources only, and a run holding one records that spelling, so its source tokenizer modernizes
1909 spellings ("fué", "á") in any input; text already in today's spelling goes through
unchanged (tests/training/test_mixture.py).
"""

import dataclasses
import math
import os
import re

from model.spelling import MODERN
from training.corpus import CorpusError, corpus_source_spelling, load_run_pairs

# A weight looks like a number: what follows a corpus's last colon when it starts like one.
_LOOKS_NUMERIC = re.compile(r"[-+.0-9]")
# TensorBoard tags and report directories: a corpus name in these characters only.
_NAME_CHARACTERS = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclasses.dataclass(frozen=True)
class Corpus:
    """One corpus of a run's data spec.

    Attributes:
        spec: what `training.corpus.load_pairs` reads ("bible", a path, "tfds:NAME").
        share: its normalized weight, the expected share of the training examples (sums to 1).
        name: a short name for TensorBoard tags and report directories ("bible", a directory's
            or file's base name, a TFDS name with "/" as "_").
    """

    spec: str
    share: float
    name: str


def corpus_name(spec):
    """The short name of one corpus spec (see `Corpus.name`)."""
    stripped = spec.rstrip("/" + os.sep)
    base = os.path.basename(stripped) if not spec.startswith("tfds:") else spec[len("tfds:") :]
    if base.lower().endswith(".tsv"):
        base = base[: -len(".tsv")]
    return _NAME_CHARACTERS.sub("_", base).strip("_") or "corpus"


def _split_weight(entry, data):
    """`(corpus spec, weight)` of one comma-separated entry of `data`."""
    corpus, colon, weight_text = entry.rpartition(":")
    if not colon or not (weight_text == "" or _LOOKS_NUMERIC.match(weight_text)):
        return entry, 1.0
    if not corpus:
        raise ValueError(f"--data {data!r}: the entry {entry!r} names no corpus before its weight")
    try:
        weight = float(weight_text)
    except ValueError:
        raise ValueError(
            f"--data {data!r}: the weight of {corpus!r} must be a number, got {weight_text!r} "
            "(write CORPUS:WEIGHT, e.g. bible:1,catalogs:3)"
        ) from None
    if not math.isfinite(weight) or weight <= 0:
        raise ValueError(
            f"--data {data!r}: the weight of {corpus!r} must be positive, got {weight}"
        )
    return corpus, weight


def parse_data(data):
    """The corpora of a data spec, in the order written.

    Returns:
        list of `Corpus`, one for a plain spec (share 1), their shares summing to 1.

    Raises:
        ValueError: bad syntax (an empty spec or entry, a weight that is no number), a weight
            that is not positive, the same corpus twice, or two corpora with the same name.
    """
    if not data or not data.strip():
        raise ValueError("--data is empty: name a corpus (bible, DIR, FILE.tsv, tfds:NAME)")
    if os.path.exists(data):
        return [Corpus(data, 1.0, corpus_name(data))]
    entries = [entry.strip() for entry in data.split(",")]
    if any(not entry for entry in entries):
        raise ValueError(
            f"--data {data!r}: an empty entry between commas (write CORPUS:WEIGHT,CORPUS:WEIGHT)"
        )
    weighted = [_split_weight(entry, data) for entry in entries]
    seen = {}
    for spec, _ in weighted:
        key = os.path.realpath(spec) if os.path.exists(spec) else spec
        if key in seen:
            raise ValueError(f"--data {data!r}: the corpus {spec!r} is named twice")
        seen[key] = spec
    names = [corpus_name(spec) for spec, _ in weighted]
    for name in set(names):
        clashing = [spec for spec, other in zip(seen.values(), names) if other == name]
        if len(clashing) > 1:
            raise ValueError(
                f"--data {data!r}: {' and '.join(map(repr, clashing))} would both be reported as "
                f"{name!r}; rename one of them"
            )
    total = sum(weight for _, weight in weighted)
    return [Corpus(spec, weight / total, name) for (spec, weight), name in zip(weighted, names)]


def load_splits(corpora, split, **load_options):
    """`{corpus name: pairs}` of `split` of each corpus as a run sees it, by
    `training.corpus.load_run_pairs(spec, split, **load_options)` (`reverse`: swapped).

    Raises:
        CorpusError: a corpus cannot be read (unknown, missing split, ...); the message names it.
    """
    splits = {}
    for corpus in corpora:
        try:
            splits[corpus.name] = load_run_pairs(corpus.spec, split, **load_options)
        except CorpusError as error:
            if len(corpora) == 1:
                raise
            raise CorpusError(f"corpus {corpus.spec!r} of the mixture: {error}") from error
        if not splits[corpus.name]:
            raise CorpusError(f"corpus {corpus.spec!r}: its {split} split holds no pair")
    return splits


def names_corpora(corpora):
    """The corpora the 1909 Bible's names table is learned from: those whose build records the
    source spelling "modern" (the 1909 text in today's spelling)."""
    return [corpus for corpus in corpora if corpus_source_spelling(corpus.spec) == MODERN]


def mixture_source_spelling(corpora):
    """The source spelling a run on `corpora` records (`training.vocabulary.build_tokenizers`):
    "modern" when one corpus is the 1909 Bible in today's spelling, else None."""
    return MODERN if names_corpora(corpora) else None
