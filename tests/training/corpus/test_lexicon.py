"""training.corpus.lexicon: FreeDict's dictd files read from the real Debian packages, and the
whole lexicon built with the real Apertium (`make data-test` caches and installs them)."""

import json

import pytest

from tests.apertium_fixtures import require_apertium
from training import prepare_data
from training.corpus.debian import DEFAULT_CACHE_DIR
from training.corpus.lexicon import _b64_number, freedict_pairs, is_phrase, read_dictd
from training.corpus.tsv import SPLITS, read_tsv

CACHE_DIR = DEFAULT_CACHE_DIR / "lexicon"


def _unpacked(package):
    directory = CACHE_DIR / "unpacked" / package
    if not (directory / ".unpacked").is_file():
        pytest.fail(f"{package} is not in {CACHE_DIR}: run `make data-test` first")
    return directory / "usr/share/dictd"


@pytest.mark.parametrize("text, value", [("A", 0), ("B", 1), ("BA", 64), ("Ba", 90), ("/", 63)])
def test_dictd_numbers_are_base64_digits(text, value):
    assert _b64_number(text) == value


def test_the_spanish_english_dictionary_is_read_entry_by_entry():
    directory = _unpacked("dict-freedict-spa-eng")
    entries = read_dictd(
        directory / "freedict-spa-eng.index", directory / "freedict-spa-eng.dict.dz"
    )
    # The index holds 4,508 lines, 6 of them the dictionary's own 00-database entries.
    assert len(entries) == 4_502
    assert ("perro", ["dog"]) in entries
    assert not any(headword.startswith("00") for headword, _ in entries)


@pytest.mark.parametrize(
    "text, fit",
    [
        ("dog", True),
        ("washing machine", True),
        ("give tongue", True),
        ("Aix-la-Chapelle", True),
        ("AscensionDay", False),  # two words glued
        ("dog (animal)", False),
        ("a b c d", False),
        ("", False),
        ("24", False),
    ],
)
def test_a_lexicon_entry_is_a_short_phrase_of_letters(text, fit):
    assert is_phrase(text) is fit


def test_freedict_pairs_read_both_dictionaries_spanish_first():
    _unpacked("dict-freedict-spa-eng"), _unpacked("dict-freedict-eng-spa")
    pairs, manifests = freedict_pairs(CACHE_DIR)
    assert ("perro", "dog") in pairs  # from spa-eng
    assert ("abril", "April") in pairs  # from eng-spa, read backwards
    assert [m["package"] for m in manifests] == ["dict-freedict-spa-eng", "dict-freedict-eng-spa"]
    assert sum(m["pairs"] for m in manifests) == len(pairs)


def test_the_lexicon_builds_offline(tmp_path):
    require_apertium()
    out = tmp_path / "lexicon"
    assert prepare_data.main(["--corpus", "lexicon", "--out", str(out)]) == 0
    stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    pairs = {pair for split in SPLITS for pair in read_tsv(out / f"{split}.tsv")}
    assert len(pairs) == sum(stats["split_pairs"].values()) > 15_000
    # Apertium's dictionary gives the everyday words FreeDict lacks, verbs as infinitives.
    assert {("taxi", "taxi"), ("aeropuerto", "airport"), ("ladrar", "bark")} <= pairs
    assert all(is_phrase(source) and is_phrase(target) for source, target in pairs)
    assert [p["package"] for p in stats["packages"]][-1] == "apertium-en-es"
