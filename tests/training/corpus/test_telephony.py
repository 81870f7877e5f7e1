"""training.corpus.telephony: Asterisk's prompt files read from the real Debian packages, and
the corpus built from them (`make data-test` caches the packages)."""

import gzip
import json

import pytest

from training import prepare_data
from training.corpus.debian import DEFAULT_CACHE_DIR
from training.corpus.telephony import (
    ENGLISH_PACKAGE,
    SPANISH_PACKAGE,
    prompt_pairs,
    prompts_file,
    read_prompts,
)
from training.corpus.tsv import SPLITS, CorpusError, read_tsv

CACHE_DIR = DEFAULT_CACHE_DIR / "telephony"


def _prompts(package):
    path = prompts_file(CACHE_DIR / "unpacked" / package, package)
    if not path.is_file():
        pytest.fail(f"{package} is not in {CACHE_DIR}: run `make data-test` first")
    return read_prompts(path)


def test_prompts_are_read_name_by_name_without_what_is_not_said(tmp_path):
    path = tmp_path / "core-sounds-es.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(
            "; Core Asterisk Sounds in Spanish\n\n"
            "auth-thankyou: Gracias\n"
            "beep: [tono simple]\n"
            "vm-tempgreetactive: Sus saludos [temporales] estan en uso\n"
            "silence/1: (1 segundo de silencio)\n"
            "digits/1:   uno   \n"
            "auth-thankyou: Muchas gracias\n"
            "digits/2:\n"
        )
    assert read_prompts(path) == {"auth-thankyou": "Gracias", "digits/1": "uno"}
    with pytest.raises(CorpusError, match="missing"):
        read_prompts(tmp_path / "absent.txt.gz")


def test_the_packages_pair_the_same_prompt_in_both_languages():
    spanish, english = _prompts(SPANISH_PACKAGE), _prompts(ENGLISH_PACKAGE)
    assert spanish["auth-thankyou"] == "Gracias"
    pairs = prompt_pairs(spanish, english)
    assert ("Gracias", english["auth-thankyou"]) in pairs
    assert ("dieciocho", "eighteen") in pairs
    # Every prompt both languages have, and none that only one has.
    assert len(pairs) == len(spanish.keys() & english.keys()) > 400


def test_the_telephony_corpus_builds_from_the_cached_packages(tmp_path):
    out = tmp_path / "telephony"
    assert prepare_data.main(["--corpus", "telephony", "--out", str(out)]) == 0
    stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    splits = {split: read_tsv(out / f"{split}.tsv") for split in SPLITS}
    assert {split: len(pairs) for split, pairs in splits.items()} == stats["split_pairs"]
    assert len(splits["dev"]) >= 40 and len(splits["test"]) >= 40
    train_sources = {source for source, _ in splits["train"]}
    assert not any(source in train_sources for source, _ in splits["dev"] + splits["test"])
    assert [p["package"] for p in stats["packages"]] == [SPANISH_PACKAGE, ENGLISH_PACKAGE]
    assert all("CC-BY-SA-3.0" in p["licence"] for p in stats["packages"])
