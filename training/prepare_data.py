"""Command line: builds a corpus this project makes from Debian packages.

`--corpus bible` (the default): the Spanish->English Bible, `training.corpus.bible`.
`--corpus catalogs`: Debian's translated message catalogs, `training.corpus.catalogs`.
`--corpus catalogs-more`: the catalogs of 44 more packages, apart from `catalogs`.
`--corpus catalog-fills`: the messages `catalogs` drops for their placeholders, filled,
`training.corpus.catalog_fills_corpus`, apart from `catalogs` (same packages and cache).
`--corpus catalog-fills-more`: the same of the `catalogs-more` packages, apart from `catalogs`,
`catalogs-more` and `catalog-fills`.
`--corpus wordnet-bt`: WordNet's usage examples back-translated by Apertium,
`training.corpus.backtranslation`.
`--corpus wordnet-bt-own --backtranslator RUN_DIR`: the same English back-translated by an
English→Spanish run of this project (`--reverse true`), `training.corpus.own_backtranslation`.
`--corpus lexicon`: FreeDict's and Apertium's word pairs, `training.corpus.lexicon`.
`--corpus telephony`: Asterisk's voice prompts, `training.corpus.telephony` (a domain to
fine-tune to).
See training/CORPUS.md.

Usage:
  python -m training.prepare_data --out data/bible [--cache .debs] [--force]
  python -m training.prepare_data --corpus catalogs --out data/catalogs [--packages a,b | --test_set]
  python -m training.prepare_data --corpus wordnet-bt-own --backtranslator runs/en-es \
      --out data/wordnet-bt-own [--beam_width 1]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from run_directory import traced_cache
from training import decoding_flags
from training.corpus.backtranslation import build_backtranslation_corpus
from training.corpus.bible import build_bible_corpus
from training.corpus.catalogs import CATALOG_PACKAGES, TEST_PACKAGES, build_catalogs_corpus
from training.corpus.lexicon import build_lexicon_corpus
from training.corpus.loading import (
    OWN_BACKTRANSLATION_SPEC,
    build_catalog_fills_corpus,
    build_more_catalog_fills_corpus,
    build_more_catalogs_corpus,
)
from training.corpus.own_backtranslation import build_own_backtranslation_corpus
from training.corpus.telephony import build_telephony_corpus
from training.corpus.tsv import CorpusError

logger = logging.getLogger(__name__)

CORPORA = (
    "bible",
    "catalogs",
    "catalogs-more",
    "catalog-fills",
    "catalog-fills-more",
    "wordnet-bt",
    OWN_BACKTRANSLATION_SPEC,
    "lexicon",
    "telephony",
)
# The corpora built apart from others, in the cache of the catalogs corpus of their packages.
_APART_BUILDERS = {
    "catalogs-more": (build_more_catalogs_corpus, "catalogs-more"),
    "catalog-fills": (build_catalog_fills_corpus, "catalogs"),
    "catalog-fills-more": (build_more_catalog_fills_corpus, "catalogs-more"),
}
# The corpora back-translated from WordNet's English, which `--limit` cuts short.
WORDNET_CORPORA = ("wordnet-bt", OWN_BACKTRANSLATION_SPEC)
# The decoding settings of the run that writes wordnet-bt-own's Spanish.
BACKTRANSLATION_DECODING = ("beam_width", "alpha", *decoding_flags.NEXT_TOKEN_RULE_FLAGS)


def _names(text: str | None) -> list[str] | None:
    return [name.strip() for name in text.split(",") if name.strip()] if text else None


def check_backtranslation_arguments(parser: argparse.ArgumentParser, args) -> None:
    """Exits with a usage error unless `--backtranslator` is given exactly for
    `--corpus wordnet-bt-own`, and the decoding flags and `--no_cache` only there."""
    own = args.corpus == OWN_BACKTRANSLATION_SPEC
    if own and not args.backtranslator:
        parser.error(
            f"--corpus {OWN_BACKTRANSLATION_SPEC} needs --backtranslator RUN_DIR, a run trained "
            "with --reverse true (e.g. runs/en-es)"
        )
    given = [
        f"--{name}"
        for name in ("backtranslator", *BACKTRANSLATION_DECODING)
        if getattr(args, name) is not None
    ] + (["--no_cache"] if args.no_cache else [])
    if given and not own:
        parser.error(f"{', '.join(given)}: for --corpus {OWN_BACKTRANSLATION_SPEC} only")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Build a Spanish->English corpus from Debian packages: the Bible "
        "(RV1909 -> WEB, sword-text-sparv and sword-text-web), the translated message "
        "catalogs of games and applications, WordNet's usage examples back-translated by "
        "Apertium or by an English->Spanish run of yours, a lexicon of FreeDict's and "
        "Apertium's word pairs, or Asterisk's voice prompts.",
    )
    parser.add_argument(
        "--corpus", choices=CORPORA, default="bible", help="which corpus (default: %(default)s)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="output directory for train.tsv, dev.tsv, test.tsv, stats.json (default: data/CORPUS)",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        help="directory for the downloaded and unpacked .deb packages "
        "(default: .debs for the Bible, .debs/CORPUS for the others; catalogs-more, "
        "catalog-fills and catalog-fills-more take none: .debs/catalogs-more, .debs/catalogs)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="rebuild and replace the output files if they already exist",
    )
    parser.add_argument(
        "--books",
        help="bible: comma-separated OSIS book names (e.g. Ruth,Jonah) for a quick partial build",
    )
    parser.add_argument(
        "--packages",
        help=f"catalogs: comma-separated Debian packages instead of the {len(CATALOG_PACKAGES)} "
        "chosen ones (training/corpus/catalogs.py)",
    )
    parser.add_argument(
        "--limit",
        type=int,
        help="wordnet-bt, wordnet-bt-own: back-translate only the first N usage examples "
        "(a quick build)",
    )
    parser.add_argument(
        "--backtranslator",
        metavar="RUN_DIR",
        help=f"{OWN_BACKTRANSLATION_SPEC} (required there): the run that writes the Spanish, "
        "trained English→Spanish (training.train --reverse true), e.g. runs/en-es; its "
        "decoding is its decoding.json's unless the flags below say otherwise",
    )
    decoding_flags.add_decoding_arguments(parser, BACKTRANSLATION_DECODING)
    traced_cache.add_no_cache_argument(parser)
    parser.add_argument(
        "--test_set",
        action="store_true",
        help=f"catalogs: only the few MB the tests read ({', '.join(TEST_PACKAGES)})",
    )
    args = parser.parse_args(argv)
    if args.books and args.corpus != "bible":
        parser.error("--books is for --corpus bible")
    if (args.packages or args.test_set) and args.corpus != "catalogs":
        parser.error("--packages and --test_set are for --corpus catalogs")
    if args.limit is not None and (args.corpus not in WORDNET_CORPORA or args.limit <= 0):
        parser.error(
            "--limit is a positive number of examples, for --corpus "
            + " and --corpus ".join(WORDNET_CORPORA)
        )
    check_backtranslation_arguments(parser, args)
    out = args.out or Path("data") / args.corpus
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if args.corpus == "bible":
            build_bible_corpus(
                out, args.cache or Path(".debs"), force=args.force, books=_names(args.books)
            )
        elif args.corpus == "wordnet-bt":
            build_backtranslation_corpus(
                out, args.cache or Path(".debs") / "wordnet", force=args.force, limit=args.limit
            )
        elif args.corpus == OWN_BACKTRANSLATION_SPEC:
            build_own_backtranslation_corpus(
                out,
                args.backtranslator,
                args.cache or Path(".debs") / "wordnet",
                force=args.force,
                limit=args.limit,
                cache=not args.no_cache,
                **decoding_flags.decoding_overrides(args),
            )
        elif args.corpus in _APART_BUILDERS:
            build, cache = _APART_BUILDERS[args.corpus]
            if args.cache is not None:
                parser.error(f"--cache is not for --corpus {args.corpus} (.debs/{cache})")
            build(out, force=args.force)
        elif args.corpus == "lexicon":
            build_lexicon_corpus(out, args.cache or Path(".debs") / "lexicon", force=args.force)
        elif args.corpus == "telephony":
            build_telephony_corpus(out, args.cache or Path(".debs") / "telephony", force=args.force)
        else:
            build_catalogs_corpus(
                out,
                args.cache or Path(".debs") / "catalogs",
                packages=TEST_PACKAGES
                if args.test_set
                else _names(args.packages) or CATALOG_PACKAGES,
                force=args.force,
            )
    except (CorpusError, FileExistsError) as exc:
        logger.error("error: %s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
