"""The message-catalog corpus (training.corpus.catalogs): each cleaning rule on real catalog
lines, read from the real Debian packages `make data-test` downloads into the cache
(`TEST_PACKAGES`, a few MB), and the whole build end to end on them, offline; the corpus is
the one the bundled model was trained and scored on, which the placeholder fills
(`catalog-fills`, tests/training/corpus/test_catalog_fills_corpus.py) leave as it was."""

import gettext
import json
import logging

import pytest

from training import prepare_data
from training.bundle import corpus_names, corpus_row
from training.corpus import catalog_cleaning as cleaning
from training.corpus import fill_values, load_pairs
from training.corpus.catalogs import (
    CORPUS_FORMAT_VERSION,
    DEV_FRACTION,
    SPLIT_SALT,
    TEST_FRACTION,
    TEST_PACKAGES,
    choose_locale_variants,
    read_catalog,
    split_pairs,
)
from training.corpus.debian import DEFAULT_CACHE_DIR, package_licence
from training.corpus.splitting import normalize_for_dedup, split_for_key
from training.corpus.tsv import SPLITS, CorpusError, read_tsv

CACHE_DIR = DEFAULT_CACHE_DIR / "catalogs"


def _unpacked(package):
    directory = CACHE_DIR / "unpacked" / package
    if not (directory / ".unpacked").is_file():
        pytest.fail(f"{package}'s catalogs are not in {CACHE_DIR}: run `make data-test` first")
    return directory


@pytest.fixture(scope="module")
def messages():
    """`{package: [CatalogMessage, ...]}` of every Spanish catalog of the test packages."""
    return {
        package: [
            message
            for path in sorted(_unpacked(package).rglob("*.mo"))
            for message in read_catalog(path)
        ]
        for package in TEST_PACKAGES
    }


def _message(messages, package, english_start, locale="es"):
    """The real message of `package` whose msgid starts with `english_start`."""
    found = [
        message
        for message in messages[package]
        if message.english.startswith(english_start) and message.locale == locale
    ]
    assert found, f"{package} ({locale}) has no msgid starting {english_start!r}"
    return found[0]


def _reason(message):
    return cleaning.clean_message(message.english, message.spanish)[1]


# ------------------------------------------------------------------ reading


def test_read_catalog_agrees_with_the_standard_library_gettext():
    path = _unpacked("hello") / "usr/share/locale/es/LC_MESSAGES/hello.mo"
    with open(path, "rb") as handle:
        reference = gettext.GNUTranslations(handle)
    read = read_catalog(path)
    assert len(read) > 20 and {message.locale for message in read} == {"es"}
    for message in read:
        assert message.spanish == reference.gettext(message.english)
    assert ("Hello, world!", "¡Hola mundo!") in {(m.english, m.spanish) for m in read}


def test_read_catalog_names_a_file_that_is_not_a_catalog(tmp_path):
    broken = tmp_path / "es" / "LC_MESSAGES" / "broken.mo"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"not a catalog")
    with pytest.raises(CorpusError, match="broken.mo"):
        read_catalog(broken)


# ------------------------------------------------------------------ rules


def test_context_key_is_stripped_from_wesnoth_msgids(messages):
    message = _message(messages, "wesnoth-1.16-dw", "female^")
    stripped = cleaning.strip_context_key(message.english)
    assert "^" not in stripped and message.english.endswith(stripped) and stripped


def test_placeholders_drop_the_pair(messages):
    printf = _message(messages, "hello", "Report bugs to: %s")
    printf_sentence = _message(messages, "pidgin-data", "%s wishes to start a video session")
    wesnoth = _message(messages, "wesnoth-1.16-dw", "Thank you, $")
    for message in (printf, printf_sentence, wesnoth):
        assert _reason(message) == cleaning.PLACEHOLDER, message
    plain = _message(messages, "wesnoth-1.16-dw", "Brace yourselves.")
    assert not cleaning.has_placeholder(plain.english)
    assert not cleaning.has_placeholder(plain.spanish)


def test_every_message_with_placeholders_is_dropped_not_filled(messages):
    """The fills are `clean_filled_message`'s, for the catalog-fills corpus: `clean_message`,
    the catalogs corpus's, drops each message that holds a placeholder, as it always has."""
    with_placeholders = [
        message
        for package in TEST_PACKAGES
        for message in messages[package]
        if cleaning.needs_filling(message.english, message.spanish)
    ]
    assert len(with_placeholders) > 500
    assert {_reason(message) for message in with_placeholders} == {cleaning.PLACEHOLDER}


def test_placeholders_are_filled_with_one_name_on_both_sides_for_catalog_fills(messages):
    """A printf subject and Wesnoth's `$spy_unit.name|` are filled with a person's name, the
    same in the English and the Spanish; a filled pair that another rule rejects (an e-mail
    address) is counted under that rule behind `FILLED_THEN`."""
    printf_sentence = _message(messages, "pidgin-data", "%s wishes to start a video session")
    wesnoth = _message(messages, "wesnoth-1.16-dw", "Thank you, $")
    for message, english_tail, spanish_tail in (
        (printf_sentence, " wishes to start", " desea iniciar"),
        (wesnoth, ". I will keep", ". Lo tendré"),
    ):
        (spanish, english), reason = cleaning.clean_filled_message(message.english, message.spanish)
        assert reason is None and not cleaning.has_placeholder(english + spanish)
        name = english.removeprefix("Thank you, ").split(english_tail)[0]
        assert name.split()[0] in fill_values.PERSON_NAMES, english
        assert name in spanish.split(spanish_tail)[0], (name, spanish)
    printf = _message(messages, "hello", "Report bugs to: %s")
    reason = cleaning.clean_filled_message(printf.english, printf.spanish)[1]
    assert reason == cleaning.FILLED_THEN + cleaning.URL_OR_CODE
    plain = _message(messages, "wesnoth-1.16-dw", "Brace yourselves.")
    assert not cleaning.needs_filling(plain.english, plain.spanish)


def test_markup_tags_go_and_their_text_stays(messages):
    message = _message(messages, "wesnoth-1.16-dw", "Foolish fish-men. You cannot kill <i>")
    pair, reason = cleaning.clean_message(message.english, message.spanish)
    assert reason is None
    assert pair == (
        message.spanish.replace("<i>", "").replace("</i>", ""),
        message.english.replace("<i>", "").replace("</i>", ""),
    )


def test_escaped_angle_brackets_left_after_unescaping_drop_the_pair(messages):
    command_help = [m for m in messages["pidgin-data"] if "&lt;" in m.english]
    assert len(command_help) > 10
    assert all(_reason(message) is not None for message in command_help)
    decoded = cleaning.strip_markup(command_help[0].english)
    assert "&lt;" not in decoded and "<" in decoded


def test_gtk_and_qt_accelerators_are_removed(messages):
    gtk = _message(messages, "pidgin-data", "_Accept Defaults")
    assert cleaning.remove_accelerators(gtk.english) == "Accept Defaults"
    assert "_" not in cleaning.remove_accelerators(gtk.spanish)
    mid_word = [m for m in messages["pidgin-data"] if m.english == "_Accounts"][0]
    assert cleaning.remove_accelerators(mid_word.spanish) == mid_word.spanish.replace("_", "")
    qt = _message(messages, "konsole", "&Close Session")
    assert cleaning.remove_accelerators(qt.english) == "Close Session"
    assert "&" not in cleaning.remove_accelerators(qt.spanish)
    # An entity is not an accelerator.
    entity = [m for m in messages["pidgin-data"] if "&lt;" in m.english][0]
    assert "&lt;" in cleaning.remove_accelerators(entity.english)


def test_identifier_msgids_are_dropped(messages):
    assert _reason(_message(messages, "hello", "'")) == cleaning.ID_LIKE
    assert _reason(_message(messages, "pidgin-data", "Volume(0-100)")) == cleaning.ID_LIKE


def test_untranslated_messages_are_dropped(messages):
    copied = [m for m in messages["wesnoth-1.16-dw"] if m.english == m.spanish]
    assert copied
    assert {_reason(message) for message in copied} == {cleaning.UNTRANSLATED}


def test_voseo_loses_to_the_neutral_spanish_of_the_same_msgid(messages):
    english = "Adds a small box to the buddy list that shows if you have new mail."
    neutral = _message(messages, "pidgin-data", english)
    voseo = _message(messages, "pidgin-data", english, locale="es_AR")
    assert "tenés" in voseo.spanish and "tenés" not in neutral.spanish
    # The es_AR catalog comes after es in the file order; try both orders.
    for order in (messages["pidgin-data"], messages["pidgin-data"][::-1]):
        chosen, dropped = choose_locale_variants(order)
        assert [m for m in chosen if m.english == english] == [neutral]
        assert dropped > 100
    assert len({m.english for m in chosen}) == len(chosen)


def test_pieces_of_sentences_are_dropped(messages):
    label = _message(messages, "pidgin-data", "The following error has occurred:", "es_AR")
    assert _reason(label) == cleaning.CUT_MID_SENTENCE
    interrupted = _message(messages, "wesnoth-1.16-dw", "I had hoped...")
    assert not cleaning.is_cut_mid_sentence(interrupted.english)


def test_labels_are_not_sentences_but_short_exclamations_are(messages):
    assert _reason(_message(messages, "wesnoth-1.16-dw", "Beloved Pet")) == cleaning.NOT_A_SENTENCE
    assert _reason(_message(messages, "wesnoth-1.16-dw", "Brace yourselves.")) is None


def test_a_spanish_side_far_longer_than_the_english_is_dropped(messages):
    expanded = _message(messages, "pidgin-data", "Cannot set IM key", "es_AR")
    assert _reason(expanded) == cleaning.LENGTH_RATIO


def test_language_check_tells_the_english_side_from_the_spanish_one(messages):
    """Over every pair of the test packages that all other rules keep: their Spanish passes,
    and their English, put where the Spanish goes (an untranslated or English msgstr), fails."""
    candidates = [
        (message.spanish, message.english)
        for package in TEST_PACKAGES
        for message in messages[package]
        if _reason(message) in (None, cleaning.NOT_SPANISH)
    ]
    assert len(candidates) > 1000
    spanish_passes = sum(cleaning.looks_spanish(s) for s, _ in candidates) / len(candidates)
    long_english = [english for _, english in candidates if len(cleaning.words(english)) >= 6]
    english_passes = sum(map(cleaning.looks_spanish, long_english)) / len(long_english)
    assert spanish_passes > 0.99 and english_passes < 0.05, (spanish_passes, english_passes)
    real = _message(messages, "pidgin-data", "Adds a small box to the buddy list")
    assert cleaning.looks_spanish(real.spanish) and not cleaning.looks_spanish(real.english)


def test_near_duplicate_key_ignores_case_accents_punctuation_and_digits():
    assert cleaning.near_duplicate_key("Tyegëa is your grandmother!") == (
        cleaning.near_duplicate_key("tyegea is your  grandmother.")
    )
    assert cleaning.near_duplicate_key("Attack 2!") == cleaning.near_duplicate_key("attack")
    assert cleaning.near_duplicate_key("Attack!") != cleaning.near_duplicate_key("Retreat!")


def test_package_licence_reads_machine_readable_and_free_form_files():
    pidgin = (_unpacked("pidgin-data") / "usr/share/doc/pidgin-data/copyright").read_text()
    assert package_licence(pidgin).startswith("GPL-2+")
    hello = (_unpacked("hello") / "usr/share/doc/hello/copyright").read_text()
    assert package_licence(hello) == "GPL, GFDL (free-form copyright file)"


def _kept_pairs(messages):
    return [
        pair
        for package in TEST_PACKAGES
        for message in messages[package]
        for pair, _ in [cleaning.clean_message(message.english, message.spanish)]
        if pair is not None
    ]


def test_split_sends_near_duplicates_to_one_split(messages):
    """A sentence and its variant in other case and punctuation land in the same split."""
    kept = _kept_pairs(messages)
    variants = [(spanish, english.upper().rstrip(".!?") + "!") for spanish, english in kept]
    keyed = [(cleaning.near_duplicate_key(e), (s, e)) for s, e in [*kept, *variants]]
    splits, _ = split_pairs(keyed)
    split_of = {pair: split for split, pairs in splits.items() for pair in pairs}
    held_out = [pair for pair in kept if split_of.get(pair) != "train"]
    assert len(held_out) > 20
    for original, variant in zip(kept, variants):
        if original in split_of and variant in split_of:
            assert split_of[original] == split_of[variant], (original, variant)


def test_split_keeps_spanish_seen_in_train_out_of_dev_and_test(messages):
    """Two English sentences translated alike: the Spanish one trains on is never evaluated."""
    kept = _kept_pairs(messages)
    other_english = [(spanish, f"{english} Really, friends.") for spanish, english in kept]
    keyed = [(cleaning.near_duplicate_key(e), (s, e)) for s, e in [*kept, *other_english]]
    splits, removed = split_pairs(keyed)
    train_spanish = {normalize_for_dedup(spanish) for spanish, _ in splits["train"]}
    assert removed > 20
    for split in ("dev", "test"):
        assert splits[split]
        assert not [s for s, _ in splits[split] if normalize_for_dedup(s) in train_spanish]


# ------------------------------------------------------------------ the build


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The corpus of the test packages, built through the command line from the cache, with
    one package whose .deb is broken (as a failed download would leave it)."""
    for package in TEST_PACKAGES:
        _unpacked(package)
    out_dir = tmp_path_factory.mktemp("catalogs")
    cache = tmp_path_factory.mktemp("cache")
    for deb in CACHE_DIR.glob("*.deb"):
        if deb.name.split("_")[0] in TEST_PACKAGES:
            (cache / deb.name).symlink_to(deb)
    (cache / "broken-package_1.0_all.deb").write_bytes(b"not a deb")
    packages = ",".join((*TEST_PACKAGES, "broken-package"))
    argv = ["--corpus", "catalogs", "--out", str(out_dir), "--cache", str(cache)]
    assert prepare_data.main([*argv, "--packages", packages]) == 0
    return out_dir, cache, argv, packages


def test_build_writes_splits_and_a_manifest_that_adds_up(built):
    out_dir, *_ = built
    stats = json.loads((out_dir / "stats.json").read_text())
    splits = {split: read_tsv(out_dir / f"{split}.tsv") for split in SPLITS}
    assert stats["split_pairs"] == {split: len(pairs) for split, pairs in splits.items()}
    manifests = {m["package"]: m for m in stats["packages"]}
    assert "broken-package" in manifests["broken-package"]["error"]
    assert list(stats["packages_unavailable"]) == ["broken-package"]
    for package in TEST_PACKAGES:
        manifest = manifests[package]
        assert manifest["version"] and manifest["licence"] and manifest["catalogs"]
        assert manifest["messages"] == manifest["cleaned"] + sum(
            count for reason, count in manifest["dropped"].items() if reason != "duplicate"
        )
        assert manifest["kept"] == manifest["cleaned"] - manifest["dropped"].get("duplicate", 0)
    kept = sum(manifests[package]["kept"] for package in TEST_PACKAGES)
    removed = stats["dropped"]["in_train_spanish_removed_from_dev_test"]
    assert sum(stats["split_pairs"].values()) == kept - removed
    assert manifests["pidgin-data"]["dropped"]["other_locale_variant"] > 100
    assert all(pairs for pairs in splits.values())


def test_the_fills_leave_the_built_corpus_as_it_was(built, messages):
    """Every pair of the built corpus is what `clean_message` makes of a message without
    placeholders, and it records the format the bundled model's corpus was built in."""
    out_dir, *_ = built
    without_placeholders = {
        cleaning.clean_message(message.english, message.spanish)[0]
        for package in TEST_PACKAGES
        for message in messages[package]
        if not cleaning.needs_filling(message.english, message.spanish)
    }
    every = [pair for split in SPLITS for pair in read_tsv(out_dir / f"{split}.tsv")]
    assert len(every) > 1000 and set(every) <= without_placeholders
    stats = json.loads((out_dir / "stats.json").read_text())
    assert stats["format_version"] == CORPUS_FORMAT_VERSION == 1
    assert "placeholder" in stats["dropped"]


def test_no_near_duplicate_of_a_held_out_sentence_is_trained_on(built):
    out_dir, *_ = built
    splits = {split: read_tsv(out_dir / f"{split}.tsv") for split in SPLITS}
    train_english = {cleaning.near_duplicate_key(english) for _, english in splits["train"]}
    train_spanish = {normalize_for_dedup(spanish) for spanish, _ in splits["train"]}
    for split in ("dev", "test"):
        for spanish, english in splits[split]:
            assert cleaning.near_duplicate_key(english) not in train_english
            assert normalize_for_dedup(spanish) not in train_spanish
    every = [english for pairs in splits.values() for _, english in pairs]
    assert len({cleaning.near_duplicate_key(english) for english in every}) == len(every)


def test_each_pair_is_in_the_split_of_its_near_duplicate_key(built):
    """The split is the hash of the near-duplicate key (`split_for_key` on the salt and the
    key), not of the English as written: one rule for a sentence and its variants."""
    out_dir, *_ = built
    for split in SPLITS:
        for _, english in read_tsv(out_dir / f"{split}.tsv"):
            key = f"{SPLIT_SALT}:{cleaning.near_duplicate_key(english)}"
            assert split_for_key(key, DEV_FRACTION, TEST_FRACTION) == split, english


def test_load_pairs_reads_the_catalogs_corpus(built):
    out_dir, *_ = built
    for split in SPLITS:
        assert load_pairs("catalogs", split, catalogs_dir=out_dir) == read_tsv(
            out_dir / f"{split}.tsv"
        )


def test_rebuild_is_a_noop_and_another_package_list_rebuilds(built, caplog):
    out_dir, cache, argv, packages = built
    before = (out_dir / "stats.json").read_bytes()
    with caplog.at_level(logging.INFO):
        assert prepare_data.main([*argv, "--packages", packages]) == 0
    assert "nothing to do" in caplog.text and (out_dir / "stats.json").read_bytes() == before
    # A corpus recorded with another format version is rebuilt, to the same pairs.
    train = (out_dir / "train.tsv").read_bytes()
    stats = json.loads(before)
    (out_dir / "stats.json").write_text(json.dumps({**stats, "format_version": 2}))
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert prepare_data.main([*argv, "--packages", packages]) == 0
    assert f"format version 2, this build writes version {CORPUS_FORMAT_VERSION}" in caplog.text
    assert (out_dir / "train.tsv").read_bytes() == train
    assert prepare_data.main([*argv, "--packages", "hello,gnome-mines"]) == 0
    stats = json.loads((out_dir / "stats.json").read_text())
    assert [m["package"] for m in stats["packages"]] == ["hello", "gnome-mines"]


def test_no_pair_left_is_an_error_naming_the_packages(built, tmp_path, caplog):
    _, cache, *_ = built
    argv = ["--corpus", "catalogs", "--out", str(tmp_path / "out"), "--cache", str(cache)]
    with caplog.at_level(logging.ERROR):
        assert prepare_data.main([*argv, "--packages", "broken-package"]) == 1
    assert "no sentence pair left" in caplog.text and "broken-package" in caplog.text
    assert not (tmp_path / "out" / "stats.json").exists()


def test_the_model_card_names_each_corpus_with_its_source_size_and_licences(built):
    out_dir, *_ = built
    stats = json.loads((out_dir / "stats.json").read_text())
    row = corpus_row(str(out_dir))
    kept = [m for m in stats["packages"] if "error" not in m]
    assert f"Spanish message catalogs of {len(kept)} Debian packages" in row
    assert " / ".join(f"{stats['split_pairs'][split]:,}" for split in SPLITS) in row
    assert "packages under GPL" in row
    bible = corpus_row("bible")
    assert "`sword-text-sparv`" in bible and "`sword-text-web`" in bible
    assert bible.endswith("| public domain |")
    assert corpus_names("bible:1,catalogs:3") == ["bible", "catalogs"]
    assert corpus_names("tfds:ted_hrlr_translate/pt_to_en") == ["tfds:ted_hrlr_translate/pt_to_en"]


def test_a_corpus_apart_from_another_holds_none_of_its_english(built, tmp_path):
    """`catalogs-more` is built apart from `catalogs`: no near-duplicate of an English sentence
    of the other corpus, in any split, is a pair of it; it is rebuilt when the other is."""
    from training.corpus.catalogs import build_catalogs_corpus, near_duplicate_key

    _, cache, *_ = built
    main_dir, more_dir = tmp_path / "main", tmp_path / "more"
    build_catalogs_corpus(main_dir, cache, ("pidgin-data", "konsole"))
    main_keys = {
        near_duplicate_key(english)
        for split in SPLITS
        for _, english in read_tsv(main_dir / f"{split}.tsv")
    }
    alone = build_catalogs_corpus(tmp_path / "alone", cache, TEST_PACKAGES)
    stats = build_catalogs_corpus(more_dir, cache, TEST_PACKAGES, apart_from=main_dir)
    more = [pair for split in SPLITS for pair in read_tsv(more_dir / f"{split}.tsv")]
    assert not {near_duplicate_key(english) for _, english in more} & main_keys
    # What is left out is exactly what the other corpus holds.
    assert sum(alone["split_pairs"].values()) - len(more) == len(
        {
            near_duplicate_key(e)
            for s in SPLITS
            for _, e in read_tsv(tmp_path / "alone" / f"{s}.tsv")
        }
        & main_keys
    )
    assert stats and not build_catalogs_corpus(more_dir, cache, TEST_PACKAGES, apart_from=main_dir)
    build_catalogs_corpus(main_dir, cache, ("konsole",), force=True)
    assert build_catalogs_corpus(more_dir, cache, TEST_PACKAGES, apart_from=main_dir)
