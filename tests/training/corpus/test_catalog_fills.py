"""training.corpus.catalog_fills: a catalog message's placeholders filled alike on both sides,
matched by what identifies them to the program, dates rendered in both languages, mismatches
dropped with their reason, every draw seeded by the message."""

import datetime
import os
import re
import subprocess
import sys

import pytest

from training.corpus import catalog_cleaning as cleaning
from training.corpus import catalog_fills as fills
from training.corpus import fill_values as values

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


def _filled(english, spanish):
    pair, reason = fills.fill_placeholders(english, spanish)
    assert reason is None, (english, spanish, reason)
    return pair


def _value_between(text, before, after):
    assert text.startswith(before) and text.endswith(after), (text, before, after)
    return text[len(before) : len(text) - len(after)]


def _numbers(text):
    """The figures of `text`, English or Spanish, as numbers (`1.234,5` and `1,234.5` alike)."""
    found = re.findall(r"\d[\d.,]*\d|\d", text)
    return [float(f.replace(",", "").replace(".", "")) for f in found]


# Each kind of placeholder, as it stands in an English and a Spanish message.
KINDS = {
    "printf %s": ("%s", "%s"),
    "printf %d": ("%d", "%d"),
    "printf %ld": ("%ld", "%ld"),
    "printf %zu": ("%zu", "%zu"),
    "printf %'d": ("%'d", "%'d"),
    "printf %.2f": ("%.2f", "%.2f"),
    "numbered %1$s": ("%1$s", "%1$s"),
    "Python %(name)s": ("%(name)s", "%(name)s"),
    "Qt %1": ("%1", "%1"),
    "Qt %L1": ("%L1", "%L1"),
    "Boost %1%": ("%1%", "%1%"),
    "{0}": ("{0}", "{0}"),
    "{}": ("{}", "{}"),
    "{name}": ("{name}", "{name}"),
    "Fluent { -brand-short-name }": ("{ -brand-short-name }", "{ -brand-short-name }"),
    "${Name}": ("${Name}", "${Name}"),
    "$1": ("$1", "$1"),
    "$name": ("$name", "$name"),
    "Wesnoth $unit.name|": ("$unit.name|", "$unit.name|"),
    "@NAME@": ("@NAME@", "@NAME@"),
    "%PRODUCTNAME": ("%PRODUCTNAME", "%PRODUCTNAME"),
    "<npcname>": ("<npcname>", "<npcname>"),
}


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_of_placeholder_is_filled_with_one_value_on_both_sides(kind):
    english_placeholder, spanish_placeholder = KINDS[kind]
    english = f"We saw {english_placeholder} near the old bridge yesterday."
    spanish = f"Vimos {spanish_placeholder} cerca del puente viejo ayer."
    filled_english, filled_spanish = _filled(english, spanish)
    english_value = _value_between(filled_english, "We saw ", " near the old bridge yesterday.")
    spanish_value = _value_between(filled_spanish, "Vimos ", " cerca del puente viejo ayer.")
    assert english_value and not cleaning.has_placeholder(filled_english + filled_spanish)
    if re.search(r"\d", english_value):
        assert _numbers(english_value) == _numbers(spanish_value)
    else:
        assert english_value == spanish_value
    pair, reason = cleaning.clean_filled_message(english, spanish)
    assert reason is None and pair == (filled_spanish, filled_english)


def test_positional_placeholders_match_the_numbered_ones_of_the_translation():
    english, spanish = _filled("Moved by %s at %s today.", "Movido hoy a las %2$s por %1$s.")
    person, time = re.fullmatch(r"Moved by (.+) at (.+) today\.", english).groups()
    assert re.fullmatch(r"\d{1,2}:\d\d", spanish.split()[4]), spanish
    assert spanish == f"Movido hoy a las {spanish.split()[4]} por {person}."
    assert time.split()[0] == spanish.split()[4] or time.endswith("M")


def test_reordered_numbered_placeholders_keep_their_values():
    english, spanish = _filled(
        "%1$s paid %2$d coins before the storm.", "%2$d monedas pagó %1$s antes de la tormenta."
    )
    payer, coins = re.fullmatch(r"(.+) paid (\d+) coins before the storm\.", english).groups()
    assert not re.search(r"\d", payer)
    assert spanish == f"{coins} monedas pagó {payer} antes de la tormenta."
    qt_english, qt_spanish = _filled("Copy %1 to %2 now.", "Copiar en %2 el archivo %1 ahora.")
    source, target = re.fullmatch(r"Copy (.+) to (.+) now\.", qt_english).groups()
    assert qt_spanish == f"Copiar en {target} el archivo {source} ahora."


def test_a_date_format_renders_one_moment_in_each_language():
    """Both sides of a date format show the moment the message's own draw gives, English by
    Python's strftime (the C locale's names), Spanish with lowercase names and a 24-hour time."""
    english_format = "%A, %B %d, %Y %I:%M %p"
    spanish_format = "%A, %e de %B de %Y a las %H:%M"
    english, spanish = _filled(english_format, spanish_format)
    moment = values.draw_moment(fills.message_rng(english_format, spanish_format))
    assert english == moment.strftime(english_format)
    weekday = values.SPANISH_WEEKDAYS[moment.weekday()]
    month = values.SPANISH_MONTHS[moment.month - 1]
    assert spanish == (
        f"{weekday}, {moment.day:2d} de {month} de {moment.year} a las "
        f"{moment.hour:02d}:{moment.minute:02d}"
    )
    assert weekday.islower() and month.islower()


@pytest.mark.parametrize(
    "pattern", ["%a %b %d %Y", "%H:%M:%S", "%y-%m-%d", "%j", "%R", "%T", "%D", "%F", "%I %p"]
)
def test_english_dates_are_rendered_as_strftime_renders_them(pattern):
    moment = datetime.datetime(2023, 3, 5, 21, 7, 9)
    assert values.render_strftime(pattern, moment, values.ENGLISH) == moment.strftime(pattern)


def test_spanish_dates_follow_the_flags_and_names_of_the_spanish_locale():
    moment = datetime.datetime(2023, 3, 5, 9, 7, 9)
    render = values.render_strftime
    assert render("%-d de %B, %-H:%M", moment, values.SPANISH) == "5 de marzo, 9:07"
    assert render("%a %e %b %l %p", moment, values.SPANISH) == "dom  5 mar  9 a. m."
    assert render("%^A %_H", moment, values.SPANISH) == "DOMINGO  9"
    with pytest.raises(ValueError, match="%x"):
        render("%x", moment, values.SPANISH)


def test_a_time_after_a_las_and_a_date_after_el():
    english, spanish = _filled(
        "Last checked on %s at %s", "Comprobado por última vez el %s a las %s"
    )
    date, time = re.fullmatch(r"Last checked on (.+) at (.+)", english).groups()
    spanish_date, spanish_time = re.fullmatch(
        r"Comprobado por última vez el (.+) a las (.+)", spanish
    ).groups()
    assert re.fullmatch(r"\d{1,2}:\d\d( [AP]M)?", time), time
    assert re.fullmatch(r"\d{1,2}:\d\d", spanish_time), spanish_time
    assert re.fullmatch(r"[A-Z][a-z]+ \d{1,2}, \d{4}", date), date
    assert re.fullmatch(r"\d{1,2} de [a-z]+ de \d{4}", spanish_date), spanish_date
    assert _numbers(date)[-1] == _numbers(spanish_date)[-1]


def test_decimals_take_a_comma_in_spanish_and_counts_agree_with_their_noun():
    english, spanish = _filled("The file is %.1f MB long.", "El archivo ocupa %.1f MB.")
    assert re.fullmatch(r"The file is \d+\.\d MB long\.", english), english
    assert re.fullmatch(r"El archivo ocupa \d+,\d MB\.", spanish), spanish
    counts = [
        int(
            _filled(f"Downloading %d files from server {n}.", "Descargando %d archivos.")[1][12:-10]
        )
        for n in range(300)
    ]
    assert min(counts) == 2 and len(set(counts)) > 20
    grouped = _filled("Copying %'d files now.", "Copiando %'d archivos ahora.")
    english_figure = grouped[0].split()[1]
    assert _numbers(english_figure) == _numbers(grouped[1].split()[1])
    assert grouped[1].split()[1] == english_figure.translate(str.maketrans(",.", ".,"))


def test_a_noun_agrees_with_the_spanish_article_and_an_error_follows_a_failure():
    for seed in range(20):
        english, spanish = _filled(
            f"You drop the %s number {seed}.", f"Sueltas la %s número {seed}."
        )
        noun = _value_between(spanish, "Sueltas la ", f" número {seed}.")
        thing = next(thing for thing in values.THINGS if thing.spanish == noun)
        assert thing.gender == "f" and english.startswith(f"You drop the {thing.english} ")
    english, spanish = _filled("Failed to save the report: %s", "No se pudo guardar el informe: %s")
    reason = english.rsplit(": ", 1)[1]
    assert (reason, spanish.rsplit(": ", 1)[1]) in values.ERRORS


@pytest.mark.parametrize(
    "english, spanish",
    [
        ("Copied %s to %s.", "Se copió %s."),  # one placeholder missing
        ("Copied %d files.", "Se copiaron %f archivos."),  # an integer against a decimal
        ("Hello %1 and %2.", "Hola %1 y %3."),  # other numbers
        ("Today at %H:%M", "Hoy, %A"),  # a time against a weekday
    ],
)
def test_mismatched_placeholders_are_dropped_with_their_reason(english, spanish):
    assert fills.fill_placeholders(english, spanish) == (None, fills.PLACEHOLDERS_MISMATCHED)
    assert cleaning.clean_filled_message(english, spanish) == (None, fills.PLACEHOLDERS_MISMATCHED)


@pytest.mark.parametrize(
    "english, spanish",
    [
        ("Press %c to continue now.", "Pulse %c para continuar ahora."),  # a character
        ("The address is %x in memory.", "La dirección es %x en memoria."),  # hexadecimal
        ("<swear>, %s is here again.", "<swear>, %s está aquí otra vez."),  # a phrase tag
        ("Read the [[Manual]] about %s.", "Lea el [[Manual]] sobre %s."),  # a wiki link
        ("Saved today at %1:%2 again.", "Guardado hoy a las %1:%2 otra vez."),  # a split time
        ("The option '--%s' is not known.", "La opción '--%s' no se conoce."),  # an option
        ("Printed on %x at %H:%M.", "Impreso el %x a las %H:%M."),  # the locale's date
    ],
)
def test_placeholders_of_kinds_not_filled_drop_the_pair(english, spanish):
    assert cleaning.clean_filled_message(english, spanish) == (None, fills.PLACEHOLDER_NOT_FILLED)


def test_a_filled_pair_another_rule_rejects_is_counted_apart():
    assert cleaning.clean_filled_message("Hi %s", "Hola %s") == (
        None,
        cleaning.FILLED_THEN + cleaning.NOT_A_SENTENCE,
    )
    assert cleaning.clean_filled_message("Open", "Abrir") == (None, cleaning.NOT_A_SENTENCE)


def test_the_same_message_is_filled_alike_in_any_process():
    message = ("%s sent %d photos to %s on %s.", "%s envió %d fotos a %s el %s.")
    here = _filled(*message)
    assert _filled(*message) == here
    script = (
        "from training.corpus.catalog_fills import fill_placeholders as f; "
        f"print(repr(f(*{message!r})[0]))"
    )
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": REPO_ROOT}
        out = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True
        )
        assert out.stdout.strip() == repr(here), out.stderr


def test_different_messages_draw_different_values():
    values_drawn = {
        _value_between(
            _filled(f"In turn {n}, %s opened the door.", f"En el turno {n}, %s abrió la puerta.")[
                0
            ],
            f"In turn {n}, ",
            " opened the door.",
        )
        for n in range(100)
    }
    assert len(values_drawn) > 30, values_drawn
