"""Length-based verse alignment after Gale & Church (1993), and the mismatches it finds.

`LengthRatioModel` says how long a correct translation of a text is; `align_chapter`
finds the best monotone alignment of a chapter's verses by length alone;
`detect_misaligned_chapters` compares it with pairing by verse number, and
`length_ratio_outliers` flags single pairs whose lengths disagree. Nothing here
knows a particular Bible: verses are `{(book, chapter, verse): text}` dicts.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence

from tqdm import tqdm

VerseRef = tuple[str, int, int]  # (OSIS book id, chapter, verse), e.g. ("Gen", 1, 1)
ChapterRef = tuple[str, int]
VerseTexts = dict[VerseRef, str]


@dataclasses.dataclass(frozen=True)
class LengthRatioModel:
    """How long a correct translation is, after Gale & Church (1993).

    A target verse is about `ratio` times as long as its source (in
    characters), with a spread that grows with the square root of the length:
    `z = (target - ratio * source) / sqrt(scale**2 * mean_length)` is roughly
    standard normal for correct pairs. Short verses thus get more slack ("No
    matarás." vs "“You shall not murder.") than long ones.

    `ratio` is fitted as total target / total source length and `scale`
    robustly (1.4826 * median absolute deviation), so the few misaligned
    verses do not widen it.
    """

    ratio: float
    scale: float

    @classmethod
    def fit(cls, pairs: Iterable[tuple[str, str]]) -> LengthRatioModel:
        lengths = [(len(source), len(target)) for source, target in pairs]
        ratio = sum(target for _, target in lengths) / sum(source for source, _ in lengths)
        deviations = [cls._deviation(source, target, ratio) for source, target in lengths]
        center = statistics.median(deviations)
        return cls(ratio, 1.4826 * statistics.median(abs(d - center) for d in deviations))

    @staticmethod
    def _deviation(source_length: int, target_length: int, ratio: float) -> float:
        mean_length = (source_length + target_length / ratio) / 2
        return (target_length - ratio * source_length) / math.sqrt(mean_length)

    def z(self, source_length: int, target_length: int) -> float:
        """Standardized length mismatch of one candidate pairing (character counts)."""
        return self._deviation(source_length, target_length, self.ratio) / self.scale


# A bead pairs consecutive source verses with consecutive target verses:
# ((source verse numbers), (target verse numbers)).
Bead = tuple[tuple[int, ...], tuple[int, ...]]
# Negative log prior of each bead shape, from Gale & Church (1993), "A program
# for aligning sentences in bilingual corpora": 1-1 89%, 1-0 and 0-1 0.99%
# each, 2-1 and 1-2 8.9% each.
_BEAD_PRIOR_COST = {
    (1, 1): -math.log(0.89),
    (1, 0): -math.log(0.0099),
    (0, 1): -math.log(0.0099),
    (2, 1): -math.log(0.089),
    (1, 2): -math.log(0.089),
}


def _bead_cost(sources: Sequence[str], targets: Sequence[str], model: LengthRatioModel) -> float:
    """Negative log likelihood (nats) of one bead: shape prior + length-ratio fit."""
    cost = _BEAD_PRIOR_COST[(len(sources), len(targets))]
    if sources and targets:
        source_length = sum(map(len, sources)) + len(sources) - 1  # joined with spaces
        target_length = sum(map(len, targets)) + len(targets) - 1
        cost += model.z(source_length, target_length) ** 2 / 2
    return cost


def align_chapter(
    source: Sequence[tuple[int, str]],
    target: Sequence[tuple[int, str]],
    model: LengthRatioModel,
    band: int = 12,
) -> tuple[list[Bead], float]:
    """Best monotone alignment of a chapter's verses by length (Gale-Church style).

    Dynamic programming over 1-1, 1-0, 0-1, 2-1 and 1-2 beads, restricted to a
    diagonal band (verse numberings never drift further apart than `band`).

    Args:
      source, target: the chapter's non-empty verses as (verse number, text),
        in order.
      model: the length-ratio model.

    Returns:
      `(beads, cost)`: the best alignment and its cost in nats.
    """
    n, m = len(source), len(target)
    cost = {(0, 0): 0.0}
    back: dict[tuple[int, int], tuple[int, int]] = {}
    for i in range(n + 1):
        for j in range(max(0, i - band), min(m, i + band) + 1):
            if i == j == 0:
                continue
            best, best_step = math.inf, None
            for di, dj in _BEAD_PRIOR_COST:
                previous = cost.get((i - di, j - dj))
                if previous is None:
                    continue
                candidate = previous + _bead_cost(
                    [text for _, text in source[i - di : i]],
                    [text for _, text in target[j - dj : j]],
                    model,
                )
                if candidate < best:
                    best, best_step = candidate, (di, dj)
            if best_step is not None:
                cost[(i, j)], back[(i, j)] = best, best_step
    if (n, m) not in cost:  # counts differ by more than the band
        return [], math.inf
    beads: list[Bead] = []
    i, j = n, m
    while i or j:
        di, dj = back[(i, j)]
        beads.append(
            (tuple(v for v, _ in source[i - di : i]), tuple(v for v, _ in target[j - dj : j]))
        )
        i, j = i - di, j - dj
    return beads[::-1], cost[(n, m)]


def identity_beads(
    source: Sequence[tuple[int, str]], target: Sequence[tuple[int, str]]
) -> list[Bead]:
    """The alignment the modules claim: verse v with verse v, unmatched verses alone."""
    source_verses = {verse for verse, _ in source}
    target_verses = {verse for verse, _ in target}
    return [
        ((verse,) if verse in source_verses else (), (verse,) if verse in target_verses else ())
        for verse in sorted(source_verses | target_verses)
    ]


def alignment_cost(
    beads: Iterable[Bead],
    source: Mapping[int, str],
    target: Mapping[int, str],
    model: LengthRatioModel,
) -> float:
    """Cost in nats of an alignment (same scale as `align_chapter`)."""
    return sum(
        _bead_cost([source[v] for v in sources], [target[v] for v in targets], model)
        for sources, targets in beads
    )


@dataclasses.dataclass(frozen=True)
class Misalignment:
    """Stretches of a chapter where the two texts number their verses differently.

    Attributes:
      chapter: (book, chapter).
      spans: verse-number ranges `(first, last)` (both included) to drop, one
        per run of consecutive beads that differ from the claimed alignment.
      gain: nats by which the best alignment beats pairing by verse number;
        the lengths are e**gain times likelier under the realignment.
      deviations: those differing beads, for the build log.
    """

    chapter: ChapterRef
    spans: tuple[tuple[int, int], ...]
    gain: float
    deviations: tuple[Bead, ...]

    def covers(self, verse: int) -> bool:
        return any(first <= verse <= last for first, last in self.spans)


def _deviating_spans(beads: Sequence[Bead], claimed: Sequence[Bead]) -> list[tuple[int, int]]:
    """Verse ranges covered by runs of consecutive beads not in `claimed`."""
    claimed_set = set(claimed)
    spans: list[tuple[int, int]] = []
    run: list[int] = []
    for bead in list(beads) + [None]:  # a sentinel closes the last run
        if bead is not None and bead not in claimed_set:
            run.extend(bead[0] + bead[1])
        elif run:
            spans.append((min(run), max(run)))
            run = []
    return spans


def _verses_by_chapter(
    verses: VerseTexts, books: set[str]
) -> dict[ChapterRef, list[tuple[int, str]]]:
    chapters: dict[ChapterRef, list[tuple[int, str]]] = collections.defaultdict(list)
    for (book, chapter, verse), text in verses.items():
        if text and book in books:
            chapters[(book, chapter)].append((verse, text))
    return chapters


def detect_misaligned_chapters(
    source: VerseTexts,
    target: VerseTexts,
    model: LengthRatioModel,
    min_gain: float = 7.0,
) -> dict[ChapterRef, Misalignment]:
    """Finds chapters whose Spanish follows a different verse numbering.

    The RV1909 module claims KJV versification, but in some chapters its text
    is numbered like the Hebrew Bible: its Jonah 2:1 is the WEB's Jonah 1:17,
    its Numbers 13:1 the WEB's 12:16, its Job 39 starts with the WEB's 38:39.
    Elsewhere it folds two verses into one and leaves a slot empty (Acts
    19:40-41). Pairing by verse number there gives wrong translations.

    Each chapter is aligned by verse length (`align_chapter`) and compared with
    pairing by verse number. Short verses and paraphrase make single verses
    noisy, so a chapter is flagged only when the realignment is clearly better
    (`min_gain` nats); then the verse ranges where it deviates are reported.

    Args:
      source, target: cleaned verse texts of the two modules.
      model: length-ratio model fitted on the verse-number pairs.
      min_gain: evidence needed to flag a chapter, in nats. On the RV1909/WEB
        data every chapter above 7 (1 Sam 10:25-26 at 7.8 and up) was a real
        boundary difference, while paraphrase alone reached 5.6 (1 Cor 13:4-8).

    Returns:
      `{(book, chapter): Misalignment}` for the flagged chapters.
    """
    books = {book for book, _, _ in source} & {book for book, _, _ in target}
    source_chapters = _verses_by_chapter(source, books)
    target_chapters = _verses_by_chapter(target, books)
    flagged = {}
    chapters = sorted(set(source_chapters) & set(target_chapters), key=list(source_chapters).index)
    for chapter in tqdm(chapters, desc="align chapters", unit="chapter", leave=False):
        source_verses, target_verses = source_chapters[chapter], target_chapters[chapter]
        beads, best_cost = align_chapter(source_verses, target_verses, model)
        claimed = identity_beads(source_verses, target_verses)
        gain = alignment_cost(claimed, dict(source_verses), dict(target_verses), model) - best_cost
        if gain < min_gain:
            continue
        deviations = tuple(bead for bead in beads if bead not in claimed)
        flagged[chapter] = Misalignment(
            chapter, tuple(_deviating_spans(beads, claimed)), gain, deviations
        )
    return flagged


def length_ratio_outliers(
    pairs: Mapping[VerseRef, tuple[str, str]], model: LengthRatioModel, max_abs_z: float = 4.0
) -> set[VerseRef]:
    """Verse pairs whose lengths disagree far beyond translation noise.

    Catches single-verse mismatches that do not shift a chapter: text that one
    tradition has and the other lacks (the Comma Johanneum in 1 John 5:7, the
    doxology the WEB moves to Rom 14:23).

    Returns:
      The references with |z| of the length ratio above `max_abs_z`.
    """
    return {
        ref
        for ref, (source, target) in pairs.items()
        if abs(model.z(len(source), len(target))) > max_abs_z
    }
