"""Train a Transformer translator: `python -m training.train --preset small --data bible`.

Builds (or reuses) the subword vocabularies, batches the corpus by length, and trains with the
paper's schedule and Adam settings in a custom `tf.distribute` loop: one device, several local
devices (`--distribution mirrored`), or several hosts (`--distribution multi_worker`, reading
`TF_CONFIG`). The run directory (see `run_directory/artifacts.py`) receives the config, the
vocabularies, TensorBoard logs, checkpoints every `--checkpoint_every` steps, and `model.keras`.

`--resume` continues from the last checkpoint: same step counter, optimizer state and data
iterator position (the shuffle buffer is part of the checkpoint; multi-worker runs restart the
data order, as TF cannot checkpoint their iterator), so a crash or `kill -9` costs at most one
checkpoint interval. A fine-tuning run (`--init_from`) resumes from what it keeps of its base
(`training.fine_tuning.keep_base_config`), so the base may have moved since. A non-finite loss stops the run with a message; checkpoints are
only written after finite steps, so the last one is good.
"""

import argparse
import dataclasses
import json
import logging
import math
import os
import shutil
import sys
import time

import keras
import tensorflow as tf

from model.tokenizer import load_tokenizers, read_tokenizer_config
from run_directory import artifacts
from training.config import TrainConfig, add_config_arguments, resolve_config, subword_sampling
from training.corpus import CorpusError
from training.dev_bleu import BestCheckpoint, DevBleu
from training.fine_tuning import (
    BASE_DEV_FILE,
    BaseWatch,
    FineTuningError,
    base_dev_splits,
    base_end,
    fine_tuning_schedule,
    inherit_decoding,
    keep_base_config,
    mixed_corpora,
    read_base_config,
)
from training.losses import masked_token_losses
from training.mixture import load_splits, parse_data
from training.noise import parse_kinds
from training.pipeline import (
    batch_examples,
    bound_lengths,
    bucket_boundaries,
    example_stream,
    kept_indices,
    make_dataset,
    mix_examples,
    text_example_stream,
    tokenize_pairs,
)
from training.schedule import CustomSchedule, paper_adam
from training.vocabulary import build_run_tokenizers

logger = logging.getLogger("training.train")

# Settings that shape the model or its vocabulary: a fine-tuning run (`--init_from`) takes them
# from the run it starts from, and refuses others.
MODEL_SETTINGS = (
    "tokenizer",
    "subword_model",
    "vocab_size",
    "shared_vocab",
    "lower_case",
    "max_sequence_length",
    "num_layers",
    "d_model",
    "num_heads",
    "dff",
    "norm_first",
    "tie_embeddings",
    "source_casing",
    "placeholders",
    "restore_accents",
    "restore_case",
    "restore_names",
    # The weights translate one way: the same corpora reversed are another task.
    "reverse",
)
# A resumed run must keep these.
FIXED_ON_RESUME = (
    "data",
    # The best checkpoint kept is the best mean dev BLEU over these corpora and --data's.
    "dev_data",
    "init_from",
    "mix_base",
    # The base's dev BLEU before fine-tuning, in base_dev.json, is measured on these sentences.
    "base_dev_sentences",
    *MODEL_SETTINGS,
    # These choose the training pipeline (tokenized up front, or in tf.data), whose iterator
    # position the checkpoints hold.
    "source_noise",
    "source_noise_kinds",
    "copy_substitution",
    "copy_figure_share",
    "placeholder_names",
    "subword_nbest_size",
    "subword_alpha",
)


class TrainingError(RuntimeError):
    """A run that cannot start or go on; the message says why and what to do."""


def make_strategy(name):
    if name == "mirrored":
        # Every local GPU; without GPUs every logical CPU device (MirroredStrategy's own default
        # would take CPU:0 alone, whatever devices were configured).
        devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([device.name for device in devices])
    if name == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            raise TrainingError(
                "--distribution multi_worker needs the TF_CONFIG environment variable"
            )
        return tf.distribute.MultiWorkerMirroredStrategy()
    return tf.distribute.get_strategy()


def worker_identity(strategy):
    """`(is_chief, task_id)`: the chief (or worker 0 without a chief) writes the run directory."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or resolver.task_type is None:
        return True, 0
    task_type, task_id = resolver.task_type, resolver.task_id or 0
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return task_type == "chief" or (
        task_type == "worker" and task_id == 0 and not has_chief
    ), task_id


class RunDirectory:
    """Where this process writes: the run directory for the chief, a worker folder otherwise.

    Every worker of a multi-worker run must save (the variables are read collectively), but
    only the chief's files are the run's.
    """

    def __init__(self, run_dir, is_chief, task_id):
        self.run_dir = run_dir
        self.is_chief = is_chief
        self.own_dir = (
            run_dir if is_chief else os.path.join(run_dir, "workers", f"worker-{task_id}")
        )
        os.makedirs(self.own_dir, exist_ok=True)

    def path(self, name):
        return os.path.join(self.own_dir, name)


def check_run_directory(run_dir, config, resume):
    """Refuses to clobber an earlier run, and to resume with a different model or data."""
    checkpoint_dir = os.path.join(run_dir, artifacts.CHECKPOINT_DIR)
    has_checkpoints = tf.train.latest_checkpoint(checkpoint_dir) is not None
    has_model = os.path.exists(os.path.join(run_dir, artifacts.MODEL_FILE))
    if not resume and (has_checkpoints or has_model):
        raise TrainingError(
            f"{run_dir} already holds a trained run; pass --resume to continue it or choose "
            "another --run_dir (nothing was overwritten)"
        )
    if resume and os.path.exists(os.path.join(run_dir, artifacts.CONFIG_FILE)):
        changed = changed_settings(artifacts.read_config(run_dir), config, FIXED_ON_RESUME)
        if changed:
            raise TrainingError(f"cannot resume {run_dir} with a different {changed}")


def changed_settings(saved, config, names):
    """`"name: saved -> asked, ..."` for the settings `names` that `config` changes from `saved`
    (a run's config dict; a setting missing from an older run's had its default there), or ""."""
    defaults = {field.name: field.default for field in dataclasses.fields(TrainConfig)}
    return ", ".join(
        f"{name}: {saved.get(name, defaults[name])!r} -> {getattr(config, name)!r}"
        for name in names
        if saved.get(name, defaults[name]) != getattr(config, name)
    )


def inherited_settings(init_from):
    """The `MODEL_SETTINGS` of the run `init_from` (for `resolve_config`'s `inherited`), so a
    fine-tuning run need not repeat them; {} without `init_from`.

    Raises:
        TrainingError: `init_from` is not a trained run.
    """
    if not init_from:
        return {}
    try:
        saved = artifacts.read_config(init_from)
        artifacts.select_weights(init_from)
    except FileNotFoundError as error:
        raise TrainingError(f"--init_from: {error}") from error
    defaults = {field.name: field.default for field in dataclasses.fields(TrainConfig)}
    return {name: saved.get(name, defaults[name]) for name in MODEL_SETTINGS}


def fine_tuning_defaults(init_from):
    """`(inherited, peak_rate)` for `resolve_config`: the settings a run fine-tuning `init_from`
    takes from it (`inherited_settings`) and the fine-tuning schedule's warmup, and the function
    of the resolved `TrainConfig` that gives that schedule's peak rate (`training.fine_tuning.
    fine_tuning_schedule`, which depends on `mix_base`); `({}, None)` without `init_from`.

    Raises:
        TrainingError: `init_from` is not a trained run.
    """
    if not init_from:
        return {}, None
    inherited = inherited_settings(init_from)
    base_config = artifacts.read_config(init_from)

    def peak_rate(config):
        return fine_tuning_schedule(base_config, init_from, config.mix_base)[1]

    warmup_steps, _ = fine_tuning_schedule(base_config, init_from, mix_base=0)
    return {**inherited, "warmup_steps": warmup_steps}, peak_rate


def checkpointed_config(run_dir):
    """The config dict of the run in `run_dir` when it has a checkpoint to resume from, else
    None."""
    checkpoint_dir = os.path.join(run_dir, artifacts.CHECKPOINT_DIR)
    if tf.train.latest_checkpoint(checkpoint_dir) is None:
        return None
    try:
        return artifacts.read_config(run_dir)
    except FileNotFoundError:
        return None


def resumed_fine_tuning_settings(saved):
    """What a fine-tuning run resumed from its checkpoint takes in place of `fine_tuning_defaults`:
    the model settings and schedule it started with, from its own config dict `saved`, so that
    resuming needs nothing of a base that has since been moved or replaced."""
    names = (*MODEL_SETTINGS, "warmup_steps", "lr_scale")
    return {name: saved[name] for name in names if name in saved}


def log_fine_tuning_schedule(config):
    """Says how the run's schedule compares with the rate where `config.init_from` ended."""
    step, rate = base_end(artifacts.read_config(config.init_from), config.init_from)
    schedule = CustomSchedule(config.d_model, config.warmup_steps, scale=config.lr_scale)
    logger.info(
        "fine-tuning schedule: %d warmup steps to a peak rate of %.3g, then decaying; %s ended "
        "at step %d with a rate of %.3g",
        config.warmup_steps,
        float(schedule(config.warmup_steps - 1)),
        config.init_from,
        step,
        rate,
    )


def check_init_from(config, run_dir):
    """Refuses to fine-tune from `config.init_from` with another model shape or vocabulary, or
    into the run directory it starts from."""
    if os.path.realpath(config.init_from) == os.path.realpath(run_dir):
        raise TrainingError(f"--init_from {config.init_from} is the run directory itself")
    changed = changed_settings(inherited_settings(config.init_from), config, MODEL_SETTINGS)
    if changed:
        raise TrainingError(
            f"cannot fine-tune from {config.init_from}: its weights and vocabulary fit its own "
            f"model and tokenizer settings, and this run changes {changed} (leave them out: "
            "they are taken from it)"
        )


def load_initial_weights(model, init_from):
    """Gives the built `model` the weights of the run `init_from` that `training.evaluate` would
    use (`run_directory.artifacts.select_weights`: averaged, else best dev BLEU, else model.keras,
    else the latest checkpoint); returns their description."""
    checkpoint_path, description = artifacts.select_weights(init_from)
    if checkpoint_path is None:
        trained = keras.models.load_model(
            os.path.join(init_from, artifacts.MODEL_FILE), compile=False
        )
        model.set_weights(trained.get_weights())
    else:
        artifacts.restore_model(model, checkpoint_path)
    return description


def run_tokenizers(train_splits, config, tokenizer_dir):
    """The run's tokenizers: learned from `train_splits` (`build_run_tokenizers`), or, fine-tuning,
    the tokenizer directory of `config.init_from` copied into the run's."""
    if not config.init_from:
        return build_run_tokenizers(train_splits, config, tokenizer_dir)
    if read_tokenizer_config(tokenizer_dir) is None:
        shutil.copytree(
            os.path.join(config.init_from, artifacts.TOKENIZER_DIR),
            tokenizer_dir,
            dirs_exist_ok=True,
        )
        logger.info("tokenizer and vocabulary of %s copied", config.init_from)
    return load_tokenizers(tokenizer_dir)


def dev_only_corpora(config, corpora):
    """The corpora of `config.dev_data`: scored on their dev split, never trained on.

    Raises:
        TrainingError: a bad spec, or a name that one of the training corpora has too.
    """
    if not config.dev_data.strip():
        return []
    try:
        extra = parse_data(config.dev_data)
    except ValueError as error:
        raise TrainingError(f"--dev_data: {error}") from error
    clashing = {corpus.name for corpus in corpora} & {corpus.name for corpus in extra}
    if clashing:
        raise TrainingError(
            f"--dev_data names {', '.join(sorted(clashing))}, which --data trains on already: "
            "a corpus of --data is scored on its dev split anyway"
        )
    return extra


def load_corpus_splits(config, corpora):
    """`(train, dev)`: `{corpus name: pairs}` of each split of each corpus of the run; dev also
    holds the corpora of `config.dev_data` (`dev_only_corpora`); every pair swapped when
    `config.reverse` (`training.corpus.load_run_pairs`)."""
    load_options = {"tfds_data_dir": config.tfds_data_dir or None, "reverse": config.reverse}
    try:
        train_splits = load_splits(corpora, "train", **load_options)
        dev_splits = load_splits(corpora + dev_only_corpora(config, corpora), "dev", **load_options)
    except CorpusError as error:
        raise TrainingError(str(error)) from error
    for corpus in corpora:
        logger.info(
            "corpus %s: %d train pairs, %d dev pairs, %.1f%% of the training examples",
            corpus.spec,
            len(train_splits[corpus.name]),
            len(dev_splits[corpus.name]),
            100 * corpus.share,
        )
    return train_splits, dev_splits


def drawn_each_epoch(config):
    """Whether something is drawn anew each epoch (source noise, copy substitution, placeholder
    names, subword sampling): the training pairs are then tokenized in tf.data."""
    return (
        config.source_noise > 0
        or config.copy_substitution > 0
        or config.placeholder_names > 0
        or subword_sampling(config)
    )


def make_train_dataset(corpora, train_splits, train_examples, tokenizers, config):
    """The training batches: each corpus's examples (`train_examples[name]`, from
    `prepare_examples`, tokenized once; or, when `drawn_each_epoch`, tokenized anew in tf.data
    from the same pairs of `train_splits`), mixed by the corpora's shares (`mix_examples`; the
    corpus i streams with seed `config.seed + i`), batched by length."""
    streams = []
    for index, corpus in enumerate(corpora):
        seed = config.seed + index
        examples = train_examples[corpus.name]
        if drawn_each_epoch(config):
            pairs = [train_splits[corpus.name][kept] for kept in examples[2]]
            streams.append(text_stream(pairs, tokenizers, config, seed))
        else:
            streams.append(
                example_stream(*examples[:2], seed=seed, shuffle_buffer=config.shuffle_buffer)
            )
    if drawn_each_epoch(config):
        log_drawn_each_epoch(config)
    mixed = mix_examples(streams, [corpus.share for corpus in corpora], seed=config.seed)
    return batch_examples(
        mixed, config.max_sequence_length, config.batch_tokens, pad_to_bucket=config.jit_compile
    )


def text_stream(pairs, tokenizers, config, seed):
    """`text_example_stream` of one corpus's training `pairs` with the run's settings."""
    source_tokenizer, target_tokenizer = tokenizers
    source_tokenize, target_tokenize = source_tokenizer.tokenize, target_tokenizer.tokenize
    if subword_sampling(config):
        source_tokenize, target_tokenize = (
            tokenizer.sampling_tokenize(config.subword_nbest_size, config.subword_alpha)
            for tokenizer in tokenizers
        )
    return text_example_stream(
        pairs,
        source_tokenize,
        target_tokenize,
        config.max_sequence_length,
        long_examples=config.long_examples,
        seed=seed,
        shuffle_buffer=config.shuffle_buffer,
        source_noise=config.source_noise,
        noise_kinds=parse_kinds(config.source_noise_kinds),
        copy_substitution=config.copy_substitution,
        copy_figure_share=config.copy_figure_share,
        placeholders=source_tokenizer.placeholders,
        placeholder_names=config.placeholder_names,
    )


def log_drawn_each_epoch(config):
    logger.info(
        "train: tokenized in the input pipeline, %.0f%% of sources noised (%s), %.0f%% of "
        "names and numbers fresh (%.0f%% of those names a figure), placeholders %s, subword "
        "sampling %s",
        100 * config.source_noise,
        config.source_noise_kinds,
        100 * config.copy_substitution,
        100 * config.copy_figure_share,
        f"on ({100 * config.placeholder_names:.0f}% of shared names too)"
        if config.placeholders
        else "off",
        f"nbest_size={config.subword_nbest_size} alpha={config.subword_alpha}"
        if subword_sampling(config)
        else "off",
    )


def prepare_examples(pairs, source_tokenizer, target_tokenizer, config, split):
    """`(source_ids, target_ids, kept)`: the split tokenized and length-bounded, and the indices
    in `pairs` of the pairs kept."""
    source_ids, target_ids = tokenize_pairs(pairs, source_tokenizer, target_tokenizer)
    kept = kept_indices(source_ids, target_ids, config.max_sequence_length, config.long_examples)
    source_ids, target_ids, dropped = bound_lengths(
        source_ids, target_ids, config.max_sequence_length, config.long_examples
    )
    if dropped:
        logger.info(
            "%s: dropped %d pairs longer than max_sequence_length=%d tokens (--long_examples "
            "truncate keeps them)",
            split,
            dropped,
            config.max_sequence_length,
        )
    if not source_ids:
        raise TrainingError(
            f"the {split} split has no pair within max_sequence_length={config.max_sequence_length}"
        )
    return source_ids, target_ids, kept


class Trainer:
    """The distributed training loop: one `train_step` = one optimizer update over all replicas."""

    def __init__(self, config, strategy, model, optimizer):
        self.config = config
        self.strategy = strategy
        self.model = model
        self.optimizer = optimizer
        # XLA compiles the replica step itself; without it the step runs inside `train_step`'s graph.
        self._step_fn = (
            tf.function(self._replica_step, jit_compile=True)
            if config.jit_compile
            else self._replica_step
        )

    def _replica_step(self, inputs, labels):
        """One replica's share: its token-loss sum over the global token count.

        The optimizer sums gradients across replicas, so dividing by the global count makes the
        update the gradient of the mean loss per real target token over the whole global batch,
        however the tokens are spread over replicas.
        """
        context = tf.distribute.get_replica_context()
        with tf.GradientTape() as tape:
            logits = self.model(inputs, training=True)
            token_loss, mask = masked_token_losses(labels, logits, self.config.label_smoothing)
            loss_sum = tf.reduce_sum(token_loss)
            target_tokens = tf.reduce_sum(mask)
            global_tokens = context.all_reduce(tf.distribute.ReduceOp.SUM, target_tokens)
            loss = loss_sum / tf.maximum(global_tokens, 1.0)
            scaled_loss = self.optimizer.scale_loss(loss)
        variables = self.model.trainable_variables
        gradients = tape.gradient(scaled_loss, variables)
        self.optimizer.apply_gradients(zip(gradients, variables))
        predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
        correct = tf.reduce_sum(tf.cast(tf.equal(predictions, labels), tf.float32) * mask)
        source_tokens = tf.reduce_sum(tf.cast(tf.not_equal(inputs[0], 0), tf.float32))
        return loss_sum, target_tokens, correct, source_tokens

    @tf.function
    def train_step(self, iterator):
        """Returns global sums: (loss, target tokens, correct tokens, source tokens)."""
        per_replica = self.strategy.run(self._step_fn, args=next(iterator))
        return [
            self.strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)
            for value in per_replica
        ]

    # Dev batches come in as many shapes as there are length buckets: one shape-generic graph.
    @tf.function(reduce_retracing=True)
    def _eval_batch(self, inputs, labels):
        logits = self.model(inputs, training=False)
        token_loss, mask = masked_token_losses(labels, logits)
        predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
        correct = tf.reduce_sum(tf.cast(tf.equal(predictions, labels), tf.float32) * mask)
        return tf.reduce_sum(token_loss), tf.reduce_sum(mask), correct

    def evaluate(self, dataset, batches):
        """Dev loss (no label smoothing) and accuracy per real token over `batches` batches."""
        loss = tokens = correct = 0.0
        for inputs, labels in dataset.take(batches):
            batch_loss, batch_tokens, batch_correct = self._eval_batch(inputs, labels)
            loss, tokens, correct = (
                loss + batch_loss,
                tokens + batch_tokens,
                correct + batch_correct,
            )
        tokens = max(float(tokens), 1.0)
        return float(loss) / tokens, float(correct) / tokens


def set_precision(config):
    if config.mixed_precision != "none":
        keras.config.set_dtype_policy(config.mixed_precision)


def make_optimizer(config):
    schedule = CustomSchedule(config.d_model, config.warmup_steps, scale=config.lr_scale)
    optimizer = paper_adam(schedule)
    if config.mixed_precision == "mixed_float16":
        # float16 gradients underflow without loss scaling; bfloat16 has float32's range.
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer, schedule


class DevEvaluation:
    """What the loop measures on the dev splits at each checkpoint, written to TensorBoard's
    `dev` run: the loss and accuracy over `dev_batches` batches, and with `dev_bleu_sentences`
    the greedy dev BLEU and chrF (`training.dev_bleu.DevBleu`), which keeps the best weights
    (`BestCheckpoint`) and decides early stopping. A run on several corpora scores each one's
    dev split apart (`loss/NAME`, `accuracy/NAME`, `bleu/NAME`, `chrf/NAME`) and writes under
    the plain names (`loss`, `accuracy`, `bleu`, `chrf`) the plain mean over its corpora, the
    weights left out so that a corpus drawn rarely counts as much as one drawn often: the best
    checkpoint and early stopping follow that mean BLEU.
    """

    def __init__(self, trainer, dev_examples, dev_splits, tokenizers, config, out, base_splits):
        self.trainer, self.config = trainer, config
        options = artifacts.decoding_options(out.run_dir)
        self.datasets = {
            name: make_dataset(
                *examples[:2],
                config.max_sequence_length,
                config.batch_tokens,
                shuffle=False,
                repeat=False,
            )
            for name, examples in dev_examples.items()
        }
        self.bleu = self.best = None
        if config.dev_bleu_sentences:
            self.bleu = DevBleu(
                trainer.model,
                *tokenizers,
                dev_splits if len(dev_splits) > 1 else next(iter(dev_splits.values())),
                config.dev_bleu_sentences,
                options=options,
            )
            self.best = BestCheckpoint(trainer.model, out.path(artifacts.BEST_DIR))
        self.writer = tf.summary.create_file_writer(
            out.path(os.path.join(artifacts.LOG_DIR, "dev"))
        )
        # A fine-tuning run's watch on the dev sets of the run it starts from.
        self.watch = None
        if base_splits:
            self.watch = BaseWatch(
                DevBleu(
                    trainer.model,
                    *tokenizers,
                    base_splits,
                    config.base_dev_sentences,
                    options=options,
                ),
                self.writer,
                out.path(BASE_DEV_FILE),
                config.init_from,
                config.base_bleu_tolerance,
            )

    def __call__(self, step, watch=True, known=None):
        """Measures the current weights at `step` (and the base's dev sets, `watch` and a
        fine-tuning run; `known`: scores of these weights already made, `DevBleu`'s); returns
        `(dev loss, dev accuracy, BLEU note for the log line, BLEU result or None)`."""
        per_corpus = {
            name: self.trainer.evaluate(dataset, self.config.dev_batches)
            for name, dataset in self.datasets.items()
        }
        loss = sum(loss for loss, _ in per_corpus.values()) / len(per_corpus)
        accuracy = sum(accuracy for _, accuracy in per_corpus.values()) / len(per_corpus)
        with self.writer.as_default(step=step):
            tf.summary.scalar("loss", loss)
            tf.summary.scalar("accuracy", accuracy)
            for name, (corpus_loss, corpus_accuracy) in per_corpus.items():
                if len(per_corpus) > 1:
                    tf.summary.scalar(f"loss/{name}", corpus_loss)
                    tf.summary.scalar(f"accuracy/{name}", corpus_accuracy)
        # What the watch translates of the base's dev sets, the run's own dev BLEU does not
        # translate again: the same weights, decoded the same way.
        known = {} if known is None else known
        watched = self.watch(step, known) if watch and self.watch is not None else ""
        if self.bleu is None:
            return loss, accuracy, watched, None
        result = self.bleu(known)
        improved = self.best.update(step, result)
        with self.writer.as_default(step=step):
            tf.summary.scalar("bleu", result["bleu"])
            tf.summary.scalar("chrf", result["chrf"])
            for name, scores in result.get("corpora", {}).items():
                tf.summary.scalar(f"bleu/{name}", scores["bleu"])
                tf.summary.scalar(f"chrf/{name}", scores["chrf"])
        corpora = ", ".join(
            f"{name} {scores['bleu']:.2f}" for name, scores in result.get("corpora", {}).items()
        )
        note = (
            f", dev BLEU {result['bleu']:.2f} chrF {result['chrf']:.2f} on "
            f"{len(self.bleu.sources)} sentences"
            + (f" (mean of {corpora})" if corpora else "")
            + (
                " (best so far)"
                if improved
                else f" (best {self.best.state['bleu']:.2f} at step {self.best.state['step']})"
            )
            + watched
        )
        return loss, accuracy, note, result

    def should_stop(self):
        return self.best is not None and self.best.should_stop(self.config.early_stopping_patience)


def run_corpora(config, run_dir):
    """The corpora the run trains on: `config.data`'s, and with `config.mix_base` the ones of the
    run it starts from (`training.fine_tuning.mixed_corpora`; its settings as the run in
    `run_dir` kept them, `read_base_config`).

    Raises:
        TrainingError: a corpus to mix in is not built, `config.data` names it already, or the
            base's settings are nowhere.
    """
    corpora = parse_data(config.data)
    if not config.mix_base:
        return corpora
    try:
        base_config = read_base_config(config.init_from, run_dir)
        return mixed_corpora(corpora, base_config, config.mix_base)
    except FileNotFoundError as error:
        raise TrainingError(f"--mix_base: {error}") from error
    except FineTuningError as error:
        raise TrainingError(str(error)) from error


def watched_base_splits(config, run_dir):
    """`{corpus name: dev pairs}` of the corpora of the run `config.init_from` that a fine-tuning
    run watches (`training.fine_tuning.base_dev_splits`); {} for a run from scratch, with
    `base_dev_sentences` 0, or resumed where neither the base nor the run's copy of its settings
    is (a warning)."""
    if not config.init_from or not config.base_dev_sentences:
        return {}
    try:
        base_config = read_base_config(config.init_from, run_dir)
    except FileNotFoundError as error:
        logger.warning("the base run's dev sets are not watched: %s", error)
        return {}
    try:
        return base_dev_splits(base_config, config.tfds_data_dir)
    except CorpusError as error:
        raise TrainingError(str(error)) from error


def prepare_run(config, preset, out):
    """Loads the corpora, builds (or copies) the tokenizers, writes config.json, and tokenizes the
    splits: returns `(corpora, tokenizers, train_splits, dev_splits, train_examples,
    dev_examples)`, the last four `{corpus name: ...}`."""
    corpora = run_corpora(config, out.run_dir)
    train_splits, dev_splits = load_corpus_splits(config, corpora)
    tokenizers = run_tokenizers(train_splits, config, out.path(artifacts.TOKENIZER_DIR))
    if out.is_chief:
        with open(out.path(artifacts.CONFIG_FILE), "w", encoding="utf-8") as handle:
            json.dump({**vars(config), "preset": preset}, handle, indent=2)
    train_examples, dev_examples = (
        {
            corpus.name: prepare_examples(
                splits[corpus.name],
                *tokenizers,
                config,
                split if len(corpora) == 1 else f"{corpus.name} {split}",
            )
            for corpus in corpora
        }
        for split, splits, corpora in (
            ("train", train_splits, corpora),
            ("dev", dev_splits, corpora + dev_only_corpora(config, corpora)),
        )
    )
    return corpora, tokenizers, train_splits, dev_splits, train_examples, dev_examples


def train(config, run_dir, resume=False, preset=None):
    """Runs (or resumes) training; returns the final dev `(loss, accuracy)` (the mean over the
    corpora of a run on several)."""
    strategy = make_strategy(config.distribution)
    logger.info("%s: %d replica(s) in sync", type(strategy).__name__, strategy.num_replicas_in_sync)
    is_chief, task_id = worker_identity(strategy)
    if config.init_from and not (resume and checkpointed_config(run_dir)):
        check_init_from(config, run_dir)
        log_fine_tuning_schedule(config)
    check_run_directory(run_dir, config, resume)
    out = RunDirectory(run_dir, is_chief, task_id)
    set_precision(config)
    keras.utils.set_random_seed(config.seed)

    corpora, tokenizers, train_splits, dev_splits, train_examples, dev_examples = prepare_run(
        config, preset, out
    )
    train_dataset = make_train_dataset(corpora, train_splits, train_examples, tokenizers, config)
    if config.jit_compile:
        logger.info(
            "XLA: batches padded to their length bucket's bound, so they come in at most %d shapes",
            len(bucket_boundaries(config.max_sequence_length)),
        )
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    train_dataset = train_dataset.with_options(options)

    with strategy.scope():
        model = artifacts.build_model(
            vars(config), tokenizers[0].vocab_size, tokenizers[1].vocab_size
        )
        model.build(((None, None), (None, None)))
        optimizer, schedule = make_optimizer(config)
        optimizer.build(model.trainable_variables)
    iterator = iter(strategy.experimental_distribute_dataset(train_dataset))
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    if isinstance(iterator, tf.__internal__.tracking.Trackable):
        checkpoint.data = iterator
    else:
        # MultiWorkerMirroredStrategy's iterator cannot be checkpointed (TF 2.21): a resumed
        # multi-worker run keeps weights, optimizer and step, and restarts the data order.
        logger.info(
            "this strategy's data iterator is not checkpointable; resume restarts the data order"
        )
    manager = tf.train.CheckpointManager(
        checkpoint, out.path(artifacts.CHECKPOINT_DIR), max_to_keep=config.keep_checkpoints
    )
    resumed = resume and manager.latest_checkpoint
    if resumed:
        checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
        logger.info("resumed from %s", manager.latest_checkpoint)
    elif config.init_from:
        # Fine-tuning: the weights only; the optimizer, its step and the schedule start afresh.
        logger.info(
            "fine-tuning from %s: %s",
            config.init_from,
            load_initial_weights(model, config.init_from),
        )
    if config.init_from and out.is_chief and not resumed:
        # Not on resume: a run that started without it keeps scoring its dev BLEU as it began.
        inherit_decoding(config.init_from, out.run_dir)
        keep_base_config(config.init_from, out.run_dir)
    trainer = Trainer(config, strategy, model, optimizer)
    dev = DevEvaluation(
        trainer,
        dev_examples,
        dev_splits,
        tokenizers,
        config,
        out,
        watched_base_splits(config, run_dir),
    )
    measure_before_fine_tuning(config, dev, out, resumed)
    final = train_loop(trainer, iterator, manager, schedule, dev, out)
    if dev.watch is not None:
        kept = dev.watch.kept(None if dev.best is None else dev.best.state["step"])
        if out.is_chief:
            print(kept, flush=True)
    return final


def measure_before_fine_tuning(config, dev, out, resumed):
    """A fine-tuning run's measures of the weights it starts from: the base's dev sets
    (`dev.watch`, once per run) and, unless `resumed`, its own as step 0."""
    if dev.watch is not None and dev.watch.report["before"] is None and resumed:
        # "Before" is the weights the run started from, which a resumed run no longer holds.
        logger.warning("%s holds no base dev BLEU before fine-tuning: not measured", BASE_DEV_FILE)
        dev.watch = None
    # The base's dev sets and the run's own hold the same corpora: scored once for both.
    known = {}
    if dev.watch is not None:
        before = dev.watch.before(known)
        if out.is_chief:
            print(before, flush=True)
    if config.init_from and not resumed:
        # The weights it starts from, scored as step 0: the dev curves start where the run
        # does, and the best weights kept are never worse on its dev BLEU than those.
        dev_loss, dev_accuracy, note, _ = dev(0, watch=False, known=known)
        if out.is_chief:
            print(dev_line(0, dev_loss, dev_accuracy, note) + ", before fine-tuning", flush=True)


def train_loop(trainer, iterator, manager, schedule, dev, out):
    """Steps from the optimizer's step to `train_steps` (or the time budget, or early stopping),
    logging, checkpointing and measuring the dev splits; saves model.keras. Returns the last dev
    `(loss, accuracy)`."""
    config, model = trainer.config, trainer.model
    start_step = int(trainer.optimizer.iterations.numpy())
    if start_step >= config.train_steps:
        logger.info("already trained for %d steps (train_steps=%d)", start_step, config.train_steps)
    train_writer = tf.summary.create_file_writer(out.path(os.path.join(artifacts.LOG_DIR, "train")))
    progress = keras.utils.Progbar(
        config.train_steps,
        stateful_metrics=["loss", "accuracy", "tokens/s", "lr", "dev_bleu", "dev_chrf"],
        verbose=1 if out.is_chief else 0,
    )
    progress.update(start_step)
    window = TrainWindow()
    dev_loss = dev_accuracy = float("nan")
    deadline = time.time() + 60 * config.train_minutes if config.train_minutes > 0 else math.inf

    for step in range(start_step + 1, config.train_steps + 1):
        window.add(step, *trainer.train_step(iterator), manager)
        last_step = step == config.train_steps or time.time() >= deadline
        if step % config.log_every == 0 or last_step:
            values = window.values(float(schedule(step - 1)))
            progress.update(step, list(values.items()))
            with train_writer.as_default(step=step):
                for name, value in values.items():
                    tf.summary.scalar(name.replace("/", "_per_"), value)
            window = TrainWindow()
        if step % config.checkpoint_every == 0 or last_step:
            check_finite_weights(model, step, manager)
            manager.save(checkpoint_number=step)
            dev_loss, dev_accuracy, bleu_note, result = dev(step)
            if result is not None:
                progress.update(step, [("dev_bleu", result["bleu"]), ("dev_chrf", result["chrf"])])
            if out.is_chief:
                print(
                    "\n"
                    + dev_line(step, dev_loss, dev_accuracy, bleu_note)
                    + f", checkpoint {manager.latest_checkpoint}",
                    flush=True,
                )
            window.restart_clock()
            if dev.should_stop():
                if out.is_chief:
                    print(
                        f"early stopping: {config.early_stopping_patience} dev BLEU evaluations "
                        f"without a new best (best {dev.best.state['bleu']:.2f} at step "
                        f"{dev.best.state['step']})",
                        flush=True,
                    )
                break
        if last_step:
            if out.is_chief and step < config.train_steps:
                print(
                    f"time budget of {config.train_minutes:g} minutes reached at step {step}",
                    flush=True,
                )
            break

    model.save(out.path(artifacts.MODEL_FILE))
    if out.is_chief:
        print(f"saved {out.path(artifacts.MODEL_FILE)}", flush=True)
    return dev_loss, dev_accuracy


def dev_line(step, dev_loss, dev_accuracy, note):
    """The log line of a dev evaluation (`DevEvaluation`'s results)."""
    return f"step {step}: dev loss {dev_loss:.4f}, dev accuracy {dev_accuracy:.4f}{note}"


class TrainWindow:
    """The training sums since the last log line (or checkpoint, for the clock)."""

    def __init__(self):
        self.loss = self.target = self.correct = self.tokens = 0.0
        self.restart_clock()

    def restart_clock(self):
        self.started = time.time()

    def add(self, step, loss_sum, target_tokens, correct, source_tokens, manager):
        """Adds one step's global sums (`Trainer.train_step`).

        Raises:
            TrainingError: the step's loss is not finite (nothing is saved).
        """
        step_loss = float(loss_sum) / max(float(target_tokens), 1.0)
        if not math.isfinite(step_loss):
            raise TrainingError(
                f"the loss became {step_loss} at step {step}; stopping without saving. The last "
                f"good checkpoint is {manager.latest_checkpoint or '(none yet)'}. Lower --lr_scale, "
                "use --mixed_precision none, or check the data."
            )
        self.loss += float(loss_sum)
        self.target += float(target_tokens)
        self.correct += float(correct)
        self.tokens += float(target_tokens) + float(source_tokens)

    def values(self, learning_rate):
        elapsed = max(time.time() - self.started, 1e-9)
        return {
            "loss": self.loss / max(self.target, 1.0),
            "accuracy": self.correct / max(self.target, 1.0),
            "tokens/s": self.tokens / elapsed,
            "lr": learning_rate,
        }


def check_finite_weights(model, step, manager):
    """The step's loss was computed before its update: the updated weights are checked too,
    before they are saved.

    Raises:
        TrainingError: a weight is not finite.
    """
    if not all(bool(tf.reduce_all(tf.math.is_finite(v))) for v in model.trainable_variables):
        raise TrainingError(
            f"the weights became non-finite at step {step}; stopping without saving. The "
            f"last good checkpoint is {manager.latest_checkpoint or '(none yet)'}. Lower "
            "--lr_scale or check the data."
        )


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m training.train",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument(
        "--preset", default="small", help="tiny | demo | small | base (default: small)"
    )
    parser.add_argument("--config", help="JSON file of settings (between the preset and flags)")
    parser.add_argument("--run_dir", help="output directory (default: runs/PRESET)")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    add_config_arguments(parser)
    return parser


def main(argv=None):
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    parser = build_parser()
    args = parser.parse_args(argv)
    overrides = {name: getattr(args, name) for name in TrainConfig.__dataclass_fields__}
    run_dir = args.run_dir or os.path.join("runs", args.preset)
    resumed_config = checkpointed_config(run_dir) if args.resume else None
    try:
        if resumed_config is not None and resumed_config.get("init_from"):
            inherited, peak_rate = resumed_fine_tuning_settings(resumed_config), None
        else:
            inherited, peak_rate = fine_tuning_defaults(args.init_from)
    except TrainingError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    try:
        config = resolve_config(args.preset, args.config, overrides, inherited, peak_rate)
    except (ValueError, OSError) as error:
        parser.error(str(error))
    try:
        train(config, run_dir, resume=args.resume, preset=args.preset)
    except TrainingError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
