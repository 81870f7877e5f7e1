"""training.corpus.catalog_fills_corpus: the `catalog-fills` corpus, the messages the catalogs
corpus drops for their placeholders, filled, and built apart from that corpus. Built offline
on the real test packages `make data-test` caches and on a package of made-up messages built
here (a `.mo` written by polib, packed by `dpkg-deb --build`), whose messages stand in each
split of the catalogs corpus."""

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import polib
import pytest

from training.bundle import corpus_row
from training.corpus import catalog_cleaning as cleaning
from training.corpus import catalog_fills_corpus as fills_corpus
from training.corpus import catalogs
from training.corpus.catalogs import TEST_PACKAGES, build_catalogs_corpus, read_catalog
from training.corpus.debian import DEFAULT_CACHE_DIR, cached_deb
from training.corpus.splitting import normalize_for_dedup, split_for_key
from training.corpus.tsv import SPLITS, CorpusError, read_tsv

CACHE_DIR = DEFAULT_CACHE_DIR / "catalogs"
REPO_ROOT = Path(__file__).resolve().parents[3]
MADE_UP_PACKAGE = "fills-test-data"
# Made-up words, each in one message pair only, so that each such message is a key of its own.
WORDS = [
    first + middle + last
    for first in ("bor", "cal", "dun", "fen", "gar", "hol", "jun", "kel", "lom", "mir")
    for middle in ("ad", "et", "in", "ul", "er", "it", "on", "us")
    for last in ("o", "a", "e", "i")
]


def _catalogs_split(english):
    """The split the catalogs corpus gives a sentence (`catalogs.split_pairs`'s hash)."""
    key = cleaning.near_duplicate_key(english)
    return split_for_key(
        f"{catalogs.SPLIT_SALT}:{key}", catalogs.DEV_FRACTION, catalogs.TEST_FRACTION
    )


def _hashed_split(english):
    """The split the fills corpus gives a message of its own by hash (`message_key`)."""
    key = cleaning.near_duplicate_key(cleaning.without_placeholders(english))
    return split_for_key(
        f"{fills_corpus.SPLIT_SALT}:{key}", fills_corpus.DEV_FRACTION, fills_corpus.TEST_FRACTION
    )


def _made_up_messages():
    """`(messages, cases)`: the `(msgid, msgstr)` of the made-up package, and what each case
    of it put where (its word, or the Spanish it shares with the catalogs corpus)."""
    unused = iter(WORDS)
    messages, cases = [], {}

    def word_where(condition):
        return next(word for word in unused if condition(word))

    # A message whose English without the placeholder is a sentence of the catalogs corpus, in
    # each split of it; by its own hash it would go to another.
    for split in SPLITS:
        word = word_where(
            lambda w, split=split: (
                _catalogs_split(f"Has left the {w} room.") == split
                and _hashed_split(f"%s has left the {w} room.") != split
            )
        )
        messages += [
            (f"Has left the {word} room.", f"Ha salido de la sala {word}."),
            (f"%s has left the {word} room.", f"%s ha salido de la sala {word}."),
        ]
        cases[split] = word
    # A message whose filled English is a sentence of the catalogs corpus, figures aside.
    cases["duplicate"] = word = next(unused)
    messages += [
        (f"Deleted 7 old {word} files.", f"Se borraron 7 archivos viejos {word}."),
        (f"Deleted %d old {word} files.", f"Se borraron %d archivos viejos {word}."),
    ]
    # Filled Spanish that is another English's translation in the catalogs corpus: held out
    # there while its own hash trains on it here, then trained on there and held out here.
    for case, (english, spanish), other, split_there, trained_here in (
        (
            "held_out_spanish",
            ("Copy %d {} photos to the album.", "Copiar %d fotos {} al álbum."),
            "Copy these {} photos into the album now.",
            "test",
            True,
        ),
        (
            "trained_spanish",
            ("Move %d {} songs to the playlist.", "Mover %d canciones {} a la lista."),
            "Move these {} songs into the playlist now.",
            "train",
            False,
        ),
    ):

        def shares_spanish(w, english=english, other=other, there=split_there, here=trained_here):
            trained = _hashed_split(english.format(w)) == "train"
            return _catalogs_split(other.format(w)) == there and trained == here

        word = word_where(shares_spanish)
        english, spanish = english.format(word), spanish.format(word)
        filled_spanish = cleaning.clean_filled_message(english, spanish)[0][0]
        messages += [(english, spanish), (other.format(word), filled_spanish)]
        cases[case] = filled_spanish
    return messages, cases


def _build_package(source_dir, cache, name, messages):
    """Packs `messages` as `name`'s Spanish catalog, with a copyright file, into
    `cache/NAME_1.0_all.deb`, as `apt-get download` would leave it."""
    catalog = polib.POFile()
    catalog.metadata = {"Content-Type": "text/plain; charset=UTF-8"}
    for english, spanish in messages:
        catalog.append(polib.POEntry(msgid=english, msgstr=spanish))
    locale_dir = source_dir / "usr/share/locale/es/LC_MESSAGES"
    locale_dir.mkdir(parents=True)
    catalog.save_as_mofile(str(locale_dir / f"{name}.mo"))
    doc_dir = source_dir / f"usr/share/doc/{name}"
    doc_dir.mkdir(parents=True)
    (doc_dir / "copyright").write_text("Files: *\nLicense: GPL-3+\n")
    (source_dir / "DEBIAN").mkdir(mode=0o755)
    (source_dir / "DEBIAN/control").write_text(
        f"Package: {name}\nVersion: 1.0\nArchitecture: all\n"
        "Maintainer: Tests <tests@example.org>\nDescription: made-up catalogs for the tests\n"
    )
    source_dir.chmod(0o755)
    deb = cache / f"{name}_1.0_all.deb"
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "--build", str(source_dir), str(deb)],
        check=True,
        capture_output=True,
    )


def _cache_with_the_test_packages(cache):
    """`cache` holding the test packages' .deb files and unpacked catalogs (links into the real
    cache, which `make data-test` fills)."""
    (cache / "unpacked").mkdir(parents=True)
    for package in TEST_PACKAGES:
        unpacked = CACHE_DIR / "unpacked" / package
        if not (unpacked / ".unpacked").is_file():
            pytest.fail(f"{package}'s catalogs are not in {CACHE_DIR}: run `make data-test` first")
        (cache / cached_deb(CACHE_DIR, package).name).symlink_to(cached_deb(CACHE_DIR, package))
        (cache / "unpacked" / package).symlink_to(unpacked)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """The catalogs corpus of the test packages and the made-up one, and `catalog-fills` of the
    same packages apart from it."""
    root = tmp_path_factory.mktemp("fills")
    cache = root / "cache"
    _cache_with_the_test_packages(cache)
    messages, cases = _made_up_messages()
    _build_package(root / "source", cache, MADE_UP_PACKAGE, messages)
    packages = (*TEST_PACKAGES, MADE_UP_PACKAGE)
    build_catalogs_corpus(root / "catalogs", cache, packages)
    stats = fills_corpus.build_fills_corpus(
        root / "catalog-fills", [root / "catalogs"], cache, packages
    )
    return types.SimpleNamespace(
        root=root,
        cache=cache,
        packages=packages,
        cases=cases,
        stats=stats,
        catalogs={split: read_tsv(root / "catalogs" / f"{split}.tsv") for split in SPLITS},
        fills={split: read_tsv(root / "catalog-fills" / f"{split}.tsv") for split in SPLITS},
    )


def _keys(pairs):
    return {cleaning.near_duplicate_key(english) for _, english in pairs}


def _spanish(pairs):
    return {normalize_for_dedup(spanish) for spanish, _ in pairs}


def _held_out(splits):
    return splits["dev"] + splits["test"]


def test_the_corpus_is_the_messages_the_catalogs_drop_for_their_placeholders(corpora):
    """Per package, each message the catalogs corpus drops as `placeholder` is a filled pair
    here or counted under its reason; no pair holds a placeholder or a sentence of the catalogs
    corpus; the manifest names each package's licence, as the model card reads it."""
    stats = corpora.stats
    catalogs_stats = json.loads((corpora.root / "catalogs/stats.json").read_text())
    dropped_there = {m["package"]: m["dropped"] for m in catalogs_stats["packages"]}
    for manifest in stats["packages"]:
        outcomes = manifest["cleaned"] + sum(
            count
            for reason, count in manifest["dropped"].items()
            if reason not in (catalogs.OTHER_LOCALE_VARIANT, catalogs.DUPLICATE)
        )
        assert outcomes == dropped_there[manifest["package"]].get(cleaning.PLACEHOLDER, 0)
        assert manifest["licence"] and manifest["version"]
    every = [pair for pairs in corpora.fills.values() for pair in pairs]
    assert stats["split_pairs"] == {split: len(pairs) for split, pairs in corpora.fills.items()}
    assert len(every) > 300 and all(corpora.fills.values())
    assert not [pair for pair in every if cleaning.has_placeholder(pair[0] + "\t" + pair[1])]
    assert not _keys(every) & _keys([pair for pairs in corpora.catalogs.values() for pair in pairs])
    row = corpus_row(str(corpora.root / "catalog-fills"))
    assert "Spanish message catalogs of 6 Debian packages" in row and "packages under GPL" in row


def test_a_filled_message_takes_the_split_of_its_sentence_in_the_catalogs(corpora):
    """ "%s has left the W room." goes where the catalogs corpus put "Has left the W room.",
    in each split, though its own hash would send it elsewhere."""
    for split in SPLITS:
        word = corpora.cases[split]
        assert f"Has left the {word} room." in [e for _, e in corpora.catalogs[split]]
        filled = [e for _, e in corpora.fills[split] if e.endswith(f" has left the {word} room.")]
        assert len(filled) == 1, (split, word)
    assert all(corpora.stats["apart_from"]["split_as_apart_from"].values())


def test_a_filled_pair_the_catalogs_hold_is_left_out(corpora):
    """ "Deleted %d old W files." filled is "Deleted 7 old W files." of the catalogs corpus but
    for its figure: a duplicate, left out."""
    word = corpora.cases["duplicate"]
    every = [english for pairs in corpora.fills.values() for _, english in pairs]
    assert not [
        english for english in every if re.fullmatch(rf"Deleted \d+ old {word} files\.", english)
    ]
    assert f"Deleted 7 old {word} files." in [e for p in corpora.catalogs.values() for _, e in p]
    made_up = next(m for m in corpora.stats["packages"] if m["package"] == MADE_UP_PACKAGE)
    assert made_up["dropped"][catalogs.DUPLICATE] == 1
    assert corpora.stats["apart_from"]["pairs_in_them"] >= 1


def test_no_text_crosses_from_one_corpus_held_out_split_to_the_other_training_split(corpora):
    """Mixed in one run, neither corpus trains on the other's dev or test sentences (English
    near-duplicates or Spanish), nor on its own; the made-up Spanish each shares with the
    catalogs corpus is removed from where it would cross."""
    catalogs_split, fills = corpora.catalogs, corpora.fills
    assert not _keys(fills["train"]) & _keys(_held_out(catalogs_split))
    assert not _spanish(fills["train"]) & _spanish(_held_out(catalogs_split))
    trained = fills["train"] + catalogs_split["train"]
    assert not _keys(_held_out(fills)) & _keys(trained)
    assert not _spanish(_held_out(fills)) & _spanish(trained)
    held_out_there, trained_there = (
        corpora.cases["held_out_spanish"],
        corpora.cases["trained_spanish"],
    )
    assert held_out_there not in [spanish for spanish, _ in fills["train"]]
    assert trained_there not in [spanish for spanish, _ in _held_out(fills)]
    dropped = corpora.stats["dropped"]
    assert dropped[fills_corpus.HELD_OUT_SPANISH_REMOVED] == 1
    assert dropped["in_train_spanish_removed_from_dev_test"] == 1


def test_the_build_is_the_same_in_any_process(corpora, tmp_path):
    """Two processes with differently salted `hash()` build the same bytes."""
    script = (
        "import sys; from training.corpus.catalog_fills_corpus import build_fills_corpus; "
        "build_fills_corpus(sys.argv[1], [sys.argv[2]], sys.argv[3], sys.argv[4].split(','))"
    )
    for seed in ("1", "2"):
        out_dir = tmp_path / seed
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO_ROOT)}
        argv = [str(out_dir), str(corpora.root / "catalogs"), str(corpora.cache)]
        result = subprocess.run(
            [sys.executable, "-c", script, *argv, ",".join(corpora.packages)],
            env=env,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stderr
        for split in SPLITS:
            built_here = corpora.root / "catalog-fills" / f"{split}.tsv"
            assert (out_dir / f"{split}.tsv").read_bytes() == built_here.read_bytes()


def test_a_rebuild_is_a_noop_until_the_catalogs_corpus_is_rebuilt(corpora, tmp_path, caplog):
    """Built again, nothing happens; after the catalogs corpus is rebuilt (newer packages), it
    is rebuilt too. It downloads nothing the catalogs corpus cached, and says so first."""
    catalogs_dir, out_dir = tmp_path / "catalogs", tmp_path / "catalog-fills"
    shutil.copytree(corpora.root / "catalogs", catalogs_dir)

    def build():
        return fills_corpus.build_fills_corpus(
            out_dir, [catalogs_dir], corpora.cache, corpora.packages
        )

    with caplog.at_level(logging.INFO):
        assert build()
    assert "catalog-fills corpus: every package is in" in caplog.text
    assert "nothing to download" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert build() == {}
    assert "nothing to do" in caplog.text
    # Another build of it: its stats.json, not only its pairs, tells (here, one package less).
    fewer = [package for package in corpora.packages if package != "konsole"]
    build_catalogs_corpus(catalogs_dir, corpora.cache, fewer, force=True)
    assert build()


def test_without_the_catalogs_corpus_the_build_says_to_build_it(corpora, tmp_path):
    out_dir = tmp_path / "catalog-fills"
    with pytest.raises(CorpusError, match=r"catalogs holds no built corpus.*make data-catalogs"):
        fills_corpus.build_fills_corpus(
            out_dir, [tmp_path / "catalogs"], corpora.cache, corpora.packages
        )
    partial = tmp_path / "catalogs"
    partial.mkdir()
    shutil.copy(corpora.root / "catalogs" / "train.tsv", partial)
    with pytest.raises(CorpusError, match=r"no dev.tsv, test.tsv, stats.json"):
        fills_corpus.build_fills_corpus(out_dir, [partial], corpora.cache, corpora.packages)
    assert not out_dir.exists()


def test_a_plural_message_is_filled_in_its_plural_forms(tmp_path):
    """A plural message whose singular holds a count is read in its plural forms ("%d files" /
    "%d archivos"), which any count drawn reads right in; its singular ("%d file") would not."""
    catalog = polib.POFile()
    catalog.metadata = {
        "Content-Type": "text/plain; charset=UTF-8",
        "Plural-Forms": "nplurals=2; plural=(n != 1);",
    }
    catalog.append(
        polib.POEntry(
            msgid="Deleted %d old file from the disk.",
            msgid_plural="Deleted %d old files from the disk.",
            msgstr_plural={
                0: "Se borró %d archivo viejo del disco.",
                1: "Se borraron %d archivos viejos del disco.",
            },
        )
    )
    catalog.append(
        polib.POEntry(
            msgid="One more file was kept.",
            msgid_plural="%d more files were kept.",
            msgstr_plural={0: "Se guardó un archivo más.", 1: "Se guardaron %d archivos más."},
        )
    )
    path = tmp_path / "es" / "LC_MESSAGES" / "test.mo"
    path.parent.mkdir(parents=True)
    catalog.save_as_mofile(str(path))
    deleted, kept = read_catalog(path)
    assert deleted.english_plural == "Deleted %d old files from the disk."
    (spanish, english), reason = fills_corpus.fill_message(deleted)
    count = int(english.split()[1])
    assert reason is None and count >= 2
    assert (english, spanish) == (
        f"Deleted {count} old files from the disk.",
        f"Se borraron {count} archivos viejos del disco.",
    )
    # A singular without placeholders is the catalogs corpus's pair, as it was, not this one's.
    assert fills_corpus.message_forms(kept) == (
        "One more file was kept.",
        "Se guardó un archivo más.",
    )
    assert fills_corpus.fill_message(kept) == (None, None)
