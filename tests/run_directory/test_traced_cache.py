"""run_directory/traced_cache.py: a run's translation path traced once, kept on disk, and loaded
by later starts: what names an entry, that a kept entry translates as the traced path does, byte
for byte, that a stale one is never used, and where it goes when the run cannot be written.

The tests that trace the translation graph (seconds each, several times a test) are large."""

import json
import os
import shutil

import keras
import pytest
import tensorflow as tf

from common.serving_contract import (
    BEAM_SIGNATURE,
    GREEDY_SIGNATURE,
    SCORE_SIGNATURE,
    SIGNATURES_BY_NAME,
    TEXT_INPUT,
)
from model.restoration import write_table
from model.tokenizer import read_tokenizer_config, write_tokenizer_config
from model.translator import Translator, input_signature, traced
from model.word_repair import ENGLISH_WORDS_FILE, LEXICON_FILE, REPAIR_WORDS_KEY
from run_directory import artifacts, traced_cache
from run_directory.traced_cache import (
    ENTRY_INFO_FILE,
    STALE_STAGING_SECONDS,
    TRACED_DIR,
    code_digest,
    entry_info,
    entry_key,
    load_or_trace,
    write_entry,
)
from tests.paths import REPO_ROOT
from training.evaluate import main as evaluate_main
from training.score import run_score_function
from training.toy_corpus import ES_EN

# Toy sentences, one word the run never saw, and an empty line.
SOURCES = ["el perro come pan", "la niña lee un libro grande", "el gato azul duerme", "Kalomir", ""]


@pytest.fixture
def run_dir(tiny_run, tmp_path):
    """A copy of the tiny run whose target tokenizer repairs made-up words: its English words
    are three of the toy glossary's, and its lexicon gives every source word an English of its
    own, so that the repair changes what the model writes."""
    run_dir = tmp_path / "run"
    # Without what other tests' starts kept of the shared run.
    shutil.copytree(tiny_run["run_dir"], run_dir, ignore=shutil.ignore_patterns(TRACED_DIR))
    tokenizer_dir = run_dir / artifacts.TOKENIZER_DIR
    (tokenizer_dir / ENGLISH_WORDS_FILE).write_text("the\ndog\nbread\n", encoding="utf-8")
    write_table(str(tokenizer_dir / LEXICON_FILE), {word: f"{word}-en" for word in ES_EN})
    config = read_tokenizer_config(str(tokenizer_dir))
    write_tokenizer_config(str(tokenizer_dir), {**config, REPAIR_WORDS_KEY: True})
    return str(run_dir)


def outputs(signature):
    """The translations and scores of `SOURCES`, as bytes."""
    result = signature(tf.constant(SOURCES))
    return result["translation"].numpy().tolist(), result["score"].numpy().tobytes()


def plain_signature(run_dir, beam_width=1):
    """The run's signature traced here as a plain `tf.function`, without the cache and its
    start-up graph options: what a kept entry must translate as."""
    options = artifacts.decoding_options(run_dir, beam_width=beam_width)
    model, source_tokenizer, target_tokenizer, _ = artifacts.load_trained(run_dir)
    translator = Translator(model, source_tokenizer, target_tokenizer, options)
    name = traced_cache.signature_name(beam_width)
    method = getattr(translator, SIGNATURES_BY_NAME[name].method)
    return traced(method, *input_signature(name))


def entries(directory):
    if not os.path.isdir(directory):
        return []
    return sorted(name for name in os.listdir(directory) if not name.startswith("."))


def info_of(run_dir, beam_width=1, **overrides):
    options = artifacts.decoding_options(run_dir, beam_width=beam_width, **overrides)
    return entry_info(run_dir, traced_cache.signature_name(beam_width), options)


def test_an_entry_is_named_by_the_run_files_the_settings_and_the_code(run_dir, tmp_path):
    key = entry_key(info_of(run_dir))
    copy = str(tmp_path / "copy")
    shutil.copytree(run_dir, copy)
    assert entry_key(info_of(copy)) == key, "the same files elsewhere are the same entry"
    others = [entry_key(info_of(run_dir, 2)), entry_key(info_of(run_dir, no_repeat_ngram_size=2))]
    for path in (
        artifacts.MODEL_FILE,
        artifacts.CONFIG_FILE,
        os.path.join(artifacts.TOKENIZER_DIR, LEXICON_FILE),
    ):
        with open(os.path.join(copy, path), "ab") as handle:
            handle.write(b"\n")
        others.append(entry_key(info_of(copy)))
    # Without model.keras the run's latest checkpoint is its weights: they name the entry.
    os.remove(os.path.join(copy, artifacts.MODEL_FILE))
    assert any(".index" in path for path in traced_cache.run_files(copy))
    others.append(entry_key(info_of(copy)))
    assert len({key, *others}) == len(others) + 1


def test_the_code_digest_follows_every_file_the_graph_is_traced_from(tmp_path):
    for package in traced_cache.TRACED_PACKAGES:
        shutil.copytree(REPO_ROOT / package, tmp_path / package)
    digest = code_digest(tmp_path)
    assert digest == code_digest(REPO_ROOT)
    with open(tmp_path / "model" / "decoding" / "greedy.py", "a", encoding="utf-8") as handle:
        handle.write("\n")
    assert code_digest(tmp_path) != digest


@pytest.mark.large
@pytest.mark.parametrize("beam_width", [1, 2], ids=["greedy", "beam2"])
def test_a_kept_translation_translates_as_the_traced_path_byte_for_byte(run_dir, beam_width):
    plain = plain_signature(run_dir, beam_width)
    traced = load_or_trace(run_dir, beam_width)
    kept = os.path.join(run_dir, TRACED_DIR)
    assert traced.owner is None and len(entries(kept)) == 1
    loaded = load_or_trace(run_dir, beam_width)
    assert loaded.owner is not None, "the second start loads the kept entry"
    expected = outputs(plain)
    assert outputs(traced) == expected
    assert outputs(loaded) == expected
    repaired = [text.decode() for text in expected[0]]
    assert any("-en" in text for text in repaired), f"the repair is not exercised: {repaired}"
    name = GREEDY_SIGNATURE if beam_width == 1 else BEAM_SIGNATURE
    assert entries(kept)[0].startswith(name + "-")


@pytest.mark.large
def test_a_kept_score_signature_scores_as_the_traced_path_byte_for_byte(run_dir):
    """translate-score's forced decoding, two inputs in, kept and loaded like a translation."""
    model, source_tokenizer, target_tokenizer, _ = artifacts.load_trained(run_dir)
    translator = Translator(model, source_tokenizer, target_tokenizer)
    plain = traced(translator.score, *input_signature(SCORE_SIGNATURE))
    texts = tf.constant(SOURCES[:3])
    targets = tf.constant(["the dog eats bread", "the girl reads a big book", "the blue cat"])

    def scores(function):
        result = function(texts, targets)
        return {
            name: value.numpy().tolist() if value.dtype == tf.string else value.numpy().tobytes()
            for name, value in result.items()
        }

    expected = scores(plain)
    first = run_score_function(run_dir)
    assert first.owner is None and scores(first) == expected
    loaded = run_score_function(run_dir)
    assert loaded.owner is not None, "the second start loads the kept entry"
    assert scores(loaded) == expected
    (entry,) = entries(os.path.join(run_dir, TRACED_DIR))
    assert entry.startswith(SCORE_SIGNATURE + "-")


@pytest.mark.large
def test_evaluate_keeps_its_traced_translation_unless_told_not_to(run_dir, tmp_path):
    """`training.evaluate` loads a run as translate-text does: the first start keeps the
    traced translation, the next loads it and scores the same; `--no_cache` keeps nothing."""
    reports = []
    for attempt, flags in enumerate(([], [], ["--no_cache"])):
        if flags:
            shutil.rmtree(os.path.join(run_dir, TRACED_DIR))
        output_dir = tmp_path / f"eval{attempt}"
        arguments = ["--run_dir", run_dir, "--split", "dev", "--output_dir", str(output_dir)]
        assert evaluate_main([*arguments, *flags]) == 0
        with open(output_dir / "dev.greedy.report.json", encoding="utf-8") as handle:
            report = json.load(handle)
        reports.append((report["bleu"], report["chrf"]))
        kept = entries(os.path.join(run_dir, TRACED_DIR))
        assert len(kept) == (0 if flags else 1), (attempt, kept)
    assert reports[0] == reports[1] == reports[2]


def scale_weights(run_dir, factor):
    path = os.path.join(run_dir, artifacts.MODEL_FILE)
    model = keras.models.load_model(path, compile=False)
    model.set_weights([weight * factor for weight in model.get_weights()])
    model.save(path)


@pytest.mark.large
def test_changed_weights_are_traced_anew_and_their_stale_entry_deleted(run_dir):
    before = outputs(load_or_trace(run_dir))
    kept = os.path.join(run_dir, TRACED_DIR)
    (stale,) = entries(kept)
    scale_weights(run_dir, 0.5)
    changed = load_or_trace(run_dir)
    assert changed.owner is None, "an entry of other weights must not be loaded"
    assert outputs(changed) == outputs(plain_signature(run_dir)) != before
    (fresh,) = entries(kept)
    assert fresh != stale
    # Other settings are another entry beside it; this one stays.
    assert load_or_trace(run_dir, no_repeat_ngram_size=2).owner is None
    assert len(entries(kept)) == 2 and fresh in entries(kept)


@pytest.mark.large
def test_a_run_that_cannot_be_written_keeps_its_entry_in_the_user_cache(
    run_dir, tmp_path, monkeypatch
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    # A file where the run's entries would go: no directory can be made there, even by root,
    # for whom permission bits are no obstacle.
    with open(os.path.join(run_dir, TRACED_DIR), "w", encoding="utf-8") as handle:
        handle.write("in the way")
    first = outputs(load_or_trace(run_dir))
    user_cache = tmp_path / "cache" / traced_cache.USER_CACHE_PATH
    (entry,) = entries(user_cache)
    loaded = load_or_trace(run_dir)
    assert loaded.owner is not None and outputs(loaded) == first
    # A damaged entry is traced again, and written anew.
    with open(user_cache / entry / "saved_model.pb", "r+b") as handle:
        handle.truncate(100)
    again = load_or_trace(run_dir)
    assert again.owner is None and outputs(again) == first
    assert entries(user_cache) == [entry] and load_or_trace(run_dir).owner is not None


@pytest.mark.large
@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_a_read_only_run_directory_keeps_its_entry_in_the_user_cache(
    run_dir, tmp_path, monkeypatch
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    os.chmod(run_dir, 0o555)
    try:
        load_or_trace(run_dir)
        assert load_or_trace(run_dir).owner is not None
        assert not os.path.exists(os.path.join(run_dir, TRACED_DIR))
    finally:
        os.chmod(run_dir, 0o755)


class _Echo(tf.Module):
    """A tiny translation function with the signature's input and outputs, and a variable."""

    def __init__(self):
        super().__init__()
        self.scale = tf.Variable(2.0)
        self.translate = tf.function(
            lambda text: {"translation": text, "score": tf.fill(tf.shape(text), self.scale)},
            input_signature=[tf.TensorSpec([None], tf.string, name=TEXT_INPUT)],
        )


def echo_info(run_dir):
    """An entry's info (`entry_info`'s parts) for `_Echo`."""
    parts = {"format": traced_cache.ENTRY_FORMAT, "options": {}, "run_files": "", "code": ""}
    return {**parts, "signature": GREEDY_SIGNATURE, "libraries": {}, "run_dir": str(run_dir)}


def test_an_entry_is_written_whole_or_not_at_all(tmp_path):
    echo = _Echo()
    info = echo_info(tmp_path / "run")
    directory = tmp_path / "entries"
    # A second writer of the same entry finds it written and leaves it as it is.
    for _ in range(2):
        write_entry(str(directory), "echo", echo, echo.translate, info)
    assert os.listdir(directory) == ["echo"]
    loaded = traced_cache.TranslationCall(
        tf.saved_model.load(str(directory / "echo")).signatures[GREEDY_SIGNATURE]
    )
    assert loaded(tf.constant(["hola"]))["score"].numpy().tolist() == [2.0]
    with open(directory / "echo" / ENTRY_INFO_FILE, encoding="utf-8") as handle:
        assert json.load(handle) == info
    # A save that fails (the function reads a variable nothing tracks) leaves nothing behind.
    with pytest.raises(AssertionError, match="untracked"):
        write_entry(str(directory), "broken", tf.Module(), echo.translate, info)
    assert os.listdir(directory) == ["echo"]


def test_staging_left_by_a_dead_writer_is_deleted_by_the_next(tmp_path):
    echo = _Echo()
    info = echo_info(tmp_path / "run")
    directory = tmp_path / "entries"
    old, recent = directory / ".staging-old", directory / ".staging-recent"
    for staging in (old, recent):
        staging.mkdir(parents=True)
    long_ago = os.path.getmtime(old) - STALE_STAGING_SECONDS - 1
    os.utime(old, (long_ago, long_ago))
    write_entry(str(directory), "echo", echo, echo.translate, info)
    assert sorted(os.listdir(directory)) == [".staging-recent", "echo"]


@pytest.mark.large
def test_translate_text_keeps_the_traced_translation_unless_told_not_to(run_dir, tmp_path):
    from inference.translate_text import main

    source = tmp_path / "in.txt"
    source.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    kept = os.path.join(run_dir, TRACED_DIR)

    def translate_text(*flags):
        output = tmp_path / "out.txt"
        arguments = ["--model", run_dir, "--input_file", str(source), "--output_file", str(output)]
        assert main([*arguments, "--no_progress", *flags]) == 0
        return output.read_text(encoding="utf-8")

    traced = translate_text("--no_cache")
    assert not os.path.exists(kept)
    assert translate_text() == traced and len(entries(kept)) == 1
    assert translate_text() == traced and len(entries(kept)) == 1
