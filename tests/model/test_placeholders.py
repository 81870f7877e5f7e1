"""Placeholders (`model.placeholders`): the graph ops against a plain-Python reference, the
training pipeline's markers, the vocabulary, and a run trained with them that copies a name and
a number it never saw, through the Translator and its SavedModel export."""

import dataclasses
import os
import unicodedata

import numpy as np
import pytest
import tensorflow as tf

from model.placeholders import (
    KNOWN_WORDS_FILE,
    MARKERS,
    Placeholders,
    corpus_word_keys,
    protect_target,
    restore,
)
from training.pipeline import protect_pairs

KNOWN_TEXTS = [
    "Y Jehová dijo a Moisés: Ve a Egipto con tu hermano.",
    "los hijos de Israel salieron de la tierra",
    "entonces fueron con Aarón",
]
TEXTS = [
    "¿Kalomir vino, con 47 hombres? Kalomir y Moisés",
    "",
    "JEHOVA y Berlín y Tomasz y 1 2 3 4 5 6 7 8 9",
    "kalomir vino a egipto",  # lowercase: left to the model
    "Jehova, MOISES, Egipto e ISRAEL",  # known, whatever the case and accents
    "Ñandú e Ölund: Åsa—Çelik, 3,5 y 12.000",
    "un marcador \ue000 tecleado y Zeb",
    "   espacios   Zorb  ",
]


def _is_word_char(char):
    return unicodedata.category(char)[0] in "LNM"


def _key(word):
    decomposed = unicodedata.normalize("NFD", word)
    return "".join(c for c in decomposed if unicodedata.category(c)[0] != "M").lower()


def reference_protect(text, known, first_slot=0):
    """The module docstring's rule, in plain Python: `(protected text, values)`."""
    text = "".join(c for c in text if c not in MARKERS)
    pieces, current = [], ""
    for char in text:
        if current and _is_word_char(char) != _is_word_char(current[-1]):
            pieces.append(current)
            current = ""
        current += char
    if current:
        pieces.append(current)
    values = [""] * len(MARKERS)
    slots = {}
    out = []
    for piece in pieces:
        is_number = all(unicodedata.category(c) == "Nd" for c in piece)
        is_name = (
            unicodedata.category(piece[0]) == "Lu"
            and all(unicodedata.category(c)[0] in "LM" for c in piece)
            and _key(piece) not in known
        )
        if _is_word_char(piece[0]) and (is_number or is_name):
            if piece not in slots and len(slots) < len(MARKERS):
                slot = (len(slots) + first_slot) % len(MARKERS)
                slots[piece] = slot
                values[slot] = piece
            if piece in slots:
                out.append(MARKERS[slots[piece]])
                continue
        out.append(piece)
    return "".join(out), values


@pytest.fixture(scope="module")
def placeholders():
    return Placeholders(corpus_word_keys(KNOWN_TEXTS))


def _decode(tensor):
    return [value.decode("utf-8") for value in np.asarray(tensor).reshape(-1)]


def test_corpus_word_keys_are_lowercased_and_unaccented():
    keys = corpus_word_keys(KNOWN_TEXTS)
    assert "jehova" in keys and "moises" in keys and "israel" in keys
    assert "Jehová" not in keys and keys == sorted(set(keys))


@pytest.mark.parametrize("first_slot", [0, 3, 7])
def test_protect_matches_the_python_reference(placeholders, first_slot):
    known = set(corpus_word_keys(KNOWN_TEXTS))
    protected, values = placeholders.protect(tf.constant(TEXTS), tf.fill([len(TEXTS)], first_slot))
    for text, got, got_values in zip(TEXTS, _decode(protected), np.asarray(values)):
        want, want_values = reference_protect(text, known, first_slot)
        assert got == want, text
        assert _decode(got_values) == want_values, text


def test_protect_examples(placeholders):
    protected, values = placeholders.protect(tf.constant(TEXTS[:1] + TEXTS[3:5]))
    name, number = MARKERS[0], MARKERS[1]
    assert _decode(protected) == [
        f"¿{name} vino, con {number} hombres? {name} y Moisés",
        "kalomir vino a egipto",
        "Jehova, MOISES, Egipto e ISRAEL",
    ]
    assert _decode(values[0])[:3] == ["Kalomir", "47", ""]
    assert set(_decode(values[1:])) == {""}


def test_past_the_last_marker_words_stay(placeholders):
    protected, values = placeholders.protect(tf.constant([TEXTS[2]]))
    assert _decode(protected)[0].endswith(f"{MARKERS[7]} 7 8 9")
    assert _decode(values[0]) == ["Berlín", "Tomasz", "1", "2", "3", "4", "5", "6"]


def test_protect_costs_time_and_memory_linear_in_a_rows_length(placeholders):
    """`protect` compared every piece of a row with every other (`[batch, pieces, pieces]`):
    one 16,382-byte row took 1.25 GB and 4.9 s of CPU, before the model cut it to what it reads.
    No tensor of its graph has more than two dimensions now, and long rows with repeated,
    known and unknown words, more than `len(MARKERS)` of them, protect as the reference does."""
    graph = (
        tf.function(placeholders.protect)
        .get_concrete_function(tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.int32))
        .graph
    )
    quadratic = [
        f"{op.type} {output.shape}"
        for op in graph.get_operations()
        for output in op.outputs
        if output.shape.rank is not None and output.shape.rank > 2
    ]
    assert not quadratic
    words = ["Kalomir", "vino", "12", "Moisés", "Zeb", "Ölund", "y", "Tomasz", "3"]
    rng = np.random.default_rng(0)
    long_texts = [
        " ".join(rng.choice(words + [f"Nombre{i}" for i in range(12)], size=size))
        for size in (2000, 3, 700)
    ] + TEXTS
    known = set(corpus_word_keys(KNOWN_TEXTS))
    first_slots = tf.constant([index % len(MARKERS) for index in range(len(long_texts))])
    protected, values = placeholders.protect(tf.constant(long_texts), first_slots)
    for text, slot, got, got_values in zip(
        long_texts, first_slots.numpy(), _decode(protected), np.asarray(values)
    ):
        want, want_values = reference_protect(text, known, slot)
        assert got == want, text[:80]
        assert _decode(got_values) == want_values, text[:80]


@pytest.mark.parametrize("texts", [[""], ["", MARKERS[0]]])
def test_protect_a_batch_without_a_word(placeholders, texts):
    """A batch of empty texts (or only typed markers) has no piece at all: nothing to protect,
    and nothing to put back."""
    protected, values = placeholders.protect(tf.constant(texts))
    assert _decode(protected) == [""] * len(texts)
    assert set(_decode(values)) == {""}
    assert _decode(restore(protected, values)) == [""] * len(texts)


def test_protect_sees_the_source_as_the_models_casing_does():
    """With "lower_all_caps", a source in capitals is lowercased first: only its numbers are
    protected (the model reads it lowercased, so a capitalized name would be a marker it never
    saw in such a sentence); any other source keeps its case."""
    placeholders = Placeholders(corpus_word_keys(KNOWN_TEXTS), casing="lower_all_caps")
    protected, values = placeholders.protect(
        tf.constant(["KALOMIR VINO CON 47 HOMBRES", "Kalomir vino con 47 hombres"])
    )
    assert _decode(protected) == [
        f"kalomir vino con {MARKERS[0]} hombres",
        f"{MARKERS[0]} vino con {MARKERS[1]} hombres",
    ]
    assert _decode(values[:, :2]) == ["47", "", "Kalomir", "47"]


def test_restore_inverts_protect(placeholders):
    protected, values = placeholders.protect(tf.constant(TEXTS))
    without_typed_markers = [text.replace(MARKERS[0], "") for text in TEXTS]
    assert _decode(restore(protected, values)) == without_typed_markers
    # n translations of each source: rank 2.
    pairs = restore(tf.stack([protected, protected], axis=1), values)
    assert np.asarray(pairs).shape == (len(TEXTS), 2)
    assert _decode(pairs) == [text for text in without_typed_markers for _ in range(2)]


def test_restore_puts_back_repeated_and_drops_unknown_markers(placeholders):
    _, values = placeholders.protect(tf.constant(["Kalomir y Zeb"]))
    text = f"{MARKERS[1]} and {MARKERS[0]}, {MARKERS[0]}{MARKERS[5]}."
    assert _decode(restore(tf.constant([text]), values)) == ["Zeb and Kalomir, Kalomir."]


def test_protect_target_uses_the_sources_markers(placeholders):
    _, values = placeholders.protect(tf.constant(["Kalomir vino con 47 hombres.", "Nada."]))
    targets = protect_target(
        tf.constant(["Kalomir came with 47 men; Kalomirs 470.", "Kalomir 47"]), values
    )
    assert _decode(targets) == [
        f"{MARKERS[0]} came with {MARKERS[1]} men; Kalomirs 470.",
        "Kalomir 47",
    ]


def test_protect_pairs_marks_a_share_of_shared_names(placeholders):
    source = "Entonces Moisés y Aarón fueron a Egipto con Zeb."
    target = "Then Moisés and Aaron went to Egypt with Zeb."
    sources = tf.constant([source] * 400)
    targets = tf.constant([target] * 400)
    seed = tf.constant([5, 6], tf.int64)
    protected, marked_targets = protect_pairs(placeholders, sources, targets, seed, 0.5)
    again, _ = protect_pairs(placeholders, sources, targets, seed, 0.5)
    assert _decode(protected) == _decode(again)  # stateless: the seed decides
    rows = list(zip(_decode(protected), _decode(marked_targets)))
    # An unknown name is always a marker ("Zeb"); "Moisés" is known and written the same in
    # the target: a share of the time; "Aarón" and "Egipto" are known and the target writes
    # them otherwise: never.
    assert all("Zeb" not in s and "Zeb" not in t and "Aarón" in s for s, t in rows)
    assert all("Egipto" in s and "Aaron" in t for s, t in rows)
    marked = sum("Moisés" not in s for s, _ in rows)
    assert 150 < marked < 250
    assert all(("Moisés" in s) == ("Moisés" in t) for s, t in rows)
    for s, t in rows:
        assert {c for c in t if c in MARKERS} <= {c for c in s if c in MARKERS}
    # Markers are numbered from a random first one: every marker turns up.
    assert {c for s, _ in rows for c in s if c in MARKERS} == set(MARKERS)
    # Without a seed, translation's numbering and no known names.
    plain, _ = protect_pairs(placeholders, sources[:1], targets[:1])
    assert _decode(plain) == [f"Entonces Moisés y Aarón fueron a Egipto con {MARKERS[0]}."]


def test_vocabulary_holds_markers_as_pieces(tmp_path):
    from model.tokenizer import load_tokenizers
    from training.vocabulary import build_tokenizers

    pairs = [("Hola Pedro, tengo 3 gatos.", "Hello Pedro, I have 3 cats.")] * 20
    source, target = build_tokenizers(
        pairs, 300, tmp_path, shared=True, source_casing="lower_all_caps", placeholders=True
    )
    assert source is not target and target.placeholders is None
    assert source.placeholders is not None
    with open(os.path.join(tmp_path, KNOWN_WORDS_FILE), encoding="utf-8") as handle:
        assert handle.read().split() == ["3", "gatos", "hola", "pedro", "tengo"]
    ids = source.tokenize(tf.constant([f"a {MARKERS[0]}{MARKERS[7]} b"]))
    pieces = _decode(source.lookup(ids.to_tensor()))
    assert MARKERS[0] in pieces and MARKERS[7] in pieces
    reloaded, _ = load_tokenizers(tmp_path)
    assert reloaded.placeholders is not None
    assert reloaded.placeholders.casing == "lower_all_caps"
    with pytest.raises(ValueError, match="sentencepiece"):
        build_tokenizers(pairs, 300, tmp_path / "wp", tokenizer_type="wordpiece", placeholders=True)


# A corpus whose names and figures a tiny model learns to carry over as markers.
NAME_PAIRS = (
    ("Pedro tiene un perro.", "Pedro has a dog."),
    ("Ana tiene un gato.", "Ana has a cat."),
    ("Luis bebe café.", "Luis drinks coffee."),
    ("Marta bebe té.", "Marta drinks tea."),
    ("Tengo 3 libros.", "I have 3 books."),
    ("Tengo 12 perros.", "I have 12 dogs."),
    ("Ella tiene 7 gatos.", "She has 7 cats."),
    ("Él tiene 40 libros.", "He has 40 books."),
)


@pytest.fixture(scope="module")
def placeholder_run(tmp_path_factory):
    from tests.export_fixtures import PAIRS, build_tiny_run

    run_dir = tmp_path_factory.mktemp("placeholders") / "run"
    build_tiny_run(
        run_dir,
        PAIRS + NAME_PAIRS,
        {
            "placeholders": True,
            "placeholder_names": 0.5,
            "copy_substitution": 1.0,
            "copy_figure_share": 0.3,
        },
    )
    return str(run_dir)


UNSEEN = [
    ("Zorblat tiene un perro.", "Zorblat"),
    ("Tengo 4821 libros.", "4821"),
    ("Kwame bebe café.", "Kwame"),
]


@pytest.mark.large
def test_a_run_with_placeholders_copies_unseen_names_and_numbers(placeholder_run, tmp_path):
    import tensorflow_text  # noqa: F401  (the export's ops)

    from inference.export import export_run
    from training.evaluate import run_translate_function, translate

    translate_batch, _ = run_translate_function(placeholder_run)
    texts = [text for text, _ in UNSEEN]
    translations = translate(texts, translate_batch, show_progress=False)
    for (text, value), translation in zip(UNSEEN, translations):
        assert value in translation.split(), (text, translation)
        assert not any(marker in translation for marker in MARKERS)
    # The SavedModel carries the known words and the markers: the same translations, and a
    # scored target with the name in it gets the pieces back.
    version_dir = export_run(placeholder_run, str(tmp_path / "export"))
    loaded = tf.saved_model.load(version_dir)
    served = loaded.signatures["serving_default"](text=tf.constant(texts))["translation"]
    assert _decode(served) == translations
    scored = loaded.signatures["score"](
        text=tf.constant(texts[:1]), target=tf.constant(["Zorblat has a dog."])
    )
    pieces = _decode(scored["target_tokens"])
    assert "Zorblat" in pieces and not any(marker in "".join(pieces) for marker in MARKERS)


@pytest.mark.large
def test_the_ctranslate2_recipe_protects_as_the_translator_does(placeholder_run, tmp_path):
    """docs/serving.md's CTranslate2 recipe on the placeholder run, with unseen words: the same
    translations as the project's greedy signature (CTranslate2 runs the same weights)."""
    import contextlib
    import io
    import re

    from inference.export_ctranslate2 import main as convert
    from tests.inference.test_export_ctranslate2 import readme_recipe
    from training.evaluate import run_translate_function, translate

    output_dir = str(tmp_path / "ct2")
    with contextlib.redirect_stdout(io.StringIO()):
        convert(["--run_dir", placeholder_run, "--output_dir", output_dir])
    texts = [text for text, _ in UNSEEN]
    recipe = re.sub(
        r"^RUN_DIR, CT2_DIR = .*$",
        f"RUN_DIR, CT2_DIR = {placeholder_run!r}, {output_dir!r}",
        readme_recipe(),
        flags=re.MULTILINE,
    )
    recipe, count = re.subn(r"^texts = \[.*\]$", f"texts = {texts!r}", recipe, flags=re.MULTILINE)
    assert count == 1
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(recipe, "docs/serving.md (CTranslate2)", "exec"), {})
    translate_batch, _ = run_translate_function(placeholder_run)
    expected = translate(texts, translate_batch, show_progress=False)
    assert printed.getvalue().splitlines() == expected
    assert all(value in line for line, (_, value) in zip(expected, UNSEEN))


# Sources on which the tiny run, left alone, writes some placeholder more often than the source
# holds it (a repeated name) in some signature.
CROWDED = [
    "Kwame Kwame.",
    "Zorblat bebe café y Kwame bebe té.",
    "Kwame tiene un perro y Zorblat tiene un gato.",
    "Zorblat, Kwame, Ingrid, Olaf.",
    "Tengo 3 libros y 3 perros.",
]
UNSEEN_WORDS = ("Kwame", "Zorblat", "Ingrid", "Olaf", "3")


def _repeated_words(text, translation):
    """The unseen words `translation` holds more often than `text`."""
    return [word for word in UNSEEN_WORDS if translation.count(word) > text.count(word)]


@pytest.mark.large
def test_no_signature_writes_a_placeholder_more_often_than_the_source(placeholder_run):
    """With `limit_placeholders` (the default) no decoder's output holds a protected word more
    often than its source, nor a marker; without it, the tiny run repeats some."""
    from model.translator import DecodingOptions, Translator
    from run_directory.artifacts import load_trained

    model, source_tokenizer, target_tokenizer = load_trained(placeholder_run)[:3]
    texts = tf.constant(CROWDED)
    empty = tf.fill([len(CROWDED)], "")

    def outputs(options):
        translator = Translator(model, source_tokenizer, target_tokenizer, options)
        found = {
            "greedy": translator.greedy(texts)["translation"],
            "beam_search": translator.beam_search(texts)["translation"],
            "prefix": translator.prefix(texts, empty)["translation"],
            "alignments": translator.alignments(texts)["translation"],
        }
        for seed in range(4):
            seeds = tf.fill([len(CROWDED)], seed)
            found[f"sample seed {seed}"] = translator.sample(texts, seeds)["translation"]
        for name, columns in (
            ("n_best", translator.n_best(texts)),
            ("alternatives", translator.alternatives(texts, empty)),
        ):
            for column in range(columns["translations"].shape[1]):
                found[f"{name}[{column}]"] = columns["translations"][:, column]
        return {name: _decode(value) for name, value in found.items()}

    options = DecodingOptions(beam_width=3, sampling_topk=5, num_alternatives=3)
    for name, translations in outputs(options).items():
        for text, translation in zip(CROWDED, translations):
            assert not any(marker in translation for marker in MARKERS), (name, translation)
            assert not _repeated_words(text, translation), (name, text, translation)
    unlimited = outputs(dataclasses.replace(options, limit_placeholders=False))
    assert any(
        _repeated_words(text, translation)
        for translations in unlimited.values()
        for text, translation in zip(CROWDED, translations)
    ), "the tiny run repeats no placeholder on its own: the test tests nothing"


@pytest.mark.large
def test_warmup_texts_are_as_long_as_asked_after_the_placeholders(placeholder_run):
    """`inference.export`'s warmup texts, counted as the signatures decode them: with known words
    that leave out the capitals of `WARMUP_TEXTS` ("Hola", "Dónde", "El"), each of those is one
    marker piece, as `alignments` shows them (the words put back in its `source_tokens`)."""
    from inference.export import texts_of_lengths
    from model.translator import MIN_SOURCE_TOKENS, Translator
    from run_directory.artifacts import load_trained

    model, source_tokenizer, target_tokenizer, _ = load_trained(placeholder_run)
    source_tokenizer.placeholders = Placeholders(corpus_word_keys(KNOWN_TEXTS))
    translator = Translator(model, source_tokenizer, target_tokenizer)
    lengths = list(range(MIN_SOURCE_TOKENS, model.pe_input + 1))
    texts = texts_of_lengths(translator, lengths)
    assert "Hola" in texts[model.pe_input]
    pieces = translator.alignments(tf.constant([texts[length] for length in lengths]))
    assert np.sum(pieces["source_tokens"].numpy() != b"", axis=1).tolist() == lengths
    # A warmup request holds one length's text alone: for 2 tokens "", a batch without a word.
    assert texts[MIN_SOURCE_TOKENS] == ""
    alone = translator.alignments(tf.constant([texts[MIN_SOURCE_TOKENS]]))
    assert alone["source_tokens"].numpy().tolist() == [[b"[START]", b"[END]"]]
