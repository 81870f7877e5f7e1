"""Training configuration: presets, a config file, and command-line overrides, in that order."""

import argparse
import dataclasses
import json
import logging
import math

from common.flags import parse_bool
from run_directory.settings import RENAMED_SETTINGS, upgrade_renamed_settings
from training.mixture import parse_data
from training.noise import DEFAULT_NOISE_KINDS, SPANISH_ONLY, parse_kinds, spanish_only
from training.vocabulary import RESTORATION_SWITCHES

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class TrainConfig:
    """Every setting of a training run; `config.json` in the run directory records them all."""

    # Data and vocabulary.
    # bible | DIR with train/dev/test.tsv | FILE.tsv | tfds:NAME, or several mixed by weight,
    # CORPUS:WEIGHT,CORPUS:WEIGHT (training.mixture).
    data: str = "bible"
    # Corpora scored on their dev split at every checkpoint (loss, BLEU), never trained on:
    # comma-separated specs as --data names them, weights ignored, e.g. training/everyday
    # ("": none).
    dev_data: str = ""
    tfds_data_dir: str = ""  # TFDS data directory for tfds:NAME ("": TFDS's, ~/tensorflow_datasets)
    # The other direction: every pair of the corpora read target first (English→Spanish on the
    # project's corpora; training.corpus.load_run_pairs), wherever the run reads them.
    reverse: bool = False
    tokenizer: str = "sentencepiece"  # sentencepiece | wordpiece (model/tokenizer.py)
    subword_model: str = "unigram"  # SentencePiece's unigram | bpe
    vocab_size: int = 8000
    shared_vocab: bool = True  # one vocabulary learned from both languages
    lower_case: bool = False  # every vocabulary lowercased: both sides, the output too
    # The source side only (training.vocabulary.build_tokenizers): keep | lower (every source
    # lowercased) | lower_all_caps (sources written in capitals lowercased), wherever the source
    # tokenizer runs (model.tokenizer.normalize_casing); translations keep their case.
    source_casing: str = "keep"
    # Tokens per side, [START]/[END] included; = the positional encodings. Was `max_length`.
    max_sequence_length: int = 128
    long_examples: str = "drop"  # drop | truncate
    # Robustness to how people type (training.noise, training.pipeline.make_text_dataset): the
    # share of training sources noised per epoch, by one of these perturbations (comma-separated,
    # "+" composes). Dev and test are never noised.
    source_noise: float = 0.0
    source_noise_kinds: str = ",".join(DEFAULT_NOISE_KINDS)
    # Names and numbers never seen (training.copying): the share of the training pairs with a
    # name or a number on both sides that get a fresh one, on both sides, per epoch.
    copy_substitution: float = 0.0
    # Of those name slots filled, the share that gets a figure instead of a name.
    copy_figure_share: float = 0.0
    # Numbers and unknown capitalized names become placeholder markers before the subword model
    # and come back after detokenizing (model.placeholders), in training and wherever the run
    # translates.
    placeholders: bool = False
    # Sources typed without accents, or in lowercase, get them back before the subword model
    # (model.restoration: tables learned from the training sources), in training and wherever
    # the run translates.
    restore_accents: bool = False
    restore_case: bool = False
    # Names typed in today's spelling are read in the 1909 Bible's ("Belén" → "Bethlehem";
    # model.spelling.name_table), wherever the run translates. The Bible corpus only.
    restore_names: bool = False
    # With placeholders, the share of the names a training pair writes the same on both sides
    # ("David") that become markers too (training.pipeline.protect_pairs).
    placeholder_names: float = 0.0
    # SentencePiece subword regularization (Kudo 2018) of the training pairs, both sides:
    # nbest_size 0 (or 1) is off, -1 samples from every segmentation, N > 1 from the N best;
    # alpha smooths the sampling distribution. Decoding always tokenizes deterministically.
    subword_nbest_size: int = 0
    subword_alpha: float = 0.1
    # Model (the paper's names).
    num_layers: int = 6
    d_model: int = 512
    num_heads: int = 8
    dff: int = 2048
    dropout: float = 0.1
    norm_first: bool = False
    # §3.4: the output projection uses the target embedding matrix (and, with shared_vocab, the
    # source embedding is that matrix too); false gives each its own matrix.
    tie_embeddings: bool = True
    # Fine-tuning: a trained run directory whose weights (those training.evaluate would use,
    # `run_directory.artifacts.select_weights`), tokenizer and vocabulary this run starts from, with a
    # fresh optimizer and schedule. "": from scratch.
    init_from: str = ""
    # With init_from (training.fine_tuning): the first N dev sentences of each of the init_from
    # run's corpora that are built are scored before the first step and at every checkpoint
    # (0: off), and a fall of more than base_bleu_tolerance BLEU is warned of. 300: on 100,
    # one checkpoint of the same run differs from the next by up to 2 BLEU, which is the
    # tolerance (BENCHMARKS.md, "Training: fine-tuning the bundled model").
    base_dev_sentences: int = 300
    base_bleu_tolerance: float = 2.0
    # With init_from: the share of the training examples drawn from the init_from run's corpora,
    # in its proportions (0: none; they must be built).
    mix_base: float = 0.0
    # Optimization.
    train_steps: int = 100_000
    # Wall-clock budget of the training loop (dev evaluations included, setup not); the run ends
    # at the first step past it, with a checkpoint, like a run that reached train_steps. 0: off.
    train_minutes: float = 0.0
    batch_tokens: int = 25_000  # per step, across all replicas
    warmup_steps: int = 4000
    lr_scale: float = 1.0  # multiplies the paper's schedule
    label_smoothing: float = 0.1
    seed: int = 0
    shuffle_buffer: int = 20_000
    # Run bookkeeping.
    checkpoint_every: int = 1000
    keep_checkpoints: int = 3
    log_every: int = 50
    dev_batches: int = 20  # dev loss/accuracy at every checkpoint over this many batches
    dev_bleu_sentences: int = 200  # greedy dev BLEU at every checkpoint over this many (0: off)
    early_stopping_patience: int = 0  # stop after this many dev BLEUs without a new best (0: off)
    # Performance.
    jit_compile: bool = False
    mixed_precision: str = "none"  # none | mixed_float16 | mixed_bfloat16
    distribution: str = "default"  # default | mirrored | multi_worker (TF_CONFIG)


PRESETS = {
    # Seconds on a CPU: for tests and smoke runs.
    "tiny": dict(
        vocab_size=400,
        max_sequence_length=48,
        num_layers=1,
        d_model=32,
        num_heads=2,
        dff=64,
        dropout=0.0,
        train_steps=40,
        batch_tokens=1024,
        warmup_steps=20,
        lr_scale=0.3,
        label_smoothing=0.0,
        checkpoint_every=20,
        log_every=5,
        dev_batches=2,
        dev_bleu_sentences=0,
    ),
    # `make demo-train`: 3 minutes on one core (BENCHMARKS.md, "Training recipe sweep, demo"):
    # pre-LN, which learns fastest early, no regularization, which a run this short never needs,
    # and a small vocabulary.
    "demo": dict(
        vocab_size=2000,
        max_sequence_length=64,
        num_layers=2,
        d_model=128,
        num_heads=4,
        dff=512,
        norm_first=True,
        dropout=0.0,
        train_steps=750,
        batch_tokens=2048,
        warmup_steps=200,
        lr_scale=1.0,
        label_smoothing=0.0,
        checkpoint_every=250,
        log_every=25,
        dev_batches=5,
    ),
    # The CPU default: 44 minutes on 2 cores (BENCHMARKS.md, "Training: the presets on the
    # embedded corpus").
    "small": dict(
        vocab_size=8000,
        max_sequence_length=96,
        num_layers=3,
        d_model=192,
        num_heads=4,
        dff=768,
        dropout=0.1,
        train_steps=2600,
        batch_tokens=4096,
        warmup_steps=1000,
        lr_scale=0.7,
        label_smoothing=0.1,
        checkpoint_every=250,
        keep_checkpoints=5,
        log_every=25,
        dev_batches=20,
    ),
    # The paper's base model (§6.1): for GPUs.
    "base": dict(
        vocab_size=32000,
        shared_vocab=True,
        max_sequence_length=256,
        num_layers=6,
        d_model=512,
        num_heads=8,
        dff=2048,
        dropout=0.1,
        train_steps=100_000,
        batch_tokens=25_000,
        warmup_steps=4000,
        label_smoothing=0.1,
        checkpoint_every=1000,
        mixed_precision="mixed_float16",
    ),
}

CHOICES = {
    "tokenizer": ("sentencepiece", "wordpiece"),
    "subword_model": ("unigram", "bpe"),
    "long_examples": ("drop", "truncate"),
    "source_casing": ("keep", "lower", "lower_all_caps"),
    "mixed_precision": ("none", "mixed_float16", "mixed_bfloat16"),
    "distribution": ("default", "mirrored", "multi_worker"),
}


class _RenamedFlag(argparse.Action):
    """An old flag name of `RENAMED_SETTINGS`: stores the new setting, logging a deprecation."""

    def __call__(self, parser, namespace, values, option_string=None):
        logger.warning("%s is deprecated; use --%s.", option_string, self.dest)
        setattr(namespace, self.dest, values)


def preset_values_help(field):
    """`--help` text of a setting: its value in each preset (`(tiny: 40, ..., base: 100000)`)."""
    values = {name: preset.get(field.name, field.default) for name, preset in PRESETS.items()}
    if len(set(values.values())) == 1:
        return f"(every preset: {field.default!r})"
    return "(" + ", ".join(f"{name}: {value!r}" for name, value in values.items()) + ")"


def add_config_arguments(parser):
    """One `--name` option per TrainConfig field (default None = not given)."""
    group = parser.add_argument_group("training settings (override the preset and --config)")
    for field in dataclasses.fields(TrainConfig):
        kind = parse_bool if field.type is bool else field.type
        group.add_argument(
            f"--{field.name}",
            type=kind,
            default=None,
            choices=CHOICES.get(field.name),
            metavar=field.name.upper() if field.name not in CHOICES else None,
            help=preset_values_help(field).replace("%", "%%"),
        )
    fields = {field.name: field for field in dataclasses.fields(TrainConfig)}
    for old_name, new_name in RENAMED_SETTINGS.items():
        group.add_argument(
            f"--{old_name}",
            dest=new_name,
            action=_RenamedFlag,
            type=fields[new_name].type,
            default=None,
            help=f"deprecated: --{new_name}",
        )


def resolve_config(preset, config_file=None, overrides=None, inherited=None, peak_rate=None):
    """preset values < `inherited` (a fine-tuning run's settings of the run it starts from) <
    config file (JSON) < command-line overrides.

    `peak_rate` (a fine-tuning run's, `training.fine_tuning.fine_tuning_schedule`): a function
    of the resolved `TrainConfig` giving a peak rate; unless the config file or the
    overrides set `lr_scale`, it is the one whose schedule peaks at that rate after the
    resolved `warmup_steps`.

    Raises:
        ValueError: an unknown preset, an unknown key in the config file, or a bad value.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    values = {**PRESETS[preset], **(inherited or {})}
    from_file = {}
    if config_file:
        with open(config_file, encoding="utf-8") as handle:
            try:
                from_file = json.load(handle)
            except json.JSONDecodeError as error:
                raise ValueError(
                    f"{config_file}:{error.lineno}: not valid JSON: {error.msg} "
                    f"(column {error.colno})"
                ) from error
        if not isinstance(from_file, dict):
            raise ValueError(f"{config_file}: expected a JSON object of settings")
        from_file = upgrade_renamed_settings(from_file, config_file)
        known = {field.name for field in dataclasses.fields(TrainConfig)}
        unknown = sorted(set(from_file) - known)
        if unknown:
            raise ValueError(f"{config_file}: unknown setting(s) {', '.join(unknown)}")
        values.update(from_file)
    given = {name: value for name, value in (overrides or {}).items() if value is not None}
    values.update(given)
    config = TrainConfig(**values)
    if peak_rate is not None and "lr_scale" not in given and "lr_scale" not in from_file:
        config = dataclasses.replace(
            config,
            lr_scale=lr_scale_for_peak(peak_rate(config), config.d_model, config.warmup_steps),
        )
    validate(config)
    return config


def lr_scale_for_peak(peak, d_model, warmup_steps):
    """The `lr_scale` whose schedule (`training.schedule.CustomSchedule`) peaks at `peak` after
    `warmup_steps` steps: its peak is scale · (d_model · warmup_steps)^-0.5."""
    return peak * math.sqrt(d_model * warmup_steps)


def validate(config):
    """Fails before any long work on settings that cannot run."""
    parse_data(config.data)
    for name, allowed in CHOICES.items():
        if getattr(config, name) not in allowed:
            raise ValueError(f"{name} must be one of {allowed}, got {getattr(config, name)!r}")
    if config.d_model % config.num_heads:
        raise ValueError(
            f"d_model ({config.d_model}) must be divisible by num_heads ({config.num_heads})"
        )
    if config.batch_tokens < config.max_sequence_length:
        raise ValueError(
            f"batch_tokens ({config.batch_tokens}) must be at least max_sequence_length "
            f"({config.max_sequence_length})"
        )
    for name in (
        "train_steps",
        "checkpoint_every",
        "log_every",
        "vocab_size",
        "max_sequence_length",
    ):
        if getattr(config, name) <= 0:
            raise ValueError(f"{name} must be positive, got {getattr(config, name)}")
    for name in (
        "dev_bleu_sentences",
        "early_stopping_patience",
        "train_minutes",
        "base_dev_sentences",
    ):
        if getattr(config, name) < 0:
            raise ValueError(f"{name} must be 0 (off) or positive, got {getattr(config, name)}")
    if not 0.0 <= config.source_noise <= 1.0:
        raise ValueError(f"source_noise must be within [0, 1], got {config.source_noise}")
    parse_kinds(config.source_noise_kinds)
    if config.reverse:
        validate_reversed(config)
    if not 0.0 <= config.copy_substitution <= 1.0:
        raise ValueError(f"copy_substitution must be within [0, 1], got {config.copy_substitution}")
    if not 0.0 <= config.placeholder_names <= 1.0:
        raise ValueError(f"placeholder_names must be within [0, 1], got {config.placeholder_names}")
    if config.placeholder_names > 0 and not config.placeholders:
        raise ValueError("placeholder_names needs --placeholders true")
    if not 0.0 <= config.copy_figure_share <= 1.0:
        raise ValueError(f"copy_figure_share must be within [0, 1], got {config.copy_figure_share}")
    if subword_sampling(config):
        if config.tokenizer != "sentencepiece":
            raise ValueError("subword_nbest_size (sampling) needs tokenizer sentencepiece")
        if config.subword_alpha <= 0:
            raise ValueError(f"subword_alpha must be positive, got {config.subword_alpha}")
    if not 0.0 <= config.mix_base < 1.0:
        raise ValueError(f"mix_base must be within [0, 1), got {config.mix_base}")
    if config.mix_base and not config.init_from:
        raise ValueError("mix_base mixes in the corpora of the run it starts from: needs init_from")
    if config.early_stopping_patience and not config.dev_bleu_sentences:
        raise ValueError("early_stopping_patience needs dev BLEU: set dev_bleu_sentences > 0")


def validate_reversed(config):
    """Refuses what reads a reversed run's English sources as Spanish.

    Raises:
        ValueError: a restoration table, or a noise kind that writes Spanish, asked for.
    """
    restoring = [name for name in RESTORATION_SWITCHES if getattr(config, name)]
    if restoring:
        raise ValueError(
            f"{', '.join(restoring)}: the restoration tables put back what people leave out "
            "when they type Spanish (model.restoration: accents, capitals, the 1909 Bible's "
            "names), and a reversed run's sources are English: leave them out with --reverse"
        )
    spanish = spanish_only(parse_kinds(config.source_noise_kinds))
    if spanish:
        raise ValueError(
            f"source_noise_kinds {', '.join(spanish)}: these perturbations write Spanish "
            f"({', '.join(SPANISH_ONLY)}, training.noise), and a reversed run's sources are "
            "English: leave them out with --reverse"
        )


def subword_sampling(config):
    """Whether the run samples segmentations of its training pairs (subword regularization)."""
    return config.subword_nbest_size not in (0, 1)
