"""training/corpus/alignment.py: verses paired, misaligned chapters found and realigned, the
length-ratio model."""

import pytest

from tests.corpus_fixtures import (
    COMMA_JOHANNEUM,
    FULL_CORPUS_LENGTH_RATIO,
    FULL_CORPUS_LENGTH_SCALE,
    JONAH,
    ORDINARY_PAIR,
)
from training.corpus import alignment, bible

# ------------------------------------------------------ Bible: pairing and alignment


def _jonah_modules():
    source = {("Jonah", c, v): es for (c, v), (es, _) in JONAH.items()}
    target = {("Jonah", c, v): en for (c, v), (_, en) in JONAH.items()}
    return source, target


def test_pair_verses_drops_empty_slots_and_ignores_books_one_side_lacks():
    source, target = _jonah_modules()
    target[("Tob", 1, 1)] = "Tobit text, only in the WEB."
    pairs, drops = bible.pair_verses(source, target)
    assert ("Jonah", 1, 17) not in pairs  # RV1909 slot is empty
    assert len(pairs) == len(JONAH) - 1
    assert drops["empty_source"] == 1 and drops["empty_target"] == 0
    assert not any(ref[0] == "Tob" for ref in pairs)


def test_detect_misaligned_chapters_finds_the_shifted_jonah_2_only():
    source, target = _jonah_modules()
    model = alignment.LengthRatioModel(FULL_CORPUS_LENGTH_RATIO, FULL_CORPUS_LENGTH_SCALE)
    flagged = alignment.detect_misaligned_chapters(source, target, model)

    assert set(flagged) == {("Jonah", 2)}
    jonah2 = flagged[("Jonah", 2)]
    assert jonah2.gain > 7
    assert all(jonah2.covers(verse) for verse in range(1, 10))
    # The realignment pairs the RV1909's 2:(i+1) with the WEB's 2:i.
    assert ((3,), (2,)) in jonah2.deviations and ((4,), (3,)) in jonah2.deviations


def test_align_chapter_recovers_a_one_verse_shift_and_a_merge():
    model = alignment.LengthRatioModel(FULL_CORPUS_LENGTH_RATIO, FULL_CORPUS_LENGTH_SCALE)
    english = [(v, JONAH[(3, v)][1]) for v in range(1, 11)]
    spanish = [(v, JONAH[(3, v)][0]) for v in range(1, 11)]
    beads, _ = alignment.align_chapter(spanish, english, model)
    assert beads == alignment.identity_beads(spanish, english)

    # The Spanish merges verses 5 and 6 into 5 and leaves slot 6 empty.
    merged = spanish[:4] + [(5, spanish[4][1] + " " + spanish[5][1])] + spanish[6:]
    beads, _ = alignment.align_chapter(merged, english, model)
    assert ((5,), (5, 6)) in beads
    assert [bead for bead in beads if bead not in alignment.identity_beads(merged, english)] == [
        ((5,), (5, 6))
    ]


def test_length_ratio_model_fit_and_outliers():
    source, target = _jonah_modules()
    pairs, _ = bible.pair_verses(source, target)
    aligned = [pair for ref, pair in pairs.items() if ref[1] != 2]
    model = alignment.LengthRatioModel.fit(aligned)
    expected_ratio = sum(len(t) for _, t in aligned) / sum(len(s) for s, _ in aligned)
    assert model.ratio == pytest.approx(expected_ratio)
    assert model.scale > 0

    full = alignment.LengthRatioModel(FULL_CORPUS_LENGTH_RATIO, FULL_CORPUS_LENGTH_SCALE)
    candidates = {("1John", 5, 7): COMMA_JOHANNEUM, ("1John", 5, 6): ORDINARY_PAIR}
    assert alignment.length_ratio_outliers(candidates, full) == {("1John", 5, 7)}
