"""Fine-tuning that keeps what the base run knew (`training.train --init_from BASE`).

Three things a run started from a trained run (the base) does by default, besides taking its
weights, tokenizer and model settings (`training.train.inherited_settings`):

* **A fine-tuning schedule** (`fine_tuning_schedule`): a short warmup (`WARMUP_STEPS`) to a peak
  rate no higher than the rate where the base run ended (`PEAK_FRACTION` of it, or
  `MIXED_PEAK_FRACTION` with `--mix_base`), then the paper's inverse square-root decay. The
  paper's schedule started afresh (a warmup of its own to the preset's peak) sends the weights
  far from the base within a few hundred steps on a small corpus, and so does the base's final
  rate on the new corpus alone: docs/benchmark-log.md, "Training: fine-tuning the bundled model:
  the schedules tried".
  A `--lr_scale` or `--config`'s `lr_scale` given explicitly is used as given; a `--warmup_steps`
  alone keeps the peak.
* **The base's decoding settings** (`inherit_decoding`): its `decoding.json` copied into the run
  when it starts, so that the run's dev BLEU, `training.evaluate` and its exports decode as the
  base does.
* **A watch on what it knew** (`BaseWatch`): the first `base_dev_sentences` dev sentences of each
  of the base's corpora that are built here, those it trained on and those it was scored on
  (`dev_data`), are translated before the first step and at every checkpoint; the BLEU and chrF go to TensorBoard's `dev` run (`base_bleu/NAME`,
  `base_chrf/NAME`, step 0 before training), the log line, and `<run_dir>/base_dev.json` (with,
  at the end, those of the weights the run keeps), and a fall of more than
  `base_bleu_tolerance` BLEU from before is a logged warning, recorded there.

`--mix_base W` (`mixed_corpora`) trains on the base's corpora too: a share W of the training
examples is drawn from them, in the base's own proportions.
"""

import json
import logging
import os
import shutil

import tensorflow as tf

from model.files import write_atomically
from run_directory import artifacts
from training.corpus import corpus_is_at_hand
from training.corpus.loading import (
    BACKTRANSLATION_SPEC,
    BIBLE_SPEC,
    CATALOG_FILLS_SPEC,
    CATALOGS_SPEC,
    LEXICON_SPEC,
    MORE_CATALOG_FILLS_SPEC,
    MORE_CATALOGS_SPEC,
    OWN_BACKTRANSLATION_SPEC,
    TELEPHONY_SPEC,
    make_command,
)
from training.mixture import Corpus, load_splits, parse_data
from training.schedule import CustomSchedule

logger = logging.getLogger(__name__)

# The fine-tuning schedule's warmup and peak (a fraction of the rate where the base ended),
# chosen on dev BLEU, of the new corpus and of the base's, on the bundle before es-en
# (docs/benchmark-log.md, "Training: fine-tuning the bundled model, the bundle before es-en"): on
# the new corpus alone the base's final rate lost more than 2 BLEU of the base's in 100 steps, a
# fifth of it kept them within 2 while the new corpus's rose; with the base's corpora mixed in
# (`--mix_base`), the base's final rate kept them and gained more. On es-en and Asterisk's
# telephony prompts the same held: mixed in, the Bible and the catalogs stayed within a point
# while the prompts' dev BLEU rose most; alone, less gained and more lost (BENCHMARKS.md,
# "Training: fine-tuning the bundled model").
WARMUP_STEPS = 50
PEAK_FRACTION = 0.2
MIXED_PEAK_FRACTION = 1.0
# The corpora `make data-NAME` builds.
PROJECT_CORPORA = (
    BIBLE_SPEC,
    CATALOGS_SPEC,
    MORE_CATALOGS_SPEC,
    CATALOG_FILLS_SPEC,
    MORE_CATALOG_FILLS_SPEC,
    BACKTRANSLATION_SPEC,
    OWN_BACKTRANSLATION_SPEC,
    LEXICON_SPEC,
    TELEPHONY_SPEC,
)
# What `training.train` writes about the base's dev sets (`BaseWatch`).
BASE_DEV_FILE = "base_dev.json"
# The base's config.json, as the run found it when it started (`keep_base_config`).
BASE_CONFIG_FILE = "base_config.json"


class FineTuningError(RuntimeError):
    """A fine-tuning setting that cannot run; the message says what to do."""


def base_end(base_config, base_dir):
    """`(step, rate)`: the step where the run `base_dir` (config dict `base_config`) ended (its
    latest checkpoint's, else its `train_steps`) and its schedule's learning rate there."""
    latest = tf.train.latest_checkpoint(os.path.join(base_dir, artifacts.CHECKPOINT_DIR))
    step = artifacts.checkpoint_step(latest) if latest else base_config["train_steps"]
    schedule = CustomSchedule(
        base_config["d_model"], base_config["warmup_steps"], base_config["lr_scale"]
    )
    # The schedule takes the count of updates applied before the one it rates.
    return step, float(schedule(step - 1))


def fine_tuning_schedule(base_config, base_dir, mix_base):
    """`(warmup_steps, peak rate)` of a run fine-tuning `base_dir` with `mix_base`:
    `WARMUP_STEPS`, and `PEAK_FRACTION` (`MIXED_PEAK_FRACTION` when `mix_base` > 0) of the rate
    where the base ended (`base_end`)."""
    fraction = MIXED_PEAK_FRACTION if mix_base else PEAK_FRACTION
    return WARMUP_STEPS, fraction * base_end(base_config, base_dir)[1]


def inherit_decoding(base_dir, run_dir):
    """Copies the base's `decoding.json` into `run_dir` unless the run has one (the user's, or
    a resumed run's); returns whether the run now decodes as the base does."""
    source = os.path.join(base_dir, artifacts.DECODING_FILE)
    target = os.path.join(run_dir, artifacts.DECODING_FILE)
    if os.path.exists(target):
        return False
    if not os.path.exists(source):
        return False
    shutil.copyfile(source, target)
    with open(source, encoding="utf-8") as handle:
        logger.info(
            "decoding settings of %s inherited: %s", base_dir, json.dumps(json.load(handle))
        )
    return True


def keep_base_config(base_dir, run_dir):
    """Copies the base's config.json into `run_dir` as `BASE_CONFIG_FILE`, unless the run holds
    one: what a resumed run needs of its base is read there (`read_base_config`), so the run goes
    on when the base has since been moved, replaced or deleted."""
    target = os.path.join(run_dir, BASE_CONFIG_FILE)
    if not os.path.exists(target):
        write_atomically(target, json.dumps(artifacts.read_config(base_dir), indent=2))


def read_base_config(base_dir, run_dir):
    """The base run's config dict: the run's copy (`keep_base_config`), else the base's own.

    Raises:
        FileNotFoundError: neither is there; the message names both.
    """
    kept = os.path.join(run_dir, BASE_CONFIG_FILE)
    if os.path.exists(kept):
        with open(kept, encoding="utf-8") as handle:
            return json.load(handle)
    try:
        return artifacts.read_config(base_dir)
    except FileNotFoundError as error:
        raise FileNotFoundError(
            f"{error} Nor does {run_dir} keep a copy of its settings ({BASE_CONFIG_FILE})."
        ) from error


def base_corpora(base_config):
    """The corpora the base run trained on (its `data` spec), in its proportions."""
    return parse_data(base_config["data"])


def make_target(corpus):
    """What builds a corpus of the project (`make data-bible`); for another, that it is missing."""
    if corpus.spec in PROJECT_CORPORA:
        return f"{make_command(corpus.spec)} builds it"
    return f"{corpus.spec} is not found here"


def mixed_corpora(corpora, base_config, share):
    """`corpora` (the run's `--data`) with the base's corpora mixed in: those draw a `share` of
    the training examples, in the base's proportions, and `corpora` the rest in theirs.

    Raises:
        FineTuningError: a base corpus is not built here (the make target named), or `corpora`
            names one of the base's already.
    """
    if not share:
        return corpora
    mixed_in = base_corpora(base_config)
    missing = [corpus for corpus in mixed_in if not corpus_is_at_hand(corpus.spec)]
    if missing:
        raise FineTuningError(
            f"--mix_base needs the corpora the base run trained on, and "
            f"{', '.join(corpus.spec for corpus in missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not built: "
            + "; ".join(make_target(corpus) for corpus in missing)
        )
    clashing = {corpus.name for corpus in corpora} & {corpus.name for corpus in mixed_in}
    if clashing:
        raise FineTuningError(
            f"--mix_base mixes in {', '.join(sorted(clashing))}, which --data names already: "
            "leave it out of --data, or leave out --mix_base and weigh it in --data"
        )
    return [Corpus(corpus.spec, corpus.share * (1 - share), corpus.name) for corpus in corpora] + [
        Corpus(corpus.spec, corpus.share * share, corpus.name) for corpus in mixed_in
    ]


def base_dev_splits(base_config, tfds_data_dir=None):
    """`{corpus name: dev pairs}` of the base's corpora that are built here, and of the corpora
    it was only scored on (its `dev_data`: the bundle's everyday sentences, which its recipe was
    chosen by); one not built is left out, with a warning naming what builds it (a watch never
    builds a corpus); each pair as the base reads it (swapped for a reversed base)."""
    watched = base_corpora(base_config)
    if base_config.get("dev_data", "").strip():
        watched += parse_data(base_config["dev_data"])
    at_hand = []
    for corpus in watched:
        if corpus_is_at_hand(corpus.spec):
            at_hand.append(corpus)
        else:
            logger.warning(
                "the base run's corpus %s is not built: what the run keeps of it is not "
                "measured (%s)",
                corpus.spec,
                make_target(corpus),
            )
    return load_splits(
        at_hand,
        "dev",
        reverse=base_config.get("reverse", False),
        tfds_data_dir=tfds_data_dir or None,
    )


class BaseWatch:
    """Scores the base's dev sets before fine-tuning and at every checkpoint, and warns when one
    falls (module docstring).

    Args:
        bleu: a `training.dev_bleu.DevBleu` over `{corpus name: dev pairs}` of the base's
            corpora (the current weights, the run's decoding).
        writer: the `dev` run's TensorBoard writer.
        path: the report, `<run_dir>/base_dev.json` (read back on resume: "before" is measured
            once, on the base's weights).
        base_dir: the base run, for messages and the report.
        tolerance: BLEU points a corpus may fall before a warning.
    """

    def __init__(self, bleu, writer, path, base_dir, tolerance):
        self.bleu, self.writer, self.path, self.tolerance = bleu, writer, path, tolerance
        self.report = {
            "init_from": base_dir,
            "sentences": {name: len(pairs) for name, pairs in bleu.corpora.items()},
            "decoding": bleu.decoding,
            "tolerance": tolerance,
            "before": None,
            "checkpoints": {},
            "warnings": [],
        }
        if os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                self.report = json.load(handle)

    def before(self, known=None):
        """Scores the weights the run starts from (once per run: a resumed run keeps its
        "before"; `known`: as `DevBleu`'s); returns the line to print."""
        if self.report["before"] is None:
            self.report["before"] = self._measure(0, known)
            self._write()
        scores = self.report["before"]
        return f"base dev BLEU before fine-tuning ({self.report['decoding']}): " + ", ".join(
            f"{name} {scores[name]['bleu']:.2f} ({self.report['sentences'][name]} sentences)"
            for name in scores
        )

    def __call__(self, step, known=None):
        """Scores the current weights at `step` (`known`: as `DevBleu`'s), warns on a fall
        beyond the tolerance; returns the note for the checkpoint's log line."""
        scores = self._measure(step, known)
        before = self.report["before"]
        self.report["checkpoints"][str(step)] = scores
        for name, now in scores.items():
            fall = before[name]["bleu"] - now["bleu"]
            if fall > self.tolerance:
                warning = (
                    f"step {step}: the base's {name} dev BLEU fell {fall:.2f} points "
                    f"({before[name]['bleu']:.2f} -> {now['bleu']:.2f}), more than "
                    f"{self.tolerance:g}: the run is forgetting what {self.report['init_from']} "
                    "knew (lower --lr_scale, train fewer steps, or mix its corpora in with "
                    "--mix_base 0.5)"
                )
                logger.warning("%s", warning)
                self.report["warnings"].append(warning)
        self._write()
        return ", base dev BLEU " + ", ".join(
            f"{name} {now['bleu']:.2f} ({now['bleu'] - before[name]['bleu']:+.2f})"
            for name, now in scores.items()
        )

    def kept(self, step):
        """Records in the report which step's weights the run keeps (its best dev BLEU's; None:
        its last checkpoint's); returns the line to print: their base dev BLEU against before."""
        measured = {"0": self.report["before"], **self.report["checkpoints"]}
        # The last measured when the run kept no best (no dev BLEU) or one measured unwatched.
        step = str(step) if str(step) in measured else list(measured)[-1]
        self.report["kept"] = {"step": int(step), "corpora": measured[step]}
        self._write()
        return f"base dev BLEU of the weights kept (step {step}): " + ", ".join(
            f"{name} {now['bleu']:.2f} ({now['bleu'] - self.report['before'][name]['bleu']:+.2f})"
            for name, now in measured[step].items()
        )

    def _measure(self, step, known=None):
        result = self.bleu(known)
        scores = {
            name: {"bleu": corpus["bleu"], "chrf": corpus["chrf"]}
            for name, corpus in result["corpora"].items()
        }
        with self.writer.as_default(step=step):
            for name, corpus in scores.items():
                tf.summary.scalar(f"base_bleu/{name}", corpus["bleu"])
                tf.summary.scalar(f"base_chrf/{name}", corpus["chrf"])
        self.writer.flush()
        return scores

    def _write(self):
        write_atomically(self.path, json.dumps(self.report, indent=2))
