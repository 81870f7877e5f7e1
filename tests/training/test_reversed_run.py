"""A run trained the other way round (`--reverse true`, `training.config.TrainConfig.reverse`):
every pair it reads is swapped (`training.corpus.load_run_pairs`), in training, its vocabulary,
evaluation and fine-tuning; what fits only Spanish sources or English targets is refused; and
every tool that reads a run translates it English to Spanish with no other flag."""

import json
import os

import pytest
import sacrebleu
import sentencepiece
import tensorflow as tf

from common.serving_contract import TRANSLATION_OUTPUT
from inference.export import export_run
from inference.translate_text import main as translate_text
from model.placeholders import MARKERS, Placeholders, corpus_word_keys
from model.spelling import MODERN
from run_directory import artifacts
from tests.apertium_fixtures import require_apertium
from tests.model_server_fixtures import http, start_server
from tests.training_cli import train_tiny
from training import copying
from training.bundle import model_card
from training.config import resolve_config
from training.corpus import load_pairs
from training.corpus.outputs import STATS_FILE
from training.evaluate import apertium_report, evaluate, export_translate_function
from training.pipeline import protect_pairs
from training.toy_corpus import ES_EN, write_corpus
from training.train import TrainingError, inherited_settings, train
from training.vocabulary import main as vocabulary_main

SPANISH, ENGLISH = set(ES_EN), set(ES_EN.values())
# English sentences of the toy corpus's words, and the words of their Spanish glosses.
SENTENCES = ["the dog eats bread", "the girl reads the book"]


def words_of(texts):
    return {word for text in texts for word in text.split()}


@pytest.fixture(scope="module")
def reversed_run(tmp_path_factory):
    """`(run_dir, corpus)`: the tiny preset trained 80 steps on the toy Spanish→English corpus
    reversed, with separate vocabularies and placeholders (its known words are its sources').
    The corpus records its Spanish in today's spelling, as the Bible's does."""
    work = tmp_path_factory.mktemp("reversed")
    corpus = write_corpus(work / "corpus")
    (corpus / STATS_FILE).write_text(json.dumps({"source_spelling": MODERN}), encoding="utf-8")
    corpus = str(corpus)
    run_dir = train_tiny(
        str(work / "run"),
        data=corpus,
        reverse=True,
        shared_vocab=False,
        placeholders=True,
        train_steps=80,
    )
    return run_dir, corpus


def pieces(run_dir, side):
    """The pieces of the run's SentencePiece model of `side` ("src" or "tgt")."""
    model = sentencepiece.SentencePieceProcessor(
        model_file=os.path.join(run_dir, artifacts.TOKENIZER_DIR, f"spm.{side}.model")
    )
    return {model.id_to_piece(index).lstrip("▁") for index in range(model.get_piece_size())}


@pytest.mark.large
def test_a_reversed_run_learns_from_the_pairs_swapped(reversed_run):
    """Every source it learned from is English (its known words are exactly the English
    words), its vocabularies are the right way round, and its source tokenizer does not
    modernize Spanish spelling."""
    run_dir, _ = reversed_run
    tokenizer_dir = os.path.join(run_dir, artifacts.TOKENIZER_DIR)
    with open(os.path.join(tokenizer_dir, "known_words.txt"), encoding="utf-8") as handle:
        assert set(handle.read().split()) == ENGLISH
    assert ENGLISH <= pieces(run_dir, "src") and not SPANISH & pieces(run_dir, "src")
    assert {"perro", "gato", "libro"} <= pieces(run_dir, "tgt")
    assert not {"dog", "cat", "book"} & pieces(run_dir, "tgt")
    assert "source_spelling" not in json.load(
        open(os.path.join(tokenizer_dir, "tokenizer_config.json"))
    )


@pytest.mark.large
def test_its_evaluation_scores_spanish_translations_against_the_spanish_side(
    reversed_run, tmp_path
):
    """`training.evaluate` reads the run's `reverse`: English sources, Spanish references, and
    made-up words counted against Spanish; the translations score far higher against the
    Spanish side than against the English one."""
    run_dir, corpus = reversed_run
    report = evaluate(run_dir, "dev", output_dir=str(tmp_path), cache=False)
    with open(tmp_path / "dev.greedy.hyp.txt", encoding="utf-8") as handle:
        hypotheses = handle.read().splitlines()
    pairs = load_pairs(corpus, "dev")
    spanish = sacrebleu.corpus_chrf(hypotheses, [[source for source, _ in pairs]]).score
    english = sacrebleu.corpus_chrf(hypotheses, [[target for _, target in pairs]]).score
    assert report["chrf"] == pytest.approx(spanish, abs=0.01)
    assert spanish > english + 20
    assert words_of(hypotheses) & SPANISH and not words_of(hypotheses) & ENGLISH
    assert report["made_up_known_words"].startswith("Spanish word list (wspanish)")


@pytest.mark.large
def test_every_tool_translates_it_english_to_spanish_with_no_other_flag(reversed_run, tmp_path):
    """translate-text, an export's signature and the model server, each given the run or its
    export alone."""
    run_dir, _ = reversed_run
    source_file, output_file = tmp_path / "in.txt", tmp_path / "out.txt"
    source_file.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    arguments = ["--model", run_dir, "--input_file", str(source_file), "--no_cache"]
    assert translate_text([*arguments, "--output_file", str(output_file), "--no_progress"]) == 0
    by_run = output_file.read_text(encoding="utf-8").splitlines()
    assert words_of(by_run) & SPANISH and not words_of(by_run) & ENGLISH

    version_dir = export_run(run_dir, export_base=str(tmp_path / "exports"))
    translate_batch, _ = export_translate_function(version_dir)
    exported = [text.decode() for text in translate_batch(tf.constant(SENTENCES)).numpy()]
    assert exported == by_run

    server = start_server(
        tmp_path,
        model_name="translator",
        model_base_path=os.path.dirname(version_dir),
        rest_api_port=0,
    )
    try:
        status, body = http(
            "POST", f"{server.rest}/v1/models/translator:predict", {"instances": SENTENCES}
        )
    finally:
        server.server.stop()
    assert status == 200, body
    assert [row[TRANSLATION_OUTPUT] for row in body["predictions"]] == by_run


@pytest.mark.large
def test_fine_tuning_a_reversed_run_stays_reversed(reversed_run, tmp_path):
    """A fine-tuning run takes `reverse` from its base and refuses to change it; a forward run
    is refused as the base of a reversed one."""
    run_dir, corpus = reversed_run
    inherited = inherited_settings(run_dir)
    assert inherited["reverse"] is True
    config = resolve_config(
        "tiny", overrides={"data": corpus, "init_from": run_dir}, inherited=inherited
    )
    assert config.reverse is True
    forward = resolve_config(
        "tiny",
        overrides={"data": corpus, "init_from": run_dir, "reverse": False},
        inherited=inherited,
    )
    with pytest.raises(TrainingError, match="this run changes reverse: True -> False"):
        train(forward, str(tmp_path / "forward"))


@pytest.mark.large
@pytest.mark.parametrize("option", ["--add_restoration", "--add_word_repair"])
def test_the_tables_of_spanish_sources_are_refused_to_a_reversed_run(reversed_run, option, capsys):
    run_dir, corpus = reversed_run
    tokenizer_dir = os.path.join(run_dir, artifacts.TOKENIZER_DIR)
    before = sorted(os.listdir(tokenizer_dir))
    with pytest.raises(SystemExit) as failure:
        vocabulary_main(["--data", corpus, "--out_dir", tokenizer_dir, option])
    assert failure.value.code == 2
    error = capsys.readouterr().err
    assert f"{option}: {tokenizer_dir} is the tokenizer of a reversed run" in error
    assert "Spanish" in error
    assert sorted(os.listdir(tokenizer_dir)) == before


def test_the_model_card_names_the_languages_of_the_direction():
    report = {
        "decoding": "greedy",
        "bleu": 1.0,
        "chrf": 2.0,
        "sentences": 3,
        "bleu_signature": "b",
        "chrf_signature": "c",
    }
    everyday = ([{**report, "made_up_known_words": "w"}], [("the dog", "el perro")], ["el"], ["x"])

    def card(**config):
        return model_card(config, "model.keras", [report], "make", 2**20, everyday=everyday)

    assert card(reverse=True).startswith("# English→Spanish Transformer")
    assert "English → Spanish translation" in card(reverse=True)
    assert "| English | reference | translation | Apertium |" in card(reverse=True)
    assert "`apertium eng-spa`" in card(reverse=True)
    assert card().startswith("# Spanish→English Transformer") and "`apertium spa-eng`" in card()


def test_names_and_numbers_of_english_sources_become_fresh_values_and_placeholders():
    """The copy substitution and the placeholders of a reversed run's pairs, English first: the
    shared name and the number are its copy slots, filled on both sides, and the unknown name
    and the figure become the same markers on both sides."""
    forward = [
        ("Abram vivió siete años en la tierra.", "Abram lived seven years in the land."),
        ("Entonces Abram habló a Lot.", "Then Abram spoke to Lot."),
    ]
    pairs = [(target, source) for source, target in forward]
    names = copying.proper_names(pairs)
    assert names == {"Abram", "Lot"}
    number, name = copying.copy_templates(pairs, names)
    assert number.kind == copying.NUMBERS and "seven" not in number.source
    assert name.kind == copying.NAMES and name.source == f"Then {copying.SLOT} spoke to Lot."
    filled_sources, filled_targets = copying.fill_copy_slots(
        *(tf.constant(texts) for texts in ([s for s, _ in pairs], [t for _, t in pairs])),
        tf.constant([number.source, name.source]),
        tf.constant([number.target, name.target]),
        tf.constant([copying.KIND_IDS[copying.NUMBERS], copying.KIND_IDS[copying.NAMES]]),
        rate=1.0,
        seed=tf.constant([1, 2], tf.int64),
    )
    for source, target in zip(filled_sources.numpy(), filled_targets.numpy()):
        fresh = set(source.decode().split()) - set(" ".join(s for s, _ in pairs).split())
        assert len(fresh) == 1 and fresh <= set(target.decode().split())

    placeholders = Placeholders(corpus_word_keys([source for source, _ in pairs]))
    sources, targets = protect_pairs(
        placeholders,
        tf.constant(["Then Kalomir spoke to Abram 47 times."]),
        tf.constant(["Entonces Kalomir habló a Abram 47 veces."]),
    )
    assert sources.numpy()[0].decode() == f"Then {MARKERS[0]} spoke to Abram {MARKERS[1]} times."
    assert targets.numpy()[0].decode() == (
        f"Entonces {MARKERS[0]} habló a Abram {MARKERS[1]} veces."
    )


def test_apertium_beside_a_reversed_run_translates_english_to_spanish():
    require_apertium()
    pairs = [("the dog eats bread", "el perro come pan")]
    report, hypotheses = apertium_report(pairs, (None, "not measured"), reverse=True)
    assert report["decoding"].endswith(" eng-spa") and "perro" in hypotheses[0]
    report, hypotheses = apertium_report([pair[::-1] for pair in pairs], (None, "not measured"))
    assert report["decoding"].endswith(" spa-eng") and "dog" in hypotheses[0]
