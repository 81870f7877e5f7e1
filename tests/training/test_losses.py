"""Masked cross-entropy and accuracy against Keras's own losses on the real (non-pad) tokens."""

import keras
import numpy as np
import pytest

from training.losses import MaskedAccuracy, MaskedSparseCrossEntropy


@pytest.fixture
def labels_and_logits():
    rng = np.random.default_rng(0)
    labels = rng.integers(1, 11, size=(4, 6))
    labels[0, 3:] = 0
    labels[2, 1:] = 0
    logits = rng.normal(size=(4, 6, 11)).astype(np.float32) * 3
    return labels, logits


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_loss_equals_keras_categorical_crossentropy_on_real_tokens(labels_and_logits, smoothing):
    labels, logits = labels_and_logits
    real = labels != 0
    reference = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=smoothing)
    expected = reference(keras.ops.one_hot(labels[real], 11), logits[real])
    loss = MaskedSparseCrossEntropy(label_smoothing=smoothing)(labels, logits)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


def test_pad_positions_do_not_affect_the_loss(labels_and_logits):
    labels, logits = labels_and_logits
    changed = logits.copy()
    changed[labels == 0] = 1e4
    loss = MaskedSparseCrossEntropy(label_smoothing=0.1)
    np.testing.assert_allclose(loss(labels, changed), loss(labels, logits), rtol=1e-6)


def test_accuracy_is_token_weighted_across_batches(labels_and_logits):
    labels, logits = labels_and_logits
    metric = MaskedAccuracy()
    metric.update_state(labels[:2], logits[:2])
    metric.update_state(labels[2:], logits[2:])
    real = labels != 0
    expected = np.mean(np.argmax(logits, -1)[real] == labels[real])
    np.testing.assert_allclose(metric.result(), expected, rtol=1e-6)


def test_rejects_bad_smoothing():
    with pytest.raises(ValueError, match="label_smoothing"):
        MaskedSparseCrossEntropy(label_smoothing=1.0)
