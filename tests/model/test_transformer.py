"""The whole Transformer: masks derived from pad id 0, causality, gradients, serialization, cache."""

import collections

import keras
import numpy as np
import pytest
import tensorflow as tf

from common.cpu import describe_cpu
from model import Transformer
from tests.numerics import (
    BFLOAT16_ULP,
    ROUND_ONCE_TO_NEAREST,
    rounded_to_nearest_bfloat16,
    share_rounded_once,
)

VOCAB_IN, VOCAB_OUT = 40, 50


def small_transformer(**overrides):
    kwargs = dict(
        num_layers=2,
        d_model=32,
        num_heads=4,
        dff=64,
        input_vocab_size=VOCAB_IN,
        target_vocab_size=VOCAB_OUT,
        pe_input=64,
        pe_target=64,
        rate=0.1,
    )
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
    assert set(weights) == {
        "encoder_layer1",
        "encoder_layer2",
        "decoder_layer1_block1",
        "decoder_layer1_block2",
        "decoder_layer2_block1",
        "decoder_layer2_block2",
    }
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
        changed[:, i + 1 :] = rng.integers(1, VOCAB_OUT, size=changed[:, i + 1 :].shape)
        changed_logits = model((inp, changed), training=False).numpy()
        np.testing.assert_allclose(changed_logits[:, : i + 1], logits[:, : i + 1], atol=1e-5)
        assert np.abs(changed_logits[:, i + 1 :] - logits[:, i + 1 :]).max() > 1e-4


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
        loss = tf.reduce_mean(
            keras.losses.sparse_categorical_crossentropy(tar, logits, from_logits=True)
        )
    grads = tape.gradient(loss, model.trainable_weights)
    # 2 layers each: encoder 4 attention Dense + 2 FFN Dense + 2 LN; decoder 8 + 2 + 3; embeddings,
    # final LayerNorms (pre-LN) and the output layer's bias (its matrix is the target embedding).
    assert len(model.trainable_weights) == 2 * 2 * (4 + 2 + 2) + 2 * 2 * (8 + 2 + 3) + 2 + 2 * 2 + 1
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
    cache = model.init_cache(*model.encode(inp), cache_slots=tar.shape[1] + 2)
    step_logits = []
    for t in range(tar.shape[1]):
        logits, _, cache = model.decode(tar[:, t : t + 1], cache, t)
        step_logits.append(logits)
    np.testing.assert_allclose(np.concatenate(step_logits, axis=1), expected, atol=1e-5)


def test_decode_contract_prefix_alignment_and_reorder(batch):
    """`decode` of a whole prefix at once equals the full forward pass, its alignment is the
    last layer's cross-attention averaged over heads, and `reorder_cache` hands each row the
    target history of the row it names while the source stays the row's own."""
    inp, tar = batch
    model = small_transformer()
    expected, weights = model((inp, tar), training=False, return_attention_weights=True)
    cache = model.init_cache(*model.encode(inp), cache_slots=tar.shape[1])
    output = model.decode(tar, cache, 0)
    np.testing.assert_allclose(output.logits, expected, atol=1e-5)
    np.testing.assert_allclose(
        output.alignment, weights["decoder_layer2_block2"].numpy().mean(axis=1), atol=1e-6
    )

    # Three hypotheses of one source (as in beam search); rows 0 and 2 swap target prefixes:
    # the next step equals decoding the swapped prefixes.
    source = np.repeat(inp[:1], 3, axis=0)
    cache = model.init_cache(*model.encode(source), cache_slots=tar.shape[1])
    reordered = model.reorder_cache(
        model.decode(tar[:, :4], cache, 0).cache, tf.constant([2, 1, 0])
    )
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


# ------------------------------------------------------------------------ weight tying (§3.4)


def shared_vocab_transformer(**overrides):
    return small_transformer(input_vocab_size=VOCAB_OUT, **overrides)


def test_classic_signature_ties_the_target_embedding_and_the_output_projection():
    model = Transformer(2, 32, 4, 64, VOCAB_IN, VOCAB_OUT, 64, 64, 0.1)
    model.build(((None, None), (None, None)))
    target_matrix = model.decoder.embedding.embedding.embeddings
    assert model.final_layer.token_embedding.embeddings is target_matrix
    assert model.encoder.embedding.embedding.embeddings is not target_matrix
    untied = small_transformer(tie_embeddings=False)
    untied.build(((None, None), (None, None)))
    # The untied model's (d_model, vocab) kernel is the only weight the tied one lacks.
    untied_shapes = collections.Counter(tuple(w.shape) for w in untied.trainable_weights)
    untied_shapes.subtract(tuple(w.shape) for w in model.trainable_weights)
    assert +untied_shapes == collections.Counter({(32, VOCAB_OUT): 1})


def test_shared_vocabulary_makes_all_three_uses_one_variable(batch, tmp_path):
    inp, tar = batch
    model = shared_vocab_transformer(share_embeddings=True)
    model((inp, tar))
    matrix = model.decoder.embedding.embedding.embeddings
    assert model.encoder.embedding.embedding.embeddings is matrix
    assert model.final_layer.token_embedding.embeddings is matrix
    assert sum(w is matrix for w in model.trainable_weights) == 1
    # A checkpoint stores it once.
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    saved = [name for name, _ in tf.train.list_variables(path) if "VARIABLE_VALUE" in name]
    assert len(saved) == len(model.weights)
    assert sum(shape == [VOCAB_OUT, 32] for _, shape in tf.train.list_variables(path)) == 1


def test_sharing_needs_one_vocabulary():
    with pytest.raises(ValueError, match="share_embeddings needs one vocabulary.*40.*50"):
        small_transformer(share_embeddings=True)


def _untied_copy(tied):
    """An untied model computing exactly what `tied` computes: each use of the shared matrix E
    gets its own copy (the output kernel is Eᵀ), every other weight is copied."""
    untied = Transformer(
        **{**tied.get_config(), "tie_embeddings": False, "share_embeddings": False}
    )
    untied.build(((None, None), (None, None)))
    matrix = tied.decoder.embedding.embedding.embeddings
    untied.encoder.embedding.embedding.embeddings.assign(
        tied.encoder.embedding.embedding.embeddings
    )
    untied.decoder.embedding.embedding.embeddings.assign(matrix)
    untied.final_layer.kernel.assign(tf.transpose(matrix))
    untied.final_layer.bias.assign(tied.final_layer.bias)
    for tied_layer, untied_layer in zip(
        tied.encoder.enc_layers + tied.decoder.dec_layers,
        untied.encoder.enc_layers + untied.decoder.dec_layers,
    ):
        untied_layer.set_weights(tied_layer.get_weights())
    return untied


def _loss_gradients(model, inp, tar, variables):
    with tf.GradientTape() as tape:
        logits = model((inp, tar), training=False)
        loss = tf.reduce_mean(
            keras.losses.sparse_categorical_crossentropy(tar, logits, from_logits=True)
        )
    return logits, [tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, variables)]


@pytest.mark.parametrize("share", [False, True], ids=["target+output", "all-three"])
def test_gradient_of_the_tied_matrix_is_the_sum_of_its_uses(batch, share):
    """d loss / d E of the tied model = the sum of the untied model's gradients of E's copies."""
    inp, tar = batch
    inp = np.minimum(inp, VOCAB_OUT - 1)
    tied = shared_vocab_transformer(share_embeddings=share, rate=0.0)
    tied.build(((None, None), (None, None)))
    # A non-zero bias, so the projection's bias is part of what must match.
    tied.final_layer.bias.assign(np.random.default_rng(2).normal(size=VOCAB_OUT))
    untied = _untied_copy(tied)
    matrix = tied.decoder.embedding.embedding.embeddings
    tied_logits, (tied_gradient,) = _loss_gradients(tied, inp, tar, [matrix])
    untied_logits, (decoder_input, output_kernel, encoder_input) = _loss_gradients(
        untied,
        inp,
        tar,
        [
            untied.decoder.embedding.embedding.embeddings,
            untied.final_layer.kernel,
            untied.encoder.embedding.embedding.embeddings,
        ],
    )
    np.testing.assert_allclose(tied_logits, untied_logits, rtol=1e-5, atol=1e-6)
    expected = decoder_input + output_kernel.T + (encoder_input if share else 0.0)
    # Every use contributes: none of the summed gradients is negligible.
    for gradient in (decoder_input, output_kernel) + ((encoder_input,) if share else ()):
        assert np.abs(gradient).max() > 1e-2 * np.abs(expected).max()
    np.testing.assert_allclose(tied_gradient, expected, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("share", [False, True], ids=["target+output", "all-three"])
def test_tied_keras_file_round_trip_keeps_the_tying(batch, share, tmp_path):
    inp, tar = batch
    inp = np.minimum(inp, VOCAB_OUT - 1)
    model = shared_vocab_transformer(share_embeddings=share)
    expected = model((inp, tar), training=False)
    model.save(tmp_path / "tied.keras")
    restored = keras.models.load_model(tmp_path / "tied.keras")
    assert restored.get_config() == model.get_config()
    assert restored.tie_embeddings and restored.share_embeddings == share
    matrix = restored.decoder.embedding.embedding.embeddings
    assert restored.final_layer.token_embedding.embeddings is matrix
    assert (restored.encoder.embedding.embedding.embeddings is matrix) == share
    np.testing.assert_array_equal(restored((inp, tar), training=False), expected)


def test_keras_file_saved_before_tying_loads_as_the_untied_model(batch, tmp_path):
    """A `.keras` file from before weight tying: untied weights, a config without the new keys."""
    import json
    import zipfile

    inp, tar = batch
    model = small_transformer(tie_embeddings=False)
    expected = model((inp, tar), training=False)
    model.save(tmp_path / "new.keras")
    with (
        zipfile.ZipFile(tmp_path / "new.keras") as new,
        zipfile.ZipFile(tmp_path / "old.keras", "w") as old,
    ):
        for item in new.infolist():
            data = new.read(item)
            if item.filename == "config.json":
                config = json.loads(data)
                del config["config"]["tie_embeddings"], config["config"]["share_embeddings"]
                data = json.dumps(config).encode()
            old.writestr(item, data)
    restored = keras.models.load_model(tmp_path / "old.keras")
    assert not restored.tie_embeddings and not restored.share_embeddings
    np.testing.assert_array_equal(restored((inp, tar), training=False), expected)


@pytest.mark.parametrize("share", [False, True], ids=["target+output", "all-three"])
def test_tied_mixed_precision_keeps_float32_matrix_and_logits(batch, share):
    inp, tar = batch
    inp = np.minimum(inp, VOCAB_OUT - 1)
    model = shared_vocab_transformer(share_embeddings=share, dtype="mixed_float16")
    with tf.GradientTape() as tape:
        logits = model((inp, tar), training=True)
        loss = tf.reduce_mean(
            keras.losses.sparse_categorical_crossentropy(tar, logits, from_logits=True)
        )
    matrix = model.decoder.embedding.embedding.embeddings
    assert logits.dtype == "float32" and matrix.dtype == "float32"
    assert model.decoder.embedding.compute_dtype == "float16"
    gradient = tf.convert_to_tensor(tape.gradient(loss, matrix)).numpy()
    assert gradient.dtype == np.float32 and np.all(np.isfinite(gradient))
    # The float16 model computes the float32 one's logits, to float16 precision.
    reference = shared_vocab_transformer(share_embeddings=share)
    reference.build(((None, None), (None, None)))
    reference.set_weights(model.get_weights())
    np.testing.assert_allclose(
        model((inp, tar), training=False), reference((inp, tar), training=False), atol=5e-2
    )


def _named_leaves(tree, prefix=""):
    """`{dotted name: leaf}` of a `named_weights()` tree (dicts and lists)."""
    items = tree.items() if isinstance(tree, dict) else enumerate(tree)
    leaves = {}
    for key, value in items:
        name = f"{prefix}{key}"
        if isinstance(value, dict | list):
            leaves.update(_named_leaves(value, name + "."))
        else:
            leaves[name] = value
    return leaves


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_named_weights_name_every_weight_once_in_the_papers_terms(norm_first):
    model = small_transformer(norm_first=norm_first, tie_embeddings=False)
    model.build(((None, None), (None, None)))
    leaves = _named_leaves(model.named_weights())
    variables = {name: leaf for name, leaf in leaves.items() if isinstance(leaf, keras.Variable)}
    assert sorted(variable.path for variable in variables.values()) == sorted(
        variable.path for variable in model.weights
    )
    layer = model.decoder.dec_layers[1]
    assert leaves["decoder.layers.1.encoder_decoder_attention.W_K"] is layer.mha2.wk.kernel
    assert leaves["decoder.layers.1.self_attention.b_O"] is layer.mha1.dense.bias
    assert leaves["encoder.layers.0.feed_forward.W_2"].shape == (64, 32)
    assert leaves["pre_softmax_linear.W"] is model.final_layer.kernel
    assert ("encoder.final_layer_norm.gamma" in leaves) == norm_first
    positions = leaves["decoder.positional_encoding"]
    np.testing.assert_array_equal(positions, model.decoder.embedding.pos_encoding[0])


def test_named_weights_of_a_tied_model_give_the_transposed_target_embedding():
    model = small_transformer()
    model.build(((None, None), (None, None)))
    weights = model.named_weights()
    target_matrix = model.decoder.embedding.embedding.embeddings
    assert weights["decoder"]["embedding"] is target_matrix
    np.testing.assert_array_equal(weights["pre_softmax_linear"]["W"], np.transpose(target_matrix))


@pytest.mark.cpu_dependent
@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied"])
def test_bfloat16_weights_decode_as_mixed_bfloat16_but_for_a_bfloat16_output_product(batch, tie):
    """Under the "bfloat16" policy (`model.precision`, what `inference.export --compute_dtype
    bfloat16` exports) the weight matrices are stored in bfloat16, and layer norms, token
    embeddings and the float32 output layer keep float32 variables: up to the logits, a decoding
    step computes exactly what the same weights compute under mixed_bfloat16, which stores every
    weight in float32 and casts it at every read. The pre-softmax product then runs in bfloat16
    (`logits_product_dtype`) where mixed_bfloat16's runs in float32: its float32 sum rounded
    once to bfloat16, to nearest where oneDNN multiplies (AVX-512F CPUs), toward zero where
    TensorFlow's Eigen kernel does (AVX2-only CPUs, or `TF_ENABLE_ONEDNN_OPTS=0`)."""
    inp, tar = batch
    inp = np.minimum(inp, VOCAB_OUT - 1)
    sizes = dict(tie_embeddings=tie, share_embeddings=tie, rate=0.0)
    reference = shared_vocab_transformer(**sizes)
    reference.build(((None, None), (None, None)))
    # Layer norms start at exactly 1 and 0, which bfloat16 holds: perturb every weight.
    rng = np.random.default_rng(0)
    reference.set_weights([w + rng.normal(0, 0.05, w.shape) for w in reference.get_weights()])
    # W in bfloat16 numbers and no bias: mixed_bfloat16's float32 product is then the exact
    # sum that the bfloat16 product rounds once.
    output_matrix = (
        reference.final_layer.token_embedding.embeddings if tie else reference.final_layer.kernel
    )
    output_matrix.assign(tf.cast(tf.cast(output_matrix, tf.bfloat16), tf.float32))
    reference.final_layer.bias.assign(tf.zeros_like(reference.final_layer.bias))
    models = {}
    for policy in ("float32", "mixed_bfloat16", "bfloat16"):
        models[policy] = shared_vocab_transformer(**sizes, dtype=policy)
        models[policy].build(((None, None), (None, None)))
        models[policy].set_weights(reference.get_weights())

    stored = models["bfloat16"].weights
    kept_float32 = ("layernorm", "embedding", "final_layer")
    for variable in stored:
        expected = "float32" if any(part in variable.path for part in kept_float32) else "bfloat16"
        assert variable.dtype == expected, variable.path
    assert sum(variable.dtype == "bfloat16" for variable in stored) > len(stored) / 2

    def step_logits(model):
        cache = model.init_cache(*model.encode(inp), cache_slots=tar.shape[1])
        logits = []
        for t in range(tar.shape[1]):
            step, _, cache = model.decode(tar[:, t : t + 1], cache, t)
            logits.append(step)
        return np.concatenate(logits, axis=1)

    bfloat16 = step_logits(models["bfloat16"])
    mixed = step_logits(models["mixed_bfloat16"])
    # The whole forward pass too (training's, and the export's score signature).
    forward = (models["bfloat16"]((inp, tar)), models["mixed_bfloat16"]((inp, tar)))
    for given, expected in ((bfloat16, mixed), forward):
        assert given.dtype == np.float32
        np.testing.assert_array_equal(given, rounded_to_nearest_bfloat16(given))
        assert not np.array_equal(given, expected)
        # The same sum rounded once to bfloat16, to nearest (oneDNN) or toward zero (Eigen, on
        # AVX2-only CPUs); a few round otherwise (summed in another order). The stronger
        # property, which rounding, is tested per kernel below.
        to_nearest, toward_zero = share_rounded_once(given, expected)
        assert max(to_nearest, toward_zero) > 0.99, (to_nearest, toward_zero)
        np.testing.assert_allclose(given, expected, rtol=BFLOAT16_ULP)
        kernel_rounding = to_nearest if ROUND_ONCE_TO_NEAREST else toward_zero
        assert kernel_rounding > 0.99, (describe_cpu(), ROUND_ONCE_TO_NEAREST, to_nearest)
    # Both compute in bfloat16: close to float32's logits, not equal to them.
    float32 = step_logits(models["float32"])
    np.testing.assert_allclose(bfloat16, float32, atol=0.1)
