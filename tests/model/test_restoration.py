"""Accents and capitals put back on sources typed without them (`model.restoration`): the tables
on examples, the graph ops against a plain-Python reference on real verses typed as people type,
text written correctly left alone, and the tokenizers and a SavedModel that carry them."""

import collections
import fractions
import itertools
import json
import os
import random
import re
import shutil
import unicodedata

import pytest
import tensorflow as tf

from model.restoration import (
    ACCENT_CONTEXTS_FILE,
    ACCENTS_FILE,
    CASES_FILE,
    NAMES_FILE,
    Restoration,
    accent_table,
    case_table,
    context_accent_table,
    context_lookup,
    read_context_table,
    read_table,
    strip_accents,
    word_contexts,
    write_context_table,
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


def assert_tokenizes_in_a_saved_model(tokenizer, typed, expected, directory):
    """`tokenizer` saved in a SavedModel and loaded back gives `typed` the ids `expected`: its
    restoration tables travel with it, as to TF Serving."""

    class Carrier(tf.Module):
        def __init__(self, tokenizer):
            super().__init__()
            self.tokenizer = tokenizer

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def ids(self, text):
            return self.tokenizer.tokenize(text).to_tensor()

    tf.saved_model.save(Carrier(tokenizer), str(directory / "carrier"))
    loaded = tf.saved_model.load(str(directory / "carrier"))
    assert (
        loaded.ids(typed).numpy().tolist()
        == tf.ragged.constant(expected).to_tensor().numpy().tolist()
    )


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
    assert_tokenizes_in_a_saved_model(source, typed, expected, tmp_path)


def test_vocabularies_carry_the_tables_asked_for(tmp_path):
    from model.tokenizer import load_tokenizers
    from training.vocabulary import add_restoration, build_tokenizers

    pairs = [("Y Jesús amará a su prójimo.", "And Jesus will love his neighbour.")] * 20 + [
        ("No sé nada, se fue.", "I know nothing, he left.")
    ] * 2
    build_tokenizers(pairs, 300, tmp_path / "plain", shared=True)
    source, _ = load_tokenizers(tmp_path / "plain")
    assert source.restoration is None
    source, _ = build_tokenizers(
        pairs, 300, tmp_path / "restored", shared=True, restore_accents=True, restore_case=True
    )
    assert _decode(source.restoration(tf.constant(["jesus amara"]))) == ["Jesús amará"]
    assert (tmp_path / "restored" / ACCENT_CONTEXTS_FILE).exists()
    assert not (tmp_path / "plain" / ACCENT_CONTEXTS_FILE).exists()
    # A trained run's directory gains them in place; its vocabulary is untouched.
    trained = tmp_path / "trained"
    shutil.copytree(tmp_path / "plain", trained)
    add_restoration(trained, pairs)
    config = json.loads((trained / "tokenizer_config.json").read_text())
    assert config["restore_accents"] and config["restore_case"]
    assert (trained / ACCENTS_FILE).exists() and (trained / CASES_FILE).exists()
    source, _ = load_tokenizers(trained)
    assert _decode(source.restoration(tf.constant(["jesus amara"]))) == ["Jesús amará"]
    # The accents in context too, learned from the same sources.
    sources = [source_text for source_text, _ in pairs]
    contexts = read_context_table(trained / ACCENT_CONTEXTS_FILE)
    assert contexts == context_accent_table(sources) and ("no", "se", "") in contexts
    assert source.restoration.accent_contexts is not None
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


# Accents restored in context: ambiguous bare forms ("se": "se", "sé") read by their neighbours.


def test_word_contexts_take_neighbours_bare_and_punctuation_nearest_the_word():
    assert word_contexts("¿Qué hora es?, dijo  Él\u00a0tú 9x") == [
        ("Qué", "¿", "hora"),
        ("hora", "que", "es"),
        ("es", "hora", "?"),
        ("dijo", ",", "el"),
        ("Él", "dijo", "tu"),
        ("tú", "el", "9x"),
        ("9x", "tu", "$"),
    ]
    assert word_contexts("") == [] and word_contexts(" se ") == [("se", "^", "$")]


def test_context_accent_table_keeps_clear_majorities_with_enough_evidence():
    texts = ["no sé nada"] * 3 + ["no se fue", "se fue", "se fue"]
    # "no se": 3 of 4 are "sé"; "se nada": all 3. "se" starting a text (2) and "se fue" (3) are
    # always "se", the word alone's form (3 of 6 are "sé": no majority there), kept only since
    # each outweighs a context on the other side that says "sé": "^ se nada" ties with "se
    # nada", and a tie goes to the previous word; "se fue" outweighs "no se" in "no se fue".
    table = context_accent_table(texts)
    assert table == {
        ("no", "se", ""): ("sé", fractions.Fraction(3, 4)),
        ("", "se", "nada"): ("sé", 1),
        ("^", "se", ""): ("se", 1),
        ("", "se", "fue"): ("se", 1),
    }
    assert [
        context_lookup(table, *context) for context in (("^", "se", "nada"), ("no", "se", "fue"))
    ] == ["se", "se"]
    assert (
        context_lookup(table, "no", "se", "va") == "sé"
        and context_lookup(table, "y", "se", "va") == "se"
    )
    # One occurrence is evidence enough: "no se fue" (once) says "se", as its contexts read it.
    assert context_accent_table(texts, min_count=1) == table
    # Two are not at 3: "se" starting a text decides nothing, and "se nada" there reads "sé".
    assert context_accent_table(texts, min_count=3) == {
        ("no", "se", ""): ("sé", fractions.Fraction(3, 4)),
        ("", "se", "nada"): ("sé", 1),
        ("", "se", "fue"): ("se", 1),
    }
    # 3 of 4 is no clear majority at 0.8: "no se" backs off to the next word, and "se fue"
    # outweighs nothing that says otherwise.
    assert context_accent_table(texts, min_share=0.8) == {
        ("", "se", "nada"): ("sé", 1),
        ("^", "se", ""): ("se", 1),
    }
    # No form is ambiguous: nothing to learn.
    assert context_accent_table(["Está aquí, está allí", "el día"]) == {}


def test_context_accent_table_reads_punctuation_and_the_ends_of_a_text():
    texts = ["¿Qué?", "¿Qué dices?", "Dice que no.", "Dice que sí.", "Sí, claro.", "Si puedo, voy."]
    assert context_accent_table(texts + ["Dime qué"], min_count=1) == {
        ("¿", "que", ""): ("qué", 1),
        ("dice", "que", ""): ("que", 1),
        ("dime", "que", ""): ("qué", 1),
        ("", "que", "?"): ("qué", 1),
        ("", "que", "dices"): ("qué", 1),
        ("", "que", "$"): ("qué", 1),
        ("que", "si", ""): ("sí", 1),
        ("", "si", ","): ("sí", 1),
        ("", "si", "."): ("sí", 1),
    }


def _backoff_reference(texts, min_count, min_share):
    """`lookup(previous, bare, next)`: every context of `texts` that has a clear majority,
    read both neighbours first; then of the previous and the next, the one whose majority is the
    larger share (ties: the previous), or the one there is; then none; else the bare form."""
    forms = collections.defaultdict(collections.Counter)
    occurrences = [
        (word.lower(), previous, following)
        for text in texts
        for word, previous, following in word_contexts(text)
    ]
    words = {word for word, _, _ in occurrences}
    for word, previous, following in occurrences:
        bare = strip_accents(word)
        if bare in words and any(strip_accents(w) == bare != w for w in words):
            for p, n in ((previous, following), (previous, ""), ("", following), ("", "")):
                forms[(p, bare, n)][word] += 1

    def majority(key):
        """`(share, form)` of the context `key`, or None."""
        counts = forms.get(key, {})
        total = sum(counts.values())
        if total and total >= min_count:
            best, count = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]
            if count >= min_share * total:
                return count * 1.0 / total, best
        return None

    def lookup(previous, bare, following):
        one_sided = [majority((previous, bare, "")), majority(("", bare, following))]
        if all(one_sided):
            # The larger share; a tie to the previous word (whose index sorts first).
            one_sided = [max(one_sided, key=lambda share_form: share_form[0])]
        for found in (majority((previous, bare, following)), *one_sided, majority(("", bare, ""))):
            if found:
                return found[1]
        return bare

    return lookup


AMBIGUOUS = ["se", "sé", "esta", "está", "ésta", "el", "él", "si", "sí", "que", "qué"]
OTHERS = ["no", "donde", "casa", "hora", "es", "mi", "9"]
SEPARATORS = [" ", " ", " ", ", ", "? ", " ¿", ". ", "\u00a0", "\t", "  "]


def _random_text(rng, words, size):
    pieces = [rng.choice(words) for _ in range(size)]
    separators = [rng.choice(SEPARATORS) for _ in range(size - 1)]
    text = "".join(
        itertools.chain.from_iterable(itertools.zip_longest(pieces, separators, fillvalue=""))
    )
    return rng.choice(["", "¿", " "]) + text + rng.choice(["", ".", "?", " "])


@pytest.mark.parametrize("min_count, min_share", [(1, 0.6), (2, 0.7), (3, 0.9)])
def test_context_accent_table_reads_as_every_decided_context_backing_off(min_count, min_share):
    """Its few entries give, for every context, what the contexts themselves decide: seen ones
    and unseen ones, on a random corpus where most contexts are seen with several forms."""
    rng = random.Random(min_count)
    texts = [_random_text(rng, AMBIGUOUS + OTHERS, rng.randint(1, 6)) for _ in range(400)]
    table = context_accent_table(texts, min_count, min_share)
    reference = _backoff_reference(texts, min_count, min_share)
    sides = ["^", "$", ",", "?", "¿", ".", "zzz"] + [strip_accents(w) for w in AMBIGUOUS + OTHERS]
    disagreements = [
        (p, bare, n, context_lookup(table, p, bare, n), reference(p, bare, n))
        for bare in ("se", "esta", "el", "si", "que", "no")
        for p in sides
        for n in sides
        if context_lookup(table, p, bare, n) != reference(p, bare, n)
    ]
    assert not disagreements, disagreements[:5]


def reference_context_restore(text, table):
    """The context rule of `Restoration` in plain Python: in a text without any accent, each word
    whose (previous, word, next) reads a different word in `table` gets it, in the typed case."""
    if re.search("[áéíóúüÁÉÍÓÚÜ\u0301\u0308]", text):
        return text
    runs = [
        "".join(run)
        for _, run in itertools.groupby(text, lambda c: unicodedata.category(c)[0] in "LNM")
    ]
    out = []
    for index, piece in enumerate(runs):
        if unicodedata.category(piece[0])[0] not in "LNM":
            out.append(piece)
            continue
        sides = []
        for step, edge in ((-1, "^"), (1, "$")):
            between, beside = index + step, index + 2 * step
            marks = "".join(
                c
                for c in (runs[between] if 0 <= between < len(runs) else "")
                if c not in "\t\n\f\r" and unicodedata.category(c)[0] != "Z"
            )
            if not 0 <= between < len(runs):
                sides.append(edge)
            elif marks:
                sides.append(marks[-1] if step < 0 else marks[0])
            else:
                sides.append(runs[beside].lower() if 0 <= beside < len(runs) else edge)
        lower = piece.lower()
        word = context_lookup(table, sides[0], lower, sides[1])
        if word == lower:
            out.append(piece)
        elif piece == lower:
            out.append(word)
        elif piece == piece.upper() and len(piece) > 1:
            out.append(word.upper())
        else:
            out.append(word[0].upper() + word[1:])
    return "".join(out)


def _random_context_table(rng):
    """Entries of every kind over the words and neighbours of `_random_text`, some of them the
    bare form itself (those stop a context after them), of shares that often tie."""
    bare_forms = sorted({strip_accents(word) for word in AMBIGUOUS})
    sides = ["^", "$", ",", "?", "¿", "."] + bare_forms + OTHERS
    forms = collections.defaultdict(list)
    for word in AMBIGUOUS:
        forms[strip_accents(word)].append(word)
    table = {}
    for _ in range(150):
        bare = rng.choice(bare_forms)
        previous = rng.choice(["", "", *sides])
        following = rng.choice(["", "", *sides])
        share = fractions.Fraction(rng.randint(2, 4), 4)
        table[(previous, bare, following)] = (rng.choice(forms[bare]), share)
    return table


def test_context_restoration_matches_the_python_reference_on_random_rows():
    rng = random.Random(7)
    table = _random_context_table(rng)
    words = [strip_accents(w) for w in AMBIGUOUS] + OTHERS
    typed = [_random_text(rng, words, rng.randint(1, 8)) for _ in range(600)]
    typed = typed + [text.upper() for text in typed[:100]] + [text.title() for text in typed[:100]]
    typed += ["", "¿?", "Ésta es", "no se", "no se está", "no se\u0301", "ESTA"]
    restored = _decode(Restoration(accent_contexts=table)(tf.constant(typed)))
    expected = [reference_context_restore(text, table) for text in typed]
    mismatches = [(t, r, e) for t, r, e in zip(typed, restored, expected) if r != e]
    assert not mismatches, mismatches[:5]
    assert sum(r != t for r, t in zip(restored, typed)) > 200


def test_context_restoration_keeps_the_typed_case_and_leaves_accented_rows_alone():
    table = {
        ("no", "se", ""): ("sé", 0.9),
        ("", "donde", ""): ("dónde", 0.8),
        ("donde", "esta", ""): ("está", 1),
        ("^", "esta", ""): ("esta", 0.9),
        ("", "esta", "$"): ("está", 0.9),
        ("^", "que", ""): ("que", 0.85),
        ("", "que", "hora"): ("qué", 1),
        ("", "si", ","): ("sí", 0.9),
    }
    restoration = Restoration({"telefono": "teléfono"}, None, accent_contexts=table)
    typed = [
        "no se donde esta mi telefono",
        "NO SE DONDE ESTA",
        "No se Donde esta",
        "esta casa, donde esta",
        "Esta",  # a tie of the start and the end: the previous word's "esta" stays
        "¿que hora es? si, claro",
        "que hora es",  # "que hora" outweighs the start's "que"
        "que casa",
        "no se dónde esta",  # typed with an accent: the writer meant "se" and "esta"
        "NO SE DÓNDE",
        "no se donde esta mi teléfono",
    ]
    assert _decode(restoration(tf.constant(typed))) == [
        "no sé dónde está mi teléfono",
        "NO SÉ DÓNDE ESTÁ",
        "No sé Dónde está",
        "esta casa, dónde está",
        "Esta",
        "¿qué hora es? sí, claro",
        "qué hora es",
        "que casa",
        "no se dónde esta",
        "NO SE DÓNDE",
        "no se donde esta mi teléfono",
    ]


def test_context_restoration_on_real_verses_restores_and_leaves_accented_verses_alone(verses):
    train, dev = verses
    table = context_accent_table(train[:6000])
    restoration = Restoration(accent_contexts=table)
    assert _decode(restoration(tf.constant(dev))) == [
        text if re.search("[áéíóúüÁÉÍÓÚÜ]", text) else reference_context_restore(text, table)
        for text in dev
    ]
    typed = [strip_accents(text) for text in dev]
    restored = _decode(restoration(tf.constant(typed)))
    assert restored == [reference_context_restore(text, table) for text in typed]
    # More of the ambiguous words come back as written than are taken from it.
    gained = lost = 0
    for original, typed_back, back in zip(dev, typed, restored):
        for word, bare, word_back in zip(*(WORD.findall(t) for t in (original, typed_back, back))):
            gained += word_back == word != bare
            lost += word_back != word == bare
    assert gained > 5 * max(lost, 1), (gained, lost)


def test_a_directory_without_the_context_table_restores_as_before(tmp_path):
    directory = tmp_path / "tokenizer"
    directory.mkdir()
    (directory / ACCENTS_FILE).write_text("telefono\tteléfono\n", encoding="utf-8")
    (directory / CASES_FILE).write_text("dios\tDios\n", encoding="utf-8")
    typed = tf.constant(["no se donde esta mi telefono", "dios"])
    before = Restoration.from_directory(directory)
    assert before.accent_contexts is None
    assert _decode(before(typed)) == ["No se donde esta mi teléfono", "Dios"]
    table = {("no", "se", ""): ("sé", fractions.Fraction(2, 3)), ("", "se", "$"): ("se", 1)}
    write_context_table(directory / ACCENT_CONTEXTS_FILE, table)
    assert read_context_table(directory / ACCENT_CONTEXTS_FILE) == table
    after = Restoration.from_directory(directory)
    assert _decode(after(typed)) == ["No sé donde esta mi teléfono", "Dios"]
    # Read with the accents only.
    assert Restoration.from_directory(directory, accents=False).accent_contexts is None


@pytest.mark.skipif(
    not os.path.exists(os.path.join(PRETRAINED_TOKENIZER, CASES_FILE)),
    reason="the bundle has no restoration tables",
)
def test_the_bundles_context_table_restores_in_a_saved_model_and_a_copy_without_it_does_not(
    tmp_path,
):
    from model.tokenizer import load_tokenizers

    restoring, _ = load_tokenizers(PRETRAINED_TOKENIZER)
    assert restoring.restoration.accent_contexts is not None
    copy = tmp_path / "tokenizer"
    shutil.copytree(PRETRAINED_TOKENIZER, copy)
    os.remove(copy / ACCENT_CONTEXTS_FILE)
    source, _ = load_tokenizers(copy)
    assert source.restoration.accent_contexts is None
    typed = tf.constant(["no se donde esta mi telefono", "No se donde está"])
    expected = source.tokenize(
        tf.constant(["no sé dónde está mi teléfono", "No se donde está"])
    ).to_list()
    assert restoring.tokenize(typed).to_list() == expected
    assert source.tokenize(typed).to_list() != expected
    assert_tokenizes_in_a_saved_model(restoring, typed, expected, tmp_path)
