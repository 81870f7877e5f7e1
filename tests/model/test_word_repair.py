"""The repair of made-up words (`model.word_repair`): its verdicts against
`training.made_up_words` (the evaluation's own count), its replacements on hand-made alignments,
and a trained translator's greedy and beam translations repaired in the graph."""

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from model.restoration import write_table
from model.tokenizer import load_tokenizers, read_tokenizer_config, write_tokenizer_config
from model.translator import DecodingOptions, Translator
from model.word_repair import ENGLISH_WORDS_FILE, LEXICON_FILE, REPAIR_WORDS_KEY, WordRepair
from run_directory import artifacts
from tests.export_fixtures import PAIRS
from training.made_up_words import MadeUpWords, words
from training.word_repair_tables import lexicon_english, word_key

ENGLISH = ("i", "bought", "a", "in", "and", "the", "dog", "don't", "tax", "is", "Carlos", "cafe")


@pytest.fixture(scope="module")
def repair():
    return WordRepair({"sofa": "sofa", "perro": "dog", "taxi": "taxi", "cuenca": "basin"}, ENGLISH)


def _graph_made_up(repair, translation, source):
    """The made-up words of `translation` by `WordRepair.made_up`, letters only."""
    words_in = translation.split(" ")
    source_words = [w for w in words(source)] or [""]
    mask = repair.made_up(tf.constant([words_in]), tf.constant([source_words])).numpy()[0]
    return [words(word)[0] for word, bad in zip(words_in, mask, strict=True) if bad]


@pytest.mark.parametrize(
    "translation, source",
    [
        ("I bought a supermercated.", "Compré un supermercado."),
        ("The tax is in the dog.", "El taxi está en el perro."),
        ("Carlos' dog, Carlos's dog.", "El perro de Carlos."),
        ("I bought in Cuenca.", "Compré en Cuenca."),
        ("I bought a CAFÉ.", "Compré un café."),
        ("The dog's tax: 8:45, 12 euros!", "El perro a las 8:45, 12 euros."),
        ("Don't DOG the cymble «Cymble»", "No"),
        ("sopher, eurs; eurses.", "sofá, euros"),
    ],
)
def test_made_up_words_are_those_the_evaluation_counts(repair, translation, source):
    reference = MadeUpWords(ENGLISH).made_up(translation, source)
    assert _graph_made_up(repair, translation, source) == reference


def test_the_lexicon_english_of_a_lone_word():
    listed = frozenset({"barks", "Sunday", "sofa", "Sundays"})
    assert lexicon_english("It barks", listed) == "barks"
    assert lexicon_english("Sundays", listed) == "Sundays"
    assert lexicon_english("Sofa", listed) == "sofa"
    assert lexicon_english("Taxi driver", listed) == "taxi driver"
    assert lexicon_english("It", listed) == "it"
    assert word_key("Sofá") == "sofa" and word_key("AÑO") == "ano"


def _pieces(words_by_row, width):
    rows = [[*pieces, *[""] * (width - len(pieces))] for pieces in words_by_row]
    return tf.constant(rows)


def _alignment(target_to_source, target_width, source_width):
    """float `[batch, T, S]`: each target piece attends to one source position."""
    alignment = np.zeros([len(target_to_source), target_width, source_width], np.float32)
    for row, positions in enumerate(target_to_source):
        for t, s in enumerate(positions):
            alignment[row, t, s] = 0.9
            alignment[row, t, (s + 1) % source_width] = 0.1
    return tf.constant(alignment)


def test_made_up_words_are_replaced_from_the_aligned_source_word(repair):
    # Source pieces: [START] is "", as the Translator passes reserved tokens.
    source = [
        ["", "▁Compré", "▁un", "▁so", "fá", "▁en", "▁Cuenca", "."],
        ["", "▁Sofá", "▁y", "▁perro", "."],
        ["", "▁el", "▁trombo", "lito"],
        ["", "▁paraguas"],
    ]
    target = [
        ["▁I", "▁bought", "▁a", "▁so", "pher", "▁in", "▁Cun", "cah", "."],
        ["▁«", "So", "pher", "»", "▁and", "▁dog", "."],
        ["▁the", "▁trombo", "phon"],
        ["▁para", "guat"],
    ]
    # Target piece → source position; "sopher" attends to "so"+"fá", "Cuncah" to "Cuenca".
    # "paraguat" attends to [START] most (position 0, no piece), then to "paraguas".
    links = [[1, 2, 3, 3, 4, 5, 6, 6, 7], [1, 1, 1, 1, 2, 3, 4], [1, 2, 3], [0, 0]]
    translations = tf.constant(
        ["I bought a sopher in Cuncah.", "«Sopher» and dog.", "the trombophon", "paraguat"]
    )
    repaired = repair(translations, _pieces(source, 8), _pieces(target, 9), _alignment(links, 9, 8))
    assert [text.decode() for text in repaired.numpy()] == [
        # From the lexicon; a name copied, though the lexicon has the common noun "cuenca".
        "I bought a sofa in Cuenca.",
        # The first word's capital is not a name's: the lexicon's, capitalized, in its quotes.
        "«Sofa» and dog.",
        # Not in the lexicon: the source word.
        "the trombolito",
        # Of the source's words, not [START].
        "paraguas",
    ]


def test_a_source_word_the_translation_already_says_is_passed_over():
    repair = WordRepair(
        {"manana": "tomorrow", "va": "goes", "llover": "rain"},
        ("goes", "to", "weep", "tomorrow", "rain", "it"),
    )
    source = _pieces([["", "▁Mañana", "▁va", "▁a", "▁llover"]] * 2, 5)
    target = _pieces([["▁Main", "tern", "▁goes", "▁to", "▁weep"]] * 2, 5)
    alignment = np.zeros([2, 5, 5], np.float32)
    for t, s in enumerate([2, 2, 2, 3, 4]):
        alignment[:, t, s] = 0.6
    # Row 0: "Maintern" looks at "va" most, then at "Mañana"; "goes" already says "va".
    alignment[0, :2, 1] = 0.4
    # Row 1: it looks at "va" alone: said or not, its English is the only one there is.
    translations = tf.constant(["Maintern goes to weep"] * 2)
    repaired = repair(translations, source, target, tf.constant(alignment))
    assert [text.decode() for text in repaired.numpy()] == [
        "Tomorrow goes to weep",
        "Goes goes to weep",
    ]


def test_a_source_word_said_twice_is_said_once_its_english_is_there_twice():
    repair = WordRepair(
        {"decimo": "tenth", "mes": "month", "en": "in", "el": "the", "dia": "day"},
        ("the", "tenth", "month", "in", "day"),
    )
    # "el mes décimo; en el décimo día": the second "décimo" is not yet said, "día" is not.
    source = _pieces([["", "▁el", "▁mes", "▁décimo", ";", "▁en", "▁el", "▁décimo", "▁día"]], 9)
    target = _pieces([["▁the", "▁tenth", "▁month", ";", "▁in", "▁the", "▁dec", "im"]], 8)
    alignment = np.zeros([1, 8, 9], np.float32)
    for t, s in enumerate([1, 3, 2, 4, 5, 6, 7, 7]):
        alignment[0, t, s] = 0.6
    # "decim" looks at the second "décimo" most, then at "día".
    alignment[0, 6:, 8] = 0.3
    translations = tf.constant(["the tenth month; in the decim"])
    repaired = repair(translations, source, target, tf.constant(alignment))
    assert repaired.numpy()[0].decode() == "the tenth month; in the tenth"


def test_a_translation_without_made_up_words_is_returned_as_written(repair):
    source = [["", "▁El", "▁perro", "."]]
    target = [["▁The", "▁dog", "."]]
    for text in ("The dog.", "The  dog .", "Thé dog ."):
        # Words that do not match the pieces leave the row alone, made up or not.
        repaired = repair(
            tf.constant([text]),
            _pieces(source, 4),
            _pieces(target, 3),
            _alignment([[1, 2, 3]], 3, 4),
        )
        assert repaired.numpy()[0].decode() == text


@pytest.fixture(scope="module")
def repairing_run(tiny_export_run, tmp_path_factory):
    """A copy of the tiny run whose English leaves out "cat" and "coffee", and whose lexicon
    says "gato" → "kitty": so its "cat" is made up, and repaired."""
    run_dir = tmp_path_factory.mktemp("repairing") / "run"
    shutil.copytree(tiny_export_run, run_dir)
    tokenizer_dir = os.path.join(run_dir, artifacts.TOKENIZER_DIR)
    english = {w for _, target in PAIRS for w in words(target)} - {"cat", "coffee"}
    with open(os.path.join(tokenizer_dir, ENGLISH_WORDS_FILE), "w", encoding="utf-8") as f:
        f.writelines(f"{word}\n" for word in sorted(english))
    write_table(os.path.join(tokenizer_dir, LEXICON_FILE), {"gato": "kitty"})
    config = read_tokenizer_config(tokenizer_dir)
    write_tokenizer_config(tokenizer_dir, {**config, REPAIR_WORDS_KEY: True})
    return run_dir, english


@pytest.mark.parametrize("signature", ["greedy", "beam_search", "alignments"])
def test_a_trained_translator_repairs_its_made_up_words(repairing_run, signature):
    run_dir, english = repairing_run
    model, source_tokenizer, target_tokenizer, _ = artifacts.load_trained(run_dir)
    assert target_tokenizer.word_repair is not None
    sources = [
        "El gato es negro.",
        "Me gusta el café.",
        "El perro es blanco.",
        "Tengo un gato negro.",
    ]

    def translate(repair_words):
        options = DecodingOptions(beam_width=2, repair_words=repair_words)
        translator = Translator(model, source_tokenizer, target_tokenizer, options)
        outputs = getattr(translator, signature)(tf.constant(sources))
        return [text.decode() for text in outputs["translation"].numpy()]

    as_decoded, repaired = translate(False), translate(True)
    assert as_decoded == [
        "The cat is black.",
        "I like coffee.",
        "The dog is white.",
        "I have a black cat.",
    ]
    # "cat" attends to "gato", which the lexicon holds; "coffee" to a word it lacks (the tiny
    # model's attention is no clean alignment), copied.
    assert repaired[0::2] == ["The kitty is black.", "The dog is white."]
    assert repaired[3] == "I have a black kitty."
    prefix, copied = repaired[1][: len("I like ")], repaired[1][len("I like ") : -1]
    assert prefix == "I like " and copied in words(sources[1]), repaired[1]
    assert MadeUpWords(english | {"kitty"}).report(repaired, sources)["made_up_words"] == 0


def test_load_tokenizers_gives_only_the_target_the_repair(repairing_run, tiny_export_run):
    run_dir, _ = repairing_run
    source, target = load_tokenizers(os.path.join(run_dir, artifacts.TOKENIZER_DIR))
    assert source.word_repair is None and isinstance(target.word_repair, WordRepair)
    _, plain = load_tokenizers(os.path.join(tiny_export_run, artifacts.TOKENIZER_DIR))
    assert plain.word_repair is None


def test_the_export_repairs_as_the_translator_does(repairing_run, tmp_path):
    import tensorflow_text  # noqa: F401  (the SavedModel's SentencePiece ops)

    from inference.export import export_run

    run_dir, _ = repairing_run
    signatures = ["serving_default", "beam_search"]
    version_dir = export_run(
        run_dir, str(tmp_path / "exports"), signatures=signatures, warmup_signatures=()
    )
    loaded = tf.saved_model.load(version_dir)
    sources = tf.constant(["El gato es negro.", "Tengo un gato negro."])
    for name in signatures:
        outputs = loaded.signatures[name](text=sources)
        assert [t.decode() for t in outputs["translation"].numpy()] == [
            "The kitty is black.",
            "I have a black kitty.",
        ]
