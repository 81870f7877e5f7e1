"""The layout of a training run directory, and loading a trained translator from it.

    <run_dir>/
        config.json          the full training configuration (model sizes, tokenizer options, ...)
        tokenizer/           vocabularies + tokenizer_config.json (`training.tokenizer`)
        checkpoints/         tf.train checkpoints (model, optimizer, step, data iterator)
        model.keras          the trained model (written at the end of training)
        logs/                TensorBoard event files

Everything downstream (evaluation, export, notebooks) loads a run through `load_trained`.
"""

import json
import os

import keras

from model import Transformer
from training.tokenizer import load_tokenizers

CONFIG_FILE = "config.json"
TOKENIZER_DIR = "tokenizer"
CHECKPOINT_DIR = "checkpoints"
MODEL_FILE = "model.keras"
LOG_DIR = "logs"

MODEL_ARGS = ("num_layers", "d_model", "num_heads", "dff", "dropout", "norm_first")


# Settings added after runs were first written, with the value those older runs had.
SETTINGS_OF_OLDER_RUNS = {"tie_embeddings": False}


def read_config(run_dir):
    path = os.path.join(run_dir, CONFIG_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found: {run_dir} is not a training run directory.")
    with open(path, encoding="utf-8") as config_file:
        return {**SETTINGS_OF_OLDER_RUNS, **json.load(config_file)}


def build_model(config, input_vocab_size, target_vocab_size):
    """A fresh `Transformer` with the sizes of a run's `config` (a dict) and the vocabularies.

    `tie_embeddings` ties the target embedding and the output projection, and with
    `shared_vocab` the source embedding too (§3.4).
    """
    return Transformer(
        num_layers=config["num_layers"],
        d_model=config["d_model"],
        num_heads=config["num_heads"],
        dff=config["dff"],
        input_vocab_size=input_vocab_size,
        target_vocab_size=target_vocab_size,
        pe_input=config["max_length"],
        pe_target=config["max_length"],
        rate=config["dropout"],
        norm_first=config["norm_first"],
        tie_embeddings=config["tie_embeddings"],
        share_embeddings=config["tie_embeddings"] and config["shared_vocab"],
    )


def load_trained(run_dir):
    """Loads a trained translator.

    Uses `model.keras` when training finished; otherwise the latest checkpoint (a run stopped
    early can still be evaluated or exported).

    Returns:
        `(model, source_tokenizer, target_tokenizer, config)`.
    """
    import tensorflow as tf

    config = read_config(run_dir)
    source_tokenizer, target_tokenizer = load_tokenizers(os.path.join(run_dir, TOKENIZER_DIR))
    model_path = os.path.join(run_dir, MODEL_FILE)
    if os.path.exists(model_path):
        model = keras.models.load_model(model_path, compile=False)
    else:
        latest = tf.train.latest_checkpoint(os.path.join(run_dir, CHECKPOINT_DIR))
        if latest is None:
            raise FileNotFoundError(f"{run_dir} has neither {MODEL_FILE} nor a checkpoint.")
        model = build_model(config, source_tokenizer.vocab_size, target_tokenizer.vocab_size)
        model.build(((None, None), (None, None)))
        # Every model weight must come back (the checkpoint also holds the optimizer and data
        # state, which are not needed here): never evaluate or export half-random weights.
        tf.train.Checkpoint(model=model).restore(latest).assert_existing_objects_matched() \
            .expect_partial()
    return model, source_tokenizer, target_tokenizer, config
