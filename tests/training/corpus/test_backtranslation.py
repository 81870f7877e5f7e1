"""training.corpus.backtranslation: WordNet's usage examples read from the real `wordnet-base`
package and back-translated by the real Apertium (`make data-test` caches and installs both),
end to end on a few hundred examples, offline."""

import json

import pytest

from tests.apertium_fixtures import require_apertium
from training import prepare_data
from training.corpus import apertium, load_pairs
from training.corpus.backtranslation import (
    MAX_WORDS,
    MIN_WORDS,
    clean_example,
    read_usage_examples,
    unique_examples,
    unpack_wordnet,
)
from training.corpus.debian import DEFAULT_CACHE_DIR
from training.corpus.tsv import SPLITS, read_tsv

CACHE_DIR = DEFAULT_CACHE_DIR / "wordnet"


@pytest.fixture(scope="module")
def examples():
    if not (CACHE_DIR / "unpacked" / "wordnet-base" / ".unpacked").is_file():
        pytest.fail(f"wordnet-base is not in {CACHE_DIR}: run `make data-test` first")
    return read_usage_examples(unpack_wordnet(CACHE_DIR) / "usr/share/wordnet")


def test_every_quoted_example_of_every_gloss_is_read(examples):
    # WordNet 3.0's glosses quote 48,339 usage examples (grep -o '"[^"]*"' data.* | wc -l).
    assert len(examples) == 48_339
    assert "we sat up all night" in examples
    assert not any('"' in example or "|" in example for example in examples)


@pytest.mark.parametrize(
    "example, cleaned",
    [
        ("we sat up  all night", "We sat up all night"),
        ("dark glasses", None),  # under MIN_WORDS: a phrase, not a sentence
        ("he said `hello' to me", None),  # the lexicographers' quotes
        ("a b c d e f g h i j " * 4 + "k", None),  # over MAX_WORDS
        ("the house was tastelessly decorated", "The house was tastelessly decorated"),
    ],
)
def test_examples_are_cleaned_into_training_targets(example, cleaned):
    assert (MIN_WORDS, MAX_WORDS) == (3, 40)
    assert clean_example(example) == cleaned


def test_near_duplicates_are_kept_once():
    kept, dropped = unique_examples(["we sat up", "We  sat up", "dark glasses", "it rained hard"])
    assert kept == ["We sat up", "It rained hard"]
    assert dropped == {"not_clean": 1, "duplicate": 1}


def test_the_corpus_builds_offline_with_apertiums_spanish(tmp_path, examples):
    require_apertium()
    out = tmp_path / "wordnet-bt"
    assert prepare_data.main(["--corpus", "wordnet-bt", "--out", str(out), "--limit", "300"]) == 0
    stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    splits = {split: read_tsv(out / f"{split}.tsv") for split in SPLITS}
    pairs = [pair for split in SPLITS for pair in splits[split]]
    assert stats["split_pairs"] == {split: len(splits[split]) for split in SPLITS}
    assert len(pairs) + stats["dropped"]["apertium_unknown_word"] == 300
    assert len(pairs) > 150 and splits["train"]
    english = [target for _, target in pairs]
    assert set(english) <= set(unique_examples(examples)[0][:300])
    # The Spanish is Apertium's, without a word it did not know.
    assert not any(apertium.has_unknown_marks(source) for source, _ in pairs)
    assert [source for source, _ in pairs[:20]] == apertium.translate(
        english[:20], apertium.ENGLISH_TO_SPANISH
    )
    assert {package["package"] for package in stats["packages"]} == {
        "wordnet-base",
        "apertium-en-es",
    }
    assert all(package["licence"] for package in stats["packages"])
    # Rebuilt only when asked or stale: a second build is a no-op.
    assert prepare_data.main(["--corpus", "wordnet-bt", "--out", str(out), "--limit", "300"]) == 0
    assert json.loads((out / "stats.json").read_text(encoding="utf-8")) == stats
    assert load_pairs(str(out), "train") == splits["train"]


def test_limit_is_only_for_the_backtranslated_corpus(capsys):
    with pytest.raises(SystemExit):
        prepare_data.main(["--corpus", "lexicon", "--limit", "3"])
    assert "--limit" in capsys.readouterr().err
