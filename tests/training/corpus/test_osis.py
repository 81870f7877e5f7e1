"""training/corpus/osis.py: the OSIS markup stripped, the casing table, the colophons cut."""

import pytest

from training.corpus.osis import (
    build_casing_table,
    fix_caps_opening,
    strip_markup,
    strip_subscription,
)

# ------------------------------------------------------------ Bible: markup cleaning


def test_strip_markup_removes_strongs_numbers_and_notes_without_gluing_words():
    osis = (
        '<w lemma="strong:H0430">In</w> <w lemma="strong:H7225">beginning</w>, '
        '<w lemma="strong:H0430">God</w><note placement="foot"><reference type="annotateRef">1:1 '
        "</reference>The Hebrew word rendered “God” is “אֱלֹהִ֑ים” (Elohim).</note>"
        '<w lemma="strong:H1254">created</w> <w lemma="strong:H0776">earth</w>. <div eID="gen25" type="x-p"/>'
    )
    assert strip_markup(osis) == "In beginning, God created earth."


def test_strip_markup_puts_no_space_before_punctuation_after_a_note():
    osis = (
        'two assaria coins</q> <note placement="foot"><reference type="annotateRef">12:6 </reference>'
        'An assarion was a small copper coin.</note> <q marker="" who="Jesus">? '
        '<w lemma="strong:G3756">Not</w> one'
    )
    assert strip_markup(osis) == "two assaria coins? Not one"


def test_strip_markup_separates_a_quote_closed_against_the_next_word():
    osis = '<w lemma="strong:G1343">righteousness</w>.”</q><w lemma="strong:G5119">Then</w> he allowed him.'
    assert strip_markup(osis) == "righteousness.” Then he allowed him."


def test_strip_markup_spaces_added_words_but_joins_added_enclitics():
    osis = (
        '<w lemma="strong:H8033">hay allí</w><transChange type="added">también</transChange>'
        '<w lemma="strong:H0916">bdelio</w>: <w lemma="x">sáca</w><transChange type="added">lo</transChange> '
        '<w lemma="x">y Josué</w><transChange type="added">los</transChange> '
        '<w lemma="x">no quiso beber</w><transChange type="added">lo</transChange>. '
        'preguntándo<transChange type="added">le</transChange>'
    )
    assert (
        strip_markup(osis)
        == "hay allí también bdelio: sácalo y Josué los no quiso beberlo. preguntándole"
    )


def test_strip_markup_keeps_psalm_titles_and_drops_other_headings():
    osis = (
        '<div type="x-milestone" subType="x-preverse" sID="pv5154"/><title canonical="true" type="psalm">'
        'A Psalm by David.</title> <lg sID="gen8524"/> <l level="1" sID="gen8525"/>'
        '<w lemma="strong:H3068">Yahweh</w> is my shepherd;<l eID="gen8525" level="1"/> '
        '<title type="section">Not part of the verse</title><speaker>Beloved</speaker> '
        '<l level="2" sID="gen8526"/>I shall lack nothing. <l eID="gen8526" level="2"/>'
    )
    assert strip_markup(osis) == "A Psalm by David. Yahweh is my shepherd; I shall lack nothing."


def test_strip_markup_cuts_the_glossary_after_the_end_of_revelation():
    osis = (
        'The grace of the <w lemma="strong:G2962">Lord</w> be with all the saints. Amen.  <chapter eID="Rev.22"/>'
        '<div eID="gen35836" type="x-p"/> <div canonical="true" eID="gen35575" osisID="Rev" type="book"/> '
        '<div sID="gen35837" type="glossary"/> <title level="1" type="main">World English Bible Glossary</title> '
        '<list> <item><seg type="keyword">Abaddon</seg> Abaddon is Hebrew for destruction.</item></list>'
    )
    assert strip_markup(osis) == "The grace of the Lord be with all the saints. Amen."


def test_strip_markup_removes_bare_strongs_tags_and_unescapes_entities():
    assert strip_markup("Jesu<G2424>cristo &amp; <H7225>Pedro") == "Jesucristo & Pedro"


CASING = build_casing_table(
    [
        "Y dijo Jehová á Moisés que fueron a ti y a Dios.",
        "Porque Jehová es bueno, y fueron acabados; oh Dios, a ti clamo.",
        "Amén. Y fueron todos con Jehová.",
    ]
)


def test_build_casing_table_prefers_running_text_casing():
    assert CASING["jehová"] == "Jehová"
    assert CASING["fueron"] == "fueron"
    assert CASING["dios"] == "Dios"
    assert "amén" not in CASING  # only ever seen at a sentence start


@pytest.mark.parametrize(
    "text, expected",
    [
        ("EN el principio crió Dios los cielos.", "En el principio crió Dios los cielos."),
        ("Y FUERON acabados los cielos.", "Y fueron acabados los cielos."),
        ("Salmo de David. JEHOVÁ es mi pastor.", "Salmo de David. Jehová es mi pastor."),
        (
            "Salmo de David. A TI, oh Jehová, levantaré mi alma.",
            "Salmo de David. A ti, oh Jehová, levantaré mi alma.",
        ),
        ("¡OH Jehová, cuánto!", "¡Oh Jehová, cuánto!"),
        ("Entonces dijo: AMARTE he, oh Jehová.", "Entonces dijo: Amarte he, oh Jehová."),
        ("ALEPH. BIENAVENTURADOS los perfectos.", "ALEPH. Bienaventurados los perfectos."),
        # Capitals inside a sentence are deliberate and stay.
        (
            "Escribe al ángel de la iglesia en SARDIS: El que tiene.",
            "Escribe al ángel de la iglesia en SARDIS: El que tiene.",
        ),
        ("Y respondió Dios á Moisés: Yo soy.", "Y respondió Dios á Moisés: Yo soy."),
    ],
)
def test_fix_caps_opening(text, expected):
    assert fix_caps_opening(text, CASING) == expected


def test_strip_subscription_cuts_the_colophon_only():
    verse = "La gracia sea con todos vosotros. Amén. Fué escrita á los Hebreos desde Italia con Timoteo."
    assert strip_subscription(verse) == "La gracia sea con todos vosotros. Amén."
    plain = "Hijitos, guardaos de los ídolos. Amén."
    assert strip_subscription(plain) == plain
