"""The training CLI: a real run, exact resume, kill -9 recovery, the NaN guard, bad options."""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from model import Transformer
from model.tokenizer import read_tokenizer_config
from run_directory import artifacts
from tests.paths import REPO_ROOT
from tests.training_cli import run_training_cli
from training.config import TrainConfig, add_config_arguments, resolve_config
from training.losses import masked_token_losses
from training.toy_corpus import word_for_word_pairs
from training.train import Trainer, TrainingError, main, train

ROOT = str(REPO_ROOT)


@pytest.fixture
def corpus(tiny_corpus):
    return tiny_corpus


def tiny(corpus, **overrides):
    return resolve_config("tiny", overrides={"data": corpus, **overrides})


def final_weights(run_dir):
    model, *_ = artifacts.load_trained(run_dir)
    return [w.numpy() for w in model.weights]


def test_tiny_run_writes_the_run_directory_and_learns(tiny_run):
    run_dir, dev_loss, dev_accuracy = (
        tiny_run["run_dir"],
        tiny_run["dev_loss"],
        tiny_run["dev_accuracy"],
    )
    for name in (
        "config.json",
        "model.keras",
        "tokenizer/tokenizer_config.json",
        "logs/train",
        "logs/dev",
    ):
        assert os.path.exists(os.path.join(run_dir, name)), name
    assert tf.train.latest_checkpoint(os.path.join(run_dir, "checkpoints")).endswith("ckpt-60")
    assert json.load(open(os.path.join(run_dir, "config.json")))["preset"] == "tiny"
    # Word-for-word glosses over a 20-word vocabulary: chance is ~5%; 60 steps learn far more.
    assert dev_accuracy > 0.3 and dev_loss < 2.5
    event_files = os.listdir(os.path.join(run_dir, "logs", "train"))
    assert event_files, "TensorBoard events"


def test_a_run_without_model_file_loads_from_its_last_checkpoint(tiny_run, tmp_path):
    import shutil

    copy = str(tmp_path / "copy")
    shutil.copytree(tiny_run["run_dir"], copy)
    os.remove(os.path.join(copy, "model.keras"))
    from_checkpoint, *_ = artifacts.load_trained(copy)
    from_file, *_ = artifacts.load_trained(tiny_run["run_dir"])
    inputs = (np.array([[5, 6, 7, 3]]), np.array([[2, 8, 9]]))
    np.testing.assert_array_equal(from_checkpoint(inputs), from_file(inputs))


@pytest.mark.large
def test_resume_continues_exactly(corpus, tmp_path):
    """20 steps + resume to 40 = 40 uninterrupted steps: weights, optimizer and data position."""
    straight, interrupted = str(tmp_path / "straight"), str(tmp_path / "interrupted")
    train(tiny(corpus, train_steps=40, checkpoint_every=20), straight)
    train(tiny(corpus, train_steps=20, checkpoint_every=20), interrupted)
    train(tiny(corpus, train_steps=40, checkpoint_every=20), interrupted, resume=True)
    for expected, actual in zip(final_weights(straight), final_weights(interrupted)):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.large
def test_time_budget_ends_the_run_with_a_checkpoint_and_the_model(corpus, tmp_path, capsys):
    """`train_minutes` ends the run at the first step past the budget, saved like a finished run
    (a budget of 0.6 s: the first step alone, tracing included, takes longer)."""
    run_dir = str(tmp_path / "run")
    train(tiny(corpus, train_steps=1000, checkpoint_every=500, train_minutes=0.01), run_dir)
    latest = tf.train.latest_checkpoint(os.path.join(run_dir, "checkpoints"))
    steps = artifacts.checkpoint_step(latest)
    assert 1 <= steps < 1000
    assert f"time budget of 0.01 minutes reached at step {steps}" in capsys.readouterr().out
    assert os.path.exists(os.path.join(run_dir, "model.keras"))


def test_refuses_to_overwrite_or_resume_with_another_model(corpus, tmp_path):
    run_dir = str(tmp_path / "run")
    train(tiny(corpus, train_steps=5, checkpoint_every=5), run_dir)
    before = os.path.getmtime(os.path.join(run_dir, "model.keras"))
    with pytest.raises(TrainingError, match="already holds a trained run; pass --resume"):
        train(tiny(corpus, train_steps=5), run_dir)
    with pytest.raises(TrainingError, match="different d_model: 32 -> 64"):
        train(tiny(corpus, train_steps=10, d_model=64), run_dir, resume=True)
    with pytest.raises(TrainingError, match="different reverse: False -> True"):
        train(tiny(corpus, train_steps=10, reverse=True), run_dir, resume=True)
    assert os.path.getmtime(os.path.join(run_dir, "model.keras")) == before


@pytest.mark.large
def test_a_run_given_restoration_after_training_resumes_with_it(corpus, tmp_path):
    """`make pretrained` gives the trained run's source tokenizer the restoration tables
    (`training.vocabulary --add_restoration`) and is run again to train further: the resumed
    run keeps that tokenizer, tables included; other options than the run's are still refused."""
    from training.vocabulary import build_tokenizers
    from training.vocabulary import main as vocabulary_main

    run_dir = str(tmp_path / "run")
    tokenizer_dir = os.path.join(run_dir, artifacts.TOKENIZER_DIR)
    train(tiny(corpus, train_steps=5, checkpoint_every=5), run_dir)
    vocabulary_main(["--data", corpus, "--out_dir", tokenizer_dir, "--add_restoration"])
    restored = read_tokenizer_config(tokenizer_dir)
    assert restored["restore_accents"] and restored["restore_case"]

    train(tiny(corpus, train_steps=10, checkpoint_every=5), run_dir, resume=True)
    latest = tf.train.latest_checkpoint(os.path.join(run_dir, "checkpoints"))
    assert artifacts.checkpoint_step(latest) == 10
    assert read_tokenizer_config(tokenizer_dir) == restored
    with pytest.raises(ValueError, match=r"vocab_size: 400 there, 77 asked"):
        build_tokenizers([("uno", "one")], 77, tokenizer_dir)


@pytest.mark.large
def test_nan_guard_stops_and_keeps_the_last_good_checkpoint(corpus, tmp_path):
    """20 good steps, then a resume with a learning rate that overflows float32: the first
    update makes the weights non-finite, the run stops at that step, and the last checkpoint
    is step 20's, with its weights."""
    run_dir = str(tmp_path / "run")
    train(tiny(corpus, train_steps=20, checkpoint_every=10), run_dir)
    good = final_weights(run_dir)
    os.remove(os.path.join(run_dir, "model.keras"))
    with pytest.raises(TrainingError, match=r"became (nan|inf|-inf|non-finite) at step") as failure:
        train(
            tiny(corpus, train_steps=200, checkpoint_every=1, warmup_steps=1, lr_scale=1e40),
            run_dir,
            resume=True,
        )
    failed_at = int(re.search(r"at step (\d+)", str(failure.value)).group(1))
    latest = tf.train.latest_checkpoint(os.path.join(run_dir, "checkpoints"))
    assert f"The last good checkpoint is {latest}" in str(failure.value).replace("\n", " ")
    assert (failed_at, artifacts.checkpoint_step(latest)) == (21, 20)
    reader = tf.train.load_checkpoint(latest)
    for name, dtype in reader.get_variable_to_dtype_map().items():
        if dtype.is_floating:  # skips the data iterator's state (a variant)
            assert np.all(np.isfinite(reader.get_tensor(name))), name
    for expected, actual in zip(good, final_weights(run_dir), strict=True):
        np.testing.assert_array_equal(actual, expected)
    assert not os.path.exists(os.path.join(run_dir, "model.keras"))


@pytest.mark.large
def test_kill_9_then_resume_loses_at_most_one_interval(corpus, tmp_path):
    """SIGKILL between checkpoints keeps every checkpoint written; the resumed run redoes only
    the steps after the last one, and ends with the weights of a run never interrupted."""
    run_dir = str(tmp_path / "run")
    args = [
        "--preset",
        "tiny",
        "--data",
        corpus,
        "--run_dir",
        run_dir,
        "--train_steps",
        "400",
        "--checkpoint_every",
        "10",
        "--log_every",
        "10",
    ]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    process = subprocess.Popen(
        [sys.executable, "-m", "training.train", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    checkpoint_dir = os.path.join(run_dir, "checkpoints")
    seen = 0
    try:
        while seen < 20:
            assert process.poll() is None, "training exited before it was killed"
            latest = tf.train.latest_checkpoint(checkpoint_dir)
            seen = artifacts.checkpoint_step(latest) if latest else 0
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    killed_at = artifacts.checkpoint_step(tf.train.latest_checkpoint(checkpoint_dir))
    assert killed_at >= seen  # nothing written before the kill was lost

    result = run_training_cli(
        *args[:-4], "--train_steps", str(killed_at + 10), "--resume", timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"resumed from {os.path.join(checkpoint_dir, f'ckpt-{killed_at}')}" in result.stderr
    assert tf.train.latest_checkpoint(checkpoint_dir).endswith(f"ckpt-{killed_at + 10}")
    straight = str(tmp_path / "straight")
    train(tiny(corpus, train_steps=killed_at + 10, checkpoint_every=10), straight)
    for expected, actual in zip(final_weights(straight), final_weights(run_dir), strict=True):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


# `python -c` program: training.train's CLI on two logical CPU devices, which must be set up
# before TensorFlow initializes (hence a fresh process).
TWO_CPU_DEVICES = """
import sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from training.train import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.large
def test_mirrored_strategy_on_two_devices_matches_one_device(corpus, tmp_path):
    """Each replica takes part of every batch and normalizes by the global token count, so two
    replicas make the same updates as one device (tiny has no dropout)."""
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    one_device_loss, _ = train(tiny(corpus, train_steps=15, checkpoint_every=15), one)
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            TWO_CPU_DEVICES,
            "--preset",
            "tiny",
            "--data",
            corpus,
            "--run_dir",
            two,
            "--train_steps",
            "15",
            "--checkpoint_every",
            "15",
            "--distribution",
            "mirrored",
        ],
        cwd=ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "MirroredStrategy: 2 replica(s) in sync" in result.stderr
    two_device_loss = float(result.stdout.rsplit("dev loss ", 1)[1].split(",")[0])
    assert two_device_loss == pytest.approx(one_device_loss, abs=1e-4)
    one_model, two_model = (artifacts.load_trained(run)[0] for run in (one, two))
    for expected, actual in zip(one_model.weights, two_model.weights):
        if expected.path.endswith("wk/bias"):
            # Softmax ignores a constant added to all of a query's logits, so the key bias has a
            # zero gradient up to rounding, which Adam's normalization blows up into noise.
            continue
        np.testing.assert_allclose(
            actual.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6, err_msg=expected.path
        )


@pytest.mark.large
def test_mixed_precision_with_xla_trains_like_float32(corpus, tiny_run, tmp_path):
    """mixed_float16 (loss-scaled) with the XLA-compiled step: the run completes, saves a
    float16-compute model, and learns as far as the float32 run of the same 60 steps."""
    run_dir = str(tmp_path / "mixed")
    result = run_training_cli(
        "--preset",
        "tiny",
        "--data",
        corpus,
        "--run_dir",
        run_dir,
        "--train_steps",
        "60",
        "--mixed_precision",
        "mixed_float16",
        "--jit_compile",
        "true",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "batches padded to their length bucket's bound" in result.stderr
    dev_loss = float(result.stdout.rsplit("dev loss ", 1)[1].split(",")[0])
    assert abs(dev_loss - tiny_run["dev_loss"]) < 0.1 * tiny_run["dev_loss"]
    model, *_ = artifacts.load_trained(run_dir)
    assert model.dtype_policy.name == "mixed_float16"
    assert model.encoder.enc_layers[0].mha.compute_dtype == "float16"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--preset", "huge"], "unknown preset 'huge'"),
        (
            ["--preset", "tiny", "--d_model", "31"],
            "d_model (31) must be divisible by num_heads (2)",
        ),
        (["--preset", "tiny", "--mixed_precision", "fp8"], "invalid choice: 'fp8'"),
        (["--preset", "tiny", "--batch_tokens", "10"], "batch_tokens (10) must be at least"),
    ],
)
def test_bad_options_fail_fast_with_a_clear_message(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--run_dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "run")


def test_missing_corpus_is_a_clear_error(tmp_path, capsys):
    assert (
        main(
            [
                "--preset",
                "tiny",
                "--data",
                str(tmp_path / "nope.tsv"),
                "--run_dir",
                str(tmp_path / "run"),
            ]
        )
        == 1
    )
    assert "nope.tsv" in capsys.readouterr().err


def test_training_curves_read_back_from_tensorboard(tiny_run, tmp_path):
    from training.curves import plot_training_curves, read_scalars

    run_dir = tiny_run["run_dir"]
    train_series = read_scalars(os.path.join(run_dir, "logs", "train"))
    dev_series = read_scalars(os.path.join(run_dir, "logs", "dev"))
    steps, losses = train_series["loss"]
    assert list(steps) == list(range(5, 61, 5))  # tiny preset: log_every 5, 60 steps
    assert losses[-1] < losses[0]
    dev_steps, dev_accuracy = dev_series["accuracy"]
    assert list(dev_steps) == [20, 40, 60]
    assert dev_accuracy[-1] == pytest.approx(tiny_run["dev_accuracy"], abs=1e-6)
    output = tmp_path / "curves.png"
    figure = plot_training_curves(run_dir, str(output))
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert figure.get_suptitle() == f"training curves: {os.path.basename(run_dir)}"


def dev_batches(shapes, seed=0):
    """(inputs, labels) batches of the given (batch, length) shapes, padded rows included."""
    rng = np.random.default_rng(seed)
    batches = []
    for batch_size, length in shapes:
        real = np.arange(length) < rng.integers(1, length + 1, size=(batch_size, 1))
        source, target = (
            tf.constant(rng.integers(1, 20, (batch_size, length)), tf.int32) for _ in range(2)
        )
        labels = tf.constant(np.where(real, rng.integers(1, 20, (batch_size, length)), 0), tf.int32)
        batches.append(((source, target), labels))
    return batches


def as_dataset(batches):
    spec = tf.TensorSpec([None, None], tf.int32)
    return tf.data.Dataset.from_generator(
        lambda: iter(batches), output_signature=((spec, spec), spec)
    )


@pytest.mark.large
def test_dev_evaluation_is_one_graph_for_every_bucket_shape():
    """Dev batches come in one shape per length bucket: once the evaluation graph has gone
    shape-generic, new buckets do not trace it again. Its loss and accuracy are per real
    target token, as an eager count over the same batches gives."""
    model = Transformer(1, 16, 2, 32, 20, 20, 40, 40, rate=0.0)
    trainer = Trainer(TrainConfig(), tf.distribute.get_strategy(), model, optimizer=None)
    batches = dev_batches([(2, 5), (3, 7), (4, 9), (2, 11)])

    loss, accuracy = trainer.evaluate(as_dataset(batches), len(batches))
    traces = trainer._eval_batch.experimental_get_tracing_count()
    more = dev_batches([(5, 13), (1, 3), (6, 8)], seed=1)
    trainer.evaluate(as_dataset(more), len(more))

    assert trainer._eval_batch.experimental_get_tracing_count() == traces
    total_loss = total_tokens = total_correct = 0.0
    for inputs, labels in batches:
        logits = model(inputs, training=False)
        token_loss, mask = masked_token_losses(labels, logits)
        predictions = np.argmax(logits.numpy(), axis=-1)
        total_loss += float(tf.reduce_sum(token_loss))
        total_tokens += float(tf.reduce_sum(mask))
        total_correct += float(np.sum((predictions == labels.numpy()) * mask.numpy()))
    assert loss == pytest.approx(total_loss / total_tokens, rel=1e-5)
    assert accuracy == pytest.approx(total_correct / total_tokens)


@pytest.mark.large
def test_shared_vocab_ties_all_three_embeddings_and_resumes_exactly(corpus, tmp_path):
    """--shared_vocab with the default tying: one matrix embeds both languages and projects to
    the logits, through checkpoints, resume and model.keras."""
    straight, interrupted = str(tmp_path / "straight"), str(tmp_path / "interrupted")
    shared = dict(shared_vocab=True, checkpoint_every=10)
    train(tiny(corpus, train_steps=20, **shared), straight)
    train(tiny(corpus, train_steps=10, **shared), interrupted)
    train(tiny(corpus, train_steps=20, **shared), interrupted, resume=True)
    model, *_ = artifacts.load_trained(interrupted)
    matrix = model.decoder.embedding.embedding.embeddings
    assert model.tie_embeddings and model.share_embeddings
    assert model.encoder.embedding.embedding.embeddings is matrix
    assert model.final_layer.token_embedding.embeddings is matrix
    for expected, actual in zip(final_weights(straight), final_weights(interrupted), strict=True):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.large
def test_a_run_from_before_tying_stays_untied(corpus, tmp_path):
    """A run directory written before --tie_embeddings existed (untied, no such key in its
    config) loads as the untied model and resumes only as one."""
    run_dir = str(tmp_path / "run")
    train(tiny(corpus, train_steps=5, checkpoint_every=5, tie_embeddings=False), run_dir)
    expected = final_weights(run_dir)
    config_path = os.path.join(run_dir, "config.json")
    config = json.load(open(config_path))
    del config["tie_embeddings"]
    json.dump(config, open(config_path, "w"))
    os.remove(os.path.join(run_dir, "model.keras"))  # stopped before the end: from the checkpoint

    model, *_ = artifacts.load_trained(run_dir)
    assert not model.tie_embeddings and model.final_layer.kernel.shape == (
        32,
        model.target_vocab_size,
    )
    for want, got in zip(expected, [w.numpy() for w in model.weights], strict=True):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(TrainingError, match="different tie_embeddings: False -> True"):
        train(tiny(corpus, train_steps=10, checkpoint_every=5), run_dir, resume=True)
    result = run_training_cli(
        "--preset",
        "tiny",
        "--data",
        corpus,
        "--run_dir",
        run_dir,
        "--resume",
        "--train_steps",
        "10",
        "--checkpoint_every",
        "5",
        "--tie_embeddings",
        "false",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert not artifacts.load_trained(run_dir)[0].tie_embeddings


def test_config_file_sits_between_the_preset_and_the_flags(corpus, tmp_path, capsys):
    config_file = tmp_path / "settings.json"
    config_file.write_text(json.dumps({"d_model": 48, "dropout": 0.2, "data": corpus}))
    config = resolve_config("tiny", str(config_file), {"dropout": 0.3})
    tiny_preset = resolve_config("tiny")
    assert (config.d_model, config.dropout, config.num_layers) == (48, 0.3, tiny_preset.num_layers)
    assert config.data == corpus

    config_file.write_text(json.dumps({"d_model": 48, "dmodel": 64, "warmup": 3}))
    with pytest.raises(SystemExit) as exit_info:
        main(["--preset", "tiny", "--config", str(config_file), "--run_dir", str(tmp_path / "r")])
    assert exit_info.value.code == 2
    assert f"{config_file}: unknown setting(s) dmodel, warmup" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "r")


def test_a_config_saved_with_max_length_still_loads_as_max_sequence_length(tmp_path, caplog):
    config_file = tmp_path / "settings.json"
    config_file.write_text(json.dumps({"max_length": 40}))
    with caplog.at_level("WARNING", logger="run_directory.settings"):
        assert resolve_config("tiny", str(config_file)).max_sequence_length == 40
    assert f"{config_file}: the setting max_length is deprecated" in caplog.text
    config_file.write_text(json.dumps({"max_length": 40, "max_sequence_length": 48}))
    with pytest.raises(ValueError, match="both max_length and its new name max_sequence_length"):
        resolve_config("tiny", str(config_file))


def test_the_max_length_flag_still_sets_max_sequence_length(caplog):
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    with caplog.at_level("WARNING", logger="training.config"):
        args = parser.parse_args(["--max_length", "40"])
    assert args.max_sequence_length == 40
    assert "--max_length is deprecated; use --max_sequence_length." in caplog.text


def test_a_malformed_config_file_is_named_with_its_line(tmp_path, capsys):
    config_file = tmp_path / "settings.json"
    config_file.write_text('{\n  "d_model": 48\n  "dropout": 0.2\n}\n')
    with pytest.raises(SystemExit) as exit_info:
        main(["--preset", "tiny", "--config", str(config_file), "--run_dir", str(tmp_path / "r")])
    assert exit_info.value.code == 2
    assert f"{config_file}:3: not valid JSON: Expecting ',' delimiter" in capsys.readouterr().err
    config_file.write_text("[1, 2]")
    with pytest.raises(ValueError, match=f"{config_file}: expected a JSON object"):
        resolve_config("tiny", str(config_file))


def test_help_shows_every_presets_values(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())  # unwrapped
    assert "--train_steps TRAIN_STEPS (tiny: 40, demo: 750, small: 2600, base: 100000)" in help_text
    assert (
        "--norm_first NORM_FIRST (tiny: False, demo: True, small: False, base: False)" in help_text
    )
    assert "--seed SEED (every preset: 0)" in help_text
    assert "tiny | demo | small | base (default: small)" in help_text
    assert "(default: None)" not in help_text


def test_long_examples_truncate_keeps_what_drop_would_discard(corpus, tmp_path):
    """Every toy sentence is at least 5 tokens with [START]/[END]: max_sequence_length 4 drops them all,
    and truncation keeps them all."""
    with pytest.raises(
        TrainingError, match="the train split has no pair within max_sequence_length=4"
    ):
        train(
            tiny(corpus, max_sequence_length=4, batch_tokens=64, train_steps=3),
            str(tmp_path / "drop"),
        )
    run_dir = str(tmp_path / "truncate")
    train(
        tiny(
            corpus, max_sequence_length=4, batch_tokens=64, train_steps=3, long_examples="truncate"
        ),
        run_dir,
    )
    assert os.path.exists(os.path.join(run_dir, "model.keras"))


@pytest.mark.large
def test_separate_lower_cased_vocabularies_through_train(corpus, tmp_path):
    from model.tokenizer import load_tokenizers

    run_dir = str(tmp_path / "run")
    train(tiny(corpus, shared_vocab=False, lower_case=True, train_steps=3), run_dir)
    source, target = load_tokenizers(os.path.join(run_dir, artifacts.TOKENIZER_DIR))
    assert set(source.vocab) != set(target.vocab)
    assert "perro" in "".join(source.vocab) and "perro" not in "".join(target.vocab)

    def round_trip(tokenizer, text):
        return tokenizer.detokenize(tokenizer.tokenize([text])).numpy()[0].decode()

    assert round_trip(source, "El PERRO come") == "el perro come"
    assert round_trip(target, "The DOG eats") == "the dog eats"
    model, *_ = artifacts.load_trained(run_dir)
    assert model.get_config()["input_vocab_size"] == source.vocab_size


@pytest.mark.large
def test_a_noised_run_checkpoints_its_pipeline_and_resumes(corpus, tmp_path):
    """Source noise and copy substitution tokenize in tf.data with the tokenizers' traced functions, whose
    SentencePiece resource tf.data cannot serialize: the iterator must still be checkpointed
    (every 20 steps in the tiny preset) and the run resumed to its end."""
    run_dir = str(tmp_path / "run")
    robust = dict(source_noise=0.3, copy_substitution=0.5)
    train(tiny(corpus, train_steps=25, **robust), run_dir)
    assert artifacts.kept_checkpoints(os.path.join(run_dir, "checkpoints"))[-1][0] == 25
    train(tiny(corpus, train_steps=45, **robust), run_dir, resume=True)
    assert artifacts.kept_checkpoints(os.path.join(run_dir, "checkpoints"))[-1][0] == 45


@pytest.mark.large
def test_a_run_with_source_noise_sampling_and_source_lowercasing(corpus, tmp_path):
    """Noise and subword sampling switch training to the in-pipeline tokenization; the run
    learns, records its source casing in its tokenizer config (so evaluation and exports
    lowercase sources as training did, and only sources), and cannot resume with the pipeline
    switched off."""
    from model.tokenizer import load_tokenizers

    run_dir = str(tmp_path / "run")
    robust = dict(source_noise=0.3, subword_nbest_size=-1, subword_alpha=0.2)
    dev_loss, dev_accuracy = train(
        tiny(corpus, train_steps=60, source_casing="lower", **robust), run_dir
    )
    # Chance is ~5% over the 20 words; sampled segmentations make the 60 steps learn slower
    # than the plain run's (> 0.3), still far above chance.
    assert dev_accuracy > 0.15 and dev_loss < 3.0
    tokenizer_dir = os.path.join(run_dir, artifacts.TOKENIZER_DIR)
    assert (
        json.load(open(os.path.join(tokenizer_dir, "tokenizer_config.json")))["source_casing"]
        == "lower"
    )
    source, target = load_tokenizers(tokenizer_dir)
    assert (source.casing, target.casing) == ("lower", None)
    text = tf.constant(["El PERRO Come"])
    assert source.detokenize(source.tokenize(text)).numpy()[0] == b"el perro come"
    assert target.detokenize(target.tokenize(text)).numpy()[0] == b"El PERRO Come"
    with pytest.raises(TrainingError, match="different source_noise: 0.3 -> 0.0"):
        train(
            tiny(corpus, train_steps=80, source_casing="lower", **{**robust, "source_noise": 0.0}),
            run_dir,
            resume=True,
        )


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"source_noise": 1.5}, "source_noise must be within [0, 1], got 1.5"),
        ({"source_noise_kinds": "lowercase,shout"}, "unknown perturbation 'shout'"),
        ({"copy_substitution": -0.1}, "copy_substitution must be within [0, 1], got -0.1"),
        ({"copy_figure_share": 1.5}, "copy_figure_share must be within [0, 1], got 1.5"),
        (
            {"subword_nbest_size": -1, "tokenizer": "wordpiece"},
            "subword_nbest_size (sampling) needs tokenizer sentencepiece",
        ),
        # A reversed run's sources are English: what reads them as Spanish is refused.
        (
            {"reverse": True, "restore_case": True},
            "restore_case: the restoration tables put back what people leave out when they "
            "type Spanish",
        ),
        (
            {"reverse": True, "source_noise_kinds": "lowercase,strip_accents+old_spelling"},
            "source_noise_kinds strip_accents+old_spelling: these perturbations write Spanish",
        ),
    ],
)
def test_bad_robustness_settings_are_refused(overrides, message):
    with pytest.raises(ValueError) as failure:
        resolve_config("tiny", overrides=overrides)
    assert message in str(failure.value)


class TrainTestToyTranslate(tfds.core.GeneratorBasedBuilder):
    """The word-for-word toy corpus as a TFDS dataset, with ted_hrlr_translate's split names."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {"es": tfds.features.Text(), "en": tfds.features.Text()}
            ),
            supervised_keys=("es", "en"),
        )

    def _split_generators(self, dl_manager):
        return {
            split: self._generate_examples(word_for_word_pairs(count, seed))
            for split, count, seed in (("train", 600, 0), ("validation", 40, 1), ("test", 40, 2))
        }

    def _generate_examples(self, pairs):
        for index, (es, en) in enumerate(pairs):
            yield index, {"es": es, "en": en}


@pytest.mark.large
def test_a_prepared_tfds_directory_trains_and_evaluates_offline(tmp_path):
    tfds_dir = tmp_path / "tensorflow_datasets"
    TrainTestToyTranslate(data_dir=str(tfds_dir)).download_and_prepare()
    run_dir = tmp_path / "run"
    # A fresh process knows no builder class: TFDS reads the prepared files alone, as it would
    # from a directory copied from a machine with network access.
    result = run_training_cli(
        "--preset", "tiny", "--data", "tfds:train_test_toy_translate", "--tfds_data_dir",
        str(tfds_dir), "--run_dir", str(run_dir), "--train_steps", "2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "600 train pairs, 40 dev pairs" in result.stderr
    assert artifacts.read_config(str(run_dir))["tfds_data_dir"] == str(tfds_dir)
    # Evaluation reads the test split from the run's own TFDS directory, or from --tfds_data_dir.
    evaluate = [
        sys.executable,
        "-m",
        "training.evaluate",
        "--run_dir",
        str(run_dir),
        "--limit",
        "3",
    ]
    evaluated = subprocess.run(evaluate, cwd=ROOT, capture_output=True, text=True)
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert "3 sentences, greedy" in evaluated.stdout
    elsewhere = ["--tfds_data_dir", str(tmp_path / "empty")]
    evaluated = subprocess.run(evaluate + elsewhere, cwd=ROOT, capture_output=True, text=True)
    assert evaluated.returncode == 1
    assert "unknown TFDS dataset 'train_test_toy_translate'" in evaluated.stderr
