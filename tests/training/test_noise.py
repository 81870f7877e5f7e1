"""Perturbations of how people type (training/noise.py), and the noise of training sources."""

import math

import numpy as np
import pytest
import tensorflow as tf

from training.noise import (
    DEFAULT_NOISE_KINDS,
    PERTURBATIONS,
    parse_kinds,
    perturb_sources,
    perturbation,
)

# Verses of the corpus (RV1909) and what users type.
SOURCES = [
    "¿Dónde está mi hermano?",
    "Y dijo: «¿Quién eres?»",
    "¡Ay de mí! dijo él.",
    "Año y pingüino: ÑANDÚ Über;",
    "DIOS ES AMOR",
    "Y oró Jonás desde el vientre del pez á Jehová su Dios,",
    "En el principio creó Dios los cielos y la tierra; y fue a ver o a oír.",
    "Y fué Jesús de Nazareth á Bethlehem; JOSAPHAT",
]
EXPECTED = {
    "lowercase": [
        "¿dónde está mi hermano?",
        "y dijo: «¿quién eres?»",
        "¡ay de mí! dijo él.",
        "año y pingüino: ñandú über;",
        "dios es amor",
        "y oró jonás desde el vientre del pez á jehová su dios,",
        "en el principio creó dios los cielos y la tierra; y fue a ver o a oír.",
        "y fué jesús de nazareth á bethlehem; josaphat",
    ],
    "uppercase": [
        "¿DÓNDE ESTÁ MI HERMANO?",
        "Y DIJO: «¿QUIÉN ERES?»",
        "¡AY DE MÍ! DIJO ÉL.",
        "AÑO Y PINGÜINO: ÑANDÚ ÜBER;",
        "DIOS ES AMOR",
        "Y ORÓ JONÁS DESDE EL VIENTRE DEL PEZ Á JEHOVÁ SU DIOS,",
        "EN EL PRINCIPIO CREÓ DIOS LOS CIELOS Y LA TIERRA; Y FUE A VER O A OÍR.",
        "Y FUÉ JESÚS DE NAZARETH Á BETHLEHEM; JOSAPHAT",
    ],
    "strip_accents": [
        "¿Donde esta mi hermano?",
        "Y dijo: «¿Quien eres?»",
        "¡Ay de mi! dijo el.",
        "Año y pinguino: ÑANDU Uber;",
        "DIOS ES AMOR",
        "Y oro Jonas desde el vientre del pez a Jehova su Dios,",
        "En el principio creo Dios los cielos y la tierra; y fue a ver o a oir.",
        "Y fue Jesus de Nazareth a Bethlehem; JOSAPHAT",
    ],
    "strip_diacritics": [
        "¿Donde esta mi hermano?",
        "Y dijo: «¿Quien eres?»",
        "¡Ay de mi! dijo el.",
        "Ano y pinguino: NANDU Uber;",
        "DIOS ES AMOR",
        "Y oro Jonas desde el vientre del pez a Jehova su Dios,",
        "En el principio creo Dios los cielos y la tierra; y fue a ver o a oir.",
        "Y fue Jesus de Nazareth a Bethlehem; JOSAPHAT",
    ],
    "no_final_punct": [
        "Dónde está mi hermano",
        "Y dijo: «Quién eres",
        "¡Ay de mí! dijo él",
        "Año y pingüino: ÑANDÚ Über",
        "DIOS ES AMOR",
        "Y oró Jonás desde el vientre del pez á Jehová su Dios,",
        "En el principio creó Dios los cielos y la tierra; y fue a ver o a oír",
        "Y fué Jesús de Nazareth á Bethlehem; JOSAPHAT",
    ],
    # Only the modern forms go back to 1909's; the 1909 "á" of the sixth stays as it is.
    "old_spelling": [
        "¿Dónde está mi hermano?",
        "Y dijo: «¿Quién eres?»",
        "¡Ay de mí! dijo él.",
        "Año y pingüino: ÑANDÚ Über;",
        "DIOS ES AMOR",
        "Y oró Jonás desde el vientre del pez á Jehová su Dios,",
        "En el principio crió Dios los cielos y la tierra; y fué á ver ó á oír.",
        "Y fué Jesús de Nazareth á Bethlehem; JOSAPHAT",
    ],
    # Capitalized names with "th" or "ph" in today's spelling; words in capitals are not names.
    "modern_names": [*SOURCES[:-1], "Y fué Jesús de Nazaret á Belén; JOSAPHAT"],
}


def strings(tensor):
    return [text.decode("utf-8") for text in tensor.numpy()]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_perturbation_on_spanish_sentences(name):
    assert strings(PERTURBATIONS[name](tf.constant(SOURCES))) == EXPECTED[name]


def test_every_registered_perturbation_is_tested():
    assert set(PERTURBATIONS) == set(EXPECTED)


def test_compositions_apply_left_to_right_and_unknown_names_are_refused():
    composed = perturbation("strip_accents+lowercase+no_final_punct")
    assert strings(composed(tf.constant(SOURCES[:2]))) == [
        "donde esta mi hermano",
        "y dijo: «quien eres",
    ]
    with pytest.raises(ValueError, match="unknown perturbation 'lowercase\\+shout'; choose from"):
        perturbation("lowercase+shout")
    with pytest.raises(ValueError, match="no perturbation named"):
        parse_kinds(" , ")
    assert parse_kinds(",".join(DEFAULT_NOISE_KINDS)) == DEFAULT_NOISE_KINDS


# Every default kind changes this sentence, so a noised source is a changed one.
CHANGED_BY_EVERY_KIND = "¿Dónde está mi hermano?"


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_the_share_of_changed_sources_is_the_noise_rate(rate):
    """Over n sources the changed count is Binomial(n, rate): within 4 standard deviations; and
    each kind gets its share of the noised ones alike."""
    count = 4000
    sources = tf.constant([CHANGED_BY_EVERY_KIND] * count)
    noised, choices = perturb_sources(sources, rate, DEFAULT_NOISE_KINDS, seed=[7, 0])
    changed = np.array(strings(noised)) != CHANGED_BY_EVERY_KIND
    np.testing.assert_array_equal(changed, choices.numpy() >= 0)
    bound = 4 * math.sqrt(count * rate * (1 - rate))
    assert abs(changed.sum() - count * rate) < bound
    per_kind = np.bincount(choices.numpy()[changed], minlength=len(DEFAULT_NOISE_KINDS))
    expected = changed.sum() / len(DEFAULT_NOISE_KINDS)
    assert np.all(np.abs(per_kind - expected) < 4 * math.sqrt(expected))
    for choice, text in zip(choices.numpy()[changed][:50], np.array(strings(noised))[changed]):
        kind = perturbation(DEFAULT_NOISE_KINDS[choice])
        assert strings(kind(tf.constant([CHANGED_BY_EVERY_KIND]))) == [text]


def test_noise_is_reproducible_from_its_seed():
    sources = tf.constant(SOURCES * 50)
    first = strings(perturb_sources(sources, 0.5, DEFAULT_NOISE_KINDS, seed=[3, 11])[0])
    again = strings(perturb_sources(sources, 0.5, DEFAULT_NOISE_KINDS, seed=[3, 11])[0])
    other = strings(perturb_sources(sources, 0.5, DEFAULT_NOISE_KINDS, seed=[3, 12])[0])
    assert first == again != other
    assert strings(perturb_sources(sources, 0.0, DEFAULT_NOISE_KINDS, seed=[3, 11])[0]) == (
        SOURCES * 50
    )
