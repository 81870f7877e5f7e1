"""OSIS markup of a SWORD Bible module to plain verse text, and the RV1909's typographic quirks.

`strip_markup` turns one verse's OSIS into text (both modules); `fix_caps_opening`
(drop-cap chapter openings, with `build_casing_table`) and `strip_subscription`
(colophons after the epistles) undo what only the Reina-Valera 1909 has.
"""

from __future__ import annotations

import collections
import html
import re
from collections.abc import Iterable, Mapping

# Back matter that the WEB module appends after the closing book milestone of
# Revelation (a whole glossary inside the text of Rev 22:21).
_BOOK_END = re.compile(r"<div\b(?=[^>]*\beID=)(?=[^>]*\btype=\"book\")[^>]*/>.*", re.S)
# Elements whose content is not verse text: footnotes and cross references (with
# their <reference>, <rdg>, <catchWord> children), and the speaker labels the
# WEB puts into the Song of Songs ("Beloved", "Friends").
_DROPPED_ELEMENTS = re.compile(r"<(note|speaker)\b[^>]*?(?:/>|>.*?</\1>)", re.S)
_TITLE = re.compile(r"<title\b([^>]*)>(.*?)</title>", re.S)
# Word-level elements written back to back without a space: the RV1909 writes
# words the translators added in <transChange> right against the neighbouring
# <w> ("allí</w><transChange>también</transChange><w>bdelio").
_ADJACENT_WORD_ELEMENTS = re.compile(r"(</(?:w|transChange)>)(?=<(?:w|transChange)\b)")
# ...except an added enclitic pronoun, which belongs to the verb before it
# ("sáca</w><transChange>lo</transChange>" is "sácalo").
_ADDED_CLITIC = re.compile(
    r"</w>(?=<transChange\b[^>]*>(?:lo|la|le|los|las|les|me|te|se|nos|os)</transChange>)"
)
_LAST_WORD = re.compile(r"(\w+)$")
_ACCENTED = set("áéíóú")
# Accented words that are not verbs with an enclitic split off.
_NOT_CLITIC_HOSTS = {
    "cuánto",
    "cuánta",
    "cuántos",
    "cuántas",
    "cómo",
    "dónde",
    "cuándo",
    "quién",
    "quiénes",
    "cuál",
}
# Inline markup sits inside running text; any other tag (line, paragraph,
# chapter and list milestones) separates words.
_INLINE_TAG = re.compile(
    r"</?(?:w|transChange|seg|name|hi|divineName|foreign|inscription|mentioned)\b[^>]*>"
)
# Quotation elements may or may not separate words: the WEB closes a quote
# right against the next word ("righteousness.”</q><w>Then"), but also opens
# one inside a sentence ("he said, <q>“Go"); decided like dropped content.
_QUOTE_TAG = re.compile(r"</?q\b[^>]*>")
# Bare Strong's numbers that GBF-derived modules put right after a word
# ("Christ<G5547>"); here they only sit in <w lemma=...> attributes.
_STRONGS_TAG = re.compile(r"<[GH]\d{1,5}[a-z]?>")
_ANY_TAG = re.compile(r"<[^>]*>")
_GAP = "\x00"  # stands where dropped content was, until we know if a space belongs there
_GAP_RUN = re.compile(r"\s*\x00[\s\x00]*")
_OPENING_PUNCT = "“‘([¡¿«"
_CLOSING_PUNCT = ",.;:!?”’)]»"


def _resolve_gap(match: re.Match) -> str:
    """A space where dropped content separated two words, none before closing punctuation.

    The run matched includes the whitespace around the dropped content, so the
    characters beside it are the visible neighbours.
    """
    text = match.string
    before = text[match.start() - 1] if match.start() > 0 else ""
    after = text[match.end()] if match.end() < len(text) else ""
    if not before or not after or before in _OPENING_PUNCT or after in _CLOSING_PUNCT:
        return ""
    return " "


def _is_clitic_host(word: str) -> bool:
    """Whether a Spanish word is a verb form that takes an enclitic pronoun.

    Decided from spelling alone: an infinitive ("beber"), a plural imperative
    ("haced", "Dad"; not the nouns "ciudad", "verdad"), or a word ending in a
    vowel, n or s with a written accent before its last syllable, which Spanish
    spelling only allows there because the pronoun follows ("sáca" of
    "sácalo", "oyéndo" of "oyéndolo"). Preterites with the enclitic ("plantóla")
    cannot be told from nouns ("Josué los") this way and stay separate.
    """
    lower = word.lower()
    if lower in _NOT_CLITIC_HOSTS:
        return False
    if len(lower) >= 4 and lower.endswith(("ar", "er", "ir")):
        return True
    if lower.endswith(("ad", "ed", "id")) and not re.search(r"[aeiou]dad$", lower):
        return True
    stem_has_accent = any(ch in _ACCENTED for ch in lower[:-1])
    return (
        lower[-1] in "aeiouns"
        and stem_has_accent
        and lower[-1] not in _ACCENTED
        and not (lower[-1] in "ns" and lower[-2] in _ACCENTED)
    )


def _join_added_clitic(match: re.Match) -> str:
    """Replaces the `</w>` before an added enclitic: nothing after its verb, else a space."""
    verb = _LAST_WORD.search(match.string, max(0, match.start() - 40), match.start())
    return "" if verb and _is_clitic_host(verb.group(1)) else " "


def strip_markup(osis: str) -> str:
    """Turns one verse of OSIS markup into plain text.

    Handles, in order:
      * back matter after a book's closing milestone (the WEB glossary that
        sits in Rev 22:21) is cut;
      * footnotes, cross references and speaker labels are dropped with their
        content; where that leaves two words touching ("God<note>..</note>created")
        a space is put back, but not before punctuation ("shekel<note/>,");
        quotation tags are treated the same way ("righteousness.”</q><w>Then");
      * canonical titles (psalm superscriptions such as "A Psalm by David.")
        keep their text, because the Spanish carries them inside verse 1;
        other titles are dropped;
      * back-to-back word elements get a space ("allí</w><transChange>también"),
        except an added enclitic pronoun, which is joined to its verb
        ("sáca</w><transChange>lo" -> "sácalo", see `_is_clitic_host`);
      * Strong's numbers (in `<w lemma=..>` attributes, or bare as `<G5547>`)
        and all remaining tags are removed, entities unescaped, whitespace
        collapsed.

    Args:
      osis: the verse's raw OSIS string.

    Returns:
      The verse text on one line ('' for an empty slot).
    """
    text = _BOOK_END.sub("", osis)
    text = _DROPPED_ELEMENTS.sub(_GAP, text)
    text = _TITLE.sub(
        lambda m: f" {m.group(2)} " if 'canonical="true"' in m.group(1) else _GAP, text
    )
    text = _QUOTE_TAG.sub(_GAP, text)
    text = _ADDED_CLITIC.sub(_join_added_clitic, text)
    text = _ADJACENT_WORD_ELEMENTS.sub(r"\1 ", text)
    text = _INLINE_TAG.sub("", text)
    text = _STRONGS_TAG.sub("", text)
    text = _ANY_TAG.sub(" ", text)
    text = html.unescape(text)
    text = _GAP_RUN.sub(_resolve_gap, text)
    return " ".join(text.split())


_WORD = re.compile(r"\w+")
_SENTENCE_END = ".:;?!"


def _is_caps_word(word: str) -> bool:
    return len(word) >= 2 and word.isalpha() and word.isupper()


_SENTENCE_START = re.compile(
    r"(?:^|[" + re.escape(_SENTENCE_END) + r"])[\s" + re.escape(_OPENING_PUNCT) + r"]*(?=\w)"
)


def _sentence_starts(text: str) -> set[int]:
    """Offsets of words that open a sentence (only opening punctuation before them)."""
    return {match.end() for match in _SENTENCE_START.finditer(text)}


def build_casing_table(texts: Iterable[str]) -> dict[str, str]:
    """Learns each word's usual casing from running text.

    Counts the forms of every word that is neither all caps nor at a sentence
    start, and keeps the most frequent ('Jehová', 'Dios', 'fueron').

    Returns:
      `{word.lower(): preferred_form}`.
    """
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for text in texts:
        sentence_starts = _sentence_starts(text)
        for match in _WORD.finditer(text):
            word = match.group()
            if match.start() in sentence_starts or not word.isalpha() or _is_caps_word(word):
                continue
            counts[word.lower()][word] += 1
    return {lower: forms.most_common(1)[0][0] for lower, forms in counts.items()}


def _opens_caps_run(
    text: str,
    words: list[re.Match],
    index: int,
    casing: Mapping[str, str],
    sentence_starts: set[int],
) -> int | None:
    """Where the drop-cap run holding `words[index]` starts, or None if it is not one.

    `words[index]` must be all caps. An unknown all-caps word followed by a
    period is a heading, not a drop cap: the acrostic letters of Psalm 119
    ("ALEPH. Bienaventurados"), which the WEB keeps in capitals too. Single
    capital letters right before it belong to the run ("Y FUERON", "A TI"),
    and the run must start a sentence.
    """
    word = words[index].group()
    if not _is_caps_word(word):
        return None
    if word.lower() not in casing and text[words[index].end() :].lstrip().startswith("."):
        return None
    start = index
    while (
        start > 0
        and len(words[start - 1].group()) == 1
        and words[start - 1].group().isupper()
        and text[words[start - 1].end() : words[start].start()].isspace()
    ):
        start -= 1
    return start if words[start].start() in sentence_starts else None


def fix_caps_opening(text: str, casing: Mapping[str, str]) -> str:
    """Undoes the printed drop-cap style of the RV1909's chapter openings.

    The first words of each chapter are set in capitals ("EN el principio",
    "Y FUERON acabados", "Salmo de David. JEHOVÁ es mi pastor", "A TI, oh
    Jehová", "Entonces dijo: AMARTE he"). This finds the first sentence-opening
    run of all-caps words (see `_opens_caps_run`) and rewrites it in each
    word's usual casing from `casing` (lowercase for words never seen in
    running text), capitalizing the first letter of the sentence.

    Apply it to verse 1 of a chapter only: inside verses capitals are
    deliberate ("YO SOY EL QUE SOY", "SANTIDAD Á JEHOVÁ").

    Args:
      text: plain verse text.
      casing: `build_casing_table` over the same module.

    Returns:
      The text with the opening run re-cased (unchanged if there is none).
    """
    words = list(_WORD.finditer(text))
    sentence_starts = _sentence_starts(text)
    for index in range(len(words)):
        start = _opens_caps_run(text, words, index, casing, sentence_starts)
        if start is not None:
            break
    else:
        return text
    end = index
    while (
        end + 1 < len(words)
        and _is_caps_word(words[end + 1].group())
        and text[words[end].end() : words[end + 1].start()].isspace()
    ):
        end += 1
    pieces, cursor = [], 0
    for position in range(index, end + 1):
        match = words[position]
        word = casing.get(match.group().lower(), match.group().lower())
        if position == start:  # no single capital letter before it: it opens the sentence
            word = word[:1].upper() + word[1:]
        pieces += [text[cursor : match.start()], word]
        cursor = match.end()
    return "".join(pieces) + text[cursor:]


# A colophon after the closing "Amén." of an epistle's last verse: "Amén. Fué
# escrita de Corinto á los Romanos, enviada por medio de Febe, ...".
_SUBSCRIPTION = re.compile(r"(\bAmén\.)\s+[^.]*\b(?:[Ee]scrita|[Ee]nviada)\b.*$")


def strip_subscription(text: str) -> str:
    """Cuts the subscription the RV1909 appends to the last verse of an epistle.

    The Textus Receptus tradition ends Paul's letters and Hebrews with a note
    on where the letter was written ("Fué escrita de Corinto á los Romanos").
    It is not part of the verse and the WEB does not have it.
    """
    return _SUBSCRIPTION.sub(r"\1", text)
