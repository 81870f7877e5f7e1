"""The values a catalog message's placeholders are filled with, each written in English and in
Spanish as a program running in that language writes it (`training.corpus.catalog_fills`).

A value is drawn from a `random.Random` the caller seeds, so the same message always gets the
same values. Numbers are written each language's way (a decimal comma in Spanish, as the
catalogs' own literal figures and the Spanish locales write them); dates and times are rendered
from strftime directives with English names and lowercase Spanish ones; names of people, places
and files are written the same in both languages; things are nouns translated, of the gender and
number a Spanish article before the placeholder calls for.
"""

from __future__ import annotations

import dataclasses
import datetime
import random
import re

# What a text placeholder (`%s`, `%1`, `{0}`, `$name`) holds, chosen by its name or its
# neighbours (`catalog_fills.name_category`, `catalog_fills.context_category`).
PERSON = "person"
PLACE = "place"
FILE = "file"
THING = "thing"
TIME = "time"
DATE = "date"
INTEGER = "integer"
DECIMAL = "decimal"
QUANTITY = "quantity"  # a measure before a unit: an integer or a decimal
VERSION = "version"
TITLE = "title"  # the name a user gave something: a calendar, a page, a preset, a gradient
ERROR = "error"  # the system's reason a program quotes after "Failed to ...: "
KNOWN = "known"  # a name the program always fills alike (`KNOWN_VALUES`)
NOTHING = "nothing"  # a name the program fills with nothing where no value applies

# Spelled alike in both languages, so the model learns to carry them across unchanged.
PERSON_NAMES = (
    "María", "Juan", "Ana", "Carlos", "Lucía", "Pedro", "Elena", "Pablo", "Sofía", "Diego",
    "Laura", "Miguel", "Carmen", "David", "Isabel", "Daniel", "Sara", "Marta", "Jorge", "Paula",
    "Emma", "Peter", "Anna", "Thomas", "Julia", "Alex", "Oliver", "Nora", "Victor", "Irene",
)  # fmt: skip
FAMILY_NAMES = (
    "García", "López", "Martínez", "Sánchez", "Romero", "Navarro", "Torres", "Ruiz", "Smith",
    "Brown", "Miller", "Taylor",
)  # fmt: skip
PLACE_NAMES = (
    "Madrid", "Lima", "Bogotá", "Quito", "Santiago", "Caracas", "Montevideo", "Buenos Aires",
    "Barcelona", "Valencia", "Chicago", "Toronto", "Boston", "Sydney", "Denver", "Dallas",
    "Granada", "Málaga", "Oslo", "Zúrich",
)  # fmt: skip
FILE_NAMES = (
    "report.pdf", "notes.txt", "photo.jpg", "budget.ods", "letter.odt", "song.ogg",
    "holiday.png", "backup.zip", "invoice.pdf", "draft.txt", "map.svg", "video.mp4",
    "informe.pdf", "fotos.zip", "carta.odt", "Documents", "Music", "Projects",
)  # fmt: skip
TITLES = (
    "Aurora", "Orion", "Atlas", "Nova", "Phoenix", "Luna", "Delta", "Andrómeda", "Horizonte",
    "Mercurio", "Sol", "Summer", "Alfa", "Omega",
)  # fmt: skip
# The system's error messages (strerror's and GLib's), in the Spanish these catalogs give
# them where they hold them, else glibc's.
ERRORS = (
    ("Permission denied", "Permiso denegado"),
    ("No such file or directory", "No existe el fichero o el directorio"),
    ("No space left on device", "No queda espacio en el dispositivo"),
    ("Connection refused", "Conexión rechazada"),
    ("Connection timed out", "Tiempo de espera de la conexión agotado"),
    ("Invalid argument", "Argumento no válido"),
    ("Network is unreachable", "La red no es accesible"),
    ("Operation not permitted", "Operación no permitida"),
    ("Input/output error", "Error de entrada/salida"),
    ("File exists", "El archivo ya existe"),
)
VERSIONS = ("2.4", "3.1.2", "1.16", "5.0", "7.3.1", "0.9", "4.2", "12.1")
# Names a program always fills alike, and what it shows there (LibreOffice's on Linux).
KNOWN_VALUES = {
    "productname": "LibreOffice",
    "modulename": "Writer",
    "mod1": "Ctrl",
    "mod2": "Alt",
    "brand-short-name": "Firefox",
    "brand-full-name": "Mozilla Firefox",
}


@dataclasses.dataclass(frozen=True)
class Thing:
    """A noun in both languages: English singular and plural, Spanish singular and plural, and
    the Spanish gender (`m` or `f`)."""

    english: str
    english_plural: str
    spanish: str
    spanish_plural: str
    gender: str


THINGS = tuple(
    Thing(*fields.split(","))
    for fields in """book,books,libro,libros,m key,keys,llave,llaves,f
    knife,knives,cuchillo,cuchillos,m door,doors,puerta,puertas,f box,boxes,caja,cajas,f
    bottle,bottles,botella,botellas,f
    map,maps,mapa,mapas,m lamp,lamps,lámpara,lámparas,f sword,swords,espada,espadas,f
    shield,shields,escudo,escudos,m phone,phones,teléfono,teléfonos,m
    letter,letters,carta,cartas,f chair,chairs,silla,sillas,f car,cars,coche,coches,m
    hammer,hammers,martillo,martillos,m backpack,backpacks,mochila,mochilas,f
    window,windows,ventana,ventanas,f apple,apples,manzana,manzanas,f egg,eggs,huevo,huevos,m
    orange,oranges,naranja,naranjas,f envelope,envelopes,sobre,sobres,m""".split()
)
# A Spanish determiner before the placeholder: the gender and number of the noun it calls for.
SPANISH_DETERMINERS = {
    **dict.fromkeys("el un este ese aquel del al".split(), ("m", False)),
    **dict.fromkeys("la una esta esa aquella".split(), ("f", False)),
    **dict.fromkeys("los unos estos esos".split(), ("m", True)),
    **dict.fromkeys("las unas estas esas".split(), ("f", True)),
}

ENGLISH_WEEKDAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
SPANISH_WEEKDAYS = "lunes martes miércoles jueves viernes sábado domingo".split()
SPANISH_WEEKDAY_ABBREVIATIONS = "lun mar mié jue vie sáb dom".split()
ENGLISH_MONTHS = (
    "January February March April May June July August September October November December"
).split()
SPANISH_MONTHS = (
    "enero febrero marzo abril mayo junio julio agosto septiembre octubre noviembre diciembre"
).split()
SPANISH_MONTH_ABBREVIATIONS = "ene feb mar abr may jun jul ago sep oct nov dic".split()
# RAE's abbreviations; glibc's Spanish locales write them so too.
SPANISH_AM_PM = ("a. m.", "p. m.")
ENGLISH, SPANISH = "en", "es"

# strftime conversions rendered here, each as (value, padding width, default padding): the
# padding the `-`, `_` and `0` flags change.
_STRFTIME_NUMBERS = {
    "d": (lambda t: t.day, 2, "0"),
    "e": (lambda t: t.day, 2, " "),
    "m": (lambda t: t.month, 2, "0"),
    "y": (lambda t: t.year % 100, 2, "0"),
    "Y": (lambda t: t.year, 4, "0"),
    "C": (lambda t: t.year // 100, 2, "0"),
    "H": (lambda t: t.hour, 2, "0"),
    "k": (lambda t: t.hour, 2, " "),
    "I": (lambda t: (t.hour - 1) % 12 + 1, 2, "0"),
    "l": (lambda t: (t.hour - 1) % 12 + 1, 2, " "),
    "M": (lambda t: t.minute, 2, "0"),
    "S": (lambda t: t.second, 2, "0"),
    "j": (lambda t: t.timetuple().tm_yday, 3, "0"),
    "u": (lambda t: t.isoweekday(), 1, "0"),
    "w": (lambda t: t.isoweekday() % 7, 1, "0"),
}
# Conversions that are shorthand for others.
_STRFTIME_COMPOSITES = {"R": "%H:%M", "T": "%H:%M:%S", "D": "%m/%d/%y", "F": "%Y-%m-%d"}
_STRFTIME_NAMES = frozenset("aAbBhpP")
STRFTIME_RENDERED = (
    frozenset(_STRFTIME_NUMBERS)
    | frozenset(_STRFTIME_COMPOSITES)
    | (_STRFTIME_NAMES | frozenset("nt%"))
)
STRFTIME_DIRECTIVE = re.compile(r"%([-_0^#]?)[EO]?([a-zA-Z%])")


def _name(conversion: str, moment: datetime.datetime, language: str) -> str:
    """A weekday, month or AM/PM name (`%a %A %b %B %h %p %P`) in `language`."""
    weekday, month, pm = moment.weekday(), moment.month - 1, moment.hour >= 12
    if language == ENGLISH:
        full = {"a": ENGLISH_WEEKDAYS[weekday], "b": ENGLISH_MONTHS[month]}
        names = {"A": full["a"], "B": full["b"], "a": full["a"][:3], "b": full["b"][:3]}
        names["p"] = "PM" if pm else "AM"
    else:
        names = {"A": SPANISH_WEEKDAYS[weekday], "B": SPANISH_MONTHS[month]}
        names["a"] = SPANISH_WEEKDAY_ABBREVIATIONS[weekday]
        names["b"] = SPANISH_MONTH_ABBREVIATIONS[month]
        names["p"] = SPANISH_AM_PM[pm]
    names["h"], names["P"] = names["b"], names["p"].lower()
    return names[conversion]


def _padded(number: int, width: int, padding: str, flag: str) -> str:
    padding = {"-": "", "_": " ", "0": "0"}.get(flag, padding)
    return f"{number}".rjust(width, padding) if padding else f"{number}"


def render_strftime(pattern: str, moment: datetime.datetime, language: str) -> str:
    """`pattern`'s strftime directives rendered for `moment` in `language` (`en`, `es`):
    names from this module's tables (lowercase in Spanish), numbers padded as strftime pads
    them (`%e` with a space, `%-d` not at all), `%^B` in capitals.

    Raises:
      ValueError: a directive this module does not render (`%x`, `%c`, `%Z`: the locale's or
        the machine's, not the text's).
    """

    def directive(match: re.Match) -> str:
        flag, conversion = match.groups()
        if conversion not in STRFTIME_RENDERED:
            raise ValueError(f"strftime directive %{conversion} is not rendered")
        if conversion in _STRFTIME_COMPOSITES:
            text = render_strftime(_STRFTIME_COMPOSITES[conversion], moment, language)
        elif conversion in _STRFTIME_NAMES:
            text = _name(conversion, moment, language)
        elif conversion in _STRFTIME_NUMBERS:
            value, width, padding = _STRFTIME_NUMBERS[conversion]
            text = _padded(value(moment), width, padding, flag)
        else:
            text = {"n": "\n", "t": "\t", "%": "%"}[conversion]
        return text.upper() if flag == "^" else text

    return STRFTIME_DIRECTIVE.sub(directive, pattern)


def draw_moment(rng: random.Random) -> datetime.datetime:
    """A date and time of recent years, any hour and minute."""
    return datetime.datetime(
        rng.randint(2015, 2026),
        rng.randint(1, 12),
        rng.randint(1, 28),
        rng.randint(0, 23),
        rng.randint(0, 59),
        rng.randint(0, 59),
    )


def draw_integer(rng: random.Random, plural: bool, percent: bool, grouped: bool) -> int:
    """A count as programs show them: mostly small, some in the tens, a few in the hundreds
    and thousands (tens of thousands where the format groups digits); 2 or more where a
    noun follows (`plural`: English and Spanish then agree in the plural), 0-100 for a
    percentage."""
    if percent:
        return rng.randint(0, 100)
    share = rng.random()
    if grouped:
        return rng.randint(1000, 99999)
    if share < 0.55:
        return rng.randint(2 if plural else 1, 12)
    if share < 0.9:
        return rng.randint(13, 99)
    return rng.randint(100, 2000)


def draw_decimal(rng: random.Random, precision: int) -> float:
    """A measure with `precision` decimals, mostly below 100."""
    high = 100 if rng.random() < 0.8 else 10000
    return round(rng.uniform(0.1, high), precision)


def write_number(value: float, language: str, precision: int = 0, grouped: bool = False) -> str:
    """`value` with `precision` decimals as `language` writes it: `1,234.5` in English,
    `1.234,5` in Spanish (digit groups only when `grouped`)."""
    text = f"{value:,.{precision}f}" if grouped else f"{value:.{precision}f}"
    if language == SPANISH:
        text = text.translate(str.maketrans(",.", ".,"))
    return text


def write_time(moment: datetime.datetime, twelve_hour: bool) -> tuple[str, str]:
    """A time of day `(english, spanish)`: English on a 12-hour clock (`9:05 PM`) when
    `twelve_hour`, else on the 24-hour one, as Spanish always is (`21:05`)."""
    spanish = render_strftime("%-H:%M", moment, SPANISH)
    english = render_strftime("%-l:%M %p", moment, ENGLISH) if twelve_hour else spanish
    return english, spanish


def write_date(moment: datetime.datetime, month_only: bool = False) -> tuple[str, str]:
    """A date `(english, spanish)`: `March 5, 2023` and `5 de marzo de 2023`, or with
    `month_only` `March 2023` and `marzo de 2023`."""
    if month_only:
        english, spanish = "%B %Y", "%B de %Y"
    else:
        english, spanish = "%B %-d, %Y", "%-d de %B de %Y"
    return render_strftime(english, moment, ENGLISH), render_strftime(spanish, moment, SPANISH)


def draw_thing(rng: random.Random, spanish_before: str, english_before: str) -> tuple[str, str]:
    """A noun `(english, spanish)` that agrees with the words before the placeholder: the
    Spanish determiner's gender and number, and English "a" or "an"."""
    gender, plural = SPANISH_DETERMINERS.get(spanish_before, (None, False))
    vowel = {"an": True, "a": False}.get(english_before)
    fitting = [
        thing
        for thing in THINGS
        if gender in (None, thing.gender) and vowel in (None, thing.english[0] in "aeiou")
    ]
    thing = rng.choice(fitting or THINGS)
    if plural and vowel is None:
        return thing.english_plural, thing.spanish_plural
    return thing.english, thing.spanish


def draw_person(rng: random.Random, family_only: bool = False) -> str:
    """A person's given name, or now and then a full name (`family_only`: a family name)."""
    if family_only:
        return rng.choice(FAMILY_NAMES)
    given = rng.choice(PERSON_NAMES)
    return f"{given} {rng.choice(FAMILY_NAMES)}" if rng.random() < 0.3 else given
