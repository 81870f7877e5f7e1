"""Modern Spanish spelling for 1909-spelled text (the Reina-Valera 1909 of the Bible corpus).

The RV1909 is written in the spelling of its time. Later spelling rules of the Real Academia
Española dropped accents it writes on a few very common words ("á", "fué", "dió"), and it writes
"crió" where the verb means create. `modernize` rewrites those words in today's spelling;
`old_spelling` puts the 1909 forms back. Each comes twice, with the same rules: in Python (the
corpus build, tests) and as TensorFlow string ops (`modernize_graph`, `old_spelling_graph`: the
source tokenizer of a run trained on the modern corpus runs `modernize_graph` before its subword
model, so 1909-spelled input still translates, and the exported SavedModel does the same).

The rules are word for word: a rule word matches only as a whole word (its neighbours are not
letters, digits, "_" or combining accents), in lowercase, capitalized ("Fué") or all capitals
("FUÉ"); the replacement keeps that case. The tables below say which reform removed each group;
training/CORPUS.md gives the counts on the corpus and the 1909 text's own irregularities, which
make `old_spelling(modernize(s)) == s` fail for a few verses: where the 1909 text writes a word
both ways ("dí" and "di", "Á" and "A"), `old_spelling` keeps the form it writes most, so those
words are not restored.

Names are the other way round: the model reads them as the 1909 text writes them, and
`name_table` maps the forms people type today to those ("Belén" → "Bethlehem"; see
`model.restoration`, which applies it).

"crió" (and "crié") is the preterite of both crear (create) and criar (raise). It reads as criar
when the next word is one of `CRIAR_OBJECTS` ("crió su hijo", "crié hijos", "le crió como á
hijo"), which today is "crio" / "crie" (RAE 2010), and as crear ("creó", "creé") otherwise.
"""

import collections
import re
import unicodedata

import tensorflow as tf

from model.placeholders import join_words, split_words
from model.restoration import WORD, strip_accents

MODERN = "modern"

# The one-letter preposition and conjunctions: accented in 1909, unaccented since the Academy's
# rules of 1911 (the last exception, "ó" between figures, went in 2010).
ONE_LETTER_WORDS = {"á": "a", "é": "e", "ó": "o", "ú": "u"}
# Monosyllables: no written accent unless it tells two words apart ("él"/"el", "sí"/"si" stay).
# The RAE's Nuevas normas of 1952 named fue, fui, dio and vio; the 1909 text also accents a few
# other monosyllables that never needed it.
MONOSYLLABLES = {
    "fué": "fue",
    "fuí": "fui",
    "dió": "dio",
    "vió": "vio",
    "dí": "di",
    "ví": "vi",
    "tí": "ti",
    "há": "ha",
    "hé": "he",
    "pié": "pie",
    "piés": "pies",
}
# Words with a diphthong count as monosyllables since the Ortografía of 2010 (guion, truhan).
DIPHTHONG_MONOSYLLABLES = {"fió": "fio", "guió": "guio", "sión": "sion"}
# 1909 writes crear (create) as "criar" in these forms; the preterites are handled with
# `CRIAR_OBJECTS` (see the module docstring).
CREAR = {"crió": "creó", "crié": "creé", "criaste": "creaste", "criador": "creador"}
CRIAR_PRETERITES = {"crió": "crio", "crié": "crie"}
# The next word that makes a preterite of "criar" mean raise, not create (offspring, or a
# comparison: "le crió como á hijo suyo").
CRIAR_OBJECTS = ("su", "sus", "hijo", "hijos", "mancebos", "cachorros", "gusanos", "éstos", "como")
# Modern forms that the 1909 text itself also writes (unaccented capitals "A", and both "di" and
# "dí"...): `old_spelling` leaves them as they are, since 1909 mostly writes them so.
NOT_RESTORED = frozenset(
    {"A", "E", "O", "U"}
    | {
        variant
        for word in ("di", "vi", "ti", "ha", "he", "pie", "pies")
        for variant in (word, word.capitalize(), word.upper())
    }
)

# Names the 1909 text writes with "th" and "ph", as Spanish wrote Greek and Hebrew names then
# ("Nazareth", "Josaphat"); the Academy's spelling writes "t" and "f" ("Nazaret", "Josafat").
# These modern forms are not "th" → "t", "ph" → "f" of their 1909 ones.
IRREGULAR_NAMES = {"Jerusalén": "Jerusalem", "Belén": "Bethlehem", "Efraín": "Ephraim"}

WORD_RULES = {**ONE_LETTER_WORDS, **MONOSYLLABLES, **DIPHTHONG_MONOSYLLABLES, **CREAR}

# Characters that continue a word: Python's \w (letters, digits, "_") and combining accents;
# RE2 (TensorFlow's regexes) spells the same class with Unicode properties.
_PY_WORD = r"\w\u0300-\u036f"
_RE2_WORD = r"\pL\pN_\x{0300}-\x{036F}"


def _case_variants(old, modern):
    """`(old, modern)` in lowercase, capitalized and all capitals (each pair once)."""
    pairs = {}
    for convert in (str, str.capitalize, str.upper):
        pairs.setdefault(convert(old), convert(modern))
    return pairs


def _variants(table):
    return {
        old_variant: modern_variant
        for old, modern in table.items()
        for old_variant, modern_variant in _case_variants(old, modern).items()
    }


_MODERN_WORDS = _variants(WORD_RULES)
_MODERN_CRIAR = _variants(CRIAR_PRETERITES)
_RESTORED = [
    (old, modern)
    for table in (_MODERN_WORDS, _MODERN_CRIAR)
    for old, modern in table.items()
    if modern not in NOT_RESTORED
]
_OLD_WORDS = dict((modern, old) for old, modern in _RESTORED)
if len(_OLD_WORDS) != len(_RESTORED):  # two 1909 forms for one modern form: no inverse
    raise ValueError("the spelling rules give some modern form two 1909 forms")
# `rule name -> count` keys: the lowercase rule, e.g. "fué→fue".
_RULE_NAMES = {old: f"{old.lower()}→{modern.lower()}" for old, modern in _MODERN_WORDS.items()}
_CRIAR_RULE_NAMES = {
    old: f"{old.lower()}→{modern.lower()}" for old, modern in _MODERN_CRIAR.items()
}


def _alternation(words):
    # Longest first, so a word is never cut short by one of its prefixes.
    return "|".join(re.escape(word) for word in sorted(words, key=lambda w: (-len(w), w)))


_PY_CRIAR = re.compile(
    rf"(?<![{_PY_WORD}])({_alternation(_MODERN_CRIAR)})"
    rf"(?= +(?:{_alternation(CRIAR_OBJECTS)})(?![{_PY_WORD}]))"
)
_PY_MODERN_WORDS = re.compile(
    rf"(?<![{_PY_WORD}])(?:{_alternation(_MODERN_WORDS)})(?![{_PY_WORD}])"
)
_PY_OLD_WORDS = re.compile(rf"(?<![{_PY_WORD}])(?:{_alternation(_OLD_WORDS)})(?![{_PY_WORD}])")


def modernize_counting(text):
    """`modernize(text)` and how often each rule applied.

    Returns:
        `(modern_text, counts)`: counts maps a rule in lowercase, e.g. "fué→fue", to the number of
        words it rewrote (rules that did not apply are absent).
    """
    counts = {}

    def replace(table, names):
        def rewrite(match):
            word = match.group(0)
            counts[names[word]] = counts.get(names[word], 0) + 1
            return table[word]

        return rewrite

    text = _PY_CRIAR.sub(replace(_MODERN_CRIAR, _CRIAR_RULE_NAMES), text)
    text = _PY_MODERN_WORDS.sub(replace(_MODERN_WORDS, _RULE_NAMES), text)
    return text, counts


def modernize(text):
    """Rewrites the 1909 spellings in `text` (a str) in today's spelling; the rest is unchanged."""
    return modernize_counting(text)[0]


def old_spelling(text):
    """Puts the 1909 spellings back into modern-spelled `text` (a str): "a" → "á", "fue" →
    "fué", "creó" → "crió"; words in `NOT_RESTORED` stay."""
    return _PY_OLD_WORDS.sub(lambda match: _OLD_WORDS[match.group(0)], text)


def _modern_name(name):
    return name.replace("th", "t").replace("Th", "T").replace("ph", "f").replace("Ph", "F")


def _word_counts(texts):
    return collections.Counter(
        word for text in texts for word in WORD.findall(unicodedata.normalize("NFC", text))
    )


def name_table(texts, other_texts=()):
    """`{typed form: name}` in lowercase, learned from the 1909-spelled `texts` (the training
    sources): each name there (a capitalized word) with "th" or "ph" under its modern form
    ("betania" → "bethania"), and each of `IRREGULAR_NAMES` whose 1909 form is there; each modern
    form also without its accents ("belen"). A form whose accent-free key is that of a word of
    `texts` or of `other_texts` (the training sources of the other corpora of a run that mixes
    several, `training.mixture`) is left out, so no word the model was trained on changes."""
    words = _word_counts(texts)
    keys = {strip_accents(word.lower()) for word in words | _word_counts(other_texts)}
    pairs = [
        (_modern_name(word), word)
        for word in words
        if word[0].isupper() and not word.isupper() and _modern_name(word) != word
    ]
    pairs += [(modern, old) for modern, old in IRREGULAR_NAMES.items() if old in words]
    table = {}
    for modern, old in sorted(pairs):
        for form in (modern.lower(), strip_accents(modern.lower())):
            if strip_accents(form) not in keys:
                table.setdefault(form, old.lower())
    return table


# ----------------------------------------------------------------------------- in the graph
# RE2 has no lookaround: a rule matches its word with the characters on either side and writes
# them back. A match then hides the next word's left neighbour, so two rule words one character
# apart ("á á") need a second pass; a second pass always suffices, because a word skipped in the
# first pass directly follows one that was rewritten. Every rule changes one letter, so the words
# that change the same letter into the same letter, with the same ending, share one regex
# ("dió", "vió", "ó": prefixes "di", "vi", "" before "ó"), which keeps the graph small.
_RE2_LEFT = rf"(^|[^{_RE2_WORD}])"
_RE2_RIGHT = rf"(?:[^{_RE2_WORD}]|$)"


def _changed_letter(old, new):
    """`(prefix, old_letter, new_letter, suffix)` of a rule that changes one letter."""
    differences = [i for i, (a, b) in enumerate(zip(old, new)) if a != b]
    if len(old) != len(new) or len(differences) != 1:
        raise ValueError(f"a spelling rule must change one letter: {old!r} -> {new!r}")
    i = differences[0]
    return old[:i], old[i], new[i], old[i + 1 :]


def _re2_rules(table, right_context=""):
    """`(pattern, rewrite)` pairs for `tf.strings.regex_replace` applying `table` to whole words
    (followed by `right_context`, an RE2 pattern, when given)."""
    prefixes = {}
    for old, new in table.items():
        prefix, old_letter, new_letter, suffix = _changed_letter(old, new)
        prefixes.setdefault((old_letter, new_letter, suffix), []).append(prefix)
    return [
        (
            f"{_RE2_LEFT}((?:{_alternation(group)})){re.escape(old_letter)}"
            f"({re.escape(suffix)}{right_context}{_RE2_RIGHT})",
            rf"\1\2{new_letter}\3",
        )
        for (old_letter, new_letter, suffix), group in sorted(prefixes.items())
    ]


_RE2_MODERNIZE = _re2_rules(
    _MODERN_CRIAR, right_context=f" +(?:{_alternation(CRIAR_OBJECTS)})"
) + _re2_rules(_MODERN_WORDS)
_RE2_OLD_SPELLING = _re2_rules(_OLD_WORDS)


def _rewrite_graph(strings, rules):
    strings = tf.convert_to_tensor(strings, tf.string)
    for pattern, rewrite in rules:
        for _ in range(2):
            strings = tf.strings.regex_replace(strings, pattern, rewrite)
    return strings


def modernize_graph(strings):
    """`modernize` as TensorFlow ops: a `tf.string` tensor of any shape in, the same shape out."""
    return _rewrite_graph(strings, _RE2_MODERNIZE)


def modern_names_graph(strings):
    """Names written as people write them today, as TensorFlow ops (`[batch]` `tf.string` in and
    out): each capitalized word (not all capitals) with "th" or "ph" in its modern form, and
    `IRREGULAR_NAMES`' 1909 forms in theirs ("Bethlehem" → "Belén"): what `name_table` undoes."""
    pieces = split_words(tf.convert_to_tensor(strings, tf.string))
    words = pieces.flat_values
    capitalized = tf.strings.regex_full_match(words, r"\p{Lu}.*") & tf.logical_not(
        tf.equal(tf.strings.upper(words, encoding="utf-8"), words)
    )
    modern = words
    for old, new in (("th", "t"), ("Th", "T"), ("ph", "f"), ("Ph", "F")):
        modern = tf.strings.regex_replace(modern, old, new)
    for new, old in IRREGULAR_NAMES.items():
        modern = tf.where(tf.equal(words, old), new, modern)
    return join_words(pieces.with_flat_values(tf.where(capitalized, modern, words)))


def old_spelling_graph(strings):
    """`old_spelling` as TensorFlow ops: a `tf.string` tensor of any shape in, the same out."""
    return _rewrite_graph(strings, _RE2_OLD_SPELLING)
