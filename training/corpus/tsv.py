"""Corpus files: the `source<TAB>target` format, and the error every corpus source raises.

TSV format: UTF-8, one `source<TAB>target` pair per line. Blank lines are
ignored; any other line that does not hold exactly two non-empty fields, or is
not valid UTF-8, is reported with its file and line number and skipped (or
raises `CorpusError` in strict mode).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterable
from pathlib import Path

logger = logging.getLogger(__name__)

Pair = tuple[str, str]

SPLITS = ("train", "dev", "test")
# Past this many malformed lines per file, only the summary is logged (the
# report still lists every line).
_MAX_LOGGED_PROBLEMS = 20


class CorpusError(ValueError):
    """A corpus cannot be read or used: the message names the file, line or dataset."""


@dataclasses.dataclass(frozen=True)
class LineProblem:
    """One malformed line of a TSV corpus.

    Attributes:
      path: the file.
      line_number: 1-based line number.
      problem: what is wrong, in words.
    """

    path: str
    line_number: int
    problem: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line_number}: {self.problem}"


def _parse_tsv_line(raw: bytes) -> tuple[Pair | None, str | None]:
    """Parses one line (without its newline) into a pair.

    Returns:
      `(pair, None)` for a good line, `(None, None)` for a blank line and
      `(None, problem)` for a malformed one.
    """
    if raw.endswith(b"\r"):  # files written on Windows
        raw = raw[:-1]
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"invalid UTF-8 (byte {exc.start}: {raw[exc.start : exc.start + 1]!r})"
    if not line.strip():
        return None, None
    fields = line.split("\t")
    if len(fields) == 1:
        return None, "no tab: expected 'source<TAB>target'"
    if len(fields) > 2:
        return None, f"{len(fields) - 1} tabs: expected exactly one between source and target"
    source, target = fields[0].strip(), fields[1].strip()
    if not source and not target:
        return None, "both source and target are empty"
    if not source:
        return None, "empty source"
    if not target:
        return None, "empty target"
    return (source, target), None


def read_tsv(
    path: str | os.PathLike,
    strict: bool = False,
    problems: list[LineProblem] | None = None,
) -> list[Pair]:
    """Reads a `source<TAB>target` corpus file.

    The file is read as bytes and decoded line by line, so one line of invalid
    UTF-8 costs that line only. A UTF-8 byte-order mark and Windows line endings
    are accepted; surrounding whitespace of each field is stripped.

    Args:
      path: the TSV file.
      strict: raise on the first malformed line instead of skipping it.
      problems: if given, every malformed line is appended to it as a
        `LineProblem` (the collected report); each is also logged as a warning.

    Returns:
      The valid pairs in file order, as `(source, target)` strings.

    Raises:
      CorpusError: the file is missing or unreadable, a line is malformed and
        `strict` is set (the message is `FILE:LINE: problem`), or the file has
        no valid pair at all.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CorpusError(f"cannot read corpus file {path}: {exc.strerror or exc}") from exc
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]

    pairs: list[Pair] = []
    found: list[LineProblem] = []
    for line_number, raw in enumerate(data.split(b"\n"), start=1):
        pair, problem = _parse_tsv_line(raw)
        if problem is not None:
            issue = LineProblem(str(path), line_number, problem)
            if strict:
                raise CorpusError(str(issue))
            found.append(issue)
            if len(found) <= _MAX_LOGGED_PROBLEMS:
                logger.warning("skipping malformed line %s", issue)
        elif pair is not None:
            pairs.append(pair)

    if len(found) > _MAX_LOGGED_PROBLEMS:
        logger.warning(
            "%s: %d malformed lines skipped in total (first %d logged)",
            path,
            len(found),
            _MAX_LOGGED_PROBLEMS,
        )
    if problems is not None:
        problems.extend(found)
    if not pairs:
        detail = f" ({len(found)} malformed lines, first: {found[0]})" if found else ""
        raise CorpusError(f"corpus file {path} has no valid 'source<TAB>target' pair{detail}")
    return pairs


def write_tsv(path: str | os.PathLike, pairs: Iterable[Pair], overwrite: bool = False) -> int:
    """Writes pairs as a UTF-8 `source<TAB>target` file (parent dirs are created).

    Args:
      path: the file to write.
      pairs: `(source, target)` strings; neither may be empty or hold a tab or
        newline, since that would corrupt the file format.
      overwrite: replace an existing file; without it an existing file is an error.

    Returns:
      The number of pairs written.

    Raises:
      FileExistsError: `path` exists and `overwrite` is False.
      CorpusError: a pair cannot be represented in the format (nothing is written).
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists; pass overwrite=True to replace it")
    lines = []
    for index, (source, target) in enumerate(pairs):
        for side, text in (("source", source), ("target", target)):
            if not text or not text.strip():
                raise CorpusError(f"pair {index}: empty {side}, cannot write {path}")
            if "\t" in text or "\n" in text or "\r" in text:
                raise CorpusError(
                    f"pair {index}: {side} contains a tab or newline, cannot write {path}: {text[:60]!r}"
                )
        lines.append(f"{source}\t{target}\n")
    # Imported here: model/ brings TensorFlow, which reading a corpus does not need.
    from model.files import write_atomically

    path.parent.mkdir(parents=True, exist_ok=True)
    # Through a side file, so an interrupted run never leaves half a corpus.
    write_atomically(path, "".join(lines))
    return len(lines)


def load_corpus(data_dir: str | os.PathLike) -> dict[str, list[Pair]]:
    """Reads `train.tsv`, `dev.tsv` and `test.tsv` of a corpus directory.

    Returns:
      `{"train": pairs, "dev": pairs, "test": pairs}`.

    Raises:
      CorpusError: the directory or one of the files is missing, or a file has
        no valid pair (malformed lines are skipped and logged, see `read_tsv`).
    """
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise CorpusError(f"corpus directory {data_dir} does not exist")
    missing = [f"{split}.tsv" for split in SPLITS if not (data_dir / f"{split}.tsv").is_file()]
    if missing:
        raise CorpusError(f"corpus directory {data_dir} lacks {', '.join(missing)}")
    return {split: read_tsv(data_dir / f"{split}.tsv") for split in SPLITS}
