"""A tiny trained Spanish→English run directory, laid out exactly as `training.artifacts` says.

    <run_dir>/config.json, <run_dir>/tokenizer/, <run_dir>/model.keras

`build_tiny_run` learns SentencePiece vocabularies from `PAIRS` and fits a 1-layer, d_model 32
Transformer on them (teacher forcing: decoder input = target[:-1], labels = target[1:]) until it
reproduces the training translations, so exports of it emit real words and [END]. Tests that
need a real translator (export, serving) build one per session or module with it instead of
waiting for a full training run.
"""

import json
import os

import keras
import numpy as np
import tensorflow as tf

from training.artifacts import CONFIG_FILE, MODEL_FILE, TOKENIZER_DIR, build_model
from training.losses import MaskedAccuracy, MaskedSparseCrossEntropy
from training.schedule import CustomSchedule, paper_adam
from training.vocabulary import build_run_tokenizers

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

TINY_CONFIG = {
    "num_layers": 1,
    "d_model": 32,
    "num_heads": 4,
    "dff": 64,
    "dropout": 0.0,
    "norm_first": False,
    "tie_embeddings": True,
    # Short on purpose: the export tests truncate inputs longer than this.
    "max_length": 24,
    # Separate SentencePiece vocabularies (the training CLI's tests cover the shared default).
    "tokenizer": "sentencepiece",
    "subword_model": "unigram",
    "vocab_size": 400,
    "shared_vocab": False,
    "lower_case": False,
    "batch_size": len(PAIRS),
    "train_steps": 150,
    "warmup_steps": 40,
    "seed": 0,
}


def _teacher_forcing_arrays(source_tokenizer, target_tokenizer, pairs):
    """Padded `(source, decoder_input, labels)` int32 arrays of the tokenized pairs."""
    sources = tf.constant([source for source, _ in pairs])
    targets = tf.constant([target for _, target in pairs])
    source_ids = source_tokenizer.tokenize(sources).to_tensor().numpy().astype(np.int32)
    target_ids = target_tokenizer.tokenize(targets).to_tensor().numpy().astype(np.int32)
    # The [END] of a shorter target is followed by padding, so dropping the last column only
    # removes padding or the longest target's [END] from the decoder input.
    return source_ids, target_ids[:, :-1], target_ids[:, 1:]


def build_tiny_run(run_dir, pairs=PAIRS, config=None):
    """Writes a trained tiny run to `run_dir` (created; must not hold a run yet).

    Args:
        run_dir: str or os.PathLike.
        pairs: `(spanish, english)` str pairs to learn.
        config: overrides of `TINY_CONFIG`.

    Returns:
        dict: the run config written to `config.json`, plus `final_loss` and
        `final_accuracy` (masked, on the training pairs).
    """
    config = {**TINY_CONFIG, **(config or {})}
    run_dir = os.fspath(run_dir)
    if os.path.exists(os.path.join(run_dir, CONFIG_FILE)):
        raise FileExistsError(f"{run_dir} already holds a run ({CONFIG_FILE} exists).")
    keras.utils.set_random_seed(config["seed"])
    source_tokenizer, target_tokenizer = build_run_tokenizers(
        list(pairs), config, os.path.join(run_dir, TOKENIZER_DIR)
    )
    source, decoder_input, labels = _teacher_forcing_arrays(
        source_tokenizer, target_tokenizer, pairs
    )
    if max(source.shape[1], decoder_input.shape[1]) > config["max_length"]:
        raise ValueError(f"a pair is longer than max_length={config['max_length']} tokens.")

    model = build_model(config, source_tokenizer.vocab_size, target_tokenizer.vocab_size)
    # Peak rate 1e-2 at `warmup_steps`: the paper's curve, scaled for 40 sentences.
    peak = (config["d_model"] * config["warmup_steps"]) ** -0.5
    model.compile(
        optimizer=paper_adam(
            CustomSchedule(config["d_model"], config["warmup_steps"], scale=1e-2 / peak)
        ),
        loss=MaskedSparseCrossEntropy(),
        metrics=[MaskedAccuracy()],
    )
    dataset = (
        tf.data.Dataset.from_tensor_slices(((source, decoder_input), labels))
        .batch(config["batch_size"])
        .repeat()
    )
    history = model.fit(
        dataset, epochs=1, steps_per_epoch=config["train_steps"], shuffle=False, verbose=0
    )
    # Saved without its compile config (optimizer, schedule, loss), as the training CLI's
    # custom loop saves it: loading it then needs nothing but the model's own classes.
    inference_model = build_model(config, source_tokenizer.vocab_size, target_tokenizer.vocab_size)
    inference_model.build(((None, None), (None, None)))
    inference_model.set_weights(model.get_weights())
    inference_model.save(os.path.join(run_dir, MODEL_FILE))
    with open(os.path.join(run_dir, CONFIG_FILE), "w", encoding="utf-8") as config_file:
        json.dump(config, config_file, indent=2)
        config_file.write("\n")
    return {
        **config,
        "final_loss": float(history.history["loss"][-1]),
        "final_accuracy": float(history.history["masked_accuracy"][-1]),
    }
