"""Tests for model/tokenizer.py and training/vocabulary.py: learning, losslessness, files, serving.

The outside references are the `sentencepiece` library itself (its own encoder must give the ids
the in-graph keras-hub tokenizer gives), keras-hub's WordPiece tokenizer, Python's `unicodedata`
(`normalize`), and TF's `saved_model_cli` (the TF1 Session loader TF Serving uses). Losslessness is
checked on every sentence of the embedded Bible corpus (built by `make test` before pytest; built
here if missing) and on hostile strings.
"""

import json
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import keras_hub
import numpy as np
import pytest
import sentencepiece
import tensorflow as tf
from sentencepiece import sentencepiece_model_pb2

from model.special_tokens import END_ID, PAD_ID, RESERVED_TOKENS, START_ID, UNK_ID
from model.tokenizer import (
    SentencePieceTokenizer,
    WordPieceTokenizer,
    load_tokenizers,
    normalize,
)
from training import vocabulary
from training.corpus import load_pairs

PAIRS = [
    ("¿Dónde está la estación de tren?", "Where is the train station?"),
    ("¡Qué día tan bonito!", "What a beautiful day!"),
    ("El niño comió una manzana, y después durmió.", "The boy ate an apple, and then he slept."),
    ('Ella dijo: "no lo sé".', 'She said: "I don\'t know".'),
    ("La casa es grande; el jardín, pequeño.", "The house is big; the garden, small."),
    ("Son las 10:30 y el billete cuesta 3,5 euros.", "It is 10:30 and the ticket costs 3.5 euros."),
    ("Hola, ¿cómo estás?", "Hello, how are you?"),
    ("Los niños juegan en el jardín (cerca de la casa).", "The children play in the garden."),
    ("¿Está lejos la estación?", "Is the station far?"),
    ("Mañana comeremos manzanas en la estación.", "Tomorrow we will eat apples at the station."),
    ("hola", "hello"),
]
SPANISH = [spanish for spanish, _ in PAIRS]

HOSTILE = [
    "3.5 “hola” 1, 2 A - B",  # what the old spacing rules got wrong
    "  leading,  double   and trailing spaces  ",
    "emoji 😀 👍🏽 🇪🇸 family 👨‍👩‍👧",
    "中文字符，日本語のテキスト、한국어 문장",
    "עברית ימין לשמאל مرحبا بالعالم",
    "combining e\u0301 and decomposed n\u0303 vs ñ é",
    "control \x00 \x07 \x1b \x7f chars\ttab\nnewline\r",
    "zero\u200bwidth\u200c join\u200d soft\u00adhyphen \ufeffbom",
    "\u2581 the word marker ▁▁ itself ▁",
    "\tleading tab and trailing newline\n",
    "ligatures ﬁ ﬂ, circled ① and full-width ＡＢＣ",
    "no-break\u00a0space, em\u2003space, ideographic\u3000space",
    "x" * 10_000,
    "",
    "   ",
    "[START] [END] [PAD] [UNK] <s> </s> <0x41>",
]


def as_strings(tensor):
    return [value.decode("utf-8") for value in tensor.numpy()]


def round_trip(tokenizer, texts):
    return as_strings(tokenizer.detokenize(tokenizer.tokenize(tf.constant(texts, tf.string))))


@pytest.fixture(scope="module")
def small_proto():
    return vocabulary.learn_sentencepiece([text for pair in PAIRS * 5 for text in pair], 400)


@pytest.fixture(scope="module")
def small(small_proto):
    return SentencePieceTokenizer(small_proto)


@pytest.fixture(scope="module")
def bible_texts():
    return [
        text
        for split in ("train", "dev", "test")
        for pair in load_pairs("bible", split)
        for text in pair
    ]


@pytest.fixture(scope="module")
def bible(bible_texts):
    return SentencePieceTokenizer(vocabulary.learn_sentencepiece(bible_texts, 8000))


def test_reserved_ids_and_edges(small):
    assert (PAD_ID, UNK_ID, START_ID, END_ID) == (0, 1, 2, 3)
    assert tuple(small.vocab[:4]) == RESERVED_TOKENS
    assert as_strings(small.lookup(tf.constant([0, 1, 2, 3]))) == list(RESERVED_TOKENS)
    ids = small.tokenize(tf.constant(SPANISH + [""])).to_list()
    assert all(row[0] == START_ID and row[-1] == END_ID for row in ids)
    assert all(not set(row[1:-1]) & {PAD_ID, UNK_ID, START_ID, END_ID} for row in ids)
    assert ids[-1] == [START_ID, END_ID]
    assert int(small.get_vocab_size()) == small.vocab_size == len(small.vocab)


def test_ids_equal_the_sentencepiece_library(small, small_proto):
    """The in-graph keras-hub/tensorflow-text tokenizer and the library's own encoder agree."""
    processor = sentencepiece.SentencePieceProcessor(model_proto=small_proto)
    texts = SPANISH + [text for text in HOSTILE if len(text) < 1000]
    ids = small.tokenize(tf.constant(texts)).to_list()
    assert [row[1:-1] for row in ids] == [processor.encode(text) for text in texts]


@pytest.mark.large
def test_lossless_on_every_sentence_of_the_bible_corpus(bible, bible_texts):
    assert len(bible_texts) > 50_000
    assert bible.vocab_size == 8000
    mismatches = []
    for start in range(0, len(bible_texts), 4096):
        chunk = bible_texts[start : start + 4096]
        mismatches += [
            (text, back)
            for text, back in zip(chunk, round_trip(bible, chunk))
            if back != normalize(text)
        ]
    assert mismatches == []
    # The corpus is NFKC text with single spaces: the round trip returns it unchanged.
    assert sum(normalize(text) != text for text in bible_texts) == 0


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_lossless_on_hostile_strings(text, small, bible):
    for tokenizer in (small, bible):
        ids = tokenizer.tokenize(tf.constant([text])).to_list()[0]
        assert UNK_ID not in ids  # byte fallback spells any character
        assert round_trip(tokenizer, [text]) == [normalize(text)]


def test_normalize_is_nfkc_with_squeezed_spaces():
    assert normalize("  a  b\u2003c ") == "a b c"
    assert normalize("ﬁ①") == "fi1"
    assert normalize("e\u0301") == "é" == normalize("é")
    assert normalize("a\u2581b") == "a b"
    # Spaces are squeezed before each "▁" reads as one: " " + "  " + " " between a and b.
    assert normalize("\u2581 a  \u2581\u2581 b \u2581") == "a    b"
    assert normalize("tab\tand\nline") == "tab\tand\nline"  # only spaces are squeezed
    assert normalize("ÁRBOL Straße", lower_case=True) == "árbol strasse"


def test_composed_and_decomposed_accents_give_the_same_ids(small):
    ids = small.tokenize(tf.constant(["estación", "estacio\u0301n"])).to_list()
    assert ids[0] == ids[1]


def test_detokenize_stops_at_end_and_drops_reserved_ids(small):
    ids = small.tokenize(tf.constant(["hola", "¿Dónde está?"])).to_tensor().numpy()
    hola = [i for i in ids[0] if i not in (PAD_ID, START_ID, END_ID)]
    tail = [i for i in ids[1] if i not in (PAD_ID, START_ID, END_ID)]
    batch = tf.ragged.constant(
        [[START_ID, *hola, UNK_ID, END_ID, *tail], [*hola, PAD_ID, PAD_ID, *hola]]
    ).to_tensor()
    assert as_strings(small.detokenize(batch)) == ["hola", "hola hola"]  # "▁hola" starts a word
    assert as_strings(small.detokenize(tf.ragged.constant([[*hola, END_ID, *tail]]))) == ["hola"]
    with pytest.raises(TypeError, match="integers"):
        small.detokenize(tf.constant([[1.0]]))


def test_graph_mode_batch_equals_eager(small):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def through_graph(text):
        dense = small.tokenize(text).to_tensor()
        return small.detokenize(dense), dense, small.lookup(dense)

    texts = SPANISH[:5] + [""]
    text, dense, pieces = through_graph(tf.constant(texts))
    eager_ids = small.tokenize(tf.constant(texts))
    assert as_strings(text) == [normalize(t) for t in texts]
    np.testing.assert_array_equal(dense.numpy(), eager_ids.to_tensor().numpy())
    assert pieces.numpy().tolist() == small.lookup(eager_ids).to_tensor(b"[PAD]").numpy().tolist()


def test_lower_case_and_bpe_options_are_lossless_up_to_their_normalization(bible_texts):
    sample = bible_texts[::50]
    lowered = SentencePieceTokenizer(
        vocabulary.learn_sentencepiece(sample, 2000, lower_case=True), lower_case=True
    )
    assert round_trip(lowered, sample) == [normalize(text, lower_case=True) for text in sample]
    assert not any(piece != piece.lower() for piece in lowered.vocab[260:])
    bpe_proto = vocabulary.learn_sentencepiece(sample, 2000, model_type="bpe")
    spec = sentencepiece_model_pb2.ModelProto.FromString(bpe_proto).trainer_spec
    assert spec.model_type == spec.BPE and spec.byte_fallback and spec.character_coverage == 1.0
    assert round_trip(SentencePieceTokenizer(bpe_proto), sample) == [normalize(t) for t in sample]
    with pytest.raises(ValueError, match="model_type"):
        vocabulary.learn_sentencepiece(sample, 2000, model_type="char")


def test_wordpiece_through_keras_hub(tmp_path):
    texts = [text for pair in PAIRS * 5 for text in pair]
    vocab = vocabulary.learn_wordpiece(texts, 300)
    assert tuple(vocab[:4]) == RESERVED_TOKENS
    tokenizer = WordPieceTokenizer(vocab)
    reference = keras_hub.tokenizers.WordPieceTokenizer(vocabulary=vocab, oov_token="[UNK]")
    ids = tokenizer.tokenize(tf.constant(SPANISH)).to_list()
    assert [row[1:-1] for row in ids] == reference.tokenize(SPANISH)  # keras-hub's Python path
    # WordPiece keeps the words but not the spacing around punctuation.
    assert round_trip(tokenizer, ["hola, ¿cómo estás?"]) == ["hola , ¿ cómo estás ?"]
    tokenizer.save(tmp_path / "vocab.txt")
    assert WordPieceTokenizer.from_file(tmp_path / "vocab.txt").vocab == vocab


def test_build_tokenizers_shared_by_default_and_separate_on_request(tmp_path):
    shared = vocabulary.build_tokenizers(PAIRS * 5, 400, tmp_path / "shared")
    assert shared[0] is shared[1]
    assert sorted(os.listdir(tmp_path / "shared")) == ["spm.shared.model", "tokenizer_config.json"]
    source, target = vocabulary.build_tokenizers(
        PAIRS * 5, 400, tmp_path / "separate", shared=False
    )
    assert "▁estación" in source.vocab and "▁estación" not in target.vocab
    assert "▁station" in target.vocab and "▁station" not in source.vocab
    assert "▁estación" in shared[0].vocab and "▁station" in shared[0].vocab


def test_build_tokenizers_reloads_and_never_overwrites(tmp_path):
    first, _ = vocabulary.build_tokenizers(PAIRS * 5, 400, tmp_path)
    model_path = tmp_path / "spm.shared.model"
    before = model_path.read_bytes()
    again, _ = vocabulary.build_tokenizers([("otro", "other")], 400, tmp_path)  # reused
    assert again.vocab == first.vocab and model_path.read_bytes() == before
    with pytest.raises(ValueError, match=r"vocab_size: 400 there, 500 asked"):
        vocabulary.build_tokenizers(PAIRS, 500, tmp_path)
    with pytest.raises(ValueError, match=r"type: 'sentencepiece' there, 'wordpiece' asked"):
        vocabulary.build_tokenizers(PAIRS, 400, tmp_path, tokenizer_type="wordpiece")
    assert model_path.read_bytes() == before


def test_a_tokenizer_directory_of_the_old_wordpiece_tokenizer_is_refused(tmp_path):
    old_config = {
        "vocab_size": 400,
        "shared": False,
        "lower_case": False,
        "normalization": "NFKC",
        "min_frequency": 2,
    }
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(old_config), encoding="utf-8")
    (tmp_path / "vocab.src.txt").write_text("[PAD]\n[UNK]\n[START]\n[END]\na\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"older version.*Retrain"):
        load_tokenizers(tmp_path)
    with pytest.raises(ValueError, match=r"older version"):
        vocabulary.build_tokenizers(PAIRS, 400, tmp_path)
    assert json.loads((tmp_path / "tokenizer_config.json").read_text()) == old_config


def test_missing_or_bad_inputs_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer_config.json not found"):
        load_tokenizers(tmp_path)
    with pytest.raises(ValueError, match="No text"):
        vocabulary.learn_sentencepiece(["", ""], 300)
    with pytest.raises(ValueError, match="tokenizer must be one of"):
        vocabulary.build_tokenizers(PAIRS, 400, tmp_path, tokenizer_type="bytes")
    with pytest.raises(ValueError, match="must start with the reserved tokens"):
        WordPieceTokenizer(["a", "b", "[PAD]", "[UNK]", "[START]", "[END]"])


def test_exported_savedmodel_survives_tf1_loader(small, tmp_path):
    archive = keras.export.ExportArchive()
    archive.track(small)

    def serve(text):
        ids = small.tokenize(text)
        return {"round_trip": small.detokenize(ids), "ids": ids.to_tensor()}

    archive.add_endpoint(
        "serving_default", serve, input_signature=[tf.TensorSpec([None], tf.string, name="text")]
    )
    export_dir = tmp_path / "tokenizer_model" / "1"
    archive.write_out(str(export_dir), verbose=False)
    texts = ["3.5 “hola” 1, 2 A - B", "😀 ¿Dónde está?"]
    expected_ids = small.tokenize(tf.constant(texts)).to_tensor().numpy()

    # saved_model_cli loads with the TF1 Session loader, like TF Serving; the tensorflow-text ops
    # must be registered first, as TF Serving links them.
    saved_model_cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    outputs_dir = tmp_path / "cli_outputs"
    launcher = (
        "import runpy, sys, tensorflow_text; sys.argv = sys.argv[1:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    command = [
        sys.executable,
        "-c",
        launcher,
        saved_model_cli,
        "run",
        "--dir",
        str(export_dir),
        "--tag_set",
        "serve",
        "--signature_def",
        "serving_default",
        "--input_exprs",
        "text=" + json.dumps(texts, ensure_ascii=False),
        "--outdir",
        str(outputs_dir),
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    cli_text = np.load(outputs_dir / "round_trip.npy", allow_pickle=True)
    assert [t.decode("utf-8") for t in cli_text] == texts
    np.testing.assert_array_equal(np.load(outputs_dir / "ids.npy"), expected_ids)

    loaded = tf.saved_model.load(str(export_dir))
    outputs = loaded.signatures["serving_default"](text=tf.constant(texts))
    assert as_strings(outputs["round_trip"]) == texts


def test_command_line_builds_vocabularies(tmp_path, capsys):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    lines = [f"{spanish}\t{english}\n" for spanish, english in PAIRS * 5]
    (data_dir / "train.tsv").write_text("".join(lines), encoding="utf-8")
    out_dir = tmp_path / "vocab"
    vocabulary.main(
        [
            "--data_dir",
            str(data_dir),
            "--out_dir",
            str(out_dir),
            "--vocab_size",
            "350",
            "--separate_vocabs",
        ]
    )
    source, target = load_tokenizers(out_dir)
    assert source is not target and source.vocab_size <= 350
    output = capsys.readouterr().out
    assert PAIRS[0][0] in output and "▁" in output  # the round-trip sample and its pieces


def test_source_casing_lowercases_all_of_a_source_or_only_one_in_capitals():
    from model.tokenizer import normalize_casing

    texts = tf.constant(
        ["DIOS ES AMOR", "¿DÓNDE ESTÁ ÑOÑO?", "YO SOY EL QUE SOY, dijo", "Dios", "12."]
    )
    lowered = ["dios es amor", "¿dónde está ñoño?", "yo soy el que soy, dijo", "dios", "12."]
    as_written = ["dios es amor", "¿dónde está ñoño?", "YO SOY EL QUE SOY, dijo", "Dios", "12."]
    for casing, expected in (("lower", lowered), ("lower_all_caps", as_written)):
        normalized = normalize_casing(texts, casing).numpy()
        assert [text.decode("utf-8") for text in normalized] == expected, casing
    with pytest.raises(ValueError, match="casing must be one of"):
        normalize_casing(texts, "upper")
