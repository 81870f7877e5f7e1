"""Modern Spanish spelling (model/spelling.py): the rules on real RV1909 verses, Python and graph
agreeing on the whole corpus and on edge cases, `old_spelling` undoing `modernize` but for the
1909 text's measured irregularities, and a run trained on a modern-spelled corpus reading
1909-spelled input through its exported SavedModel."""

import json
import os
import re

import pytest
import tensorflow as tf

from model.restoration import Restoration, strip_accents
from model.spelling import (
    MODERN,
    modern_names_graph,
    modernize,
    modernize_graph,
    name_table,
    old_spelling,
    old_spelling_graph,
)
from training.corpus import corpus_source_spelling, load_pairs
from training.corpus.loading import DEFAULT_BIBLE_DIR
from training.corpus.outputs import read_corpus_stats
from training.corpus.tsv import SPLITS

# Real verses of the RV1909 (1909 spelling, as the corpus build cleans them) and their modern form.
VERSES = [
    (  # Gen 1:1: create
        "En el principio crió Dios los cielos y la tierra.",
        "En el principio creó Dios los cielos y la tierra.",
    ),
    (  # Gen 1:5: fué
        "Y llamó Dios á la luz Día, y á las tinieblas llamó Noche: y fué la tarde y la mañana un "
        "día.",
        "Y llamó Dios a la luz Día, y a las tinieblas llamó Noche: y fue la tarde y la mañana un "
        "día.",
    ),
    (  # Lev 13:48: ó, twice in a row of alternatives
        "O en estambre ó en trama, de lino ó de lana, ó en piel, ó en cualquiera obra de piel;",
        "O en estambre o en trama, de lino o de lana, o en piel, o en cualquiera obra de piel;",
    ),
    (  # 1 Sam 1:23: raise, not create
        "Y quedóse la mujer, y crió su hijo hasta que lo destetó.",
        "Y quedóse la mujer, y crio su hijo hasta que lo destetó.",
    ),
    (  # Isa 45:12: crié (create)
        "Yo hice la tierra, y crié sobre ella al hombre.",
        "Yo hice la tierra, y creé sobre ella al hombre.",
    ),
    (  # Gen 21:27: dió, é
        "Y tomó Abraham ovejas y vacas, y dió á Abimelech; é hicieron ambos alianza.",
        "Y tomó Abraham ovejas y vacas, y dio a Abimelech; e hicieron ambos alianza.",
    ),
    (  # Gen 1:4: vió; Gen 38:15: an enclitic form ("vióla") is not a rule word
        "Y vió Dios que la luz era buena. Y vióla Judá",
        "Y vio Dios que la luz era buena. Y vióla Judá",
    ),
]

EDGE_CASES = [
    "á á á",
    "ó ó, ó.ó",
    "Á la mañana FUÉ y Fué; DIÓ á él",
    "¿fué?¡á!«ó»(ú)",
    "á\ná\tá",
    "fuéramos dióse á_b a_á á1 1á",  # inside longer words: unchanged
    # The next words are matched in lowercase only ("CRIÓ HIJOS" reads as create).
    "crió hijos crió su crió como crió.crió gusanos CRIÓ HIJOS Crió como",
    "crió hijosdalgo",  # not a listed next word
    "fue\u0301 a\u0301",  # a combining accent continues the word: not a rule word
    "Sión, sión, SIÓN; Criador criaste",
    "",
]
# Verses whose 1909 text `old_spelling(modernize(...))` does not give back, measured on the
# corpus build (train 76, dev 2, test 2; training/CORPUS.md lists the words).
NOT_RESTORED_VERSES = 80


def corpus_sources():
    """The Spanish side of the Bible corpus, every split, as data/bible holds it."""
    return [source for split in SPLITS for source, _ in load_pairs("bible", split)]


def corpus_is_modern():
    return corpus_source_spelling("bible") == MODERN


def graph(function, texts):
    return [text.decode("utf-8") for text in function(tf.constant(texts, tf.string)).numpy()]


@pytest.mark.parametrize("old, modern", VERSES)
def test_modernize_rewrites_real_verses_and_old_spelling_restores_them(old, modern):
    assert modernize(old) == modern
    assert graph(modernize_graph, [old]) == [modern]
    assert old_spelling(modern) == old
    assert graph(old_spelling_graph, [modern]) == [old]


def test_python_and_graph_agree_on_edge_cases():
    expected = [modernize(text) for text in EDGE_CASES]
    assert graph(modernize_graph, EDGE_CASES) == expected
    assert graph(old_spelling_graph, expected) == [old_spelling(text) for text in expected]
    assert expected[0] == "a a a" and expected[1] == "o o, o.o"
    assert expected[2] == "A la mañana FUE y Fue; DIO a él"
    assert expected[3] == "¿fue?¡a!«o»(u)"
    assert expected[5] == EDGE_CASES[5]
    assert expected[6] == "crio hijos crio su crio como creó.crio gusanos CREÓ HIJOS Crio como"
    assert expected[7] == "creó hijosdalgo"
    assert expected[8] == EDGE_CASES[8]
    assert expected[9] == "Sion, sion, SION; Creador creaste"


def test_modernize_graph_keeps_the_shape():
    texts = tf.constant([["á", "fué"], ["ó", "x"]])
    assert modernize_graph(texts).numpy().tolist() == [[b"a", b"fue"], [b"o", b"x"]]


def test_python_and_graph_agree_on_the_whole_corpus():
    sources = corpus_sources()
    modern = [modernize(source) for source in sources]
    assert graph(modernize_graph, sources) == modern
    assert graph(old_spelling_graph, modern) == [old_spelling(text) for text in modern]


def test_old_spelling_restores_the_1909_corpus_but_for_its_measured_irregularities():
    """Counted on the 1909 text when data/bible still holds it; a modern build recorded the
    same count in its stats.json when it had both texts."""
    sources = corpus_sources()
    if corpus_is_modern():
        assert all(modernize(old_spelling(source)) == source for source in sources)
        not_restored = read_corpus_stats(DEFAULT_BIBLE_DIR)["spelling_not_restored"]
    else:
        not_restored = sum(old_spelling(modernize(source)) != source for source in sources)
    assert not_restored == NOT_RESTORED_VERSES


def test_name_table_maps_todays_forms_to_the_1909_names_but_never_a_word_of_the_sources():
    sources = [
        "Y Jesús fué á Bethania y á Nazareth, y vió á Josaphat.",
        "Vino de Nazaret de Galilea á Jerusalem y Bethlehem.",
        "THEOPHILO escribió.",  # all capitals: not read as a name
        "Seth y set.",  # "set" is a word of the sources: "Seth" has no modern form
    ]
    assert name_table(sources) == {
        "betania": "bethania",
        "josafat": "josaphat",
        "jerusalén": "jerusalem",
        "jerusalen": "jerusalem",
        "belén": "bethlehem",
        "belen": "bethlehem",
        "betlehem": "bethlehem",
    }  # "Nazaret" is a word there; "Efraín" has no 1909 form there (no "Ephraim")


def test_todays_names_are_read_as_the_sources_write_them_and_the_sources_are_unchanged():
    """On the whole corpus: renaming changes no source, and gives back every name that
    `modern_names_graph` rewrote, but those whose modern form is itself a word there."""
    sources = corpus_sources()
    renaming = Restoration(names=name_table(sources))
    assert graph(renaming.rename, sources) == sources
    modern = graph(modern_names_graph, sources)
    assert sum(m != s for m, s in zip(modern, sources)) > 1000  # the corpus has such names
    words_of = re.compile(r"[^\W\d_]+").findall
    keys = {strip_accents(word.lower()) for text in sources for word in words_of(text)}
    changed = [
        (written, read)
        for source, renamed in zip(sources, graph(renaming.rename, modern))
        for written, read in zip(words_of(source), words_of(renamed), strict=True)
        if read != written
    ]
    written_modern = graph(modern_names_graph, [written for written, _ in changed])
    read_modern = graph(modern_names_graph, [read for _, read in changed])
    for (written, read), modern_written, modern_read in zip(changed, written_modern, read_modern):
        # Another 1909 form of the same name ("Mephaat" for "Mephaath"), or a modern form that
        # is itself a word there ("Nazaret"), which is left as typed.
        same_name = strip_accents(read.lower()) in keys and modern_read == modern_written
        assert same_name or strip_accents(modern_written.lower()) in keys, (written, read)


def test_modern_names_graph_rewrites_capitalized_names_only():
    assert graph(
        modern_names_graph, ["Bethlehem y Jerusalem, Nazareth; THEOS, Ephraim kathos"]
    ) == ["Belén y Jerusalén, Nazaret; THEOS, Efraín kathos"]


@pytest.mark.large
def test_a_modern_spelling_run_translates_1909_spelling_like_modern_through_its_export(tmp_path):
    """A tiny run trained on a corpus that records modern spelling: its tokenizer config says
    so, and its SavedModel turns each 1909-spelled sentence into the translation of its modern
    form (a run without the record does not modernize: see tests/model/test_tokenizer.py)."""
    import tensorflow_text  # noqa: F401  (the exported tokenizer's ops)

    from inference.export import export_run
    from tests.export_fixtures import PAIRS, build_tiny_run

    modern_pairs = [(modernize(source), target) for source, target in PAIRS]
    corpus = str(tmp_path / "run-corpus")
    os.makedirs(corpus)
    with open(os.path.join(corpus, "stats.json"), "w", encoding="utf-8") as handle:
        json.dump({"source_spelling": MODERN}, handle)
    build_tiny_run(tmp_path / "run", modern_pairs, config={"train_steps": 20})
    with open(tmp_path / "run" / "tokenizer" / "tokenizer_config.json", encoding="utf-8") as f:
        assert json.load(f)["source_spelling"] == MODERN
    signatures = tf.saved_model.load(export_run(tmp_path / "run", tmp_path / "exports")).signatures

    modern = [text for old, text in VERSES] + ["Él fue a la casa o a la ciudad."]
    old = [old for old, _ in VERSES] + ["Él fué á la casa ó á la ciudad."]
    for name in ("serving_default", "beam_search"):
        translate = signatures[name]
        assert translate(text=tf.constant(old))["translation"].numpy().tolist() == (
            translate(text=tf.constant(modern))["translation"].numpy().tolist()
        )
