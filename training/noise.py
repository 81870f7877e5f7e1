"""How people type, as perturbations of Spanish source text: the one home of each.

Every perturbation maps a `tf.string` tensor (any shape, UTF-8) to one of the same shape, with
TensorFlow and tensorflow-text ops only, so the same code noises sources inside the training
input pipeline (`perturb_sources`, per example) and perturbs whole test splits in
`training.evaluate --perturb` (called on a `tf.constant`).

- `lowercase`, `uppercase`: Unicode-aware (`tf.strings.lower/upper` with UTF-8), so "Á" ↔ "á".
- `strip_accents`: the acute accent and the diaeresis (á é í ó ú ü, and capitals) go; ñ stays.
  Writers who skip accents on a Spanish keyboard still type ñ: it is a letter of its own, not an
  accented n, and dropping it changes words ("año" → "ano"). The English-keyboard habit of
  typing "n" for "ñ" is `strip_diacritics`, which removes every combining mark (ñ → n, ç → c).
- `no_final_punct`: the final run of . ! ? ; : … goes, with the spaces and closing quotes or
  brackets around it ("Dijo: «¿Quién eres?»" → "Dijo: «Quién eres"); when that run held a
  ? (or !), the last ¿ (or ¡) before it goes too, since people who do not type the closing mark
  do not type the opening one. Opening quotes stay (they are not final). A sentence without
  final punctuation is unchanged.

On English sources (a reversed run's, `training.config.TrainConfig.reverse`) `lowercase`,
`uppercase` and `no_final_punct` work as on Spanish, and `strip_accents` and `strip_diacritics`
change only the few words English writes with marks ("café"); the perturbations that write
Spanish (`SPANISH_ONLY`) are refused there.

`PERTURBATIONS` maps each name to its function; a composition is spelled with "+"
("strip_accents+lowercase", applied left to right) and parsed by `perturbation`.
"""

import tensorflow as tf
import tensorflow_text

from model.restoration import ACCENT_MARKS
from model.spelling import modern_names_graph, old_spelling_graph

# Combining marks (after NFD): acute and diaeresis are the Spanish accents (model.restoration,
# which puts them back); every mark (\p{Mn}) includes the tilde of ñ.
_ALL_MARKS = r"\p{Mn}"
_FINAL = ".!?;:…"
_CLOSING = "\\s»”’\"')\\]"
_FINAL_RUN = f"[{_FINAL}{_CLOSING}]*[{_FINAL}][{_FINAL}{_CLOSING}]*$"


def lowercase(text):
    return tf.strings.lower(text, encoding="utf-8")


def uppercase(text):
    return tf.strings.upper(text, encoding="utf-8")


def _remove_marks(text, marks):
    decomposed = tensorflow_text.normalize_utf8(text, "NFD")
    return tensorflow_text.normalize_utf8(tf.strings.regex_replace(decomposed, marks, ""), "NFC")


def strip_accents(text):
    """á é í ó ú ü (and capitals) → a e i o u; ñ and everything else unchanged (NFC output)."""
    return _remove_marks(text, ACCENT_MARKS)


def strip_diacritics(text):
    """Every combining mark removed: strip_accents, and ñ → n, ç → c (NFC output)."""
    return _remove_marks(text, _ALL_MARKS)


def no_final_punct(text):
    """Drops the final punctuation run and the ¿/¡ that opened a final ?/! (module docstring)."""
    stripped = tf.strings.regex_replace(text, f"(?s){_FINAL_RUN}", "")
    for closing, opening in (("?", "¿"), ("!", "¡")):
        closed_here = tf.strings.regex_full_match(
            text, f"(?s).*\\{closing}[{_FINAL}{_CLOSING}]*"
        ) & tf.strings.regex_full_match(text, f"(?s).*{_FINAL_RUN}")
        without_opening = tf.strings.regex_replace(
            stripped, f"(?s){opening}([^{opening}]*)$", r"\1"
        )
        stripped = tf.where(closed_here, without_opening, stripped)
    return stripped


PERTURBATIONS = {
    "lowercase": lowercase,
    "uppercase": uppercase,
    "strip_accents": strip_accents,
    "strip_diacritics": strip_diacritics,
    "no_final_punct": no_final_punct,
    # The Reina-Valera's 1909 forms put back ("a" → "á", "fue" → "fué", "creó" → "crió").
    "old_spelling": old_spelling_graph,
    # Names as today's Spanish writes them ("Bethlehem" → "Belén", "Nazareth" → "Nazaret").
    "modern_names": modern_names_graph,
}

# The perturbations that write Spanish, which a reversed run's English sources
# (`training.config.TrainConfig.reverse`) must not get ("a" → "á"); the others leave what they
# do not apply to as it is (no accent to strip in most English).
SPANISH_ONLY = ("old_spelling", "modern_names")

# What training noises sources with by default: each way of typing of issue #23, and the
# commonest combination (a phone's lowercase, no accents, no final mark).
DEFAULT_NOISE_KINDS = (
    "lowercase",
    "uppercase",
    "strip_accents",
    "no_final_punct",
    "strip_accents+lowercase+no_final_punct",
)


def perturbation(name):
    """The function of a perturbation name, or of a "+"-joined composition of them.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    parts = name.split("+")
    unknown = [part for part in parts if part not in PERTURBATIONS]
    if unknown or not name:
        raise ValueError(
            f"unknown perturbation {name!r}; choose from {', '.join(PERTURBATIONS)}, or join "
            "several with '+'"
        )
    functions = [PERTURBATIONS[part] for part in parts]

    def composed(text):
        for function in functions:
            text = function(text)
        return text

    return composed


def parse_kinds(text):
    """A comma-separated list of perturbation names (compositions allowed) → tuple, validated."""
    kinds = tuple(kind.strip() for kind in text.split(",") if kind.strip())
    if not kinds:
        raise ValueError("no perturbation named: give at least one")
    for kind in kinds:
        perturbation(kind)
    return kinds


def spanish_only(kinds):
    """The kinds of `kinds` (names or "+"-compositions, `parse_kinds`) that use one of
    `SPANISH_ONLY`."""
    return [kind for kind in kinds if set(kind.split("+")) & set(SPANISH_ONLY)]


def perturb_sources(sources, rate, kinds, seed):
    """Noises each source with probability `rate`, by one of `kinds` drawn uniformly.

    The draws are stateless: the same `seed` gives the same noise, so a resumed run (whose data
    iterator restores the position the seed is made from) noises as an uninterrupted one.

    Args:
        sources: `tf.string` tensor `[batch]`.
        rate: float in [0, 1], the probability that a source is noised.
        kinds: sequence of perturbation names (see `perturbation`).
        seed: int tensor `[2]`, e.g. (the run's seed, the chunk's position in the stream).

    Returns:
        `(noised_sources, choices)`: the sources, and per source the index into `kinds` of its
        perturbation, or -1 for a source left as it was.
    """
    if not kinds or rate <= 0:
        return sources, tf.fill(tf.shape(sources), -1)
    size = tf.shape(sources)
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=2)
    whether_seed, which_seed = seeds[0], seeds[1]
    noised = tf.random.stateless_uniform(size, seed=whether_seed) < rate
    kind = tf.random.stateless_uniform(
        size, seed=which_seed, minval=0, maxval=len(kinds), dtype=tf.int32
    )
    choices = tf.where(noised, kind, -1)
    candidates = tf.stack([sources] + [perturbation(name)(sources) for name in kinds])
    picked = tf.gather(tf.transpose(candidates), choices + 1, batch_dims=1)
    return picked, choices
