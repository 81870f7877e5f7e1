"""training.word_repair_tables: the tables a run repairs its made-up words with, built with the
real Apertium and Debian's word lists (`make data-test` installs and downloads them)."""

import os
import shutil

import pytest

from model.restoration import read_table
from model.tokenizer import load_tokenizers, read_tokenizer_config
from model.word_repair import ENGLISH_WORDS_FILE, LEXICON_FILE, REPAIR_WORDS_KEY, WordRepair
from run_directory import artifacts
from tests.apertium_fixtures import require_apertium
from training.made_up_words import WORDLIST_CACHE_DIR
from training.word_repair_tables import add_word_repair


def test_add_word_repair_writes_apertiums_words_and_the_english_ones(tiny_export_run, tmp_path):
    require_apertium()
    if not (WORDLIST_CACHE_DIR / "unpacked" / "wamerican" / ".unpacked").is_file():
        pytest.fail(f"the English word lists are not in {WORDLIST_CACHE_DIR}: run `make data-test`")
    tokenizer_dir = tmp_path / "tokenizer"
    shutil.copytree(os.path.join(tiny_export_run, artifacts.TOKENIZER_DIR), tokenizer_dir)
    pairs = [("El perro ladra.", "The dog barks at Jehoshaphat."), ("Hola.", "Hello.")]
    sizes = add_word_repair(
        str(tokenizer_dir), pairs, spanish_words=["supermercado", "Domingos", "xqztrv", "sofá"]
    )
    lexicon = read_table(tokenizer_dir / LEXICON_FILE)
    # A verb's subject dropped; a name's capital kept, a common word's not; keys unaccented.
    assert lexicon["ladra"] == "barks"
    assert lexicon["supermercado"] == "supermarket"
    assert lexicon["domingos"] == "Sundays"
    assert lexicon["sofa"] == "sofa"
    assert "xqztrv" not in lexicon and "sofá" not in lexicon
    english = set((tokenizer_dir / ENGLISH_WORDS_FILE).read_text(encoding="utf-8").split())
    assert {"Jehoshaphat", "supermarket", "colour", "color"} <= english
    assert sizes == {"english_words": len(english), "lexicon": len(lexicon)}
    assert read_tokenizer_config(tokenizer_dir)[REPAIR_WORDS_KEY] is True
    _, target = load_tokenizers(str(tokenizer_dir))
    assert isinstance(target.word_repair, WordRepair)
