"""Scoring given outputs: the teacher-forced log-probability a model gives a translation."""

import tensorflow as tf

from model.decoding.common import output_log_probs
from model.masks import PAD_ID


def sequence_log_prob(model, inp, tokens, start_id):
    """Teacher-forced log-probability of given output tokens (up to and including [END]).

    Args:
        tokens: `(batch, out_len)` as returned by the decoders (0 after [END]).

    Returns:
        `(batch,)` float32 sums of token log-probabilities over the non-pad tokens.
    """
    batch_size = tf.shape(tokens)[0]
    decoder_input = tf.concat(
        [tf.fill([batch_size, 1], tf.cast(start_id, tf.int32)), tokens[:, :-1]], axis=1
    )
    log_probs = output_log_probs(model((inp, decoder_input), training=False))
    token_log_probs = tf.gather(log_probs, tokens, axis=2, batch_dims=2)
    return tf.reduce_sum(token_log_probs * tf.cast(tf.not_equal(tokens, PAD_ID), tf.float32), 1)
