"""Average a run's last checkpoints: `python -m training.average --run_dir runs/small --last 3`.

Checkpoint averaging (as OpenNMT-tf, fairseq and Sockeye do it): the mean of the model weights of
the last N checkpoints, usually a better translator than the last checkpoint alone. It is written
to `<run_dir>/averaged/` (`ckpt-<newest step>` and `average.json`, which lists the steps), and
`training.evaluate`, `inference.export` and the notebooks then use it instead of `model.keras`
(see `run_directory.artifacts.load_trained`) until training goes on past those steps. Only model
weights are averaged, in float64 and stored as float32 whatever the run's mixed precision; the
optimizer state and the training checkpoints are left untouched, so `--resume` is unaffected.
Averaging again replaces the previous average.
"""

import argparse
import json
import os
import shutil
import sys
import uuid

import numpy as np
import tensorflow as tf
from tqdm import tqdm

from model.tokenizer import load_tokenizers
from run_directory import artifacts


class AveragingError(ValueError):
    """Checkpoints that cannot be averaged as asked; the message says why and what to do."""


def checkpoints_to_average(run_dir, last):
    """`[(step, path), ...]`: the `last` newest checkpoints of the run, oldest first.

    Raises:
        AveragingError: `last` < 1, no run directory, or fewer than `last` checkpoints.
    """
    if last < 1:
        raise AveragingError(f"--last must be at least 1, got {last}")
    if not os.path.isdir(run_dir):
        raise AveragingError(f"{run_dir} does not exist")
    kept = artifacts.kept_checkpoints(os.path.join(run_dir, artifacts.CHECKPOINT_DIR))
    if len(kept) < last:
        steps = ", ".join(str(step) for step, _ in kept) or "none"
        raise AveragingError(
            f"{run_dir} has {len(kept)} checkpoint(s) (steps: {steps}); averaging the last "
            f"{last} needs {last}. Training keeps the last --keep_checkpoints of them."
        )
    return kept[-last:]


def average_weights(model, checkpoint_paths):
    """Sets the built `model`'s weights to their mean over `checkpoint_paths`.

    Floating-point weights are summed in float64 and assigned in the variables' dtype (float32,
    also under a mixed-precision policy); any other weight keeps the newest checkpoint's value.
    """
    sums = None
    for path in tqdm(checkpoint_paths, desc="averaging", unit=" checkpoint"):
        artifacts.restore_model(model, path)
        values = [weight.numpy().astype(np.float64) for weight in model.weights]
        sums = values if sums is None else [total + value for total, value in zip(sums, values)]
    for weight, total in zip(model.weights, sums):
        if weight.dtype.startswith("float"):
            weight.assign((total / len(checkpoint_paths)).astype(weight.dtype))


def _replace_directory(staging_dir, final_dir):
    """Puts `staging_dir` in place of `final_dir`, which may exist: renames only, so a reader
    finds either the old or the new directory complete."""
    old_dir = None
    if os.path.exists(final_dir):
        old_dir = f"{final_dir}.old-{uuid.uuid4().hex}"
        os.rename(final_dir, old_dir)
    os.rename(staging_dir, final_dir)
    if old_dir is not None:
        shutil.rmtree(old_dir)


def average_run(run_dir, last):
    """Averages the run's `last` newest checkpoints into `<run_dir>/averaged/`.

    Returns:
        the averaged checkpoint's path.

    Raises:
        AveragingError: see `checkpoints_to_average`; nothing is written then.
        FileNotFoundError: the directory is not a training run (no config.json).
    """
    chosen = checkpoints_to_average(run_dir, last)
    config = artifacts.read_config(run_dir)
    source_tokenizer, target_tokenizer = load_tokenizers(
        os.path.join(run_dir, artifacts.TOKENIZER_DIR)
    )
    model = artifacts.build_model(config, source_tokenizer.vocab_size, target_tokenizer.vocab_size)
    model.build(((None, None), (None, None)))
    average_weights(model, [path for _, path in chosen])

    steps = [step for step, _ in chosen]
    staging_dir = os.path.join(run_dir, f".{artifacts.AVERAGED_DIR}-staging-{uuid.uuid4().hex}")
    try:
        manager = tf.train.CheckpointManager(
            tf.train.Checkpoint(model=model), staging_dir, max_to_keep=1
        )
        name = os.path.basename(manager.save(checkpoint_number=steps[-1]))
        with open(
            os.path.join(staging_dir, artifacts.AVERAGE_INFO_FILE), "w", encoding="utf-8"
        ) as info_file:
            json.dump(
                {"steps": steps, "checkpoints": [os.path.basename(path) for _, path in chosen]},
                info_file,
                indent=2,
            )
        averaged_dir = os.path.join(run_dir, artifacts.AVERAGED_DIR)
        _replace_directory(staging_dir, averaged_dir)
    except BaseException:
        shutil.rmtree(staging_dir, ignore_errors=True)
        raise
    return os.path.join(averaged_dir, name)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m training.average", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--run_dir", required=True, help="a training run directory")
    parser.add_argument(
        "--last", type=int, required=True, help="how many of the newest checkpoints to average"
    )
    args = parser.parse_args(argv)
    try:
        path = average_run(args.run_dir, args.last)
    except (AveragingError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(
        f"wrote {path}, the average of the last {args.last} checkpoint(s); "
        "training.evaluate and inference.export now use it"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
