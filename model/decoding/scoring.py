"""Scoring given outputs: the teacher-forced log-probabilities a model gives a translation."""

import tensorflow as tf

from model.decoding.common import output_log_probs
from model.masks import PAD_ID


def teacher_forced_logits(model, inp, tokens, start_id):
    """The logits `(batch, out_len, vocab)` of each position of `tokens` `(batch, out_len)`
    given the tokens before it ([START] first): one pass of the whole decoder."""
    batch_size = tf.shape(tokens)[0]
    decoder_input = tf.concat(
        [tf.fill([batch_size, 1], tf.cast(start_id, tf.int32)), tokens[:, :-1]], axis=1
    )
    return model((inp, decoder_input), training=False)


def token_log_probs(model, inp, tokens, start_id):
    """Teacher-forced log-probability of each given output token (forced decoding), from the
    distribution the decoders choose from (`output_log_probs`: [PAD] left out of the softmax).

    Args:
        inp: `(batch, inp_len)` source ids.
        tokens: `(batch, out_len)` as returned by the decoders (up to and including [END], 0
            after it).
        start_id: the [START] id, fed before the first token.

    Returns:
        `(batch, out_len)` float32: log P(token_t | tokens_<t, inp), 0 at padding. Unnormalized:
        a sum over a row is `sequence_log_prob`, the greedy decoder's score of those tokens.
    """
    log_probs = output_log_probs(teacher_forced_logits(model, inp, tokens, start_id))
    chosen = tf.gather(log_probs, tokens, axis=2, batch_dims=2)
    return chosen * tf.cast(tf.not_equal(tokens, PAD_ID), tf.float32)


def sequence_log_prob(model, inp, tokens, start_id):
    """Teacher-forced log-probability of given output tokens (up to and including [END]).

    Args:
        tokens: `(batch, out_len)` as returned by the decoders (0 after [END]).

    Returns:
        `(batch,)` float32 sums of `token_log_probs` over the non-pad tokens.
    """
    return tf.reduce_sum(token_log_probs(model, inp, tokens, start_id), axis=1)
