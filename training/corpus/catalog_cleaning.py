"""Cleaning rules for message-catalog pairs (msgid English, msgstr Spanish).

A program's messages are not sentences as people write them: they hold format placeholders
filled at run time, markup, keyboard accelerators, context keys, identifiers, and pieces of
sentences glued together by code. Each rule below is one small function; `clean_message`
applies them in order and names the first that rejects a pair (the manifest counts pairs
dropped by that name, training/CORPUS.md lists them).

Placeholders drop the pair in `clean_message` rather than being cut out: "%s home page" without
its "%s" is not a sentence any more. `clean_filled_message` fills them instead
(`training.corpus.catalog_fills`: each the same value on both sides, as the program would at
run time), and the filled pair then meets every other rule: the `catalog-fills` corpus, kept
apart from the catalogs corpus so that the one the bundled model was trained and scored on
stays as it was. A message whose placeholders it cannot fill is dropped under its own reason,
and a filled pair that another rule rejects is counted under that rule's reason behind
`FILLED_THEN`.
"""

from __future__ import annotations

import html
import re
import unicodedata

from training.corpus.catalog_fills import (
    PLACEHOLDER_NOT_FILLED,
    blank_placeholders,
    fill_placeholders,
)
from training.corpus.tsv import Pair

# The drop reasons, in the order `clean_message` applies the rules (`clean_filled_message`
# fills placeholders first, with `catalog_fills`'s reasons, `PLACEHOLDERS_MISMATCHED` and
# `PLACEHOLDER_NOT_FILLED`, instead of dropping them under `PLACEHOLDER`).
PLACEHOLDER = "placeholder"
ID_LIKE = "id_like_msgid"
URL_OR_CODE = "url_or_code"
PLACEHOLDER_BEHIND_ENTITY = "placeholder_behind_entity"
MARKUP_LEFT = "markup_left"
UNTRANSLATED = "untranslated"
NOT_A_SENTENCE = "not_a_sentence"
TOO_LONG = "too_long"
CUT_MID_SENTENCE = "cut_mid_sentence"
LENGTH_RATIO = "length_ratio"
NOT_SPANISH = "not_spanish"
# A filled message that a rule then rejects counts as this prefix and the rule's reason
# (`filled_then_not_a_sentence`), apart from the messages without placeholders.
FILLED_THEN = "filled_then_"

# A pair is kept as a sentence with this many English words, or with `MIN_PHRASE_WORDS` and
# final punctuation ("Brace yourselves.", "Where are you going?"): short clean phrases are what
# people type, a 2-3 word label without a stop ("Beloved Pet", "Open File") is not.
MIN_SENTENCE_WORDS = 4
MIN_PHRASE_WORDS = 2
# Longer messages are help paragraphs, not sentences, and exceed what the model is trained on.
MAX_WORDS = 60
# Spanish runs about 1.1-1.2 times as long as English; beyond these, one side says something else.
LENGTH_RATIO_RANGE = (0.5, 2.5)
# Characters added to both lengths so a 3-letter word against a 7-letter one is not an outlier.
LENGTH_RATIO_SMOOTHING = 5

_PLACEHOLDER = re.compile(
    r"%(\d+\$)?[-+#0']*\*?\d*(\.(\d+|\*))?[hlLqjzt]*[a-zA-Z@]"  # printf: %s %1$S %5.2f %.*s
    r"|%\(\w+\)[a-zA-Z]"  # Python: %(name)s
    r"|%\d+"  # Qt: %1
    r"|\{\s*[-$]?[\w.-]*\s*\}"  # {0} {} {name}, Fluent { -brand-short-name } { $count }
    r"|\$\w+"  # $1, $name, Wesnoth's $name| and $player_$side_number|.name|
    r"|@\w+@"  # @NAME@
    r"|\[\[|\]\]"  # wiki links, [[help:Main_Page|Manual]]
)
# HTML and the games' own styling tags, removed with their text kept; any other <word> is a
# placeholder the program fills (Cataclysm's <npcname>, <name_b>).
_MARKUP_TAG = re.compile(
    r"</?(?:a|b|big|body|br|code|color(?:_\w+)?|em|font|h\d|html|i|kbd|li|ol|p|qt|s|small|"
    r"span|strong|sub|sup|tt|u|ul|var)\b[^<>]*/?>",
    re.IGNORECASE,
)
_OTHER_TAG = re.compile(r"<[A-Za-z_][\w-]*>")
_BBCODE_TAG = re.compile(r"\[/?(?:b|i|u|s|center|color|size|url|font)(?:=[^\]]*)?\]")
_BULLET = re.compile(r"^(?:[-*•–―]\s+)+")
_URL_OR_CODE = re.compile(
    r"https?://|www\.|\w@\w+\.\w|(?:^|\s)/\w+/|(?:^|\s)--?\w|\\[nt]|\w\(\)|\w\.\w+\(|==|::|\w=\w"
)
_WESNOTH_CONTEXT = re.compile(r"^[\w ]+\^")  # female^Vampire Lady
_KDE_CONTEXT = re.compile(r"^_:[^\n]*\n")  # "_: comment\n" (KDE 3 catalogs)
_FREECIV_QUALIFIER = re.compile(r"^\?[\w ]+:")  # ?plural:Papua New Guineans
_CJK_ACCELERATOR = re.compile(r"\s*\([&_][^\W\d_]\)")  # Open (&O)
_AMPERSAND_ACCELERATOR = re.compile(r"&(?=[^\W\d_])(?![A-Za-z]+;|#\d+;)")  # &Open, not &amp;
_UNDERSCORE_ACCELERATOR = re.compile(r"_(?=[^\W\d_])")  # _File, Cuent_as
_TILDE_ACCELERATOR = re.compile(r"~(?=\w)")  # LibreOffice's ~Open
_LEFT_OVER_MARKUP = re.compile(r"[<>^|\\{}_]")
_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")
# The last word of a string a program glues to another ("Delete the", "Number of").
_DANGLING_WORDS = frozenset(
    "a an the of and or but nor from into your my his her their our its than".split()
)
# Function words: a Spanish text holds some of the first and few of the second.
SPANISH_FUNCTION_WORDS = frozenset(
    "el la los las un una unos unas de del al y o pero que en con por para se su sus es son "
    "está están este esta esto estos estas ese esa eso no sí lo le les me te nos mi mis tu tus "
    "como más muy ya hay ha han fue ser puede cuando donde también sin sobre entre hasta desde "
    "porque qué cómo dónde cuál quién todo todos toda todas otro otra ni aquí".split()
)
ENGLISH_FUNCTION_WORDS = frozenset(
    "the of and to in is are was were be been it this that these those with for on at by from "
    "you your we our they their he his she her not do does did have has had will would can "
    "could should what where when which who how there here all any some an or if".split()
)


def strip_context_key(text: str) -> str:
    """`text` without a context key the program strips before showing it (Wesnoth's
    `female^Vampire Lady`, Freeciv's `?plural:Papua New Guineans`, KDE 3's `_: comment` line)."""
    for key in (_WESNOTH_CONTEXT, _FREECIV_QUALIFIER, _KDE_CONTEXT):
        text = key.sub("", text, count=1)
    return text


def is_id_like(msgid: str) -> bool:
    """Whether a msgid is an identifier rather than English: no letters at all (`0`, `---`), a
    `|`-keyed string (`frames|24`), or one token holding a digit, `_` or `.` (`STR_0042`)."""
    if not any(character.isalpha() for character in msgid) or "|" in msgid:
        return True
    tokens = msgid.split()
    return len(tokens) == 1 and bool(re.search(r"[\d_.]", tokens[0].rstrip(".")))


def has_placeholder(text: str) -> bool:
    """Whether `text` holds a value the program fills in: printf's `%s`/`%1$S`, `{0}`,
    Fluent's `{ -brand-short-name }`, `$1`, Wesnoth's `$name|`, `@NAME@`, a `<name>` tag that
    is not markup, a wiki link."""
    without_markup = _MARKUP_TAG.sub(" ", text)
    return bool(_PLACEHOLDER.search(without_markup) or _OTHER_TAG.search(without_markup))


def has_url_or_code(text: str) -> bool:
    """Whether `text` holds a URL, e-mail address, path, command-line option or code."""
    return bool(_URL_OR_CODE.search(text))


def remove_accelerators(text: str) -> str:
    """`text` without keyboard accelerator marks: `&Open`, `_File`, `Cuent_as`, `~Save`,
    `Open (&O)`. `&&` (a literal ampersand in Qt) becomes `&`; entities such as `&amp;` are left
    alone; so are underscores when there are several (an identifier, not GTK's one mnemonic)."""
    text = _CJK_ACCELERATOR.sub("", text)
    if text.count("_") == 1:
        text = _UNDERSCORE_ACCELERATOR.sub("", text)
    text = _TILDE_ACCELERATOR.sub("", text)
    return _AMPERSAND_ACCELERATOR.sub("", text.replace("&&", "\0")).replace("\0", "&")


def strip_markup(text: str) -> str:
    """`text` without HTML, BBCode and styling tags (`<b>`, `<span color='green'>`,
    `<color_red>`, `[b]`; their text is kept) and list bullets, entities decoded (`&amp;` ->
    `&`), whitespace and line breaks collapsed to single spaces."""
    text = _BBCODE_TAG.sub(" ", _MARKUP_TAG.sub(" ", text))
    return _BULLET.sub("", " ".join(html.unescape(text).split()))


def is_untranslated(english: str, spanish: str) -> bool:
    """Whether the msgstr is the msgid again (case and spacing aside): a catalog's untranslated
    entry, or a name the translator copied."""
    return " ".join(english.casefold().split()) == " ".join(spanish.casefold().split())


def words(text: str) -> list[str]:
    """The words of `text`, lowercased (letters and inner apostrophes; no digits)."""
    return [word.lower() for word in _WORD.findall(text)]


def is_sentence_like(english: str) -> bool:
    """Whether the English is a sentence or a short phrase people would type: at least
    `MIN_SENTENCE_WORDS` words, or `MIN_PHRASE_WORDS` and final `.`, `!` or `?`."""
    count = len(words(english))
    ends_like_a_sentence = english.rstrip("\"”’') ").endswith((".", "!", "?", "…"))
    return count >= MIN_SENTENCE_WORDS or (count >= MIN_PHRASE_WORDS and ends_like_a_sentence)


def is_cut_mid_sentence(text: str) -> bool:
    """Whether `text` looks like a piece of a sentence the program completes: it ends on an
    article, possessive, conjunction or "of"/"from" ("Number of"; not "in" or "on", which end
    phrasal verbs), or on `,`, `;`, `:` or a dash, or it starts with an ellipsis continuing
    something else."""
    stripped = text.rstrip()
    if stripped.endswith((",", ";", ":", "-", "–", "—", "(")) or text.lstrip().startswith(
        ("...", "…")
    ):
        return True
    found = words(stripped)
    return bool(found) and found[-1] in _DANGLING_WORDS and stripped[-1].isalpha()


def lengths_mismatch(english: str, spanish: str) -> bool:
    """Whether the Spanish is too short or too long for a translation of the English
    (`LENGTH_RATIO_RANGE`, on smoothed character counts)."""
    ratio = (len(spanish) + LENGTH_RATIO_SMOOTHING) / (len(english) + LENGTH_RATIO_SMOOTHING)
    low, high = LENGTH_RATIO_RANGE
    return not low <= ratio <= high


def looks_spanish(text: str) -> bool:
    """Whether `text` may be Spanish by its function words: at least as many Spanish as
    English ones, and not two English ones with no Spanish one ("Checks for new local mail."
    is English; "Directorio público Gadu-Gadu", which holds neither, passes)."""
    found = words(text)
    spanish = sum(word in SPANISH_FUNCTION_WORDS for word in found)
    english = sum(
        word in ENGLISH_FUNCTION_WORDS and word not in SPANISH_FUNCTION_WORDS for word in found
    )
    return spanish >= english and not (english >= 2 and spanish == 0)


def without_placeholders(text: str) -> str:
    """`text` with every placeholder blanked out, those `catalog_fills` reads first
    (`%PRODUCTNAME` whole), then any other `has_placeholder` finds, markup tags too: what a
    message says whatever the program fills in."""
    blanked = _MARKUP_TAG.sub(" ", blank_placeholders(text))
    return _OTHER_TAG.sub(" ", _PLACEHOLDER.sub(" ", blanked))


def needs_filling(english: str, spanish: str) -> bool:
    """Whether a message (msgid, msgstr) holds a placeholder on either side, which
    `clean_filled_message` fills."""
    english, spanish = strip_context_key(english), strip_context_key(spanish)
    return has_placeholder(english) or has_placeholder(spanish)


def clean_message(english: str, spanish: str) -> tuple[Pair | None, str | None]:
    """One catalog message made a training pair, or the rule that rejects it: the catalogs
    corpus's rules, which drop a message with placeholders (`PLACEHOLDER`).

    Args:
      english: the msgid (the singular of a plural message).
      spanish: its msgstr.

    Returns:
      `((spanish, english), None)` with both sides cleaned, or `(None, reason)`, the reason
      one of this module's drop constants.
    """
    english = remove_accelerators(strip_context_key(english))
    spanish = remove_accelerators(strip_context_key(spanish))
    if has_placeholder(english) or has_placeholder(spanish):
        return None, PLACEHOLDER
    pair, reason = _apply_rules(english, spanish)
    # The catalogs corpus counts a placeholder an entity hid with the others, as it always has.
    return pair, PLACEHOLDER if reason == PLACEHOLDER_BEHIND_ENTITY else reason


def clean_filled_message(english: str, spanish: str) -> tuple[Pair | None, str | None]:
    """One catalog message made a training pair with its placeholders filled
    (`catalog_fills.fill_placeholders`), or the rule that rejects it; the other rules then
    see the filled text.

    Args:
      english: the msgid (the singular of a plural message, or its plural form).
      spanish: its msgstr (of the same form).

    Returns:
      `((spanish, english), None)` filled and cleaned, or `(None, reason)`, the reason one of
      this module's drop constants or `catalog_fills`'s; behind `FILLED_THEN` when the message
      held placeholders and was filled.
    """
    filled = needs_filling(english, spanish)
    english, spanish = strip_context_key(english), strip_context_key(spanish)
    if filled:
        pair, reason = fill_placeholders(english, spanish)
        if pair is None:
            return None, reason
        english, spanish = pair
        # What the filling does not read (markup-like tags, wiki links) is still there.
        if has_placeholder(english) or has_placeholder(spanish):
            return None, PLACEHOLDER_NOT_FILLED
    pair, reason = _apply_rules(remove_accelerators(english), remove_accelerators(spanish))
    return pair, FILLED_THEN + reason if reason and filled else reason


def _apply_rules(english: str, spanish: str) -> tuple[Pair | None, str | None]:
    """The rules after the placeholders, in order: the first that rejects the pair names the
    reason."""
    if is_id_like(english):
        return None, ID_LIKE
    if has_url_or_code(english) or has_url_or_code(spanish):
        return None, URL_OR_CODE
    english, spanish = strip_markup(english), strip_markup(spanish)
    # An entity may have hidden one (KDE's "&percnt;1" is "%1").
    if has_placeholder(english) or has_placeholder(spanish):
        return None, PLACEHOLDER_BEHIND_ENTITY
    if _LEFT_OVER_MARKUP.search(english) or _LEFT_OVER_MARKUP.search(spanish):
        return None, MARKUP_LEFT
    if not spanish or is_untranslated(english, spanish):
        return None, UNTRANSLATED
    if not is_sentence_like(english):
        return None, NOT_A_SENTENCE
    if len(words(english)) > MAX_WORDS:
        return None, TOO_LONG
    if is_cut_mid_sentence(english) or is_cut_mid_sentence(spanish):
        return None, CUT_MID_SENTENCE
    if lengths_mismatch(english, spanish):
        return None, LENGTH_RATIO
    if not looks_spanish(spanish):
        return None, NOT_SPANISH
    return (spanish, english), None


def near_duplicate_key(text: str) -> str:
    """The key under which two English sentences count as near-duplicates: case, accents,
    digits, punctuation and spacing ignored ("Attack!" and "attack." share one). Used to
    remove duplicates and to split, so every near-duplicate of a test sentence is in test."""
    decomposed = unicodedata.normalize("NFD", text.casefold())
    letters = "".join(c for c in decomposed if not unicodedata.combining(c))
    return " ".join(_WORD.findall(letters))
