"""Attention masks. Convention: 1.0 marks a position that may NOT be attended."""

import tensorflow as tf

from model.special_tokens import PAD_ID


def create_padding_mask(seq):
    """Masks the padding tokens (id 0) of a batch of token ids.

    Args:
        seq: integer tensor `(batch, seq_len)`.

    Returns:
        float32 tensor `(batch, 1, 1, seq_len)`, 1.0 where `seq` is the pad id, broadcastable over
        heads and query positions of the attention logits.
    """
    mask = tf.cast(tf.math.equal(seq, PAD_ID), tf.float32)
    return mask[:, tf.newaxis, tf.newaxis, :]


def create_look_ahead_mask(size):
    """Masks future positions so position i attends only to positions ≤ i.

    Args:
        size: the sequence length (int or scalar tensor).

    Returns:
        float32 tensor `(size, size)`, 1.0 strictly above the diagonal.
    """
    return 1.0 - tf.linalg.band_part(tf.ones((size, size)), -1, 0)


def create_decoder_self_attention_mask(tar):
    """Look-ahead mask combined with the padding mask of the target tokens.

    Args:
        tar: integer tensor `(batch, tar_len)`.

    Returns:
        float32 tensor `(batch, 1, tar_len, tar_len)`.
    """
    look_ahead_mask = create_look_ahead_mask(tf.shape(tar)[1])
    return tf.maximum(create_padding_mask(tar), look_ahead_mask)


def create_cache_mask(cache_slots, position, new_positions=1):
    """The look-ahead mask of a decoding step over a fixed-size key/value cache.

    Args:
        cache_slots: slots in the cache (int or scalar tensor).
        position: the position of the step's first new token (int32 scalar); the slots of its
            `new_positions` tokens were just written.
        new_positions: tokens written at this step (1 when decoding token by token).

    Returns:
        float32 tensor `(1, 1, new_positions, cache_slots)`, 1.0 where a slot comes after the
        query's own position (not written yet, or a later token of the same step).
    """
    query_positions = position + tf.range(new_positions)[:, tf.newaxis]
    not_visible = tf.range(cache_slots)[tf.newaxis, :] > query_positions
    return tf.cast(not_visible, tf.float32)[tf.newaxis, tf.newaxis, :, :]


class AttentionMaskArgument:
    """Mixin for layers whose `mask` call argument is an attention mask, not a Keras mask.

    Keras 3 treats any `call(..., mask=...)` as its own propagated mask and warns that the layer
    "destroys" it. Ours are attention masks (1 = may not attend) derived from the pad id, and the
    outputs carry no Keras mask, which `compute_mask` returning None states explicitly.
    """

    def compute_mask(self, inputs, previous_mask=None):
        return None
