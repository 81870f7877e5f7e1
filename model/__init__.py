"""The Transformer of "Attention Is All You Need", as Keras 3 layers on TensorFlow.

Public API: every name below is importable as `from model import NAME`.
"""

from common.startup import import_tensorflow_quietly

import_tensorflow_quietly()  # before anything else imports TensorFlow

from model.attention import scaled_dot_product_attention
from model.decoder import Decoder
from model.decoder_layer import DecoderLayer
from model.embedding import PositionalEmbedding
from model.encoder import Encoder
from model.encoder_layer import EncoderLayer
from model.feed_forward import point_wise_feed_forward_network
from model.masks import (
    PAD_ID,
    create_cache_mask,
    create_decoder_self_attention_mask,
    create_look_ahead_mask,
    create_padding_mask,
)
from model.multi_head_attention import MultiHeadAttention
from model.positional_encoding import positional_encoding
from model.transformer import Transformer

__all__ = [
    "Decoder",
    "DecoderLayer",
    "Encoder",
    "EncoderLayer",
    "MultiHeadAttention",
    "PAD_ID",
    "PositionalEmbedding",
    "Transformer",
    "create_cache_mask",
    "create_decoder_self_attention_mask",
    "create_look_ahead_mask",
    "create_padding_mask",
    "point_wise_feed_forward_network",
    "positional_encoding",
    "scaled_dot_product_attention",
]
