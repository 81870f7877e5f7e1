"""The whole Transformer: masks derived from pad id 0, causality, gradients, serialization, cache."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from model import Transformer

VOCAB_IN, VOCAB_OUT = 40, 50


def small_transformer(**overrides):
    kwargs = dict(num_layers=2, d_model=32, num_heads=4, dff=64, input_vocab_size=VOCAB_IN,
                  target_vocab_size=VOCAB_OUT, pe_input=64, pe_target=64, rate=0.1)
    kwargs.update(overrides)
    return Transformer(**kwargs)


@pytest.fixture
def batch():
    rng = np.random.default_rng(0)
    inp = rng.integers(1, VOCAB_IN, size=(3, 9))
    inp[0, 6:] = 0  # sources of different lengths
    tar = rng.integers(1, VOCAB_OUT, size=(3, 7))
    return inp, tar


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_logits_shape_and_attention_weights(batch, norm_first):
    inp, tar = batch
    model = small_transformer(norm_first=norm_first)
    logits, weights = model((inp, tar), training=False, return_attention_weights=True)
    assert logits.shape == (3, 7, VOCAB_OUT) and logits.dtype == "float32"
    assert set(weights) == {"encoder_layer1", "encoder_layer2", "decoder_layer1_block1",
                            "decoder_layer1_block2", "decoder_layer2_block1", "decoder_layer2_block2"}
    assert weights["encoder_layer1"].shape == (3, 4, 9, 9)
    assert weights["decoder_layer2_block1"].shape == (3, 4, 7, 7)
    assert weights["decoder_layer2_block2"].shape == (3, 4, 7, 9)
    # Source padding gets no attention from the encoder nor from the decoder's cross-attention.
    assert np.all(weights["encoder_layer1"].numpy()[0, :, :, 6:] == 0.0)
    assert np.all(weights["decoder_layer1_block2"].numpy()[0, :, :, 6:] == 0.0)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_causality(batch, norm_first):
    """Changing target tokens after position i leaves the logits at positions <= i unchanged."""
    inp, tar = batch
    model = small_transformer(norm_first=norm_first)
    logits = model((inp, tar), training=False).numpy()
    rng = np.random.default_rng(1)
    for i in range(tar.shape[1] - 1):
        changed = tar.copy()
        changed[:, i + 1:] = rng.integers(1, VOCAB_OUT, size=changed[:, i + 1:].shape)
        changed_logits = model((inp, changed), training=False).numpy()
        np.testing.assert_allclose(changed_logits[:, : i + 1], logits[:, : i + 1], atol=1e-5)
        assert np.abs(changed_logits[:, i + 1:] - logits[:, i + 1:]).max() > 1e-4


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_source_padding_does_not_change_logits(batch, norm_first):
    inp, tar = batch
    model = small_transformer(norm_first=norm_first)
    logits = model((inp, tar), training=False)
    padded = np.pad(inp, ((0, 0), (0, 5)))
    np.testing.assert_allclose(model((padded, tar), training=False), logits, atol=1e-5)


def test_gradients_reach_every_trainable_weight(batch):
    inp, tar = batch
    model = small_transformer(norm_first=True)
    with tf.GradientTape() as tape:
        logits = model((inp, tar), training=True)
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(tar, logits, from_logits=True))
    grads = tape.gradient(loss, model.trainable_weights)
    # 2 layers each: encoder 4 attention Dense + 2 FFN Dense + 2 LN; decoder 8 + 2 + 3; embeddings,
    # final LayerNorms (pre-LN) and the output layer.
    assert len(model.trainable_weights) == 2 * 2 * (4 + 2 + 2) + 2 * 2 * (8 + 2 + 3) + 2 + 2 * 2 + 2
    for weight, grad in zip(model.trainable_weights, grads):
        assert grad is not None, weight.path
        assert float(tf.reduce_max(tf.abs(tf.convert_to_tensor(grad)))) > 0.0, weight.path


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_keras_file_round_trip(batch, norm_first, tmp_path):
    inp, tar = batch
    model = small_transformer(norm_first=norm_first)
    expected = model((inp, tar), training=False)
    path = tmp_path / "transformer.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    assert restored.get_config() == model.get_config()
    np.testing.assert_array_equal(restored((inp, tar), training=False), expected)


def test_cached_decoding_equals_full_forward(batch):
    """The key/value cache hooks: one token at a time gives the same logits as the whole prefix."""
    inp, tar = batch
    model = small_transformer()
    expected = model((inp, tar), training=False)
    cache = model.init_cache(*model.encode(inp), max_length=tar.shape[1] + 2)
    step_logits = []
    for t in range(tar.shape[1]):
        logits, _, cache = model.decode(tar[:, t: t + 1], cache, t)
        step_logits.append(logits)
    np.testing.assert_allclose(np.concatenate(step_logits, axis=1), expected, atol=1e-5)


def test_decode_contract_prefix_alignment_and_reorder(batch):
    """`decode` of a whole prefix at once equals the full forward pass, its alignment is the
    last layer's cross-attention averaged over heads, and `reorder_cache` hands each row the
    target history of the row it names while the source stays the row's own."""
    inp, tar = batch
    model = small_transformer()
    expected, weights = model((inp, tar), training=False, return_attention_weights=True)
    cache = model.init_cache(*model.encode(inp), max_length=tar.shape[1])
    output = model.decode(tar, cache, 0)
    np.testing.assert_allclose(output.logits, expected, atol=1e-5)
    np.testing.assert_allclose(
        output.alignment, weights["decoder_layer2_block2"].numpy().mean(axis=1), atol=1e-6)

    # Three hypotheses of one source (as in beam search); rows 0 and 2 swap target prefixes:
    # the next step equals decoding the swapped prefixes.
    source = np.repeat(inp[:1], 3, axis=0)
    cache = model.init_cache(*model.encode(source), max_length=tar.shape[1])
    reordered = model.reorder_cache(model.decode(tar[:, :4], cache, 0).cache, tf.constant([2, 1, 0]))
    swapped = tar[[2, 1, 0]]
    step = model.decode(swapped[:, 4:5], reordered, 4)
    np.testing.assert_allclose(step.logits[:, 0], model((source, swapped[:, :5]))[:, 4], atol=1e-5)


def test_mixed_precision_forward_and_gradients_are_finite(batch):
    inp, tar = batch
    model = small_transformer(dtype="mixed_float16")
    with tf.GradientTape() as tape:
        logits = model((inp, tar), training=True)
        loss = tf.reduce_mean(logits**2)
    assert logits.dtype == "float32"
    assert model.encoder.enc_layers[0].mha.wq.kernel.dtype == "float32"
    assert model.encoder.enc_layers[0].mha.compute_dtype == "float16"
    grads = tape.gradient(loss, model.trainable_weights)
    assert all(np.all(np.isfinite(tf.convert_to_tensor(g).numpy())) for g in grads)


def test_too_long_sequence_is_a_clear_error(batch):
    inp, tar = batch
    model = small_transformer(pe_input=8)
    with pytest.raises(tf.errors.InvalidArgumentError, match="maximum_position_encoding=8"):
        model((inp, tar), training=False)


def test_tf_checkpoint_holds_every_weight(batch, tmp_path):
    """Keras 3 hides lists of layers from tf.train.Checkpoint; the stacks must expose theirs."""
    inp, tar = batch
    model = small_transformer()
    expected = model((inp, tar), training=False)
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    saved = [name for name, _ in tf.train.list_variables(path) if "VARIABLE_VALUE" in name]
    assert len(saved) == len(model.weights)

    restored = small_transformer()
    restored.build(((None, None), (None, None)))
    tf.train.Checkpoint(model=restored).read(path).assert_consumed()
    np.testing.assert_array_equal(restored((inp, tar), training=False), expected)
