"""A built corpus directory: `train/dev/test.tsv` and the `stats.json` that marks it complete.

Shared by the corpora this project builds itself (`training.corpus.bible`,
`training.corpus.catalogs`): when to build, and the statistics file written last.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from training.corpus.tsv import SPLITS, CorpusError, Pair, write_tsv

logger = logging.getLogger(__name__)

STATS_FILE = "stats.json"


def corpus_outputs(out_dir: Path) -> list[Path]:
    """The files of a complete corpus in `out_dir`, the statistics file last."""
    return [Path(out_dir) / f"{split}.tsv" for split in SPLITS] + [Path(out_dir) / STATS_FILE]


def read_corpus_stats(directory: Path | str) -> dict | None:
    """The `stats.json` a corpus build wrote into `directory`, or None if there is none.

    Raises:
      CorpusError: the file is not valid JSON.
    """
    path = Path(directory) / STATS_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorpusError(f"{path}: not a valid stats file ({exc})") from exc


def write_corpus_stats(out_dir: Path | str, stats: dict) -> None:
    """Writes `stats.json`; called last, since its presence marks a complete build."""
    (Path(out_dir) / STATS_FILE).write_text(
        json.dumps(stats, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )


def needs_build(out_dir: Path, force: bool, stale_reason: Callable[[dict], str | None]) -> bool:
    """Whether a corpus build must run in `out_dir`.

    Args:
      out_dir: the corpus directory.
      force: rebuild a complete corpus too.
      stale_reason: given a complete corpus's statistics, why it must be rebuilt (logged),
        or None if it is current.

    Returns:
      False when `out_dir` holds a complete, current corpus and `force` is off.

    Raises:
      FileExistsError: some, but not all, outputs exist and `force` is off (nothing already
        saved is replaced without being asked).
    """
    outputs = corpus_outputs(out_dir)
    existing = [path for path in outputs if path.exists()]
    if len(existing) == len(outputs):
        reason = stale_reason(read_corpus_stats(out_dir) or {})
        if reason:
            logger.info("%s", reason)
            return True
    if not existing or force:
        return True
    if len(existing) == len(outputs):
        logger.info(
            "%s already holds the corpus (train/dev/test.tsv, stats.json); "
            "nothing to do, pass --force to rebuild",
            out_dir,
        )
        return False
    raise FileExistsError(
        f"{out_dir} holds a partial corpus ({', '.join(p.name for p in existing)}); "
        "remove it or pass --force"
    )


def stale_unless(out_dir: Path, identity: dict, what: str) -> Callable[[dict], str | None]:
    """A `needs_build` `stale_reason`: a corpus is current when its statistics hold every item
    of `identity` (a format version, the versions of the tools that made it); else it was built
    by another `what` and is rebuilt."""

    def stale_reason(stats: dict) -> str | None:
        if all(stats.get(key) == value for key, value in identity.items()):
            return None
        return f"{out_dir} was built by another {what}: rebuilding it"

    return stale_reason


def write_splits(out_dir: Path, splits: dict[str, list[Pair]]) -> None:
    """Writes `train/dev/test.tsv` into `out_dir` (created), replacing them; `stats.json`
    goes last (`write_corpus_stats`)."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        write_tsv(Path(out_dir) / f"{split}.tsv", splits[split], overwrite=True)
