"""Tests for training/corpus/ (sources, TSV, splits, the Bible pipeline) and training/prepare_data.py.

Nothing here needs the Bible packages or the network: corpora are written by the
tests, Bible quirks are imitated with strings observed in the real modules
(tests/corpus_fixtures.py), and TFDS datasets are built locally in tmp_path.
"""

import hashlib
import http.server
import json
import logging
import random
import re
import threading

import pytest
import tensorflow_datasets as tfds
from tensorflow_datasets.core.download import downloader as tfds_downloader

from model.spelling import modernize
from tests.corpus_fixtures import (
    COMMA_JOHANNEUM,
    FULL_CORPUS_LENGTH_RATIO,
    FULL_CORPUS_LENGTH_SCALE,
    JONAH,
    ORDINARY_PAIR,
)
from tests.paths import REPO_ROOT
from training import prepare_data
from training.corpus import alignment, bible, loading, splitting, tsv
from training.corpus.osis import (
    build_casing_table,
    fix_caps_opening,
    strip_markup,
    strip_subscription,
)
from training.corpus.tsv import CorpusError, LineProblem

GOOD_PAIRS = [
    ("¿Dónde está la estación?", "Where is the station?"),
    ("El niño comió una manzana.", "The boy ate an apple."),
    ("Mañana iré a Córdoba con mi pingüino.", "Tomorrow I will go to Córdoba with my penguin."),
]


def write_bytes(path, *lines: bytes, newline=b"\n"):
    path.write_bytes(newline.join(lines) + newline)
    return path


# ----------------------------------------------------------------------- read_tsv


def test_read_tsv_reads_accented_pairs_with_bom_and_crlf(tmp_path):
    lines = [f"{s}\t{t}".encode() for s, t in GOOD_PAIRS]
    lines[0] = b"\xef\xbb\xbf" + lines[0]
    path = write_bytes(tmp_path / "c.tsv", *lines, newline=b"\r\n")
    assert tsv.read_tsv(path) == GOOD_PAIRS


def test_read_tsv_skips_and_reports_each_malformed_line(tmp_path, caplog):
    path = write_bytes(
        tmp_path / "mixed.tsv",
        b"Hola\tHello",  # 1 good
        b"sin tabulador",  # 2 no tab
        b"uno\tdos\ttres",  # 3 two tabs
        b"\tEmpty source",  # 4 empty source
        "Fuente vacía\t   ".encode(),  # 5 empty (blank) target
        b"caf\xe9\tcoffee",  # 6 Latin-1, not UTF-8
        b"",  # 7 blank: ignored silently
        "Adiós\tGoodbye".encode(),  # 8 good
    )
    problems: list[LineProblem] = []
    with caplog.at_level(logging.WARNING, logger="training.corpus"):
        pairs = tsv.read_tsv(path, problems=problems)

    assert pairs == [("Hola", "Hello"), ("Adiós", "Goodbye")]
    assert [p.line_number for p in problems] == [2, 3, 4, 5, 6]
    assert all(p.path == str(path) for p in problems)
    reasons = [p.problem for p in problems]
    assert "no tab" in reasons[0]
    assert "2 tabs" in reasons[1]
    assert reasons[2] == "empty source"
    assert reasons[3] == "empty target"
    assert "invalid UTF-8" in reasons[4] and "byte 3" in reasons[4]
    for problem in problems:  # every skipped line is logged as FILE:LINE
        assert f"{path}:{problem.line_number}:" in caplog.text


def test_read_tsv_strict_raises_on_first_bad_line(tmp_path):
    path = write_bytes(tmp_path / "c.tsv", b"Hola\tHello", "Adiós".encode(), b"a\tb\tc")
    with pytest.raises(CorpusError, match=rf"{path}:2: no tab"):
        tsv.read_tsv(path, strict=True)
    assert issubclass(CorpusError, ValueError)


def test_read_tsv_strict_accepts_a_clean_file(tmp_path):
    path = write_bytes(tmp_path / "c.tsv", *[f"{s}\t{t}".encode() for s, t in GOOD_PAIRS])
    assert tsv.read_tsv(path, strict=True) == GOOD_PAIRS


@pytest.mark.parametrize(
    "content",
    [b"", b"\n\n", b"solo texto\n\t\n", b"\xff\xfe\t\xff\n"],
    ids=["empty", "blank", "bad", "binary"],
)
def test_read_tsv_without_any_valid_pair_always_raises(tmp_path, content):
    path = tmp_path / "c.tsv"
    path.write_bytes(content)
    with pytest.raises(CorpusError, match="no valid 'source<TAB>target' pair"):
        tsv.read_tsv(path)


def test_read_tsv_missing_file_names_it(tmp_path):
    with pytest.raises(CorpusError, match="nope.tsv"):
        tsv.read_tsv(tmp_path / "nope.tsv")


# ---------------------------------------------------------------------- write_tsv


def test_write_tsv_round_trips_and_refuses_to_overwrite(tmp_path):
    path = tmp_path / "sub" / "out.tsv"
    assert tsv.write_tsv(path, GOOD_PAIRS) == len(GOOD_PAIRS)
    assert tsv.read_tsv(path) == GOOD_PAIRS

    with pytest.raises(FileExistsError, match="overwrite=True"):
        tsv.write_tsv(path, [("otro", "other")])
    assert tsv.read_tsv(path) == GOOD_PAIRS  # untouched

    tsv.write_tsv(path, [("otro", "other")], overwrite=True)
    assert tsv.read_tsv(path) == [("otro", "other")]


@pytest.mark.parametrize("bad", [("a\tb", "x"), ("a", "line\nbreak"), ("", "x"), ("a", "  ")])
def test_write_tsv_rejects_pairs_that_would_corrupt_the_file(tmp_path, bad):
    path = tmp_path / "out.tsv"
    with pytest.raises(CorpusError, match="pair 1"):
        tsv.write_tsv(path, [GOOD_PAIRS[0], bad])
    assert not path.exists()


def test_load_corpus_reads_all_splits_and_names_missing_files(tmp_path):
    for split, pairs in zip(tsv.SPLITS, (GOOD_PAIRS, GOOD_PAIRS[:1], GOOD_PAIRS[1:])):
        tsv.write_tsv(tmp_path / f"{split}.tsv", pairs)
    assert tsv.load_corpus(tmp_path) == {
        "train": GOOD_PAIRS,
        "dev": GOOD_PAIRS[:1],
        "test": GOOD_PAIRS[1:],
    }

    (tmp_path / "dev.tsv").unlink()
    with pytest.raises(CorpusError, match="lacks dev.tsv"):
        tsv.load_corpus(tmp_path)


# ----------------------------------------------------------------- split and dedup


def test_stable_fraction_is_the_sha256_prefix():
    key = "Gen.1"
    expected = int(hashlib.sha256(key.encode()).hexdigest()[:16], 16) / 2**64
    assert splitting.stable_fraction(key) == expected
    assert 0 <= splitting.stable_fraction("") < 1


def test_split_for_key_fractions_match_within_binomial_noise():
    n = 20_000
    counts = {split: 0 for split in tsv.SPLITS}
    for i in range(n):
        counts[splitting.split_for_key(f"key-{i}", 0.02, 0.03)] += 1
    for split, share in (("dev", 0.02), ("test", 0.03)):
        sigma = (n * share * (1 - share)) ** 0.5
        assert abs(counts[split] - n * share) < 5 * sigma, counts
    with pytest.raises(ValueError):
        splitting.split_for_key("x", 0.6, 0.5)


def _synthetic_verses(n_books=12, n_chapters=30, n_verses=20):
    return {
        (f"Book{b}", c, v): (f"fuente {b} {c} {v}", f"target {b} {c} {v}")
        for b in range(n_books)
        for c in range(1, n_chapters + 1)
        for v in range(1, n_verses + 1)
    }


def test_split_by_chapter_never_splits_a_chapter_and_is_order_independent():
    pairs = _synthetic_verses()
    splits = bible.split_by_chapter(pairs, dev_fraction=0.1, test_fraction=0.1)

    chapter_split = {}
    for split, items in splits.items():
        for (book, chapter, _), _pair in items:
            assert chapter_split.setdefault((book, chapter), split) == split  # no chapter leaks
    assert sum(len(items) for items in splits.values()) == len(pairs)
    assert all(splits[split] for split in tsv.SPLITS)

    shuffled = list(pairs.items())
    random.Random(0).shuffle(shuffled)
    again = bible.split_by_chapter(dict(shuffled), dev_fraction=0.1, test_fraction=0.1)
    assert {s: sorted(items) for s, items in again.items()} == {
        s: sorted(items) for s, items in splits.items()
    }


def test_split_by_chapter_assignment_does_not_depend_on_other_chapters():
    pairs = _synthetic_verses()
    full = {
        ref[:2]: split for split, items in bible.split_by_chapter(pairs).items() for ref, _ in items
    }
    subset = {ref: pair for ref, pair in pairs.items() if ref[0] in ("Book3", "Book7")}
    part = {
        ref[:2]: split
        for split, items in bible.split_by_chapter(subset).items()
        for ref, _ in items
    }
    assert part == {
        chapter: split for chapter, split in full.items() if chapter[0] in ("Book3", "Book7")
    }


def test_dedup_against_removes_case_and_space_variants_and_keeps_order():
    train = [("Y dijo Dios:", "And God said:"), ("Amén.", "Amen.")]
    evaluation = [
        ("Nueva frase.", "New sentence."),
        ("y  dijo DIOS:", "God said:"),  # in train up to case/whitespace
        ("Otra frase.", "Another one."),
        ("nueva frase.", "New sentence again."),  # repeats an earlier eval source
        ("Amén!", "Amen!"),  # different punctuation: kept
    ]
    kept, removed = splitting.dedup_against(evaluation, train)
    assert kept == [evaluation[0], evaluation[2], evaluation[4]]
    assert removed == 2


def test_split_single_file_keeps_duplicate_sources_together():
    pairs = [(f"frase número {i % 500}", f"sentence {i}") for i in range(3000)]
    splits = splitting.split_single_file(pairs, heldout_fraction=0.1)
    sources = {
        split: {splitting.normalize_for_dedup(s) for s, _ in items}
        for split, items in splits.items()
    }
    assert not sources["train"] & sources["dev"]
    assert not sources["train"] & sources["test"]
    assert not sources["dev"] & sources["test"]
    assert len(splits["dev"]) == len(sources["dev"])  # dev/test deduplicated
    assert splits == splitting.split_single_file(pairs, heldout_fraction=0.1)


# ------------------------------------------------------------ Bible: markup cleaning


def test_strip_markup_removes_strongs_numbers_and_notes_without_gluing_words():
    osis = (
        '<w lemma="strong:H0430">In</w> <w lemma="strong:H7225">beginning</w>, '
        '<w lemma="strong:H0430">God</w><note placement="foot"><reference type="annotateRef">1:1 '
        "</reference>The Hebrew word rendered “God” is “אֱלֹהִ֑ים” (Elohim).</note>"
        '<w lemma="strong:H1254">created</w> <w lemma="strong:H0776">earth</w>. <div eID="gen25" type="x-p"/>'
    )
    assert strip_markup(osis) == "In beginning, God created earth."


def test_strip_markup_puts_no_space_before_punctuation_after_a_note():
    osis = (
        'two assaria coins</q> <note placement="foot"><reference type="annotateRef">12:6 </reference>'
        'An assarion was a small copper coin.</note> <q marker="" who="Jesus">? '
        '<w lemma="strong:G3756">Not</w> one'
    )
    assert strip_markup(osis) == "two assaria coins? Not one"


def test_strip_markup_separates_a_quote_closed_against_the_next_word():
    osis = '<w lemma="strong:G1343">righteousness</w>.”</q><w lemma="strong:G5119">Then</w> he allowed him.'
    assert strip_markup(osis) == "righteousness.” Then he allowed him."


def test_strip_markup_spaces_added_words_but_joins_added_enclitics():
    osis = (
        '<w lemma="strong:H8033">hay allí</w><transChange type="added">también</transChange>'
        '<w lemma="strong:H0916">bdelio</w>: <w lemma="x">sáca</w><transChange type="added">lo</transChange> '
        '<w lemma="x">y Josué</w><transChange type="added">los</transChange> '
        '<w lemma="x">no quiso beber</w><transChange type="added">lo</transChange>. '
        'preguntándo<transChange type="added">le</transChange>'
    )
    assert (
        strip_markup(osis)
        == "hay allí también bdelio: sácalo y Josué los no quiso beberlo. preguntándole"
    )


def test_strip_markup_keeps_psalm_titles_and_drops_other_headings():
    osis = (
        '<div type="x-milestone" subType="x-preverse" sID="pv5154"/><title canonical="true" type="psalm">'
        'A Psalm by David.</title> <lg sID="gen8524"/> <l level="1" sID="gen8525"/>'
        '<w lemma="strong:H3068">Yahweh</w> is my shepherd;<l eID="gen8525" level="1"/> '
        '<title type="section">Not part of the verse</title><speaker>Beloved</speaker> '
        '<l level="2" sID="gen8526"/>I shall lack nothing. <l eID="gen8526" level="2"/>'
    )
    assert strip_markup(osis) == "A Psalm by David. Yahweh is my shepherd; I shall lack nothing."


def test_strip_markup_cuts_the_glossary_after_the_end_of_revelation():
    osis = (
        'The grace of the <w lemma="strong:G2962">Lord</w> be with all the saints. Amen.  <chapter eID="Rev.22"/>'
        '<div eID="gen35836" type="x-p"/> <div canonical="true" eID="gen35575" osisID="Rev" type="book"/> '
        '<div sID="gen35837" type="glossary"/> <title level="1" type="main">World English Bible Glossary</title> '
        '<list> <item><seg type="keyword">Abaddon</seg> Abaddon is Hebrew for destruction.</item></list>'
    )
    assert strip_markup(osis) == "The grace of the Lord be with all the saints. Amen."


def test_strip_markup_removes_bare_strongs_tags_and_unescapes_entities():
    assert strip_markup("Jesu<G2424>cristo &amp; <H7225>Pedro") == "Jesucristo & Pedro"


CASING = build_casing_table(
    [
        "Y dijo Jehová á Moisés que fueron a ti y a Dios.",
        "Porque Jehová es bueno, y fueron acabados; oh Dios, a ti clamo.",
        "Amén. Y fueron todos con Jehová.",
    ]
)


def test_build_casing_table_prefers_running_text_casing():
    assert CASING["jehová"] == "Jehová"
    assert CASING["fueron"] == "fueron"
    assert CASING["dios"] == "Dios"
    assert "amén" not in CASING  # only ever seen at a sentence start


@pytest.mark.parametrize(
    "text, expected",
    [
        ("EN el principio crió Dios los cielos.", "En el principio crió Dios los cielos."),
        ("Y FUERON acabados los cielos.", "Y fueron acabados los cielos."),
        ("Salmo de David. JEHOVÁ es mi pastor.", "Salmo de David. Jehová es mi pastor."),
        (
            "Salmo de David. A TI, oh Jehová, levantaré mi alma.",
            "Salmo de David. A ti, oh Jehová, levantaré mi alma.",
        ),
        ("¡OH Jehová, cuánto!", "¡Oh Jehová, cuánto!"),
        ("Entonces dijo: AMARTE he, oh Jehová.", "Entonces dijo: Amarte he, oh Jehová."),
        ("ALEPH. BIENAVENTURADOS los perfectos.", "ALEPH. Bienaventurados los perfectos."),
        # Capitals inside a sentence are deliberate and stay.
        (
            "Escribe al ángel de la iglesia en SARDIS: El que tiene.",
            "Escribe al ángel de la iglesia en SARDIS: El que tiene.",
        ),
        ("Y respondió Dios á Moisés: Yo soy.", "Y respondió Dios á Moisés: Yo soy."),
    ],
)
def test_fix_caps_opening(text, expected):
    assert fix_caps_opening(text, CASING) == expected


def test_strip_subscription_cuts_the_colophon_only():
    verse = "La gracia sea con todos vosotros. Amén. Fué escrita á los Hebreos desde Italia con Timoteo."
    assert strip_subscription(verse) == "La gracia sea con todos vosotros. Amén."
    plain = "Hijitos, guardaos de los ídolos. Amén."
    assert strip_subscription(plain) == plain


def test_clean_source_verses_applies_caps_fix_to_chapter_openings_only():
    raw = {
        ("Gen", 1, 1): '<w lemma="strong:H7225">EN el principio</w> crió Dios.',
        ("Gen", 1, 2): "Y la tierra estaba desordenada, y el Espíritu de Dios. YO SOY EL QUE SOY.",
        (
            "Heb",
            13,
            25,
        ): "La gracia sea con todos vosotros. Amén. Fué escrita á los Hebreos desde Italia.",
    }
    clean = bible.clean_source_verses(raw)
    assert clean[("Gen", 1, 1)] == "En el principio crió Dios."
    assert clean[("Gen", 1, 2)].endswith("YO SOY EL QUE SOY.")
    assert clean[("Heb", 13, 25)] == "La gracia sea con todos vosotros. Amén."


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


# --------------------------------------------------------------- Bible: build CLI


def _fake_built_corpus(out_dir):
    for split in tsv.SPLITS:
        tsv.write_tsv(out_dir / f"{split}.tsv", GOOD_PAIRS)
    (out_dir / "stats.json").write_text(
        json.dumps({"format_version": bible.CORPUS_FORMAT_VERSION}) + "\n"
    )


def test_build_is_a_noop_when_the_corpus_exists(tmp_path, caplog):
    _fake_built_corpus(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with caplog.at_level(logging.INFO):
        assert prepare_data.main(["--out", str(tmp_path), "--cache", str(tmp_path / "debs")]) == 0
    assert "nothing to do" in caplog.text and "--force" in caplog.text
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    assert not (tmp_path / "debs").exists()  # did not even try to download


def test_build_refuses_to_overwrite_a_partial_corpus(tmp_path):
    tsv.write_tsv(tmp_path / "train.tsv", GOOD_PAIRS)
    with pytest.raises(FileExistsError, match="partial corpus"):
        bible.build_bible_corpus(tmp_path, cache_dir=tmp_path / "debs")
    assert tsv.read_tsv(tmp_path / "train.tsv") == GOOD_PAIRS


# --------------------------------------------------------------------------- TFDS

SPANISH_ENGLISH = {
    "train": [("Buenos días, señor.", "Good morning, sir."), ("¿Qué hora es?", "What time is it?")],
    "validation": [("Gracias por todo.", "Thanks for everything.")],
    "test": [("La niña leía en el jardín.", "The girl was reading in the garden.")],
}


class CorpusTestTinyTranslate(tfds.core.GeneratorBasedBuilder):
    """A two-language dataset built locally, shaped like ted_hrlr_translate."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {"en": tfds.features.Text(), "es": tfds.features.Text()}
            ),
            supervised_keys=("es", "en"),
        )

    def _split_generators(self, dl_manager):
        return {split: self._generate_examples(pairs) for split, pairs in SPANISH_ENGLISH.items()}

    def _generate_examples(self, pairs):
        for index, (es, en) in enumerate(pairs):
            yield index, {"es": es, "en": en}


class CorpusTestUnreachableTranslate(tfds.core.GeneratorBasedBuilder):
    """Downloads its data from URL, which the test points at a local server."""

    VERSION = tfds.core.Version("1.0.0")
    URL = ""

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {"en": tfds.features.Text(), "es": tfds.features.Text()}
            ),
            supervised_keys=("es", "en"),
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(dl_manager.download(self.URL))}

    def _generate_examples(self, path):
        yield 0, {"es": "nunca", "en": "never"}


def test_load_tfds_pairs_maps_supervised_keys_and_dev_split(tmp_path):
    for split, tfds_split in (("train", "train"), ("dev", "validation"), ("test", "test")):
        pairs = loading.load_tfds_pairs("corpus_test_tiny_translate", split, data_dir=tmp_path)
        assert sorted(pairs) == sorted(SPANISH_ENGLISH[tfds_split])
    # Once prepared, it loads without downloading, also through load_pairs.
    assert sorted(
        loading.load_pairs(
            "tfds:corpus_test_tiny_translate", "train", tfds_data_dir=tmp_path, tfds_download=False
        )
    ) == sorted(SPANISH_ENGLISH["train"])


class _NotFoundHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server API)
        self.send_error(404, "no such corpus")

    def log_message(self, *args):
        pass


def test_load_tfds_pairs_turns_a_failed_download_into_corpus_error(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotFoundHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        CorpusTestUnreachableTranslate.URL = (
            f"http://127.0.0.1:{server.server_address[1]}/corpus.tsv"
        )
        with pytest.raises(CorpusError) as error:
            loading.load_tfds_pairs("corpus_test_unreachable_translate", "train", data_dir=tmp_path)
    finally:
        server.shutdown()
        server.server_close()
    message = str(error.value)
    assert "'corpus_test_unreachable_translate'" in message and "failed" in message
    assert "--data" in message and "--tfds_data_dir" in message


def test_load_tfds_pairs_real_dataset_not_downloaded_is_a_clear_error(tmp_path):
    with pytest.raises(CorpusError) as error:
        loading.load_tfds_pairs(
            "ted_hrlr_translate/pt_to_en", "train", data_dir=tmp_path, download=False
        )
    message = str(error.value)
    assert "'ted_hrlr_translate/pt_to_en'" in message and "not available locally" in message
    assert "--data" in message and "--tfds_data_dir" in message


def test_the_real_ted_hrlr_builder_offline_fails_at_the_network(tmp_path, monkeypatch):
    # TFDS retries a failed request 10 times with exponential backoff (minutes offline): once here.
    monkeypatch.setattr(tfds_downloader, "MAX_RETRIES", 0)
    with pytest.raises(CorpusError) as error:
        loading.load_tfds_pairs("ted_hrlr_translate/pt_to_en", "train", data_dir=tmp_path)
    message = str(error.value)
    # The catalogue's builder got as far as its download (no missing module on the way).
    assert message.startswith(
        "downloading TFDS dataset 'ted_hrlr_translate/pt_to_en' failed (ConnectionError: "
    ), message
    assert "phontron.com" in message and "No module named" not in message
    assert "--data" in message and "--tfds_data_dir" in message


def test_a_missing_module_while_preparing_is_not_called_a_failed_download(tmp_path):
    class CorpusTestNeedsAModule(CorpusTestTinyTranslate):
        def _split_generators(self, dl_manager):
            import no_such_corpus_module  # noqa: F401

    with pytest.raises(CorpusError) as error:
        loading.load_tfds_pairs("corpus_test_needs_a_module", "train", data_dir=tmp_path)
    message = str(error.value)
    assert "needs the Python module 'no_such_corpus_module'" in message, message
    assert "downloading" not in message and "requirements.txt" in message


def test_ted_hrlr_supervised_keys_are_pt_to_en(tmp_path):
    assert tfds.builder(
        "ted_hrlr_translate/pt_to_en", data_dir=str(tmp_path)
    ).info.supervised_keys == ("pt", "en")


def test_load_tfds_pairs_unknown_name(tmp_path):
    with pytest.raises(CorpusError, match="unknown TFDS dataset 'no_such_dataset_xyz'"):
        loading.load_tfds_pairs("no_such_dataset_xyz", "train", data_dir=tmp_path, download=False)


# --------------------------------------------------------------------- load_pairs


def test_load_pairs_from_directory_single_file_and_bible_dir(tmp_path):
    data_dir = tmp_path / "corpus"
    for split in tsv.SPLITS:
        tsv.write_tsv(data_dir / f"{split}.tsv", [(f"{split} fuente", f"{split} target")])
    assert loading.load_pairs(str(data_dir), "dev") == [("dev fuente", "dev target")]
    assert loading.load_pairs("bible", "test", bible_dir=data_dir) == [
        ("test fuente", "test target")
    ]

    single = tmp_path / "all.tsv"
    pairs = [(f"oración {i}", f"sentence {i}") for i in range(400)]
    tsv.write_tsv(single, pairs)
    parts = {split: loading.load_pairs(str(single), split) for split in tsv.SPLITS}
    assert sorted(p for part in parts.values() for p in part) == sorted(pairs)
    assert parts == splitting.split_single_file(pairs)


def test_a_single_file_corpus_reports_each_bad_line_once(tmp_path, caplog):
    path = tmp_path / "pairs.tsv"
    good = "".join(f"frase {n}\tsentence {n}\n" for n in range(200))
    path.write_text(good + "sin tabulador\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="training.corpus"):
        splits = {split: loading.load_pairs(str(path), split) for split in ("train", "dev", "test")}
    assert sum(map(len, splits.values())) == 200
    assert [record.getMessage() for record in caplog.records] == [
        f"skipping malformed line {path}:201: no tab: expected 'source<TAB>target'"
    ]
    # An edited file is read again.
    path.write_text(good + "uno\tdos\ttres\n", encoding="utf-8")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="training.corpus"):
        assert loading.load_pairs(str(path), "train") == splits["train"]
    assert [f"{path}:201: 2 tabs" in record.getMessage() for record in caplog.records] == [True]


def test_load_pairs_unknown_spec_names_it(tmp_path):
    not_tsv = tmp_path / "notes.txt"
    not_tsv.write_text("Hola\tHello\n")
    for spec in ("no/such/place", str(not_tsv)):
        with pytest.raises(CorpusError, match=rf"unknown corpus source '{re.escape(spec)}'"):
            loading.load_pairs(spec, "train")
    with pytest.raises(CorpusError, match="empty TFDS name"):
        loading.load_pairs("tfds:", "train")


def test_load_pairs_rejects_unknown_split(tmp_path):
    with pytest.raises(CorpusError, match="unknown split 'validation'"):
        loading.load_pairs("bible", "validation", bible_dir=tmp_path)


def test_bible_build_end_to_end_on_three_books(tmp_path, caplog):
    """The real pipeline (cached Debian packages, pysword, cleaning, alignment, split) on Jonah
    (whose chapter 2 is numbered differently in the two Bibles), Haggai (chapter 1 is a dev
    chapter) and Malachi (chapter 2 is a test chapter); the pairs are those of the full build."""
    full_dir = REPO_ROOT / "data" / "bible"
    if not (full_dir / "stats.json").exists() or not any(bible.DEFAULT_CACHE_DIR.glob("*.deb")):
        pytest.skip("needs `make data` (the full corpus and its cached packages)")
    out = tmp_path / "three-books"
    args = ["--out", str(out), "--cache", str(bible.DEFAULT_CACHE_DIR), "--books", "Jonah,Hag,Mal"]
    assert prepare_data.main(args) == 0
    stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    # 10 chapters; Jonah 2 loses all its verses to the numbering mismatch.
    assert stats["split_chapters"] == {"train": 7, "dev": 1, "test": 1}
    assert list(stats["misaligned_chapters"]) == ["Jonah 2"]
    for split in ("train", "dev", "test"):
        pairs = tsv.read_tsv(out / f"{split}.tsv")
        assert len(pairs) == stats["split_pairs"][split] > 0
        # The full corpus may predate modern spelling; modernizing a modern text changes nothing.
        full = {
            (modernize(source), target)
            for source, target in tsv.read_tsv(full_dir / f"{split}.tsv")
        }
        assert set(pairs) <= full, split
    assert stats["source_spelling"] == "modern" and stats["spelling_rules_applied"]["á→a"] > 0

    # A corpus of an older format (no "format_version": the 1909 spelling) is rebuilt.
    (out / "stats.json").write_text(json.dumps({"split_pairs": {}}), encoding="utf-8")
    caplog.set_level(logging.INFO)
    assert prepare_data.main(args) == 0
    assert "format version 1" in caplog.text and "rebuilding" in caplog.text
    rebuilt = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    assert {**rebuilt, "build_seconds": 0} == {**stats, "build_seconds": 0}

    assert prepare_data.main([*args[:4], "--books", "Jonah,Tobit", "--force"]) == 1
    assert "spaRV1909eb has no book(s) Tobit" in caplog.text
