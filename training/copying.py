"""Names and numbers the model has never seen: training substitutions and the copy-rate test.

A name or a number that a translation must carry over unchanged is a *copy slot*. A pair has one
when the same proper name is written identically on both sides ("Israel" … "Israel"), or when
each side holds exactly one cardinal and it is the same number ("siete días" … "seven days", or
"seven days" … "siete días" in a reversed run's pairs).
`copy_templates` finds the slot of each pair and marks it with `SLOT` on both sides, once, in
Python; the rest works on those templates:

- Training (`fill_copy_slots`, in the tf.data pipeline): a share of the pairs with a slot get it
  filled, on both sides, with a fresh name (`fresh_names_graph`: syllables drawn at random) or a
  fresh number (2 to 9999 in digits), drawn anew each epoch; a share of the name slots can get a
  figure too. The Bible writes numbers in words and
  holds no digit at all, and its names are the Bible's: without this a model never learns that
  an unknown name or a figure is copied.
- Evaluation (`copy_rate_sets`, `copy_rates`, `python -m training.copying`): the test split's
  pairs with a slot, each filled with a name from `unseen_names` (generated, and checked to occur
  nowhere in the corpus) or a number, and the share of translations that contain it (issue #23:
  names ≥ 90%, numbers ≥ 95%).
"""

import dataclasses
import random
import re

import tensorflow as tf

from model.placeholders import replace_all

# Marks a copy slot in a template: a control character text does not hold (a pair that holds it
# gets no slot).
SLOT = "\x01"
NAMES, NUMBERS = "names", "numbers"
KINDS = (NAMES, NUMBERS)

# Cardinals that are one word on both sides, by value. "uno"/"one" and "cien"/"hundred" are left
# out: they double as articles and pronouns, and "cien" is "a hundred" or "one hundred".
_CARDINALS = {
    2: ("dos", "two"),
    3: ("tres", "three"),
    4: ("cuatro", "four"),
    5: ("cinco", "five"),
    6: ("seis", "six"),
    7: ("siete", "seven"),
    8: ("ocho", "eight"),
    9: ("nueve", "nine"),
    10: ("diez", "ten"),
    11: ("once", "eleven"),
    12: ("doce", "twelve"),
    20: ("veinte", "twenty"),
    30: ("treinta", "thirty"),
    40: ("cuarenta", "forty"),
    50: ("cincuenta", "fifty"),
    60: ("sesenta", "sixty"),
    70: ("setenta", "seventy"),
    80: ("ochenta", "eighty"),
    90: ("noventa", "ninety"),
}
# Any word that is (part of) a number: a side with one of these besides its cardinal is a
# compound ("ciento y cincuenta", "one hundred fifty") and has no slot.
_SPANISH_NUMBER = re.compile(
    r"\b(?:uno|una|dos|tres|cuatro|cinco|seis|siete|ocho|nueve|diez|once|doce|trece|catorce|"
    r"quince|dieci\w+|veinte|veinti\w+|treinta|cuarenta|cincuenta|sesenta|setenta|ochenta|"
    r"noventa|cien|ciento|cientos|\w+cientos|\w+cientas|mil|miles|millares|millón|millones)\b",
    re.IGNORECASE,
)
_ENGLISH_NUMBER = re.compile(
    r"\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|\w+teen|twenty|"
    r"thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|hundreds|thousand|thousands|"
    r"million|millions)\b",
    re.IGNORECASE,
)
_CAPITALIZED = re.compile(r"\b[A-Z][a-z]{2,}\b")

# Fresh names are syllables of these, so that they read as names and split into known pieces.
_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "tr")
_VOWELS = ("a", "e", "i", "o", "u")
_CODAS = ("", "", "", "n", "r", "s", "l")
_MAX_NUMBER = 9999


def proper_names(pairs):
    """Words that are names in the corpus: capitalized, at least 3 letters, written the same on
    both sides of some pair, and never written in lower case on the target side (so "He" or "No",
    which start sentences in both languages, are not names)."""
    lower = set()
    shared = set()
    for source, target in pairs:
        lower.update(word for word in re.findall(r"\b[a-z]+\b", target))
        shared.update(set(_CAPITALIZED.findall(source)) & set(_CAPITALIZED.findall(target)))
    return {name for name in shared if name.lower() not in lower}


def _number_slot(source, target):
    """`(source word, target word)`: the one number word of each side, when they are the same
    cardinal, Spanish on one side and English on the other, either way round (a reversed run's
    pairs, `training.corpus.load_run_pairs`, are English first); else None."""
    for source_numbers, target_numbers, spanish_first in (
        (_SPANISH_NUMBER, _ENGLISH_NUMBER, True),
        (_ENGLISH_NUMBER, _SPANISH_NUMBER, False),
    ):
        in_source, in_target = source_numbers.findall(source), target_numbers.findall(target)
        if len(in_source) != 1 or len(in_target) != 1:
            continue
        words = (in_source[0].lower(), in_target[0].lower())
        if (words if spanish_first else words[::-1]) in _CARDINALS.values():
            return in_source[0], in_target[0]
    return None


def _mark(text, word):
    return re.sub(rf"\b{re.escape(word)}\b", SLOT, text)


@dataclasses.dataclass(frozen=True)
class CopyTemplate:
    """A pair with its copy slot marked (`SLOT`) on both sides; `kind` is `NAMES` or `NUMBERS`."""

    source: str
    target: str
    kind: str


def copy_templates(pairs, names):
    """The copy slot of each pair, or None: its number if it has one, else its first name of
    `names` (`proper_names`) on both sides. Every occurrence of the word is marked."""
    templates = []
    for source, target in pairs:
        if SLOT in source or SLOT in target:
            templates.append(None)
            continue
        number = _number_slot(source, target)
        if number is not None:
            templates.append(
                CopyTemplate(_mark(source, number[0]), _mark(target, number[1]), NUMBERS)
            )
            continue
        shared = [word for word in _CAPITALIZED.findall(source) if word in names]
        shared = [word for word in shared if re.search(rf"\b{word}\b", target)]
        templates.append(
            CopyTemplate(_mark(source, shared[0]), _mark(target, shared[0]), NAMES)
            if shared
            else None
        )
    return templates


def unseen_names(corpus_words, count, seed=0):
    """`count` distinct generated names (capitalized) that are not words of the corpus.

    Args:
        corpus_words: set of lowercased words the corpus holds (both sides).
    """
    rng = random.Random(seed)
    names = []
    while len(names) < count:
        syllables = rng.choice((2, 3))
        name = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(syllables))
        name = (name + rng.choice(_CODAS)).capitalize()
        if name.lower() not in corpus_words and name not in names:
            names.append(name)
    return names


def fresh_names_graph(size, seed):
    """`[size]` tf.string names built as `unseen_names` builds them (2 or 3 onset-vowel syllables
    and a coda, capitalized), drawn with stateless ops from `seed` (int `[2]`)."""
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=8)

    def pick(table, index):
        draw = tf.random.stateless_uniform(
            [size], seed=seeds[index], minval=0, maxval=len(table), dtype=tf.int32
        )
        return tf.gather(tf.constant(table), draw)

    syllables = [
        tf.strings.join([pick(_ONSETS, 2 * i), pick(_VOWELS, 2 * i + 1)]) for i in range(3)
    ]
    third = tf.random.stateless_uniform([size], seed=seeds[6]) < 0.5
    body = tf.strings.join(
        [syllables[0], syllables[1], tf.where(third, syllables[2], ""), pick(_CODAS, 7)]
    )
    # Every piece is ASCII: byte positions are letter positions.
    first = tf.strings.upper(
        tf.strings.substr(body, tf.zeros([size], tf.int32), tf.ones([size], tf.int32))
    )
    rest = tf.strings.substr(body, tf.ones([size], tf.int32), tf.strings.length(body) - 1)
    return tf.strings.join([first, rest])


def fresh_numbers_graph(size, seed):
    """`[size]` tf.string numbers from 2 to `_MAX_NUMBER` in digits (stateless, from `seed`)."""
    digits = tf.random.stateless_uniform(
        [size], seed=tf.cast(seed, tf.int64), minval=2, maxval=_MAX_NUMBER + 1, dtype=tf.int32
    )
    return tf.strings.as_string(digits)


def fill_slots(templates, values):
    """Each `SLOT` of `templates[i]` (`[batch]` tf.string) replaced by `values[i]`."""
    return replace_all(templates, SLOT, values)


def fill_copy_slots(
    sources, targets, source_templates, target_templates, kinds, rate, seed, figure_share=0.0
):
    """Fills the copy slot of a share `rate` of the pairs that have one, with fresh values.

    Args:
        sources, targets: `[batch]` tf.string, the pairs as written.
        source_templates, target_templates: `[batch]` tf.string, the pairs with their slot
            marked (`copy_templates`; anything for a pair without one).
        kinds: `[batch]` int32: 0 no slot, 1 a name, 2 a number (`KIND_IDS`).
        rate: float, the probability that a pair with a slot is filled.
        seed: int `[2]` (stateless draws: a resumed pipeline fills as an uninterrupted one).
        figure_share: float, the probability that a filled name slot gets a figure instead of a
            name. Copying a figure is one skill in any context, and the Bible has about a sixth
            as many number slots as name slots: this gives figures the name slots' practice.

    Returns:
        `(sources, targets)`, with the chosen pairs' slots filled on both sides.
    """
    size = tf.shape(sources)[0]
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=4)
    chosen = (kinds > 0) & (tf.random.stateless_uniform([size], seed=seeds[0]) < rate)
    figure = tf.random.stateless_uniform([size], seed=seeds[3]) < figure_share
    values = tf.where(
        (kinds == KIND_IDS[NUMBERS]) | figure,
        fresh_numbers_graph(size, seeds[1]),
        fresh_names_graph(size, seeds[2]),
    )
    return (
        tf.where(chosen, fill_slots(source_templates, values), sources),
        tf.where(chosen, fill_slots(target_templates, values), targets),
    )


KIND_IDS = {NAMES: 1, NUMBERS: 2}


def template_tensors(pairs):
    """`(source_templates, target_templates, kinds)` of `pairs` as lists for `fill_copy_slots`
    (a pair without a slot: its own text and kind 0)."""
    templates = copy_templates(pairs, proper_names(pairs))
    return (
        [t.source if t else source for t, (source, _) in zip(templates, pairs)],
        [t.target if t else target for t, (_, target) in zip(templates, pairs)],
        [KIND_IDS[t.kind] if t else 0 for t in templates],
    )


def corpus_words(pairs):
    """Every word of `pairs`, both sides, lowercased."""
    return {word.lower() for pair in pairs for side in pair for word in re.findall(r"\w+", side)}


def copy_rate_sets(pairs, names, fills=3, seed=0, excluded_words=()):
    """The copy test sets of `pairs` (a test split): `{kind: [(source, value), …]}`, each pair
    with a slot filled `fills` times, with names of `unseen_names` (none a word of `pairs` or
    of `excluded_words`) or numbers from 2 to 9999."""
    templates = [t for t in copy_templates(pairs, names) if t is not None]
    fresh = iter(
        unseen_names(set(excluded_words) | corpus_words(pairs), fills * len(templates), seed)
    )
    rng = random.Random(seed)
    sets = {kind: [] for kind in KINDS}
    for template in templates:
        for _ in range(fills):
            value = next(fresh) if template.kind == NAMES else str(rng.randint(2, _MAX_NUMBER))
            sets[template.kind].append((template.source.replace(SLOT, value), value))
    return sets


def copied(translation, value):
    """Whether `value` occurs in `translation` as a whole word."""
    return re.search(rf"(?<!\w){re.escape(value)}(?!\w)", translation) is not None


def copy_rates(sets, translate_texts):
    """`{kind: {"sentences", "copied", "rate", "missed": [(source, translation), …5]}}`.

    Args:
        sets: `copy_rate_sets`.
        translate_texts: list of str → list of str translations.
    """
    report = {}
    for kind, items in sets.items():
        translations = translate_texts([source for source, _ in items])
        hits = [copied(out, value) for out, (_, value) in zip(translations, items)]
        report[kind] = {
            "sentences": len(items),
            "copied": sum(hits),
            "rate": round(sum(hits) / max(len(items), 1), 4),
            "missed": [
                (source, out) for hit, out, (source, _) in zip(hits, translations, items) if not hit
            ][:5],
        }
    return report
