"""training/corpus/tsv.py: reading and writing pairs, each bad line reported with its file and
line; a corpus directory's splits."""

import logging

import pytest

from tests.corpus_fixtures import GOOD_PAIRS
from training.corpus import tsv
from training.corpus.tsv import CorpusError, LineProblem


def write_bytes(path, *lines: bytes, newline=b"\n"):
    path.write_bytes(newline.join(lines) + newline)
    return path


# ----------------------------------------------------------------------- read_tsv


def test_read_tsv_reads_accented_pairs_with_bom_and_crlf(tmp_path):
    lines = [f"{s}\t{t}".encode() for s, t in GOOD_PAIRS]
    lines[0] = b"\xef\xbb\xbf" + lines[0]
    path = write_bytes(tmp_path / "c.tsv", *lines, newline=b"\r\n")
    assert tsv.read_tsv(path) == GOOD_PAIRS


def test_read_tsv_skips_and_reports_each_malformed_line(tmp_path, caplog):
    path = write_bytes(
        tmp_path / "mixed.tsv",
        b"Hola\tHello",  # 1 good
        b"sin tabulador",  # 2 no tab
        b"uno\tdos\ttres",  # 3 two tabs
        b"\tEmpty source",  # 4 empty source
        "Fuente vacía\t   ".encode(),  # 5 empty (blank) target
        b"caf\xe9\tcoffee",  # 6 Latin-1, not UTF-8
        b"",  # 7 blank: ignored silently
        "Adiós\tGoodbye".encode(),  # 8 good
    )
    problems: list[LineProblem] = []
    with caplog.at_level(logging.WARNING, logger="training.corpus"):
        pairs = tsv.read_tsv(path, problems=problems)

    assert pairs == [("Hola", "Hello"), ("Adiós", "Goodbye")]
    assert [p.line_number for p in problems] == [2, 3, 4, 5, 6]
    assert all(p.path == str(path) for p in problems)
    reasons = [p.problem for p in problems]
    assert "no tab" in reasons[0]
    assert "2 tabs" in reasons[1]
    assert reasons[2] == "empty source"
    assert reasons[3] == "empty target"
    assert "invalid UTF-8" in reasons[4] and "byte 3" in reasons[4]
    for problem in problems:  # every skipped line is logged as FILE:LINE
        assert f"{path}:{problem.line_number}:" in caplog.text


def test_read_tsv_strict_raises_on_first_bad_line(tmp_path):
    path = write_bytes(tmp_path / "c.tsv", b"Hola\tHello", "Adiós".encode(), b"a\tb\tc")
    with pytest.raises(CorpusError, match=rf"{path}:2: no tab"):
        tsv.read_tsv(path, strict=True)
    assert issubclass(CorpusError, ValueError)


def test_read_tsv_strict_accepts_a_clean_file(tmp_path):
    path = write_bytes(tmp_path / "c.tsv", *[f"{s}\t{t}".encode() for s, t in GOOD_PAIRS])
    assert tsv.read_tsv(path, strict=True) == GOOD_PAIRS


@pytest.mark.parametrize(
    "content",
    [b"", b"\n\n", b"solo texto\n\t\n", b"\xff\xfe\t\xff\n"],
    ids=["empty", "blank", "bad", "binary"],
)
def test_read_tsv_without_any_valid_pair_always_raises(tmp_path, content):
    path = tmp_path / "c.tsv"
    path.write_bytes(content)
    with pytest.raises(CorpusError, match="no valid 'source<TAB>target' pair"):
        tsv.read_tsv(path)


def test_read_tsv_missing_file_names_it(tmp_path):
    with pytest.raises(CorpusError, match="nope.tsv"):
        tsv.read_tsv(tmp_path / "nope.tsv")


# ---------------------------------------------------------------------- write_tsv


def test_write_tsv_round_trips_and_refuses_to_overwrite(tmp_path):
    path = tmp_path / "sub" / "out.tsv"
    assert tsv.write_tsv(path, GOOD_PAIRS) == len(GOOD_PAIRS)
    assert tsv.read_tsv(path) == GOOD_PAIRS

    with pytest.raises(FileExistsError, match="overwrite=True"):
        tsv.write_tsv(path, [("otro", "other")])
    assert tsv.read_tsv(path) == GOOD_PAIRS  # untouched

    tsv.write_tsv(path, [("otro", "other")], overwrite=True)
    assert tsv.read_tsv(path) == [("otro", "other")]


@pytest.mark.parametrize("bad", [("a\tb", "x"), ("a", "line\nbreak"), ("", "x"), ("a", "  ")])
def test_write_tsv_rejects_pairs_that_would_corrupt_the_file(tmp_path, bad):
    path = tmp_path / "out.tsv"
    with pytest.raises(CorpusError, match="pair 1"):
        tsv.write_tsv(path, [GOOD_PAIRS[0], bad])
    assert not path.exists()


def test_load_corpus_reads_all_splits_and_names_missing_files(tmp_path):
    for split, pairs in zip(tsv.SPLITS, (GOOD_PAIRS, GOOD_PAIRS[:1], GOOD_PAIRS[1:])):
        tsv.write_tsv(tmp_path / f"{split}.tsv", pairs)
    assert tsv.load_corpus(tmp_path) == {
        "train": GOOD_PAIRS,
        "dev": GOOD_PAIRS[:1],
        "test": GOOD_PAIRS[1:],
    }

    (tmp_path / "dev.tsv").unlink()
    with pytest.raises(CorpusError, match="lacks dev.tsv"):
        tsv.load_corpus(tmp_path)
