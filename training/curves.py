"""Training curves from a run's TensorBoard logs: `python -m training.curves --run_dir runs/small`."""

import argparse
import glob
import os

from run_directory import artifacts


def read_scalars(log_dir, wall_time=False):
    """All scalar summaries under `log_dir`: `{tag: (steps, values)}`, in step order.

    With `wall_time`, `{tag: (steps, values, wall_times)}` (seconds since the epoch).
    """
    import tensorflow as tf

    series = {}
    for path in sorted(glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))):
        for record in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                scalar = (
                    float(tf.make_ndarray(value.tensor))
                    if value.HasField("tensor")
                    else value.simple_value
                )
                series.setdefault(value.tag, {})[event.step] = (scalar, event.wall_time)
    return {
        tag: tuple(
            zip(
                *(
                    (step, scalar, wall) if wall_time else (step, scalar)
                    for step, (scalar, wall) in sorted(points.items())
                )
            )
        )
        for tag, points in series.items()
    }


def plot_training_curves(run_dir, output=None, name=None):
    """Loss and accuracy, train and dev, and dev BLEU/chrF when the run measured them, against
    steps; saved to `output` (PNG) when given.

    Returns:
        the matplotlib figure.
    """
    import matplotlib

    if output:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    logs = os.path.join(run_dir, artifacts.LOG_DIR)
    train, dev = read_scalars(os.path.join(logs, "train")), read_scalars(os.path.join(logs, "dev"))
    with_bleu = "bleu" in dev
    figure, axes = plt.subplots(1, 3 if with_bleu else 2, figsize=(16 if with_bleu else 11, 4))
    for axis, tag, label in (
        (axes[0], "loss", "cross-entropy per token"),
        (axes[1], "accuracy", "next-token accuracy"),
    ):
        for series, series_label, style in (
            (train, "train (label-smoothed)" if tag == "loss" else "train", "-"),
            (dev, "dev", "o-"),
        ):
            if tag in series:
                axis.plot(*series[tag], style, label=series_label, markersize=4)
        axis.set_xlabel("step")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
        axis.legend()
    if with_bleu:
        for tag, series_label in (("bleu", "dev BLEU (greedy)"), ("chrf", "dev chrF")):
            if tag in dev:
                axes[2].plot(*dev[tag], "o-", label=series_label, markersize=4)
        axes[2].set_xlabel("step")
        axes[2].set_ylabel("sacreBLEU score")
        axes[2].grid(alpha=0.3)
        axes[2].legend()
    figure.suptitle(f"training curves: {name or os.path.basename(os.path.normpath(run_dir))}")
    figure.tight_layout()
    if output:
        figure.savefig(output, dpi=110)
    return figure


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m training.curves", description=__doc__)
    parser.add_argument("--run_dir", required=True)
    parser.add_argument("--output", help="PNG path (default <run_dir>/training_curves.png)")
    args = parser.parse_args(argv)
    output = args.output or os.path.join(args.run_dir, "training_curves.png")
    plot_training_curves(args.run_dir, output)
    print(output)


if __name__ == "__main__":
    main()
