"""Command line: builds the embedded Spanish->English Bible corpus from Debian's SWORD packages.

The pipeline is `training.corpus.bible.build_bible_corpus` (see training/CORPUS.md).

Usage:
  python -m training.prepare_data --out data/bible [--cache .debs] [--force]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from training.corpus.bible import build_bible_corpus
from training.corpus.tsv import CorpusError

logger = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Build the embedded Spanish->English Bible corpus (RV1909 -> WEB) "
        "from Debian's sword-text-sparv and sword-text-web packages.",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("data/bible"),
        help="output directory for train.tsv, dev.tsv, test.tsv, stats.json (default: %(default)s)",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(".debs"),
        help="directory for the downloaded and unpacked .deb packages (default: %(default)s)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="rebuild and replace the output files if they already exist",
    )
    parser.add_argument(
        "--books",
        help="comma-separated OSIS book names (e.g. Ruth,Jonah) for a quick partial build",
    )
    args = parser.parse_args(argv)
    books = [name.strip() for name in args.books.split(",") if name.strip()] if args.books else None
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        build_bible_corpus(args.out, args.cache, force=args.force, books=books)
    except (CorpusError, FileExistsError) as exc:
        logger.error("error: %s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
