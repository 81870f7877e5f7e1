"""Loss and accuracy over real target tokens only: padding (id 0) never counts."""

import keras
import tensorflow as tf

from model.special_tokens import PAD_ID


@keras.saving.register_keras_serializable(package="transformer")
class MaskedSparseCrossEntropy(keras.losses.Loss):
    """Sparse cross-entropy from logits, averaged over non-pad tokens, with label smoothing (§5.4).

    With smoothing ε the target distribution is (1 - ε) on the label plus ε spread uniformly
    over the vocabulary, so the per-token loss is (1 - ε)·(-log p_label) + ε·mean_v(-log p_v).

    Call arguments:
        y_true: int labels `(batch, seq_len)`, pad id 0 ignored.
        y_pred: float logits `(batch, seq_len, vocab_size)`.

    Returns:
        scalar: the mean loss per real token of the batch.
    """

    def __init__(self, label_smoothing=0.0, name="masked_sparse_cross_entropy", **kwargs):
        super().__init__(name=name, **kwargs)
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        self.label_smoothing = label_smoothing

    def call(self, y_true, y_pred):
        token_loss, mask = masked_token_losses(y_true, y_pred, self.label_smoothing)
        return tf.reduce_sum(token_loss) / tf.maximum(tf.reduce_sum(mask), 1.0)

    def get_config(self):
        config = super().get_config()
        config.update({"label_smoothing": self.label_smoothing})
        return config


def masked_token_losses(y_true, y_pred, label_smoothing=0.0):
    """Per-token smoothed cross-entropy, zero at pad positions.

    Returns:
        `(token_loss, mask)`, both float32 `(batch, seq_len)`; `mask` is 1.0 at real tokens.
        Kept separate from the Keras loss so a distributed training loop can sum losses and
        token counts across replicas before dividing.
    """
    log_probs = tf.nn.log_softmax(tf.cast(y_pred, tf.float32), axis=-1)
    y_true = tf.cast(y_true, tf.int32)
    nll = -tf.gather(log_probs, y_true, axis=-1, batch_dims=2)
    token_loss = nll
    if label_smoothing:
        uniform = -tf.reduce_mean(log_probs, axis=-1)
        token_loss = (1.0 - label_smoothing) * nll + label_smoothing * uniform
    mask = tf.cast(tf.not_equal(y_true, PAD_ID), tf.float32)
    return token_loss * mask, mask


@keras.saving.register_keras_serializable(package="transformer")
class MaskedAccuracy(keras.metrics.Mean):
    """Fraction of non-pad target tokens whose arg-max prediction equals the label.

    Weighted by token count across batches (not a mean of per-batch ratios).
    """

    def __init__(self, name="masked_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = tf.cast(y_true, tf.int32)
        predictions = tf.argmax(y_pred, axis=-1, output_type=tf.int32)
        matches = tf.cast(tf.equal(y_true, predictions), tf.float32)
        mask = tf.cast(tf.not_equal(y_true, PAD_ID), tf.float32)
        return super().update_state(matches, sample_weight=mask)
