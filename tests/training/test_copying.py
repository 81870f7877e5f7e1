"""Copy slots: names and numbers found on both sides, refilled in training and in the test sets."""

import random
import re

import numpy as np
import pytest
import tensorflow as tf

from training import copying
from training.copying import NAMES, NUMBERS, SLOT

# Verses of the corpus as built (Reina-Valera 1909 in modern spelling, World English Bible).
VERSES = [
    (
        "Y esperó aún otros siete días, y volvió a enviar la paloma fuera del arca.",
        "He waited yet another seven days; and again he sent the dove out of the ship.",
    ),
    (
        "Y tornáronse las aguas de sobre la tierra, yendo y volviendo: y decrecieron las aguas al "
        "cabo de ciento y cincuenta días.",
        "The waters continually receded from the earth. After the end of one hundred fifty days "
        "the waters receded.",
    ),
    (
        "Y amaba Israel a José más que a todos sus hijos, porque le había tenido en su vejez.",
        "Now Israel loved Joseph more than all his children, because he was the son of his old "
        "age.",
    ),
    (
        "No temas, Abram; yo soy tu escudo, y tu galardón sobremanera grande.",
        "Don’t be afraid, Abram. I am your shield, your exceedingly great reward.",
    ),
    (
        "He aquí, yo estoy contigo, y te guardaré por donde quiera que fueres.",
        "Behold, I am with you, and will keep you, wherever you go.",
    ),
    (
        "Y vivió Abram en la tierra de Canaán, y Lot habitó en las ciudades de la llanura.",
        "Abram lived in the land of Canaan, and Lot lived in the cities of the plain. He told "
        "Lot about Abram.",
    ),
    (
        "Y yo haré que queden en Israel siete mil; todas rodillas que no se encorvaron a Baal, y "
        "bocas todas que no lo besaron.",
        "Yet I reserved seven thousand in Israel, all the knees which have not bowed to Baal, "
        "and every mouth which has not kissed him.",
    ),
]
NAMES_OF_VERSES = copying.proper_names(VERSES)


def test_proper_names_are_shared_capitalized_words_never_written_in_lower_case():
    # "He" starts sentences on both sides but is "he" elsewhere; Joseph/José differ; Canaan is
    # "Canaán" in Spanish.
    assert NAMES_OF_VERSES == {"Israel", "Abram", "Lot", "Baal"}
    pairs = [("Hola, dijo Sara.", "Hola, said Sarah."), ("Dijo hola.", "He said hola.")]
    assert copying.proper_names(pairs) == set()


def test_templates_mark_the_shared_cardinal_or_the_first_shared_name_everywhere():
    templates = copying.copy_templates(VERSES, NAMES_OF_VERSES)
    assert templates[0] == copying.CopyTemplate(
        VERSES[0][0].replace("siete", SLOT), VERSES[0][1].replace("seven", SLOT), NUMBERS
    )
    # A compound number ("ciento y cincuenta", "one hundred fifty") is not one slot.
    assert templates[1] is None
    assert templates[2].kind == NAMES and templates[2].source.count(SLOT) == 1
    assert (
        templates[3].target
        == "Don’t be afraid, \x01. I am your shield, your exceedingly great reward."
    )
    assert templates[4] is None
    assert templates[5].source.count(SLOT) == 1 and templates[5].target.count(SLOT) == 2
    assert "Lot" in templates[5].source  # one name a pair: the first, Abram
    # "siete mil" is a compound too: the pair's slot is its first name.
    assert templates[6].kind == NAMES and "siete" in templates[6].source
    assert copying.copy_templates([("a\x01b", "a b")], set()) == [None]


def test_fill_slots_equals_python_replace():
    rng = random.Random(0)
    templates = [
        "".join(rng.choice(["ab", " ", "ñ", SLOT, "é."]) for _ in range(rng.randint(0, 8)))
        for _ in range(200)
    ]
    values = ["".join(rng.choice("xyZ09") for _ in range(rng.randint(1, 5))) for _ in templates]
    filled = copying.fill_slots(tf.constant(templates), tf.constant(values)).numpy()
    assert [text.decode() for text in filled] == [
        template.replace(SLOT, value) for template, value in zip(templates, values)
    ]


def test_graph_names_follow_the_grammar_of_the_generated_test_names():
    syllable = f"(?:{'|'.join(copying._ONSETS)})[{''.join(copying._VOWELS)}]"
    grammar = re.compile(f"(?:{syllable}){{2,3}}[{''.join(c for c in copying._CODAS if c)}]?")
    graph_names = [name.decode() for name in copying.fresh_names_graph(500, [3, 4]).numpy()]
    test_names = copying.unseen_names(set(), 500, seed=1)
    for name in graph_names + test_names:
        assert name[0].isupper() and grammar.fullmatch(name.lower()), name
    assert len(set(graph_names)) > 400
    # Both draw 2 and 3 syllables about equally often.
    three = [len(re.findall(syllable, name.lower())) == 3 for name in graph_names]
    assert 0.4 < np.mean(three) < 0.6


def test_unseen_names_avoid_the_corpus_and_are_reproducible():
    words = {"mazo", "bana"}
    names = copying.unseen_names(words, 300, seed=2)
    assert len(set(names)) == 300 and not {name.lower() for name in names} & words
    assert copying.unseen_names(words, 300, seed=2) == names


def test_fresh_numbers_are_digits_from_2_to_9999():
    numbers = [int(n) for n in copying.fresh_numbers_graph(2000, [5, 6]).numpy()]
    assert min(numbers) >= 2 and max(numbers) <= 9999 and len(set(numbers)) > 1500


@pytest.mark.parametrize("rate, figure_share", [(0.0, 0.0), (0.5, 0.0), (1.0, 0.0), (1.0, 1.0)])
def test_fill_copy_slots_puts_one_fresh_value_on_both_sides(rate, figure_share):
    sources, targets = zip(*VERSES)
    source_templates, target_templates, kinds = copying.template_tensors(list(VERSES))
    filled_sources, filled_targets = copying.fill_copy_slots(
        tf.constant(sources),
        tf.constant(targets),
        tf.constant(source_templates),
        tf.constant(target_templates),
        tf.constant(kinds),
        rate,
        tf.constant([7, 8], tf.int64),
        figure_share,
    )
    changed = 0
    for index, (source, target) in enumerate(zip(filled_sources.numpy(), filled_targets.numpy())):
        source, target = source.decode(), target.decode()
        if source == sources[index]:
            assert target == targets[index]
            continue
        changed += 1
        # The value that fills the source's slot fills the target's too.
        pattern = "(.+?)".join(map(re.escape, source_templates[index].split(SLOT)))
        value = re.fullmatch(pattern, source).group(1)
        assert source == source_templates[index].replace(SLOT, value)
        assert target == target_templates[index].replace(SLOT, value)
        figure = kinds[index] == copying.KIND_IDS[NUMBERS] or figure_share == 1.0
        assert value.isdigit() if figure else value.istitle()
    with_slot = sum(kind > 0 for kind in kinds)
    assert changed == {0.0: 0, 1.0: with_slot}.get(rate, changed)
    assert 0 <= changed <= with_slot


def test_copy_rate_sets_fill_each_slot_with_unseen_names_and_numbers():
    sets = copying.copy_rate_sets(VERSES, NAMES_OF_VERSES, fills=3, excluded_words={"Zuma"})
    assert len(sets[NUMBERS]) == 3 and len(sets[NAMES]) == 12
    corpus = copying.corpus_words(VERSES)
    for kind, items in sets.items():
        for source, value in items:
            assert SLOT not in source and re.search(rf"\b{value}\b", source)
            assert value.isdigit() if kind == NUMBERS else value.lower() not in corpus


def test_copy_rates_count_whole_word_copies():
    sets = {NAMES: [("Vino Zatepun.", "Zatepun"), ("Vino Kivo.", "Kivo")], NUMBERS: []}
    report = copying.copy_rates(sets, lambda texts: ["Zatepun came.", "Kivos came."])
    assert report[NAMES]["copied"] == 1 and report[NAMES]["rate"] == 0.5
    assert report[NAMES]["missed"] == [("Vino Kivo.", "Kivos came.")]
    assert report[NUMBERS] == {"sentences": 0, "copied": 0, "rate": 0.0, "missed": []}


def test_a_number_slot_is_found_either_way_round():
    """A reversed run's pairs (`training.corpus.load_run_pairs`) are English first: the same
    cardinal is a slot there too, and a side with two number words, or another number, is not."""
    forward = ("Y vivió siete años.", "And he lived seven years.")
    for source, target in (forward, forward[::-1]):
        (template,) = copying.copy_templates([(source, target)], set())
        assert template.kind == NUMBERS
        assert SLOT in template.source and SLOT in template.target
        assert not re.search(r"siete|seven", template.source + template.target)
    assert copying.copy_templates([("He lived seven years.", "Vivió ocho años.")], set()) == [None]
    assert copying.copy_templates(
        [("one hundred fifty years", "ciento cincuenta años")], set()
    ) == [None]
