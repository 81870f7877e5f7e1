"""training.corpus.apertium: Debian's Apertium (`make data-test` installs it) run on batches of
segments that stay aligned one to one, and its unknown-word marks."""

import pytest

from tests.apertium_fixtures import require_apertium
from training.corpus import apertium


@pytest.fixture(scope="module", autouse=True)
def installed():
    require_apertium()


@pytest.mark.parametrize(
    "text, marked",
    [
        ("imaginó un *seraphic presencia", True),
        ("#ser tarde", True),
        ("la @llave", True),
        ("¿*dogo?", True),
        ("Necesito un taxi para ir al aeropuerto.", False),
        ("correo: ana@example.com, 3*4 #1", False),
    ],
)
def test_unknown_marks_start_a_word(text, marked):
    assert apertium.has_unknown_marks(text) is marked


def test_a_batch_translates_each_segment_as_it_would_alone():
    """Words that Apertium's rules would join across lines ("supermarket" and "fever" make
    "fiebre del supermercado" when only a newline is between them) stay in their segment."""
    segments = ["dog", "to bark", "supermarket", "fever", "", "the dog barks all night", "key"]
    batch = apertium.translate(segments, apertium.ENGLISH_TO_SPANISH)
    alone = [apertium.translate([segment], apertium.ENGLISH_TO_SPANISH)[0] for segment in segments]
    assert batch == alone
    assert batch[2:5] == ["Supermercado", "Fiebre", ""]


def test_unknown_words_are_marked_unless_asked_not_to():
    text = ["The xqzvw barks."]
    assert apertium.has_unknown_marks(apertium.translate(text, apertium.ENGLISH_TO_SPANISH)[0])
    unmarked = apertium.translate(text, apertium.ENGLISH_TO_SPANISH, mark_unknown=False)[0]
    assert "xqzvw" in unmarked and not apertium.has_unknown_marks(unmarked)


def test_the_peer_translates_everyday_spanish():
    (english,) = apertium.translate(
        ["Necesito un taxi para ir al aeropuerto."], apertium.SPANISH_TO_ENGLISH
    )
    assert english == "I need a taxi to go to the airport."
    assert apertium.apertium_manifest()["version"]
