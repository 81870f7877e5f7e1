"""Parallel-corpus sources for the translation pipeline.

Everything the trainer reads goes through `load_pairs(source_spec, split)`, which
returns a list of `(source, target)` string pairs. Twelve kinds of source exist:

* `bible`: the embedded Spanish->English Bible corpus in `data/bible`, built on
  first use by `training.corpus.bible` (see training/CORPUS.md).
* `catalogs`: the Spanish->English corpus of Debian's translated message catalogs in
  `data/catalogs`, built on first use by `training.corpus.catalogs`.
* `catalogs-more`: the catalogs of 44 more packages, apart from `catalogs`, in
  `data/catalogs-more`, built on first use (`build_more_catalogs_corpus`).
* `catalog-fills`: the messages of the `catalogs` packages that corpus drops for their
  placeholders, filled (`training.corpus.catalog_fills_corpus`), apart from `catalogs`, in
  `data/catalog-fills`, built on first use (`build_catalog_fills_corpus`).
* `catalog-fills-more`: the same of the `catalogs-more` packages, apart from `catalogs`,
  `catalogs-more` and `catalog-fills`, in `data/catalog-fills-more`, built on first use
  (`build_more_catalog_fills_corpus`).
* `wordnet-bt`: WordNet's English usage examples back-translated by Apertium, in
  `data/wordnet-bt`, built on first use by `training.corpus.backtranslation`.
* `wordnet-bt-own`: the same English back-translated by an English→Spanish run of this
  project, in `data/wordnet-bt-own`; built by `training.corpus.own_backtranslation` when
  given the run (`make_command`), never on first use.
* `lexicon`: word and short-phrase pairs of FreeDict and Apertium in `data/lexicon`, built
  on first use by `training.corpus.lexicon`.
* `telephony`: Asterisk's voice prompts in `data/telephony`, built on first use by
  `training.corpus.telephony`: a domain to fine-tune to.
* a directory holding `train.tsv`, `dev.tsv` and `test.tsv`.
* a single `.tsv` file: all of it is the user's corpus; `dev` and `test` are split
  off deterministically by a hash of the source sentence (`HELDOUT_FRACTION` each),
  so a source sentence and its duplicates always land in the same split.
* `tfds:NAME`, e.g. `tfds:ted_hrlr_translate/pt_to_en`: a TensorFlow Datasets
  translation dataset, source/target taken from `info.supervised_keys`.

TFDS datasets are returned as Python pairs too (not as a `tf.data.Dataset`), so
every source looks the same to the caller: tokenizer training, batching and
BLEU scoring all work on one in-memory representation. The TED talk datasets
are ~50k pairs, far below what fits in memory.

The TSV format and `CorpusError` are in `training.corpus.tsv`; the hash splits
and deduplication in `training.corpus.splitting`.
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path

from model.spelling import MODERN, old_spelling
from training.corpus import (
    backtranslation,
    bible,
    catalog_fills_corpus,
    catalogs,
    lexicon,
    telephony,
)
from training.corpus.outputs import read_corpus_stats
from training.corpus.splitting import HELDOUT_FRACTION, split_single_file
from training.corpus.tsv import SPLITS, CorpusError, Pair, read_tsv

logger = logging.getLogger(__name__)

BIBLE_SPEC = "bible"
CATALOGS_SPEC = "catalogs"
MORE_CATALOGS_SPEC = "catalogs-more"
CATALOG_FILLS_SPEC = "catalog-fills"
MORE_CATALOG_FILLS_SPEC = "catalog-fills-more"
BACKTRANSLATION_SPEC = "wordnet-bt"
OWN_BACKTRANSLATION_SPEC = "wordnet-bt-own"
LEXICON_SPEC = "lexicon"
TELEPHONY_SPEC = "telephony"
TFDS_PREFIX = "tfds:"
# Project-relative home of the embedded corpus; `load_pairs` builds it when missing.
DEFAULT_BIBLE_DIR = Path(__file__).resolve().parent.parent.parent / "data" / "bible"
DEFAULT_CATALOGS_DIR = DEFAULT_BIBLE_DIR.parent / "catalogs"
DEFAULT_MORE_CATALOGS_DIR = DEFAULT_BIBLE_DIR.parent / MORE_CATALOGS_SPEC
DEFAULT_CATALOG_FILLS_DIR = DEFAULT_BIBLE_DIR.parent / CATALOG_FILLS_SPEC
DEFAULT_MORE_CATALOG_FILLS_DIR = DEFAULT_BIBLE_DIR.parent / MORE_CATALOG_FILLS_SPEC
DEFAULT_BACKTRANSLATION_DIR = DEFAULT_BIBLE_DIR.parent / BACKTRANSLATION_SPEC
DEFAULT_OWN_BACKTRANSLATION_DIR = DEFAULT_BIBLE_DIR.parent / OWN_BACKTRANSLATION_SPEC
DEFAULT_LEXICON_DIR = DEFAULT_BIBLE_DIR.parent / LEXICON_SPEC
DEFAULT_TELEPHONY_DIR = DEFAULT_BIBLE_DIR.parent / TELEPHONY_SPEC
# Everyday sentences with references, written for the purpose (training/CORPUS.md): a corpus
# directory of a dev split (for choosing recipes) and a test split (for reporting), no train
# split; never trained on.
EVERYDAY_DIR = DEFAULT_BIBLE_DIR.parent.parent / "training" / "everyday"
# TFDS names its held-out split `validation`; the project calls it `dev`.
_TFDS_SPLIT_ALIASES = {"dev": ("validation", "dev"), "train": ("train",), "test": ("test",)}


# --------------------------------------------------------------------------- TFDS


def _tfds_split_name(builder, split: str, name: str) -> str:
    """Maps the project's split name to the one the TFDS dataset uses."""
    available = list(builder.info.splits.keys())
    for candidate in _TFDS_SPLIT_ALIASES.get(split, (split,)):
        if candidate in available:
            return candidate
    raise CorpusError(
        f"TFDS dataset {name!r} has no {split!r} split (it has {', '.join(available)})"
    )


def load_tfds_pairs(
    name: str,
    split: str,
    data_dir: str | os.PathLike | None = None,
    download: bool = True,
) -> list[Pair]:
    """Loads a TFDS translation dataset as `(source, target)` string pairs.

    Source and target are the dataset's `supervised_keys`
    (`ted_hrlr_translate/pt_to_en`: source 'pt', target 'en').

    Args:
      name: TFDS name with config, e.g. `ted_hrlr_translate/pt_to_en`.
      split: `train`, `dev` (TFDS `validation`) or `test`.
      data_dir: TFDS data directory; None means the TFDS default (~/tensorflow_datasets).
      download: download and prepare the dataset if it is not in `data_dir` yet.

    Returns:
      The split's pairs, decoded to str, in TFDS order.

    Raises:
      CorpusError: unknown dataset, no supervised keys, missing split, the
        dataset is not prepared locally and `download` is off, or the download failed.
    """
    import tensorflow_datasets as tfds  # heavy: imported only for this source kind

    kwargs = {"data_dir": os.fspath(data_dir)} if data_dir is not None else {}
    try:
        builder = tfds.builder(name, **kwargs)
    except tfds.core.registered.DatasetNotFoundError as exc:
        raise CorpusError(f"unknown TFDS dataset {name!r}: {exc}") from exc
    except Exception as exc:  # a bad config name, a broken builder
        raise CorpusError(f"cannot construct TFDS dataset {name!r}: {exc}") from exc

    hint = (
        "pass a TSV corpus with --data instead, or pre-download the dataset on a machine "
        "with network access and point --tfds_data_dir at its TFDS data directory"
    )
    if not builder.is_prepared():
        if not download:
            raise CorpusError(
                f"TFDS dataset {name!r} is not available locally in {builder.data_dir_root} "
                f"and downloading is disabled; {hint}"
            )
        logger.info(
            "TFDS dataset %r is not in %s yet: downloading and preparing it "
            "(offline, this fails only after TFDS's download retries, a few minutes)",
            name,
            builder.data_dir_root,
        )
        try:
            builder.download_and_prepare()
        except ImportError as exc:  # not a download failure: a dependency is missing
            raise CorpusError(
                f"preparing TFDS dataset {name!r} needs the Python module {exc.name!r}, which is "
                "not installed; install the pinned requirements (.venv/bin/python -m pip install "
                f"-r requirements.txt) or {hint}"
            ) from exc
        except Exception as exc:  # network errors surface as many different types
            raise CorpusError(
                f"downloading TFDS dataset {name!r} failed ({type(exc).__name__}: {exc}); {hint}"
            ) from exc

    keys = builder.info.supervised_keys
    if not keys or len(keys) != 2:
        raise CorpusError(f"TFDS dataset {name!r} has no (source, target) supervised_keys")
    dataset = builder.as_dataset(split=_tfds_split_name(builder, split, name), as_supervised=True)
    return [
        (source.decode("utf-8"), target.decode("utf-8"))
        for source, target in tfds.as_numpy(dataset)
    ]


# --------------------------------------------------------------------- entry point


def build_more_catalogs_corpus(
    out_dir: str | os.PathLike,
    catalogs_dir: str | os.PathLike = DEFAULT_CATALOGS_DIR,
    force: bool = False,
) -> dict:
    """Builds `catalogs-more` (`training.corpus.catalogs.MORE_CATALOG_PACKAGES`) in `out_dir`,
    apart from the catalogs corpus in `catalogs_dir`, which is built first when missing."""
    load_pairs(CATALOGS_SPEC, "train", catalogs_dir=catalogs_dir)
    return catalogs.build_catalogs_corpus(
        out_dir,
        catalogs.DEFAULT_CACHE_DIR / MORE_CATALOGS_SPEC,
        catalogs.MORE_CATALOG_PACKAGES,
        force=force,
        apart_from=catalogs_dir,
    )


def _build_fills_apart(out_dir, catalogs_dir, apart_from, packages_spec, packages, force):
    """`catalog_fills_corpus.build_fills_corpus` of `packages`, from the download cache of the
    corpus `packages_spec`, apart from the corpora named in `apart_from`, each built first when
    missing (the catalogs corpus in `catalogs_dir`, the others in `data/`)."""
    directories = {
        CATALOGS_SPEC: catalogs_dir,
        MORE_CATALOGS_SPEC: DEFAULT_MORE_CATALOGS_DIR,
        CATALOG_FILLS_SPEC: DEFAULT_CATALOG_FILLS_DIR,
    }
    for spec in apart_from:
        load_pairs(spec, "train", catalogs_dir=catalogs_dir)
    return catalog_fills_corpus.build_fills_corpus(
        out_dir,
        [directories[spec] for spec in apart_from],
        catalogs.DEFAULT_CACHE_DIR / packages_spec,
        packages,
        force=force,
    )


def build_catalog_fills_corpus(
    out_dir: str | os.PathLike,
    catalogs_dir: str | os.PathLike = DEFAULT_CATALOGS_DIR,
    force: bool = False,
) -> dict:
    """Builds `catalog-fills` in `out_dir`: the filled messages of
    `training.corpus.catalogs.CATALOG_PACKAGES` (their download cache, `.debs/catalogs`),
    apart from the catalogs corpus in `catalogs_dir`, which is built first when missing."""
    return _build_fills_apart(
        out_dir, catalogs_dir, (CATALOGS_SPEC,), CATALOGS_SPEC, catalogs.CATALOG_PACKAGES, force
    )


def build_more_catalog_fills_corpus(
    out_dir: str | os.PathLike,
    catalogs_dir: str | os.PathLike = DEFAULT_CATALOGS_DIR,
    force: bool = False,
) -> dict:
    """Builds `catalog-fills-more` in `out_dir`: the filled messages of
    `training.corpus.catalogs.MORE_CATALOG_PACKAGES` (their download cache,
    `.debs/catalogs-more`), apart from `catalogs-more`, the catalogs corpus in `catalogs_dir`
    and `catalog-fills`, each built first when missing: a mixture of any of them trains on
    none of the others' dev or test sentences."""
    apart_from = (MORE_CATALOGS_SPEC, CATALOGS_SPEC, CATALOG_FILLS_SPEC)
    return _build_fills_apart(
        out_dir,
        catalogs_dir,
        apart_from,
        MORE_CATALOGS_SPEC,
        catalogs.MORE_CATALOG_PACKAGES,
        force,
    )


def make_command(spec: str) -> str:
    """The make command that builds the project's corpus `spec` (`make data-bible`); the
    back-translation by a run of one's own names the run it needs."""
    if spec == OWN_BACKTRANSLATION_SPEC:
        return f"make data-{spec} BACKTRANSLATOR=RUN_DIR (a run trained with --reverse true)"
    return f"make data-{spec}"


def _builders(bible_dir, catalogs_dir):
    """`{spec: (directory, build function)}` of the corpora this project builds itself; None
    for one that cannot be built on first use (`wordnet-bt-own` needs a run to translate)."""

    def in_catalogs_dir(build):
        return functools.partial(build, catalogs_dir=catalogs_dir)

    return {
        BIBLE_SPEC: (Path(bible_dir), bible.build_bible_corpus),
        CATALOGS_SPEC: (Path(catalogs_dir), catalogs.build_catalogs_corpus),
        MORE_CATALOGS_SPEC: (
            DEFAULT_MORE_CATALOGS_DIR,
            in_catalogs_dir(build_more_catalogs_corpus),
        ),
        CATALOG_FILLS_SPEC: (
            DEFAULT_CATALOG_FILLS_DIR,
            in_catalogs_dir(build_catalog_fills_corpus),
        ),
        MORE_CATALOG_FILLS_SPEC: (
            DEFAULT_MORE_CATALOG_FILLS_DIR,
            in_catalogs_dir(build_more_catalog_fills_corpus),
        ),
        BACKTRANSLATION_SPEC: (
            DEFAULT_BACKTRANSLATION_DIR,
            backtranslation.build_backtranslation_corpus,
        ),
        OWN_BACKTRANSLATION_SPEC: (DEFAULT_OWN_BACKTRANSLATION_DIR, None),
        LEXICON_SPEC: (DEFAULT_LEXICON_DIR, lexicon.build_lexicon_corpus),
        TELEPHONY_SPEC: (DEFAULT_TELEPHONY_DIR, telephony.build_telephony_corpus),
    }


def corpus_is_at_hand(
    source_spec: str,
    bible_dir: str | os.PathLike = DEFAULT_BIBLE_DIR,
    catalogs_dir: str | os.PathLike = DEFAULT_CATALOGS_DIR,
) -> bool:
    """Whether `load_pairs(source_spec, ...)` reads files already here: a built corpus of this
    project, or an existing directory or `.tsv` file; not one it would build or download."""
    builders = _builders(bible_dir, catalogs_dir)
    if source_spec in builders:
        directory = builders[source_spec][0]
        return all((directory / f"{split}.tsv").is_file() for split in SPLITS)
    return not source_spec.startswith(TFDS_PREFIX) and Path(source_spec).exists()


@functools.lru_cache(maxsize=1)
def _split_file(path: Path, modified_ns: int, size: int) -> dict[str, tuple[Pair, ...]]:
    """The splits of one `.tsv` file, read once per version of the file (the trainer asks for
    train then dev: one read, so each malformed line is reported once)."""
    return {split: tuple(pairs) for split, pairs in split_single_file(read_tsv(path)).items()}


def load_pairs(
    source_spec: str,
    split: str,
    bible_dir: str | os.PathLike = DEFAULT_BIBLE_DIR,
    tfds_data_dir: str | os.PathLike | None = None,
    tfds_download: bool = True,
    catalogs_dir: str | os.PathLike = DEFAULT_CATALOGS_DIR,
) -> list[Pair]:
    """The one entry point the trainer uses to get a split of a corpus.

    Args:
      source_spec: `bible`; `catalogs`; `catalogs-more`; `catalog-fills`; `catalog-fills-more`;
        `wordnet-bt`; `wordnet-bt-own`; `lexicon`; `telephony`; a directory with train/dev/test.tsv;
        a `.tsv` file
        (dev/test split off by `split_single_file`); or `tfds:NAME`.
      split: `train`, `dev` or `test`.
      bible_dir: where the embedded corpus lives (built there if missing).
      tfds_data_dir, tfds_download: passed to `load_tfds_pairs`.
      catalogs_dir: where the message-catalog corpus lives (built there if missing).

    Returns:
      The split as `(source, target)` pairs.

    Raises:
      CorpusError: unknown split or spec, or the source cannot be read (`wordnet-bt-own`:
        not built yet).
    """
    if split not in SPLITS:
        raise CorpusError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")

    if source_spec.startswith(TFDS_PREFIX):
        name = source_spec[len(TFDS_PREFIX) :]
        if not name:
            raise CorpusError(
                "empty TFDS name in source spec 'tfds:'; e.g. tfds:ted_hrlr_translate/pt_to_en"
            )
        return load_tfds_pairs(name, split, data_dir=tfds_data_dir, download=tfds_download)

    builders = _builders(bible_dir, catalogs_dir)
    if source_spec in builders:
        directory, build = builders[source_spec]
        if not all((directory / f"{s}.tsv").is_file() for s in SPLITS):
            if build is None:
                raise CorpusError(
                    f"{source_spec} corpus missing in {directory}: {make_command(source_spec)} "
                    "builds it"
                )
            logger.info(
                "%s corpus missing in %s: building it now (`%s` builds it apart)",
                source_spec,
                directory,
                make_command(source_spec),
            )
            build(directory)
        return read_tsv(directory / f"{split}.tsv")

    path = Path(source_spec)
    if path.is_dir():
        split_file = path / f"{split}.tsv"
        if not split_file.is_file():
            raise CorpusError(f"corpus directory {path} has no {split}.tsv")
        return read_tsv(split_file)
    if path.is_file() and path.suffix.lower() == ".tsv":
        status = path.stat()
        pairs = list(_split_file(path.resolve(), status.st_mtime_ns, status.st_size)[split])
        if not pairs:
            raise CorpusError(
                f"the {split} part split off {path} is empty (corpus too small for a "
                f"{HELDOUT_FRACTION:.0%} hold-out); give a directory with train/dev/test.tsv instead"
            )
        return pairs
    raise CorpusError(
        f"unknown corpus source {source_spec!r}: expected 'bible', 'catalogs', 'catalogs-more', "
        "'catalog-fills', 'catalog-fills-more', 'wordnet-bt', 'wordnet-bt-own', 'lexicon', 'telephony', a "
        "directory with "
        "train/dev/test.tsv, an existing .tsv file, or 'tfds:NAME'"
    )


# ----------------------------------------------------------------------- spelling


def corpus_source_spelling(
    source_spec: str, bible_dir: str | os.PathLike = DEFAULT_BIBLE_DIR
) -> str | None:
    """The spelling a corpus's source side is written in, as its build recorded it.

    A Bible corpus built by this version records `"source_spelling": "modern"` in its
    `stats.json` (see `training.corpus.bible`); so can any corpus directory.

    Returns:
      `model.spelling.MODERN`, or None when nothing is recorded (an older Bible build, in the
      1909 spelling, or any other corpus).
    """
    if source_spec.startswith(TFDS_PREFIX):
        return None
    directory = Path(bible_dir) if source_spec == BIBLE_SPEC else Path(source_spec)
    if not directory.is_dir():
        return None
    return (read_corpus_stats(directory) or {}).get("source_spelling")


def run_languages(reverse: bool) -> tuple[str, str]:
    """`(source language, target language)` of a run: the corpora's pairs are Spanish→English,
    and a reversed run (`reverse`, `training.config.TrainConfig.reverse`) reads them the other
    way round."""
    return ("English", "Spanish") if reverse else ("Spanish", "English")


def load_run_pairs(
    source_spec: str,
    split: str,
    run_source_spelling: str | None = MODERN,
    reverse: bool = False,
    bible_dir: str | os.PathLike = DEFAULT_BIBLE_DIR,
    tfds_data_dir: str | os.PathLike | None = None,
) -> list[Pair]:
    """`load_pairs` as a run saw its corpus: the one place where a run's pairs are read, for
    training, its dev BLEU, a fine-tuning run's watch, its vocabulary and its evaluation.

    A reversed run (`reverse`) reads every pair swapped, `(target, source)`: it translates the
    corpus's target language into its source language (`run_languages`).

    A run records the spelling of the corpus it learned its vocabulary from (its tokenizer
    config's "source_spelling"); the default, "modern", reads the corpus as built, as a run
    trains on it. A run that recorded none (trained before the Bible corpus was modernized) was
    trained and evaluated on the 1909 spelling, so a modern-spelled corpus is shown to it with
    `model.spelling.old_spelling` applied to the sources: the same sources it was evaluated on,
    but for the few 1909 irregularities listed in training/CORPUS.md. Targets are never
    changed, nor is a reversed run's Spanish side: it was trained on the corpus as built.
    """
    pairs = load_pairs(source_spec, split, bible_dir=bible_dir, tfds_data_dir=tfds_data_dir)
    if reverse:
        return [(target, source) for source, target in pairs]
    if run_source_spelling != MODERN and corpus_source_spelling(source_spec, bible_dir) == MODERN:
        pairs = [(old_spelling(source), target) for source, target in pairs]
    return pairs
