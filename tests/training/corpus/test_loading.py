"""training/corpus/loading.py: TFDS datasets (offline, clear errors), a directory, a single file or
the Bible by name."""

import http.server
import logging
import re
import threading

import pytest
import tensorflow_datasets as tfds
from tensorflow_datasets.core.download import downloader as tfds_downloader

from training.corpus import loading, splitting, tsv
from training.corpus.tsv import CorpusError

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


def test_a_reversed_run_reads_every_pair_swapped_and_its_spanish_as_built(tmp_path):
    """`load_run_pairs` is where a run's pairs are read: a reversed run gets each target as its
    source, and the corpus's Spanish as built, even where a run that records no spelling gets
    the 1909 one; `training.mixture.load_splits` reads every corpus so."""
    from model.spelling import old_spelling
    from training.mixture import load_splits, parse_data

    corpus = tmp_path / "modern"
    corpus.mkdir()
    pairs = [("Él fue a casa.", "He went home."), ("Vino a verla.", "He came to see her.")]
    for split in tsv.SPLITS:
        tsv.write_tsv(corpus / f"{split}.tsv", pairs)
    (corpus / "stats.json").write_text('{"source_spelling": "modern"}', encoding="utf-8")
    assert loading.load_run_pairs(str(corpus), "dev", None) == [
        (old_spelling(source), target) for source, target in pairs
    ]
    assert old_spelling(pairs[0][0]) != pairs[0][0]
    swapped = [(target, source) for source, target in pairs]
    assert loading.load_run_pairs(str(corpus), "dev", None, reverse=True) == swapped
    assert load_splits(parse_data(str(corpus)), "test", reverse=True) == {"modern": swapped}
    assert load_splits(parse_data(str(corpus)), "test") == {"modern": pairs}
