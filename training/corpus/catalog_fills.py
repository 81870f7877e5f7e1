"""A catalog message's placeholders filled as the program fills them at run time, one value for
each placeholder, the same on both sides (`fill_placeholders`).

A message that holds `%s`, `%d`, `%1`, `{0}`, `${Name}`, `%H:%M`, ... is a sentence with holes,
and the messages with holes are those that carry numbers, times, dates, counts and names in
context ("%s a las %s" / "%s at %s"). Cutting the holes out breaks the sentence; filling them
gives the model the figures and names it otherwise never sees in a sentence.

The placeholders of both sides are parsed and matched by what identifies them to the program:
positional printf `%s`/`%d` by their order (as `%1$s`, `%2$s`, so a translation that reorders
them with `%2$s ... %1$s` matches), numbered `%1$s`, Qt's `%1`, `{0}` and `$1` by their number,
named `%(name)s`, `{name}`, `${Name}`, `$name`, `@NAME@`, `%PRODUCTNAME` and Cataclysm's name
tags (`<npcname>`) by their name. Each matched slot gets one value of the type its conversion
calls for (`%d` an integer, `%.1f` a decimal written each language's way); a text slot gets a
time, date, count, name of a person, place, file or thing, chosen by its name or by the words
around it (`name_category`, `context_category`), else by a seeded draw. A message that holds
an unambiguous strftime directive (an hour, a minute, a year, `%e`) is a date format: both
sides render one drawn date and time, each in its language.

Every draw is seeded from the message itself (`message_rng`), so a build is reproducible byte
for byte and two messages draw apart.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import random
import re

from training.corpus import fill_values as values

# Drop reasons (training/CORPUS.md's cleaning table).
PLACEHOLDERS_MISMATCHED = "placeholders_mismatched"
PLACEHOLDER_NOT_FILLED = "placeholder_not_filled"

# printf conversions filled: integers, decimals, strings. Others (`%c`, `%x`, `%p`, `%e`,
# GNOME's `%B` basename, `%S` size) are a character, a code or a program's own letter.
_INTEGER_CONVERSIONS = frozenset("diu")
_DECIMAL_CONVERSIONS = frozenset("fFgG")
_STRING_CONVERSIONS = frozenset("s")
# Cataclysm's and Freeciv's tags that the game fills with a name; its other tags (`<swear>`,
# `<info>`, `<the_cataclysm>`) are phrases or markup and are not filled.
NAME_TAGS = {
    "npcname": values.PERSON,
    "name_g": values.PERSON,
    "name_b": values.PERSON,
    "given_name": values.PERSON,
    "full_name": values.PERSON,
    "player-name": values.PERSON,
    "family_name": values.PERSON,
    "city": values.PLACE,
}
_TOKEN = re.compile(
    r"(?P<percent>%%)"
    r"|%(?P<boost>\d{1,2})%"  # Boost.Format's %1% (Widelands)
    r"|%(?P<upper_name>[A-Z]{2}[A-Z0-9_]*)%?(?![a-z])"  # LibreOffice's %PRODUCTNAME, %DATE%
    r"|%L(?P<qt_locale>\d{1,2})"  # Qt's %L1: a number in the locale's digits
    r"|%(?:(?P<number>\d+)\$|\((?P<python_name>\w+)\))?"  # printf, numbered, Python's %(name)s
    r"(?P<flags>[-+#0']*)(?P<width>\*|\d+)?(?:\.(?P<precision>\*|\d+))?"
    r"(?:hh|h|ll|l|L|q|j|z|Z|t|I64)?(?P<conversion>[a-zA-Z])"
    r"|%(?P<qt>\d{1,2})"  # Qt's %1
    r"|\{\s*(?P<brace>\$?[A-Za-z_][\w.]*|\d*|-[\w-]+)\s*\}"  # {0} {} {name} Fluent's { -brand }
    r"|\$\{(?P<dollar_brace>\w+)\}"  # ${Name}
    r"|\$(?P<dollar_number>[1-9])(?!\d)"  # $1
    r"|\$(?P<dollar_name>[A-Za-z_]\w+(?:\.[A-Za-z_]\w*)*)[|$]?"  # $name, $unit.name|, $name$
    r"|@(?P<at_name>[A-Za-z_]\w*)@"  # @NAME@
    r"|<(?P<tag>" + "|".join(NAME_TAGS) + r")>"  # Cataclysm's <npcname>
)
# An unambiguous strftime directive: hours, minutes, years, the day as `%e`. `%B` and `%S`
# are not enough: GNOME's file managers use them for a file's name and size.
_STRFTIME_ANCHOR = re.compile(r"%[-_0^#]?[EO]?[HIklMYye](?![A-Za-z0-9])")
# What each strftime directive shows, to check both sides show the same parts of the moment.
_STRFTIME_PARTS = {
    **dict.fromkeys("aAuw", "weekday"),
    **dict.fromkeys("bBhm", "month"),
    **dict.fromkeys("dej", "day"),
    **dict.fromkeys("yYC", "year"),
    **dict.fromkeys("HIklRT", "hour"),
    "M": "minute",
    "S": "second",
}
_WORD = re.compile(r"[^\W\d_]+")
# A placeholder followed by ":" and another: hours and minutes filled apart, which would need
# a time split in two.
_CLOCK_PART = re.compile(r"[:∶]%")
# A placeholder right after a command-line option's dash (`'--%s'`): an option's name.
_OPTION_DASH = re.compile(r"(?:^|[\s'\"‘“`(\[])--?$")


class UnfilledPlaceholder(ValueError):
    """A placeholder this module does not fill (its reason is the exception's argument)."""


@dataclasses.dataclass(frozen=True)
class Placeholder:
    """One placeholder of a message side.

    Attributes:
      start, end: its span in the text.
      slot: what identifies it to the program, the same on both sides: `("number", n)` for
        positional and numbered ones (`%s` is `("number", 1)` when first, `{0}` too), `("name",
        name)` for named ones; `("percent", 0)` is printf's literal `%%`.
      kind: `integer`, `decimal`, or None (a string: a text slot, whose value `draw_fill` chooses).
      precision: decimals of a `%.2f` (None: the conversion's own).
      grouped: digits grouped (printf's `'` flag, Qt's `%L1`).
    """

    start: int
    end: int
    slot: tuple
    kind: str | None = None
    precision: int | None = None
    grouped: bool = False


def _printf(match: re.Match, positional: int) -> Placeholder:
    """A printf conversion (`positional`: how many unnumbered ones came before)."""
    conversion, precision = match["conversion"], match["precision"]
    if "*" in (match["width"], precision):
        raise UnfilledPlaceholder(f"{match[0]}: a width or precision taken from an argument")
    if match["python_name"]:
        slot = ("name", match["python_name"])
    else:
        slot = ("number", int(match["number"] or positional + 1))
    if conversion in _INTEGER_CONVERSIONS:
        kind = values.INTEGER
    elif conversion in _DECIMAL_CONVERSIONS:
        kind = values.DECIMAL
    elif conversion in _STRING_CONVERSIONS:
        kind = None
    else:
        raise UnfilledPlaceholder(f"{match[0]}: printf conversion %{conversion} is not filled")
    return Placeholder(
        *match.span(),
        slot,
        kind,
        int(precision) if precision else None,
        grouped="'" in match["flags"],
    )


def _slot_of(match: re.Match, positional: int) -> Placeholder:
    """The placeholder a non-printf `_TOKEN` match is (`positional`: unnumbered ones before)."""
    span = match.span()
    if match["boost"]:
        return Placeholder(*span, ("number", int(match["boost"])))
    if match["qt"]:
        return Placeholder(*span, ("number", int(match["qt"])))
    if match["qt_locale"]:
        return Placeholder(*span, ("number", int(match["qt_locale"])), grouped=True)
    if match["brace"] is not None:
        brace = match["brace"].lstrip("$")
        if not brace or brace.isdigit():
            return Placeholder(*span, ("number", int(brace) + 1 if brace else positional + 1))
        return Placeholder(*span, ("name", brace))
    if match["dollar_number"]:
        return Placeholder(*span, ("number", int(match["dollar_number"])))
    names = ("upper_name", "dollar_brace", "dollar_name", "at_name", "tag")
    return Placeholder(*span, ("name", next(match[group] for group in names if match[group])))


def find_placeholders(text: str) -> list[Placeholder]:
    """The placeholders of one side of a message, in order, `%%` among them.

    Markup tags, tags that are not `NAME_TAGS`, wiki links and anything else `_TOKEN` does not
    read are left in the text; the caller checks none is left
    (`catalog_cleaning.has_placeholder`).

    Raises:
      UnfilledPlaceholder: a placeholder of a kind this module does not fill, or one where no
        single value reads right (a part of a time, a command-line option's name).
    """
    found = []
    positional = 0
    for match in _TOKEN.finditer(text):
        if match["percent"]:
            found.append(Placeholder(*match.span(), ("percent", 0)))
            continue
        before = text[: match.start()]
        if _CLOCK_PART.match(text, match.end()) or before.endswith(":"):
            raise UnfilledPlaceholder(f"{match[0]}: a part of a time (`%1:%2`)")
        if _OPTION_DASH.search(before):
            raise UnfilledPlaceholder(f"{match[0]}: a command-line option's name")
        if match["conversion"]:
            placeholder = _printf(match, positional)
        else:
            placeholder = _slot_of(match, positional)
        unnumbered = match["conversion"] and not (match["number"] or match["python_name"])
        if unnumbered or match["brace"] == "":
            positional += 1
        found.append(placeholder)
    return found


def blank_placeholders(text: str) -> str:
    """`text` with every placeholder this module reads (`find_placeholders`'s, of any kind)
    blanked out, each a space: `%PRODUCTNAME` whole, not just its `%P`."""
    return _TOKEN.sub(" ", text)


def message_rng(english: str, spanish: str) -> random.Random:
    """The random draws of one message: seeded by its text, so the same message is always
    filled alike (on every machine and run) and different messages draw apart."""
    digest = hashlib.sha256(f"{english}\0{spanish}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


class PlaceholdersMismatched(ValueError):
    """The two sides' placeholders do not match one to one."""


def match_slots(english: list[Placeholder], spanish: list[Placeholder]) -> dict[tuple, str | None]:
    """The slots both sides fill, each with its kind, in the order the English first shows them.

    A slot's kind is the one its conversions ask for (`%d` on one side and Qt's untyped `%1`
    on the other: an integer); None where neither asks for one (a text slot).

    Raises:
      PlaceholdersMismatched: a slot one side has and the other not, or two kinds for one slot
        (`%d` against `%f`).
    """
    kinds: dict[tuple, set] = collections.defaultdict(set)
    slots = []
    for side in (english, spanish):
        found = {placeholder.slot for placeholder in side if placeholder.slot[0] != "percent"}
        slots.append(found)
        for placeholder in side:
            if placeholder.kind is not None:
                kinds[placeholder.slot].add(placeholder.kind)
    if slots[0] != slots[1]:
        raise PlaceholdersMismatched(f"{sorted(slots[0])} against {sorted(slots[1])}")
    if any(len(found) > 1 for found in kinds.values()):
        raise PlaceholdersMismatched(f"conversions of different kinds: {dict(kinds)}")
    ordered = dict.fromkeys(p.slot for p in english if p.slot[0] != "percent")
    return {slot: next(iter(kinds[slot]), None) for slot in ordered}


@dataclasses.dataclass(frozen=True)
class Context:
    """The words around a slot's first placeholder on each side, lowercase, placeholders and
    tags left out: those before (nearest last) and up to three after (nearest first).

    Attributes:
      noun_follows: the English placeholder is followed by a word (a counted noun, in the
        plural for any count but one).
      percent_follows: the English placeholder is followed by `%`.
      quoted: the English placeholder stands in quotation marks (a file's or an object's
        name, as programs quote them).
      after_colon: the English placeholder follows a colon ("Failed to save: %s").
      colon_follows: a colon follows the English placeholder ("%s: invalid option").
    """

    english_before: tuple[str, ...]
    english_after: tuple[str, ...]
    spanish_before: tuple[str, ...]
    spanish_after: tuple[str, ...]
    noun_follows: bool
    percent_follows: bool
    quoted: bool
    after_colon: bool
    colon_follows: bool


def _words_around(text: str, placeholders: list[Placeholder], slot: tuple) -> tuple:
    """`(words before, words after, the character before but spaces, the text after)` of the
    first placeholder of `slot`."""
    blanked = list(text)
    for placeholder in placeholders:
        blanked[placeholder.start : placeholder.end] = " " * (placeholder.end - placeholder.start)
    skeleton = re.sub(r"<[^<>]*>", lambda tag: " " * len(tag[0]), "".join(blanked))
    first = next(placeholder for placeholder in placeholders if placeholder.slot == slot)
    before = [word.lower() for word in _WORD.findall(skeleton[: first.start])]
    after = [word.lower() for word in _WORD.findall(skeleton[first.end :])]
    opening = skeleton[: first.start].rstrip()[-1:]
    return tuple(before), tuple(after[:3]), opening, text[first.end :]


def slot_context(slot: tuple, english: str, spanish: str, sides: tuple) -> Context:
    """The `Context` of `slot` in a message whose sides' placeholders are `sides`."""
    english_before, english_after, opening, english_rest = _words_around(english, sides[0], slot)
    spanish_before, spanish_after, *_ = _words_around(spanish, sides[1], slot)
    return Context(
        english_before,
        english_after,
        spanish_before,
        spanish_after,
        noun_follows=bool(re.match(r"\s+[^\W\d_]", english_rest)),
        percent_follows=english_rest.lstrip().startswith("%"),
        quoted=bool(opening) and opening in "'\"“‘«`[",
        after_colon=opening == ":",
        colon_follows=english_rest.startswith(":"),
    )


# A name's parts (`death_place`, `fileName`, `$unit.hitpoints`) that say what it holds, tried
# in this order.
_NAME_PARTS = (
    (values.NOTHING, {"endnotes"}),  # Gramps's source citations, empty without sources
    (values.DATE, {"date"}),
    (values.TIME, {"time", "hour"}),
    (values.PLACE, {"place", "city", "town", "location", "country", "region"}),
    (values.FILE, {"file", "filename", "path", "folder", "dir", "directory", "document"}),
    (values.VERSION, {"version", "ver", "productversion"}),
    (
        values.INTEGER,
        set(
            "count number num n quantity amount total age year years hp hitpoints gold turn "
            "turns level percent size side index max min days hours minutes seconds".split()
        ),
    ),
    (
        values.PERSON,
        set(
            "user username nick nickname player person sender buddy who author contact spouse "
            "father mother child friend npcname speaker student owner leader recipient".split()
        ),
    ),
)
# With "name": whose name it is, when it is a person's.
_PERSON_NAME_PARTS = {"name", "given", "full", "family", "first", "last", "display", "real", "unit"}


def name_category(name: str) -> str | None:
    """What a named placeholder holds by its name, or None when the name does not say."""
    if name.lstrip("-").lower() in values.KNOWN_VALUES:
        return values.KNOWN
    if name in NAME_TAGS:
        return NAME_TAGS[name]
    parts = {part.lower() for part in re.split(r"[_.\-\s]+|(?<=[a-z])(?=[A-Z])", name) if part}
    for category, words in _NAME_PARTS:
        if parts & words:
            return category
    if "name" in parts and parts <= _PERSON_NAME_PARTS:
        return values.PERSON
    return None


_TIME_BEFORE = {("a", "las"), ("hasta", "las"), ("desde", "las")}  # "a las %s": a time
_UNITS = set(
    "b kb kib mb mib gb gib tb bytes byte kbps mbps fps hz khz mhz px pixels pt cm mm km m kg "
    "g dpi db degrees ms percent".split()
)
_COUNTED_NOUNS = set(
    "files items messages seconds minutes hours days weeks months years times bytes points "
    "pages lines words characters players units turns rows columns entries tracks songs "
    "photos images folders contacts events tasks errors warnings results matches moves "
    "games people users objects nodes layers copies gold coins steps".split()
)
_NUMBER_NOUNS_BEFORE = set(
    "level page turn round chapter step line row column track episode no number nr port".split()
)
_PERSON_WORDS = set(
    "user player contact buddy nick nickname friend person sender author member usuario "
    "jugador contacto amigo persona remitente autor".split()
)
_FILE_WORDS = set(
    "file files folder directory document image archive path filename attachment open save "
    "load read write copy copying rename import export print archivo fichero carpeta "
    "directorio documento imagen abrir guardar cargar".split()
)
# "Failed to save the file: %s": the system's reason.
_FAILURE_WORDS = set("error errors failed failure unable cannot could couldn't impossible".split())
_PLACE_WORDS = set("location place city town ubicación lugar ciudad".split())
_ENGLISH_DETERMINERS = set("the a an your my his her their its this that".split())
# A placeholder that starts the English and is followed by one of these is its subject.
_SUBJECT_VERBS = set(
    "is was has had wants wishes says said left joined died will can cannot sent invites "
    "asks tries attacks".split()
)
# Most placeholders without a cue name something (a page, a device, a calendar) or someone.
_DRAWN_CATEGORIES = (values.TITLE, values.PERSON, values.PLACE, values.INTEGER, values.FILE)
_DRAWN_WEIGHTS = (35, 30, 10, 15, 10)


def _is_verb(next_words: tuple[str, ...]) -> bool:
    """Whether the word after a sentence-initial placeholder is its verb ("%s wishes to ...",
    "%1$s bashes ...", "%s moved ..."): a known one, a third-person "-s" that is no counted
    noun or unit, or a past "-ed"."""
    word = next_words[0] if next_words else ""
    plural_noun = word in _COUNTED_NOUNS or word in _UNITS
    third_person = word.endswith("s") and len(word) > 3 and not plural_noun
    return word in _SUBJECT_VERBS or third_person or word.endswith("ed")


def context_category(context: Context, rng: random.Random) -> str:
    """What a text slot holds by the words around it: "a las %s" a time, "on %s" with "el %s"
    a date, "%s MB" a quantity, "%s files" and "page %s" a count, "version %s" a version, near
    "user", "location" or "file" a person, a place or a file, "%s's", "by %s" and Spanish's personal "a %s" a person,
    "Failed ...: %s" an error, "'%s'" and "%s: ..." a title, "the %s" a thing, "in %s" with
    "en %s" a place, "%s wishes ..." a person; otherwise a seeded draw."""
    english_last = context.english_before[-1:]
    spanish_last = context.spanish_before[-1:]
    english_next = context.english_after[:1]
    window = {*context.english_before[-3:], *context.english_after}
    window |= {*context.spanish_before[-3:], *context.spanish_after}
    rules = (
        (values.TIME, context.spanish_before[-2:] in _TIME_BEFORE),
        (values.DATE, english_last in {("on",), ("since",)} and spanish_last == ("el",)),
        (values.ERROR, context.after_colon and bool(set(context.english_before) & _FAILURE_WORDS)),
        (values.QUANTITY, context.percent_follows or bool(set(english_next) & _UNITS)),
        (values.INTEGER, bool(set(english_next) & _COUNTED_NOUNS)),
        (values.INTEGER, bool(set(english_last) & _NUMBER_NOUNS_BEFORE)),
        (values.VERSION, english_last == ("version",) or spanish_last == ("versión",)),
        (values.PERSON, bool(window & _PERSON_WORDS) or english_next == ("s",)),  # "%s's"
        (values.PLACE, bool(window & _PLACE_WORDS)),
        (values.FILE, bool(window & _FILE_WORDS)),
        (values.PERSON, english_last in {("by",), ("with",), ("from",)}),
        (values.THING, bool(set(english_last) & _ENGLISH_DETERMINERS)),
        (values.PERSON, spanish_last == ("a",)),
        (values.TITLE, context.quoted),
        # GNU's "%s: invalid option": the program's name.
        (values.TITLE, not context.english_before and context.colon_follows),
        (values.PLACE, english_last == ("in",) and spanish_last == ("en",)),
        (values.PERSON, not context.english_before and _is_verb(english_next)),
    )
    for category, applies in rules:
        if applies:
            return category
    return rng.choices(_DRAWN_CATEGORIES, _DRAWN_WEIGHTS)[0]


@dataclasses.dataclass(frozen=True)
class Fill:
    """One slot's value: its English and Spanish text, and the number when it is one (each
    placeholder then writes it with its own decimals and digit groups)."""

    english: str
    spanish: str
    number: float | None = None
    precision: int = 0


def _number_fill(number: float, precision: int = 0) -> Fill:
    return Fill(
        values.write_number(number, values.ENGLISH, precision),
        values.write_number(number, values.SPANISH, precision),
        number,
        precision,
    )


# `%f` and `%g` without a precision: one decimal (`%f`'s six zeros teach nothing).
DEFAULT_DECIMALS = 1


def _numeric_fill(kind: str, placeholders: list[Placeholder], context: Context, rng) -> Fill:
    """The value of an integer or decimal slot (`placeholders`: the slot's, both sides)."""
    if kind == values.INTEGER:
        grouped = any(placeholder.grouped for placeholder in placeholders)
        plural = context.noun_follows
        return _number_fill(values.draw_integer(rng, plural, context.percent_follows, grouped))
    precisions = [p.precision for p in placeholders if p.precision is not None]
    precision = precisions[0] if precisions else DEFAULT_DECIMALS
    return _number_fill(values.draw_decimal(rng, precision), precision)


def _text_fill(category: str, name: str | None, context: Context, rng) -> Fill:
    """The value of a text slot of `category` (`name`: the placeholder's, if it has one)."""
    if category in (values.INTEGER, values.QUANTITY):
        if category == values.QUANTITY and rng.random() < 0.5:
            return _number_fill(values.draw_decimal(rng, DEFAULT_DECIMALS), DEFAULT_DECIMALS)
        return _number_fill(
            values.draw_integer(rng, context.noun_follows, context.percent_follows, False)
        )
    if category in (values.TIME, values.DATE):
        moment = values.draw_moment(rng)
        if category == values.DATE:
            # Gramps's partial dates ("in %(partial_date)s") name a month, not a day.
            return Fill(*values.write_date(moment, month_only="partial" in (name or "")))
        return Fill(*values.write_time(moment, twelve_hour=rng.random() < 0.5))
    if category == values.ERROR:
        return Fill(*rng.choice(values.ERRORS))
    if category == values.THING:
        spanish_before = (context.spanish_before or ("",))[-1]
        return Fill(*values.draw_thing(rng, spanish_before, (context.english_before or ("",))[-1]))
    if category == values.PERSON:
        text = values.draw_person(rng, family_only="family" in (name or ""))
    elif category == values.KNOWN:
        text = values.KNOWN_VALUES[(name or "").lstrip("-").lower()]
    else:
        pool = {
            values.PLACE: values.PLACE_NAMES,
            values.FILE: values.FILE_NAMES,
            values.VERSION: values.VERSIONS,
            values.TITLE: values.TITLES,
            values.NOTHING: ("",),
        }[category]
        text = rng.choice(pool)
    return Fill(text, text)


def draw_fill(slot: tuple, kind: str | None, english: str, spanish: str, sides: tuple, rng) -> Fill:
    """The value of one slot: a number for an integer or decimal slot, else a value of the
    category its name (`name_category`) or its context (`context_category`) calls for."""
    context = slot_context(slot, english, spanish, sides)
    placeholders = [
        placeholder for side in sides for placeholder in side if placeholder.slot == slot
    ]
    if kind is not None:
        return _numeric_fill(kind, placeholders, context, rng)
    name = slot[1] if slot[0] == "name" else None
    category = (name and name_category(name)) or context_category(context, rng)
    return _text_fill(category, name, context, rng)


def _written(placeholder: Placeholder, fill: Fill, language: str) -> str:
    """What the program writes in place of `placeholder` given the slot's `fill`."""
    if placeholder.slot[0] == "percent":
        return "%"
    if fill.number is None:
        return fill.english if language == values.ENGLISH else fill.spanish
    precision = fill.precision
    if placeholder.kind == values.INTEGER:
        precision = 0
    elif placeholder.precision is not None:
        precision = placeholder.precision
    return values.write_number(fill.number, language, precision, placeholder.grouped)


def substitute(text: str, placeholders: list[Placeholder], fills: dict, language: str) -> str:
    """`text` with each placeholder written with its slot's fill, in `language`."""
    pieces, position = [], 0
    for placeholder in placeholders:
        pieces += [
            text[position : placeholder.start],
            _written(placeholder, fills.get(placeholder.slot), language),
        ]
        position = placeholder.end
    return "".join(pieces) + text[position:]


def _fill_date_formats(english: str, spanish: str, rng: random.Random) -> tuple[str, str]:
    """Both sides of a date format rendered for one drawn moment, each in its language.

    Raises:
      PlaceholdersMismatched: the sides show different parts of the moment (a date against a
        time; English's AM/PM aside).
      UnfilledPlaceholder: a directive `fill_values.render_strftime` does not render.
    """
    parts = [
        {
            _STRFTIME_PARTS.get(conversion)
            for _, conversion in values.STRFTIME_DIRECTIVE.findall(side)
        }
        - {None}
        for side in (english, spanish)
    ]
    if parts[0] != parts[1]:
        raise PlaceholdersMismatched(f"the date formats show {parts[0]} and {parts[1]}")
    moment = values.draw_moment(rng)
    try:
        return (
            values.render_strftime(english, moment, values.ENGLISH),
            values.render_strftime(spanish, moment, values.SPANISH),
        )
    except ValueError as exc:
        raise UnfilledPlaceholder(str(exc)) from exc


def fill_placeholders(english: str, spanish: str) -> tuple[tuple[str, str] | None, str | None]:
    """Both sides of a message with every placeholder filled, the same value on both sides.

    Args:
      english: the msgid (context keys already stripped).
      spanish: its msgstr.

    Returns:
      `((english, spanish), None)` filled, or `(None, reason)`: `PLACEHOLDERS_MISMATCHED`
      when the two sides' placeholders do not match one to one, `PLACEHOLDER_NOT_FILLED` for a
      placeholder of a kind this module does not fill. Placeholders it does not read at all
      (markup-like tags, wiki links) are left in the text: the caller checks.
    """
    rng = message_rng(english, spanish)
    try:
        if _STRFTIME_ANCHOR.search(english) or _STRFTIME_ANCHOR.search(spanish):
            return _fill_date_formats(english, spanish, rng), None
        sides = (find_placeholders(english), find_placeholders(spanish))
        kinds = match_slots(*sides)
    except PlaceholdersMismatched:
        return None, PLACEHOLDERS_MISMATCHED
    except UnfilledPlaceholder:
        return None, PLACEHOLDER_NOT_FILLED
    fills = {
        slot: draw_fill(slot, kind, english, spanish, sides, rng) for slot, kind in kinds.items()
    }
    return (
        substitute(english, sides[0], fills, values.ENGLISH),
        substitute(spanish, sides[1], fills, values.SPANISH),
    ), None
