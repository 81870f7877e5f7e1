"""The layout of a training run directory, and loading a trained translator from it.

    <run_dir>/
        config.json          the full training configuration (model sizes, tokenizer options, ...)
        tokenizer/           vocabularies + tokenizer_config.json (`model.tokenizer`, learned by `training.vocabulary`)
        checkpoints/         tf.train checkpoints (model, optimizer, step, data iterator)
        model.keras          the trained model (written at the end of training)
        averaged/            the average of the last checkpoints' model weights, and which
                             (`training.average`; average.json)
        best/                the model weights of the best dev BLEU so far (`training.dev_bleu`;
                             best.json)
        logs/                TensorBoard event files

Everything downstream (evaluation, export, notebooks) loads a run through `load_trained`.
"""

import json
import logging
import os
import re
import sys

import keras

from model import Transformer
from model.precision import BFLOAT16_WEIGHTS
from model.translator import DecodingOptions
from run_directory.settings import upgrade_renamed_settings

CONFIG_FILE = "config.json"
TOKENIZER_DIR = "tokenizer"
CHECKPOINT_DIR = "checkpoints"
MODEL_FILE = "model.keras"
LOG_DIR = "logs"
AVERAGED_DIR = "averaged"
AVERAGE_INFO_FILE = "average.json"
BEST_DIR = "best"
BEST_INFO_FILE = "best.json"
# Decoding options chosen for the run (on the dev split; `training.bundle` writes it): the
# defaults of `inference.export` and `training.evaluate` for this run, so that what is served is
# what was scored.
DECODING_FILE = "decoding.json"
# The trained model committed to the repository (`training.bundle`, `make pretrained`), relative
# to the repository root: `make demo` serves it and the notebooks fall back on it.
PRETRAINED_RUN = os.path.join("pretrained", "es-en")
# A bundle's model card (`training.bundle`): what tells a bundle from a run of one's own.
BUNDLE_CARD_FILE = "README.md"
# Where `training.evaluate` writes the outputs of evaluating a bundle (+ the bundle's name), so
# that the bundle's committed files stay as they are.
BUNDLE_EVAL_BASE = os.path.join("runs", "eval")

logger = logging.getLogger(__name__)

# Settings added after runs were first written, with the value those older runs had.
SETTINGS_OF_OLDER_RUNS = {"tie_embeddings": False}


def read_config(run_dir):
    path = os.path.join(run_dir, CONFIG_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found: {run_dir} is not a training run directory.")
    with open(path, encoding="utf-8") as config_file:
        return {**SETTINGS_OF_OLDER_RUNS, **upgrade_renamed_settings(json.load(config_file), path)}


def build_model(config, input_vocab_size, target_vocab_size, dtype=None):
    """A fresh `Transformer` with the sizes of a run's `config` (a dict) and the vocabularies.

    `tie_embeddings` ties the target embedding and the output projection, and with
    `shared_vocab` the source embedding too (§3.4). `dtype`: a Keras dtype policy name
    ("mixed_bfloat16"), or None for the global one.
    """
    return Transformer(
        num_layers=config["num_layers"],
        d_model=config["d_model"],
        num_heads=config["num_heads"],
        dff=config["dff"],
        input_vocab_size=input_vocab_size,
        target_vocab_size=target_vocab_size,
        pe_input=config["max_sequence_length"],
        pe_target=config["max_sequence_length"],
        rate=config["dropout"],
        norm_first=config["norm_first"],
        tie_embeddings=config["tie_embeddings"],
        share_embeddings=config["tie_embeddings"] and config["shared_vocab"],
        dtype=dtype,
    )


def checkpoint_step(path):
    """The training step of a checkpoint path that `CheckpointManager` named `.../ckpt-<step>`."""
    match = re.search(r"-([0-9]+)$", path)
    if match is None:
        raise ValueError(f"{path} is not named <prefix>-<step>")
    return int(match.group(1))


def kept_checkpoints(checkpoint_dir):
    """`[(step, path), ...]`, oldest first, of the checkpoints the directory's state file lists
    and that exist; `[]` without any."""
    import tensorflow as tf

    state = tf.train.get_checkpoint_state(checkpoint_dir)
    paths = state.all_model_checkpoint_paths if state else []
    return sorted(
        (checkpoint_step(path), path) for path in paths if os.path.exists(path + ".index")
    )


def restore_model(model, checkpoint_path):
    """Restores every weight of the built `model` from a checkpoint of `tf.train.Checkpoint(
    model=...)` (a training checkpoint also holds the optimizer and data state, not needed here).

    Raises:
        AssertionError: a model weight is missing from the checkpoint (never evaluate or export
            half-random weights).
    """
    import tensorflow as tf

    tf.train.Checkpoint(model=model).restore(
        checkpoint_path
    ).assert_existing_objects_matched().expect_partial()


def current_averaged_checkpoint(run_dir):
    """`(path, info)` of the run's averaged checkpoint (`training.average`), or None when there is
    none or when training has gone on past the checkpoints it averaged (a warning says so)."""
    found = _checkpoint_with_info(os.path.join(run_dir, AVERAGED_DIR), AVERAGE_INFO_FILE)
    if found is None:
        return None
    path, info = found
    kept = kept_checkpoints(os.path.join(run_dir, CHECKPOINT_DIR))
    if kept and kept[-1][0] > max(info["steps"]):
        logger.warning(
            "ignoring %s: it averages steps up to %d, but training went on to step %d "
            "(run training.average again)",
            path,
            max(info["steps"]),
            kept[-1][0],
        )
        return None
    return path, info


def best_checkpoint(run_dir):
    """`(path, info)` of the weights with the best dev BLEU (`training.dev_bleu`), or None."""
    return _checkpoint_with_info(os.path.join(run_dir, BEST_DIR), BEST_INFO_FILE)


def _checkpoint_with_info(directory, info_file_name):
    """`(latest checkpoint path, its JSON info file)` of a model-only checkpoint directory, or
    None when it holds no checkpoint."""
    import tensorflow as tf

    path = tf.train.latest_checkpoint(directory)
    if path is None:
        return None
    with open(os.path.join(directory, info_file_name), encoding="utf-8") as info_file:
        return path, json.load(info_file)


def is_bundle(run_dir):
    """Whether `run_dir` is a packaged model (`training.bundle`) rather than a training run."""
    return os.path.isfile(os.path.join(run_dir, BUNDLE_CARD_FILE))


def source_spelling(run_dir):
    """The spelling the run's source tokenizer reads (`model.spelling.MODERN`), or None for a
    run trained before the corpus was modernized (its tokenizer config records none)."""
    from model.tokenizer import read_tokenizer_config

    config = read_tokenizer_config(os.path.join(run_dir, TOKENIZER_DIR))
    return None if config is None else config.get("source_spelling")


def decoding_options(run_dir, **overrides):
    """The run's `DecodingOptions` (`decoding.json`, or the defaults when it has none), with the
    `overrides` that are not None (`DecodingOptions` field names, as
    `training.decoding_flags.decoding_overrides` reads them from the flags) put in their place.

    Raises:
        ValueError: an invalid value, in `decoding.json` (named) or in `overrides`.
    """
    path = os.path.join(run_dir, DECODING_FILE)
    saved = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            saved = json.load(handle)
        try:
            DecodingOptions(**saved)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{path}: {error}") from error
    return DecodingOptions(
        **{**saved, **{name: value for name, value in overrides.items() if value is not None}}
    )


def select_weights(run_dir):
    """The weights `load_trained` uses, in this order: the averaged checkpoint
    (`training.average`) unless training went on after it; the weights of the best dev BLEU
    (`training.dev_bleu`, kept during training); `model.keras` when training finished; the
    latest checkpoint (a run stopped early can still be evaluated or exported).

    Returns:
        `(checkpoint_path, description)`; `checkpoint_path` is None for `model.keras`.
    """
    import tensorflow as tf

    averaged = current_averaged_checkpoint(run_dir)
    best = best_checkpoint(run_dir)
    if averaged is not None:
        checkpoint_path, info = averaged
        return checkpoint_path, (
            f"average of the checkpoints of steps {', '.join(map(str, info['steps']))}"
        )
    if best is not None:
        checkpoint_path, info = best
        return checkpoint_path, f"step {info['step']}, the best dev BLEU ({info['bleu']:.2f})"
    if os.path.exists(os.path.join(run_dir, MODEL_FILE)):
        return None, MODEL_FILE
    checkpoint_path = tf.train.latest_checkpoint(os.path.join(run_dir, CHECKPOINT_DIR))
    if checkpoint_path is None:
        raise FileNotFoundError(f"{run_dir} has neither {MODEL_FILE} nor a checkpoint.")
    return checkpoint_path, f"checkpoint {os.path.basename(checkpoint_path)}"


def weights_step(run_dir, checkpoint_path):
    """The training step of the weights `select_weights` picked (its `checkpoint_path`): a
    checkpoint's own (an averaged one's is its last step's), or, for `model.keras`, that of the
    run's latest kept checkpoint, which training writes beside it; None when it has none."""
    if checkpoint_path is not None:
        return checkpoint_step(checkpoint_path)
    kept = kept_checkpoints(os.path.join(run_dir, CHECKPOINT_DIR))
    return kept[-1][0] if kept else None


def require_trained_run(run_dir):
    """For command lines: exits with status 2 and one `error: ...` line on stderr unless
    `run_dir` is a training run with weights to load (`read_config`, `select_weights`)."""
    try:
        read_config(run_dir)
        select_weights(run_dir)
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


# Compute dtypes a trained model can be loaded with (`load_trained`), and their Keras policies.
COMPUTE_DTYPES = {"float32": "float32", "bfloat16": BFLOAT16_WEIGHTS}


def load_trained(run_dir, compute_dtype=None):
    """Loads a trained translator, from the weights `select_weights` picks.

    `compute_dtype` None computes as the run was trained (its dtype policy); "float32" in
    float32; "bfloat16" in bfloat16 (`COMPUTE_DTYPES`: Keras's "bfloat16" policy, the
    weight matrices rounded to bfloat16 once, here, and layer norms and embeddings kept
    float32, `model.precision`): the matrix products and activations in bfloat16, the
    attention softmax and the output logits in float32 (`model.attention`,
    `model.embedding`); it decodes exactly as mixed_bfloat16 would, without casting every
    weight at every step. For serving where the CPU has bfloat16 units (AVX-512 BF16, AMX).

    Returns:
        `(model, source_tokenizer, target_tokenizer, config)`; an INFO log says which weights.
    """
    if compute_dtype is not None and compute_dtype not in COMPUTE_DTYPES:
        raise ValueError(
            f"compute_dtype must be one of {list(COMPUTE_DTYPES)}, got {compute_dtype!r}."
        )
    # Here, not at the top: keras-hub, which the tokenizers import, is slow to import, and a
    # start that loads a kept translation (`run_directory.traced_cache`) never needs it.
    from model.tokenizer import load_tokenizers

    config = read_config(run_dir)
    source_tokenizer, target_tokenizer = load_tokenizers(os.path.join(run_dir, TOKENIZER_DIR))
    checkpoint_path, loaded = select_weights(run_dir)
    if checkpoint_path is None:
        model = keras.models.load_model(os.path.join(run_dir, MODEL_FILE), compile=False)
    else:
        model = build_model(config, source_tokenizer.vocab_size, target_tokenizer.vocab_size)
        model.build(((None, None), (None, None)))
        restore_model(model, checkpoint_path)
    if compute_dtype is not None and COMPUTE_DTYPES[compute_dtype] != model.dtype_policy.name:
        weights = model.get_weights()
        model = build_model(
            config,
            source_tokenizer.vocab_size,
            target_tokenizer.vocab_size,
            dtype=COMPUTE_DTYPES[compute_dtype],
        )
        model.build(((None, None), (None, None)))
        model.set_weights(weights)
    logger.info("%s: using the weights of %s (%s)", run_dir, loaded, model.dtype_policy.name)
    return model, source_tokenizer, target_tokenizer, config
