"""Helpers shared by the notebooks, so that their cells stay about the Transformer.

Where the repository is, which trained run a notebook shows (or a quick one trained on the spot
in fast mode), subword pieces as readable labels, and attention heatmaps. (Training curves come from `training.curves`.)

Fast mode: with the environment variable `NOTEBOOK_FAST=1` (the notebook tests set it), or when
no trained run exists (not even the bundled pretrained model), the training notebooks train the `tiny` preset for
a few seconds on a small word-for-word Spanish→English corpus written into a temporary directory,
instead of reading `runs/small`, `runs/demo` or `pretrained/es-en` and the Bible corpus.
"""

import os
import pathlib
import tempfile

import numpy as np

# The project is installed (`make setup`: `pip install -e .`), so no sys.path editing here.
REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent

FAST_ENV = "NOTEBOOK_FAST"
# Looked for in this order: the user's own runs (the CPU default preset, then the quick demo),
# then the pretrained model committed to the repository (run_directory.artifacts.PRETRAINED_RUN).
TRAINED_RUN_DIRS = (
    REPO_ROOT / "runs" / "small",
    REPO_ROOT / "runs" / "demo",
    REPO_ROOT / "pretrained" / "es-en",
)  # = artifacts.PRETRAINED_RUN
BIBLE_DIR = REPO_ROOT / "data" / "bible"
FAST_PRESET = "tiny"
# Enough steps for the tiny preset to learn the word-for-word corpus (dev accuracy ~1.0).
FAST_TRAIN_STEPS = 100


def display_path(path):
    """`path` as it can be shown in a committed notebook: relative to the repository, or
    `$TMPDIR/...` for a temporary directory (no machine-specific absolute path)."""
    path = pathlib.Path(path).resolve()
    for root, shown in (
        (REPO_ROOT, None),
        (pathlib.Path(tempfile.gettempdir()).resolve(), "$TMPDIR"),
    ):
        try:
            relative = path.relative_to(root)
        except ValueError:
            continue
        return str(relative) if shown is None else f"{shown}/{relative}"
    return path.name


def is_trained_run(run_dir):
    """True when `run_dir` holds a run that `run_directory.artifacts.load_trained` can load: its config
    and either the final `model.keras` or a checkpoint (a run still training counts)."""
    import tensorflow as tf

    from run_directory import artifacts

    run_dir = pathlib.Path(run_dir)
    if not (run_dir / artifacts.CONFIG_FILE).is_file():
        return False
    if (run_dir / artifacts.MODEL_FILE).is_file():
        return True
    return tf.train.latest_checkpoint(str(run_dir / artifacts.CHECKPOINT_DIR)) is not None


def find_trained_run():
    """The first trained run of `TRAINED_RUN_DIRS` (a `pathlib.Path`), or None."""
    return next((run for run in TRAINED_RUN_DIRS if is_trained_run(run)), None)


def fast_mode_reason():
    """Why the notebooks run in fast mode (a sentence), or None when they show real runs."""
    if os.environ.get(FAST_ENV, "") not in ("", "0"):
        return f"{FAST_ENV}={os.environ[FAST_ENV]} is set"
    if find_trained_run() is None:
        return "no trained run in " + " or ".join(display_path(run) for run in TRAINED_RUN_DIRS)
    return None


def write_fast_corpus(directory):
    """Writes the word-for-word corpus of the training tests (train/dev/test.tsv) into
    `directory` and returns its path as a str."""
    from training.toy_corpus import write_corpus

    return str(write_corpus(pathlib.Path(directory)))


def fast_config(work_dir):
    """The fast-mode `TrainConfig`: the `tiny` preset for `FAST_TRAIN_STEPS` steps on the
    word-for-word corpus, which it writes into `work_dir/corpus`."""
    from training.config import resolve_config

    corpus_dir = write_fast_corpus(pathlib.Path(work_dir) / "corpus")
    return resolve_config(
        FAST_PRESET, overrides={"data": corpus_dir, "train_steps": FAST_TRAIN_STEPS}
    )


def train_fast_run(work_dir):
    """Trains `fast_config(work_dir)` into `work_dir/run` and returns that run directory (str)."""
    from training.train import train

    run_dir = str(pathlib.Path(work_dir) / "run")
    train(fast_config(work_dir), run_dir, preset=FAST_PRESET)
    return run_dir


# SentencePiece marks the start of a word with U+2581 "▁"; plots show it as the visible space "␣".
WORD_MARKER, VISIBLE_SPACE = "\u2581", "\u2423"


def readable_pieces(pieces):
    """Subword pieces (str or UTF-8 bytes) as tick labels: "▁" shown as "␣", byte pieces kept."""
    return [
        (piece.decode() if isinstance(piece, bytes) else piece).replace(WORD_MARKER, VISIBLE_SPACE)
        for piece in pieces
    ]


def plot_attention(ax, weights, key_labels, query_labels, title=None, colorbar=False):
    """Draws one attention map: a row per query, a column per key, each row summing to 1.

    Args:
        ax: a matplotlib Axes.
        weights: array `(len_q, len_k)`.
        key_labels, query_labels: tick labels, `len_k` and `len_q` strings.
        title: optional axes title.
        colorbar: also draw a colour bar next to the map.
    """
    weights = np.asarray(weights)
    if weights.shape != (len(query_labels), len(key_labels)):
        raise ValueError(
            f"weights of shape {weights.shape} do not match {len(query_labels)} query and "
            f"{len(key_labels)} key labels"
        )
    image = ax.imshow(weights, cmap="viridis", vmin=0.0, vmax=max(float(weights.max()), 1e-9))
    ax.set_xticks(range(len(key_labels)), key_labels, rotation=90)
    ax.set_yticks(range(len(query_labels)), query_labels)
    if title:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return image


def plot_attention_grid(weights_by_layer, key_labels, query_labels, title, max_width=20.0):
    """One attention map per layer (rows) and head (columns).

    Args:
        weights_by_layer: dict layer name → array `(num_heads, len_q, len_k)` (one sentence).
        key_labels, query_labels: tick labels, `len_k` and `len_q` strings.
        title: the figure's title.
        max_width: the figure's largest width in inches; long sentences shrink the maps.

    Returns:
        the matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    layers = list(weights_by_layer)
    num_heads = np.asarray(weights_by_layer[layers[0]]).shape[0]
    # About a third of an inch per token plus room for the tick labels, shrunk to max_width.
    map_width, map_height = 1.4 + 0.3 * len(key_labels), 1.2 + 0.3 * len(query_labels)
    scale = min(1.0, max_width / (map_width * num_heads))
    figure, axes = plt.subplots(
        len(layers),
        num_heads,
        squeeze=False,
        layout="constrained",
        figsize=(scale * map_width * num_heads, scale * map_height * len(layers) + 0.4),
    )
    for row, layer in enumerate(layers):
        for head in range(num_heads):
            plot_attention(
                axes[row, head],
                np.asarray(weights_by_layer[layer])[head],
                key_labels,
                query_labels,
                title=f"{layer}, head {head}",
            )
    figure.suptitle(title)
    return figure
