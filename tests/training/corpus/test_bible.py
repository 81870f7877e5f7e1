"""training/corpus/bible.py: chapters split whole, the source verses cleaned, the build CLI, the
corpus built end to end from three books."""

import json
import logging
import random

import pytest

from model.spelling import modernize
from tests.corpus_fixtures import GOOD_PAIRS
from tests.paths import REPO_ROOT
from training import prepare_data
from training.corpus import bible, tsv


def _synthetic_verses(n_books=12, n_chapters=30, n_verses=20):
    return {
        (f"Book{b}", c, v): (f"fuente {b} {c} {v}", f"target {b} {c} {v}")
        for b in range(n_books)
        for c in range(1, n_chapters + 1)
        for v in range(1, n_verses + 1)
    }


def test_split_by_chapter_never_splits_a_chapter_and_is_order_independent():
    pairs = _synthetic_verses()
    splits = bible.split_by_chapter(pairs, dev_fraction=0.1, test_fraction=0.1)

    chapter_split = {}
    for split, items in splits.items():
        for (book, chapter, _), _pair in items:
            assert chapter_split.setdefault((book, chapter), split) == split  # no chapter leaks
    assert sum(len(items) for items in splits.values()) == len(pairs)
    assert all(splits[split] for split in tsv.SPLITS)

    shuffled = list(pairs.items())
    random.Random(0).shuffle(shuffled)
    again = bible.split_by_chapter(dict(shuffled), dev_fraction=0.1, test_fraction=0.1)
    assert {s: sorted(items) for s, items in again.items()} == {
        s: sorted(items) for s, items in splits.items()
    }


def test_split_by_chapter_assignment_does_not_depend_on_other_chapters():
    pairs = _synthetic_verses()
    full = {
        ref[:2]: split for split, items in bible.split_by_chapter(pairs).items() for ref, _ in items
    }
    subset = {ref: pair for ref, pair in pairs.items() if ref[0] in ("Book3", "Book7")}
    part = {
        ref[:2]: split
        for split, items in bible.split_by_chapter(subset).items()
        for ref, _ in items
    }
    assert part == {
        chapter: split for chapter, split in full.items() if chapter[0] in ("Book3", "Book7")
    }


def test_clean_source_verses_applies_caps_fix_to_chapter_openings_only():
    raw = {
        ("Gen", 1, 1): '<w lemma="strong:H7225">EN el principio</w> crió Dios.',
        ("Gen", 1, 2): "Y la tierra estaba desordenada, y el Espíritu de Dios. YO SOY EL QUE SOY.",
        (
            "Heb",
            13,
            25,
        ): "La gracia sea con todos vosotros. Amén. Fué escrita á los Hebreos desde Italia.",
    }
    clean = bible.clean_source_verses(raw)
    assert clean[("Gen", 1, 1)] == "En el principio crió Dios."
    assert clean[("Gen", 1, 2)].endswith("YO SOY EL QUE SOY.")
    assert clean[("Heb", 13, 25)] == "La gracia sea con todos vosotros. Amén."


# --------------------------------------------------------------- Bible: build CLI


def _fake_built_corpus(out_dir):
    for split in tsv.SPLITS:
        tsv.write_tsv(out_dir / f"{split}.tsv", GOOD_PAIRS)
    (out_dir / "stats.json").write_text(
        json.dumps({"format_version": bible.CORPUS_FORMAT_VERSION}) + "\n"
    )


def test_build_is_a_noop_when_the_corpus_exists(tmp_path, caplog):
    _fake_built_corpus(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with caplog.at_level(logging.INFO):
        assert prepare_data.main(["--out", str(tmp_path), "--cache", str(tmp_path / "debs")]) == 0
    assert "nothing to do" in caplog.text and "--force" in caplog.text
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    assert not (tmp_path / "debs").exists()  # did not even try to download


def test_build_refuses_to_overwrite_a_partial_corpus(tmp_path):
    tsv.write_tsv(tmp_path / "train.tsv", GOOD_PAIRS)
    with pytest.raises(FileExistsError, match="partial corpus"):
        bible.build_bible_corpus(tmp_path, cache_dir=tmp_path / "debs")
    assert tsv.read_tsv(tmp_path / "train.tsv") == GOOD_PAIRS


def test_bible_build_end_to_end_on_three_books(tmp_path, caplog):
    """The real pipeline (cached Debian packages, pysword, cleaning, alignment, split) on Jonah
    (whose chapter 2 is numbered differently in the two Bibles), Haggai (chapter 1 is a dev
    chapter) and Malachi (chapter 2 is a test chapter); the pairs are those of the full build."""
    full_dir = REPO_ROOT / "data" / "bible"
    if not (full_dir / "stats.json").exists() or not any(bible.DEFAULT_CACHE_DIR.glob("*.deb")):
        pytest.skip("needs `make data` (the full corpus and its cached packages)")
    out = tmp_path / "three-books"
    args = ["--out", str(out), "--cache", str(bible.DEFAULT_CACHE_DIR), "--books", "Jonah,Hag,Mal"]
    assert prepare_data.main(args) == 0
    stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    # 10 chapters; Jonah 2 loses all its verses to the numbering mismatch.
    assert stats["split_chapters"] == {"train": 7, "dev": 1, "test": 1}
    assert list(stats["misaligned_chapters"]) == ["Jonah 2"]
    for split in ("train", "dev", "test"):
        pairs = tsv.read_tsv(out / f"{split}.tsv")
        assert len(pairs) == stats["split_pairs"][split] > 0
        # The full corpus may predate modern spelling; modernizing a modern text changes nothing.
        full = {
            (modernize(source), target)
            for source, target in tsv.read_tsv(full_dir / f"{split}.tsv")
        }
        assert set(pairs) <= full, split
    assert stats["source_spelling"] == "modern" and stats["spelling_rules_applied"]["á→a"] > 0

    # A corpus of an older format (no "format_version": the 1909 spelling) is rebuilt.
    (out / "stats.json").write_text(json.dumps({"split_pairs": {}}), encoding="utf-8")
    caplog.set_level(logging.INFO)
    assert prepare_data.main(args) == 0
    assert "format version 1" in caplog.text and "rebuilding" in caplog.text
    rebuilt = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    assert {**rebuilt, "build_seconds": 0} == {**stats, "build_seconds": 0}

    assert prepare_data.main([*args[:4], "--books", "Jonah,Tobit", "--force"]) == 1
    assert "spaRV1909eb has no book(s) Tobit" in caplog.text
