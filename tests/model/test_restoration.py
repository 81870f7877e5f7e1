"""Accents and capitals put back on sources typed without them (`model.restoration`): the tables
on examples, the graph ops against a plain-Python reference on real verses typed as people type,
text written correctly left alone, and the tokenizers and a SavedModel that carry them."""

import json
import os
import re
import shutil

import pytest
import tensorflow as tf

from model.restoration import (
    ACCENTS_FILE,
    CASES_FILE,
    NAMES_FILE,
    Restoration,
    accent_table,
    case_table,
    read_table,
    strip_accents,
)
from model.spelling import MODERN
from run_directory import artifacts
from tests.paths import REPO_ROOT
from training.corpus.tsv import read_tsv

DATA = os.path.join(str(REPO_ROOT), "data", "bible")
PRETRAINED_TOKENIZER = os.path.join(
    str(REPO_ROOT), artifacts.PRETRAINED_RUN, artifacts.TOKENIZER_DIR
)
WORD = re.compile(r"[^\W\d_]+")


def _decode(tensor):
    return [text.decode("utf-8") for text in tensor.numpy()]


def test_accent_table_keeps_only_forms_that_are_not_words():
    texts = ["Amarás a tu prójimo.", "Está aquí; esta casa.", "él habló, él", "Él dijo", "el día"]
    # "esta" and "el" are words too, so "está" and "él" are never put back.
    assert accent_table(texts) == {
        "amaras": "amarás",
        "aqui": "aquí",
        "dia": "día",
        "hablo": "habló",
        "projimo": "prójimo",
    }
    # Several words lose their accents to one form: the most frequent wins.
    assert accent_table(["sé sé se", "dé dé dé"]) == {"de": "dé"}
    assert accent_table(["río rió río"]) == {"rio": "río"}


def test_case_table_reads_words_where_no_sentence_starts():
    texts = [
        "Y dijo Dios: Haya luz.",
        "Entonces Dios vió.",
        "Luz y dios",
        "¿Dónde está Pedro?",
        "sobre él: ESTE ES EL REY, el rey",
    ]
    # "Haya" follows a colon, "Entonces" and "Dónde" start sentences, "REY" is a shout: their
    # capitals say nothing.
    assert case_table(texts) == {"dios": "Dios", "pedro": "Pedro"}


@pytest.fixture(scope="module")
def verses():
    if not os.path.exists(os.path.join(DATA, "train.tsv")):
        pytest.skip("the corpus is built by `make data`")
    train = [source for source, _ in read_tsv(os.path.join(DATA, "train.tsv"))]
    dev = [source for source, _ in read_tsv(os.path.join(DATA, "dev.tsv"))]
    return train, dev


@pytest.fixture(scope="module")
def tables(verses):
    train, _ = verses
    return accent_table(train), case_table(train)


def reference_restore(text, accents, cases):
    """The rules of the module docstring, written out in Python."""

    def accent(match):
        word = match.group()
        accented = accents.get(word.lower())
        if accented is None:
            return word
        if word == word.lower():
            return accented
        if word == word.upper() and len(word) > 1:
            return accented.upper()
        return accented[0].upper() + accented[1:]

    text = WORD.sub(accent, text)
    if any(char.isupper() for char in text):
        return text
    text = WORD.sub(lambda match: cases.get(match.group(), match.group()), text)
    first = WORD.search(text)
    if first is None:
        return text
    return text[: first.start()] + text[first.start()].upper() + text[first.start() + 1 :]


def test_restoration_matches_the_python_reference_on_verses_typed_as_people_type(verses, tables):
    _, dev = verses
    typed = (
        dev
        + [strip_accents(text) for text in dev]
        + [strip_accents(text).lower() for text in dev]
        + [strip_accents(text).upper() for text in dev[:100]]
        + ["", "123", "¿?", "amaras a tu projimo", "JESUS LLORO"]
    )
    restored = _decode(Restoration(*tables)(tf.constant(typed)))
    expected = [reference_restore(text, *tables) for text in typed]
    mismatches = [(t, r, e) for t, r, e in zip(typed, restored, expected) if r != e]
    assert not mismatches, mismatches[:5]
    # It restores what the tables know: most words typed without their accents get them back
    # (the rest are words both ways, as "esta" and "está").
    lost = back = 0
    for original, typed_back in zip(dev, restored[len(dev) : 2 * len(dev)]):
        for word, word_back in zip(WORD.findall(original), WORD.findall(typed_back)):
            if strip_accents(word) != word:
                lost += 1
                back += word_back == word
    assert back > 0.6 * lost, (back, lost)


def test_text_written_correctly_is_left_alone(verses, tables):
    """No training verse holds a bare form of the accent table (it is not a word there), and
    only a verse without any capital gets capitals: the rest come back as they are."""
    train, _ = verses
    sample = train[:3000]
    restored = _decode(Restoration(*tables)(tf.constant(sample)))
    changed = [(t, r) for t, r in zip(sample, restored) if t != r]
    assert all(not any(char.isupper() for char in text) for text, _ in changed), changed[:3]


def test_examples():
    restoration = Restoration(
        {"amaras": "amarás", "projimo": "prójimo", "jesus": "jesús"},
        {"jesús": "Jesús", "dios": "Dios"},
    )
    assert _decode(
        restoration(
            tf.constant(
                [
                    "amaras a tu PROJIMO, Projimo",
                    "jesus y dios",
                    "Jesus y dios",
                    "",
                    "¡dios!",
                ]
            )
        )
    ) == [
        "amarás a tu PRÓJIMO, Prójimo",
        "Jesús y Dios",
        "Jesús y dios",
        "",
        "¡Dios!",
    ]
    only_accents = Restoration({"jesus": "jesús"}, None)
    assert _decode(only_accents(tf.constant(["jesus y dios"]))) == ["jesús y dios"]
    nothing_learned = Restoration({}, {})
    assert _decode(nothing_learned(tf.constant(["jesus y dios"]))) == ["Jesus y dios"]


def test_rename_keeps_the_typed_case_and_a_lowercase_word_of_a_cased_source():
    renaming = Restoration(names={"belén": "bethlehem", "belen": "bethlehem", "set": "seth"})
    typed = [
        "Jesús nació en Belén.",
        "JESÚS NACIÓ EN BELEN",
        "jesus nacio en belen",
        "Un set en Belenes; belén y Set",  # "set" and "belén" are lowercase in a cased source
        "un set",  # a source without capitals says nothing of names
        "",
    ]
    assert _decode(renaming.rename(tf.constant(typed))) == [
        "Jesús nació en Bethlehem.",
        "JESÚS NACIÓ EN BETHLEHEM",
        "jesus nacio en bethlehem",
        "Un set en Belenes; belén y Seth",
        "un seth",
        "",
    ]
    assert _decode(Restoration({}, {}).rename(tf.constant(typed))) == typed


@pytest.mark.skipif(
    not os.path.exists(os.path.join(PRETRAINED_TOKENIZER, CASES_FILE)),
    reason="the bundle has no restoration tables",
)
def test_the_bundles_source_tokenizer_restores_in_a_saved_model(tmp_path):
    """Typed without accents or capitals, a source gets the bundle's ids of the source as
    written, from the tokenizer and from a SavedModel that carries it."""
    from model.tokenizer import load_tokenizers

    source, target = load_tokenizers(PRETRAINED_TOKENIZER)
    assert source.restoration is not None and target.restoration is None
    written = tf.constant(["Amarás a tu prójimo como a ti mismo.", "Dios es amor."])
    typed = tf.constant(["amaras a tu projimo como a ti mismo.", "DIOS ES AMOR."])
    expected = source.tokenize(written).to_list()
    assert source.tokenize(typed).to_list() == expected

    class Carrier(tf.Module):
        def __init__(self, tokenizer):
            super().__init__()
            self.tokenizer = tokenizer

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def ids(self, text):
            return self.tokenizer.tokenize(text).to_tensor()

    tf.saved_model.save(Carrier(source), str(tmp_path / "carrier"))
    loaded = tf.saved_model.load(str(tmp_path / "carrier"))
    assert (
        loaded.ids(typed).numpy().tolist()
        == tf.ragged.constant(expected).to_tensor().numpy().tolist()
    )


def test_vocabularies_carry_the_tables_asked_for(tmp_path):
    from model.tokenizer import load_tokenizers
    from training.vocabulary import add_restoration, build_tokenizers

    pairs = [("Y Jesús amará a su prójimo.", "And Jesus will love his neighbour.")] * 20
    build_tokenizers(pairs, 300, tmp_path / "plain", shared=True)
    source, _ = load_tokenizers(tmp_path / "plain")
    assert source.restoration is None
    source, _ = build_tokenizers(
        pairs, 300, tmp_path / "restored", shared=True, restore_accents=True, restore_case=True
    )
    assert _decode(source.restoration(tf.constant(["jesus amara"]))) == ["Jesús amará"]
    # A trained run's directory gains them in place; its vocabulary is untouched.
    trained = tmp_path / "trained"
    shutil.copytree(tmp_path / "plain", trained)
    add_restoration(trained, pairs)
    config = json.loads((trained / "tokenizer_config.json").read_text())
    assert config["restore_accents"] and config["restore_case"]
    assert (trained / ACCENTS_FILE).exists() and (trained / CASES_FILE).exists()
    source, _ = load_tokenizers(trained)
    assert _decode(source.restoration(tf.constant(["jesus amara"]))) == ["Jesús amará"]
    assert (trained / "spm.shared.model").read_bytes() == (
        tmp_path / "plain" / "spm.shared.model"
    ).read_bytes()
    # Names in today's spelling: the 1909 Bible's only (its corpus records the modern spelling).
    assert "restore_names" not in config and not (trained / NAMES_FILE).exists()
    with pytest.raises(ValueError, match="restore_names"):
        build_tokenizers(pairs, 300, tmp_path / "names", restore_names=True)
    bible = [("Y fué á Bethlehem.", "And he went to Bethlehem.")] * 20
    source, _ = build_tokenizers(
        bible, 300, tmp_path / "bible", source_spelling=MODERN, restore_names=True
    )
    assert _decode(source.restoration.rename(tf.constant(["Fue a Belén."]))) == ["Fue a Bethlehem."]
    modern = tmp_path / "modern"
    build_tokenizers(bible, 300, modern, source_spelling=MODERN)
    add_restoration(modern, bible)
    assert json.loads((modern / "tokenizer_config.json").read_text())["restore_names"]
    assert read_table(modern / NAMES_FILE) == {
        "belén": "bethlehem",
        "belen": "bethlehem",
        "betlehem": "bethlehem",
    }
