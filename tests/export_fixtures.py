"""A tiny trained Spanish→English run directory, trained by `training.train` itself.

`build_tiny_run` writes `PAIRS` as a corpus directory (train/dev/test.tsv) and trains a 1-layer,
d_model 32 Transformer on it with the training code users run (`training.train.train`, the
`tiny` preset with the overrides of `TINY_CONFIG`) until it reproduces the training translations,
so exports of it emit real words and [END]. Tests that need a real translator (export, serving,
CTranslate2) share one per session (`tiny_export_run` in conftest.py) instead of waiting for a
corpus-sized run.
"""

import json
import os
import sys

from training.config import resolve_config
from training.train import train

# The stock saved_model_cli does not import tensorflow_text, whose ops the tokenizer uses
# (see model/tokenizer.py); TF Serving's model server links them.
SAVED_MODEL_CLI_WITH_TF_TEXT = (
    "import sys, runpy, tensorflow_text; sys.argv = sys.argv[1:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def saved_model_cli_path():
    return os.path.join(os.path.dirname(sys.executable), "saved_model_cli")


def saved_model_cli(*args):
    """argv running the .venv's `saved_model_cli` with tensorflow_text's ops registered."""
    return [sys.executable, "-c", SAVED_MODEL_CLI_WITH_TF_TEXT, saved_model_cli_path(), *args]


def text_literal(texts):
    """A Python list literal for `saved_model_cli --input_exprs`."""
    return "[" + ", ".join(json.dumps(text, ensure_ascii=False) for text in texts) + "]"


# Short sentences sharing words, so 40 pairs are enough to learn a word-level mapping.
PAIRS = (
    ("Hola.", "Hello."),
    ("Buenos días.", "Good morning."),
    ("Buenas noches.", "Good night."),
    ("Gracias.", "Thank you."),
    ("Muchas gracias.", "Thank you very much."),
    ("¿Cómo estás?", "How are you?"),
    ("Estoy bien.", "I am fine."),
    ("El gato es negro.", "The cat is black."),
    ("El perro es blanco.", "The dog is white."),
    ("La casa es grande.", "The house is big."),
    ("La casa es pequeña.", "The house is small."),
    ("El perro es grande.", "The dog is big."),
    ("El gato es pequeño.", "The cat is small."),
    ("Me gusta el café.", "I like coffee."),
    ("Me gusta el té.", "I like tea."),
    ("No me gusta el café.", "I do not like coffee."),
    ("¿Dónde está el gato?", "Where is the cat?"),
    ("¿Dónde está el perro?", "Where is the dog?"),
    ("¿Dónde está la casa?", "Where is the house?"),
    ("El libro está en la mesa.", "The book is on the table."),
    ("El gato está en la mesa.", "The cat is on the table."),
    ("El perro está en la casa.", "The dog is in the house."),
    ("Tengo un libro.", "I have a book."),
    ("Tengo un perro.", "I have a dog."),
    ("Tengo un gato negro.", "I have a black cat."),
    ("Ella lee un libro.", "She reads a book."),
    ("Él bebe café.", "He drinks coffee."),
    ("Ella bebe té.", "She drinks tea."),
    ("Nosotros comemos pan.", "We eat bread."),
    ("Ellos comen pan.", "They eat bread."),
    ("El agua está fría.", "The water is cold."),
    ("El café está caliente.", "The coffee is hot."),
    ("Hace frío.", "It is cold."),
    ("Hace calor.", "It is hot."),
    ("Mi hermano es alto.", "My brother is tall."),
    ("Mi hermana es alta.", "My sister is tall."),
    ("Vivo en una casa pequeña.", "I live in a small house."),
    ("El niño come pan.", "The boy eats bread."),
    ("La niña bebe agua.", "The girl drinks water."),
    ("Hasta mañana.", "See you tomorrow."),
)

# Overrides of the `tiny` preset.
TINY_CONFIG = {
    "num_layers": 1,
    "d_model": 32,
    "num_heads": 4,
    "dff": 64,
    "dropout": 0.0,
    "norm_first": False,
    "tie_embeddings": True,
    # Short on purpose: the export tests truncate inputs longer than this.
    "max_sequence_length": 24,
    # Separate SentencePiece vocabularies (the training CLI's tests cover the shared default).
    "tokenizer": "sentencepiece",
    "subword_model": "unigram",
    "vocab_size": 400,
    "shared_vocab": False,
    "lower_case": False,
    "batch_tokens": 1024,
    "train_steps": 300,
    "warmup_steps": 40,
    # A peak learning rate of about 1e-2 at step 40: (32 * 40) ** -0.5 * 0.36.
    "lr_scale": 0.36,
    "label_smoothing": 0.0,
    "checkpoint_every": 300,
    "dev_batches": 1,
    "dev_bleu_sentences": 0,
    "seed": 0,
}


def write_pairs_corpus(directory, pairs=PAIRS):
    """`directory`/train.tsv, dev.tsv and test.tsv, each holding `pairs`; returns `directory`."""
    os.makedirs(directory, exist_ok=True)
    lines = "".join(f"{source}\t{target}\n" for source, target in pairs)
    for split in ("train", "dev", "test"):
        with open(os.path.join(directory, f"{split}.tsv"), "w", encoding="utf-8") as handle:
            handle.write(lines)
    return directory


def build_tiny_run(run_dir, pairs=PAIRS, config=None):
    """Trains the tiny run into `run_dir` with `training.train` (its corpus goes to
    `<run_dir>-corpus`).

    Args:
        run_dir: str or os.PathLike; must not hold a run yet.
        pairs: `(spanish, english)` str pairs to learn.
        config: overrides of `TINY_CONFIG`.

    Returns:
        The `TrainConfig` of the run.
    """
    run_dir = os.fspath(run_dir)
    corpus = write_pairs_corpus(run_dir.rstrip(os.sep) + "-corpus", pairs)
    overrides = {**TINY_CONFIG, **(config or {}), "data": corpus}
    run_config = resolve_config("tiny", overrides=overrides)
    train(run_config, run_dir, preset="tiny")
    return run_config
