"""training.made_up_words: the made-up-word rate on hand-made translations, with Debian's real
English word lists (`make data-test` downloads them into the package cache)."""

import pytest

from training.made_up_words import WORDLIST_CACHE_DIR, MadeUpWords, english_words, words


@pytest.fixture(scope="module")
def checker():
    if not (WORDLIST_CACHE_DIR / "unpacked" / "wamerican" / ".unpacked").is_file():
        pytest.fail(f"the English word lists are not in {WORDLIST_CACHE_DIR}: run `make data-test`")
    # "Jehoshaphat" stands for a name the training targets teach.
    return MadeUpWords.for_training_targets(["And Jehoshaphat slept with his fathers."])


def test_the_word_lists_are_debians_american_and_british_english():
    known = english_words()
    assert len(known) > 100_000
    # American and British spellings, inflections, possessives, contractions, folded.
    assert {"color", "colour", "barks", "dog's", "don't", "supermarket", "taxi"} <= known
    assert not {"supermercated", "censumber", "enchufufe"} & known


def test_words_are_runs_of_letters_with_inner_apostrophes():
    assert words("I don't need 2 taxis—it's 7:30, Señor Ruiz’s car.") == [
        "I",
        "don't",
        "need",
        "taxis",
        "it's",
        "Señor",
        "Ruiz’s",
        "car",
    ]


@pytest.mark.parametrize(
    "translation, source, made_up",
    [
        # Outputs of the shipped bundle on everyday sentences.
        (
            "What time closes the supermercated over?",
            "¿A qué hora cierra el supermercado?",
            ["supermercated"],
        ),
        ("Let's censumber this night.", "Vamos a cenar pescado esta noche.", ["censumber"]),
        # A wrong word is not a made-up one: "tax", "dead", "fig" are English.
        ("I need a tax to go to the dead.", "Necesito un taxi para ir al aeropuerto.", []),
        ("My son has a fig and sleeping him.", "Mi hijo tiene fiebre y le duele la cabeza.", []),
        # Copied from the source (case and accents aside) is not made up.
        ("Hoy makes a sun and a very heat.", "Hoy hace sol y mucho calor.", []),
        ("We went to Cancun with Begoña.", "Fuimos a Cancún con Begoña.", []),
        # A word of the training targets is English here.
        ("Jehoshaphat's son reigned.", "Reinó el hijo de Josafat.", []),
        # Possessives, contractions and British spellings; the same invention twice counts twice.
        ("The neighbour's dog doesn't bark.", "El perro del vecino no ladra.", []),
        (
            "The enchufufe and the enchufufe.",
            "El enchufe y el enchufe.",
            ["enchufufe", "enchufufe"],
        ),
    ],
)
def test_made_up_words_are_neither_english_nor_copied(checker, translation, source, made_up):
    assert checker.made_up(translation, source) == made_up


def test_the_report_rates_made_up_words_over_every_output_word(checker):
    translations = ["What time closes the supermercated over?", "I need a taxi.", "2 3"]
    sources = ["¿A qué hora cierra el supermercado?", "Necesito un taxi.", "2 3"]
    report = checker.report(translations, sources)
    # 6 + 4 + 0 words, one made up.
    assert report == {
        "made_up_rate": 0.1,
        "made_up_words": 1,
        "output_words": 10,
        "made_up_examples": {"supermercated": 1},
    }
    assert checker.report([], [])["made_up_rate"] == 0.0
    with pytest.raises(ValueError):
        checker.report(["one"], [])


def test_a_report_without_word_lists_holds_no_rate_and_says_why(checker):
    """Where the word lists cannot be had (offline, no apt) an evaluation still reports, with
    no rate and the reason, and its tables print n/a."""
    from training.evaluate import made_up_cell, made_up_report

    report = made_up_report((None, "not measured: no apt"), ["I need a taxi."], ["Necesito."])
    assert (
        report["made_up_rate"] is None and report["made_up_known_words"] == "not measured: no apt"
    )
    assert made_up_cell(report) == "n/a"
    measured = made_up_report((checker, "lists"), ["The supermercated."], ["El súper."])
    assert made_up_cell(measured) == "50.0% (1)" and measured["made_up_known_words"] == "lists"


def test_a_reversed_runs_spanish_is_counted_against_spanish_words_and_its_targets(tmp_path):
    """A reversed run translates into Spanish (`training.evaluate.made_up_words_for`): Debian's
    Spanish word list and its training targets, the corpus's Spanish side, are its known words,
    and English words are made up there; a forward run counts the other way round."""
    from training.corpus.tsv import SPLITS, write_tsv
    from training.evaluate import made_up_words_for

    if not (WORDLIST_CACHE_DIR / "unpacked" / "wspanish" / ".unpacked").is_file():
        pytest.fail(f"the Spanish word list is not in {WORDLIST_CACHE_DIR}: run `make data-test`")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split in SPLITS:
        write_tsv(
            corpus / f"{split}.tsv", [("El gato zorbolino duerme.", "The zorbolin cat sleeps.")]
        )
    spanish, known = made_up_words_for(str(corpus), reverse=True)
    assert known == "Spanish word list (wspanish), training targets of corpus"
    assert spanish.made_up("El gato zorbolino duerme en la casa.", "The cat.") == []
    assert {"zorbolin", "sleeps"} <= set(spanish.made_up("The zorbolin cat sleeps.", ""))
    english, known = made_up_words_for(str(corpus))
    assert known.startswith("English word lists (wamerican, wbritish)")
    assert english.made_up("The zorbolin cat sleeps in the house.", "") == []
    assert {"zorbolino", "duerme"} <= set(english.made_up("El gato zorbolino duerme.", ""))
