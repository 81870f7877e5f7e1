"""The Transformer (Vaswani et al., 2017): encoder, decoder and the final linear layer."""

from typing import NamedTuple

import keras
import tensorflow as tf

from model.decoder import Decoder
from model.embedding import (
    OutputProjection,
    TiedOutputProjection,
    make_token_embedding,
    project_to_logits,
)
from model.encoder import Encoder
from model.masks import create_decoder_self_attention_mask, create_padding_mask
from model.precision import logits_product_dtype
from model.sublayer import LAYER_NORM_EPSILON


class DecoderOutput(NamedTuple):
    """What `Transformer.decode` returns for `n` new target tokens.

    Attributes:
        logits: float32 `(batch, n, target_vocab_size)`, the next token after each new one.
        alignment: float32 `(batch, n, inp_len)`, the last decoder layer's cross-attention
            averaged over heads: how much each new token attended to each source token;
            `(batch, n, 0)` when not asked for.
        cache: the cache with the new tokens written, for the next `decode`.
    """

    logits: tf.Tensor
    alignment: tf.Tensor
    cache: dict


@keras.saving.register_keras_serializable(package="transformer")
class Transformer(keras.Model):
    """Sequence-to-sequence Transformer; every mask is derived inside from the pad id 0.

    Args:
        num_layers: N, layers in each of encoder and decoder.
        d_model: model width.
        num_heads: attention heads h.
        dff: feed-forward inner width.
        input_vocab_size, target_vocab_size: vocabulary sizes (id 0 is padding).
        pe_input, pe_target: longest source / target sequence (positional encodings).
        rate: dropout rate.
        norm_first: pre-LN instead of the paper's post-LN.
        tie_embeddings: keyword-only; the pre-softmax linear transformation uses the target
            embedding matrix (transposed) plus a bias, instead of a `Dense` layer of its own (§3.4).
        share_embeddings: keyword-only; the source and target embeddings are one matrix (the
            paper's shared vocabulary; all three uses are one matrix with `tie_embeddings`).
            Needs `input_vocab_size == target_vocab_size`.

    A config without `tie_embeddings` (a `.keras` file saved before weight tying existed)
    rebuilds the untied model it was saved from.

    Call arguments:
        inputs: `(inp, tar)`, int token ids `(batch, inp_len)` and `(batch, tar_len)`; `tar` is
            the decoder input (the target shifted right, starting with [START]).
        training: dropout on/off.
        return_attention_weights: also return the attention weights of every layer.

    Returns:
        float32 logits `(batch, tar_len, target_vocab_size)`; with `return_attention_weights`,
        `(logits, weights)` where weights maps `encoder_layer{i}`, `decoder_layer{i}_block1`
        (self-attention) and `decoder_layer{i}_block2` (cross-attention) to
        `(batch, num_heads, seq_len_q, seq_len_k)` tensors.

    Incremental decoding (`model/decoding/`) uses `encode`, `init_cache`, `decode` and
    `reorder_cache`, and nothing else of the model.
    """

    def __init__(
        self,
        num_layers,
        d_model,
        num_heads,
        dff,
        input_vocab_size,
        target_vocab_size,
        pe_input,
        pe_target,
        rate=0.1,
        norm_first=False,
        *,
        tie_embeddings=True,
        share_embeddings=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if share_embeddings and input_vocab_size != target_vocab_size:
            raise ValueError(
                "share_embeddings needs one vocabulary, got input_vocab_size="
                f"{input_vocab_size} and target_vocab_size={target_vocab_size}"
            )
        self.num_layers = num_layers
        self.d_model = d_model
        self.num_heads = num_heads
        self.dff = dff
        self.input_vocab_size = input_vocab_size
        self.target_vocab_size = target_vocab_size
        self.pe_input = pe_input
        self.pe_target = pe_target
        self.rate = rate
        self.norm_first = norm_first
        self.tie_embeddings = tie_embeddings
        self.share_embeddings = share_embeddings
        policy = self.dtype_policy
        # One layer, hence one variable, for every use of the target embedding matrix.
        target_embedding = make_token_embedding(target_vocab_size, d_model, policy)
        self.encoder = Encoder(
            num_layers=num_layers,
            d_model=d_model,
            num_heads=num_heads,
            dff=dff,
            input_vocab_size=input_vocab_size,
            maximum_position_encoding=pe_input,
            rate=rate,
            norm_first=norm_first,
            token_embedding=target_embedding if share_embeddings else None,
            name="encoder",
            dtype=policy,
        )
        self.decoder = Decoder(
            num_layers=num_layers,
            d_model=d_model,
            num_heads=num_heads,
            dff=dff,
            target_vocab_size=target_vocab_size,
            maximum_position_encoding=pe_target,
            rate=rate,
            norm_first=norm_first,
            token_embedding=target_embedding,
            name="decoder",
            dtype=policy,
        )
        # The logits stay float32 under mixed precision: softmax and the loss need the range.
        # Their product runs in bfloat16 only where the weights are stored in bfloat16 (serving).
        product_dtype = logits_product_dtype(policy)
        if tie_embeddings:
            self.final_layer = TiedOutputProjection(
                target_embedding, product_dtype, name="final_layer", dtype="float32"
            )
        else:
            self.final_layer = OutputProjection(
                target_vocab_size, product_dtype, name="final_layer", dtype="float32"
            )

    def build(self, input_shape):
        inp_shape, tar_shape = (tuple(shape) for shape in input_shape)
        self.encoder.build(inp_shape)
        enc_output_shape = inp_shape + (self.d_model,)
        self.decoder.build(tar_shape, enc_output_shape)
        self.final_layer.build(tar_shape + (self.d_model,))
        self.built = True

    def named_weights(self):
        """Every weight in the paper's names, for converters to other runtimes (CTranslate2).

        Returns:
            `{"encoder", "decoder": LayerStack.named_weights(), "pre_softmax_linear": {"W":
            (d_model, target_vocab_size), "b": (target_vocab_size,)}, "layer_norm_epsilon":
            float}`: the logits are `x·W + b`; with `tie_embeddings`, W is the transposed target
            embedding matrix (a tensor, not a variable). Tied and shared matrices appear at
            each of their uses.
        """
        return {
            "encoder": self.encoder.named_weights(),
            "decoder": self.decoder.named_weights(),
            "pre_softmax_linear": self.pre_softmax_linear(),
            "layer_norm_epsilon": LAYER_NORM_EPSILON,
        }

    def pre_softmax_linear(self):
        """The pre-softmax linear transformation: `{"W": (d_model, target_vocab_size), "b":
        (target_vocab_size,)}`, logits `x·W + b` (`model.embedding.project_to_logits`); the
        output layer's variables.

        b is float32; W is float32 too, or bfloat16 in a model storing its weights in bfloat16
        (`model.precision.logits_product_dtype`), and then a copy made by this call. With
        `tie_embeddings`, W is a tensor: the transposed target embedding matrix, copied into
        that layout by this call. A decoding loop gets it once and hands it to every `decode`
        step: multiplying by E transposed inside the loop ran up to 1.8× slower on CPU than by
        the stored copy (docs/benchmark-log.md, "Decoding against the speed goals").
        """
        return self.final_layer.pre_softmax_linear()

    def encode(self, inp, training=False, return_attention_weights=False):
        """Source ids `(batch, inp_len)` → `(enc_output (batch, inp_len, d_model),
        enc_padding_mask (batch, 1, 1, inp_len))`; with `return_attention_weights`, as
        `Encoder`, the weights `{"encoder_layer{i}": ...}` as a third element."""
        if not self.built:
            # Decoding calls encode/decode, never the model as a whole: build every weight here
            # so the cache projections don't create Dense kernels ahead of the layers' build.
            self.build(((None, None), (None, None)))
        enc_padding_mask = create_padding_mask(inp)
        encoded = self.encoder(
            inp,
            training=training,
            mask=enc_padding_mask,
            return_attention_weights=return_attention_weights,
        )
        if return_attention_weights:
            enc_output, weights = encoded
            return enc_output, enc_padding_mask, weights
        return encoded, enc_padding_mask

    def init_cache(self, enc_output, enc_padding_mask, cache_slots, compiled=False):
        """The decoding cache before the first target token, from `encode`'s outputs, for
        `decode` with the same `compiled`: with room for `cache_slots` target positions under
        XLA, growing by a position a step in a plain graph (`MultiHeadAttention.empty_cache`).

        The cache is opaque to decoding but for one promise: it is a nest of tensors whose
        first dimension is the batch, so rows can be dropped, repeated and gathered as a whole.
        """
        return {
            "padding_mask": enc_padding_mask,
            "decoder": self.decoder.init_cache(enc_output, cache_slots, compiled),
        }

    def decode(
        self,
        tar,
        cache,
        cache_update_index,
        compiled=False,
        with_alignment=True,
        pre_softmax_linear=None,
    ):
        """The next-token logits after the target ids `tar`, which continue the cache's prefix.

        Args:
            tar: `(batch, n)` target ids at positions `cache_update_index ..
                cache_update_index + n - 1` (decoding: n = 1, the last token chosen).
            cache: from `init_cache` or the previous `decode`; holds the source and the target
                positions before `cache_update_index`.
            cache_update_index: int32 scalar.
            compiled: whether XLA compiles the caller (`tf.function(jit_compile=True)`): the
                cache is then written and read with fixed shapes. It must be the `compiled` of
                `init_cache`. The outputs are the same either way; each choice runs only where
                it says.
            with_alignment: False returns a zero-width alignment, not computed.
            pre_softmax_linear: this model's `pre_softmax_linear()`, got once per decoding call
                rather than at each step; default: the output layer itself (the forward pass's
                arithmetic, not fused with its bias: `model.dense`).

        Returns:
            `DecoderOutput(logits, alignment, cache)`.
        """
        hidden, cross_weights, decoder_cache = self.decoder.decode_step(
            tar,
            cache["decoder"],
            cache_update_index,
            padding_mask=cache["padding_mask"],
            compiled=compiled,
        )
        if pre_softmax_linear is None:
            logits = self.final_layer(hidden)
        else:
            logits = project_to_logits(hidden, pre_softmax_linear, fused=True)
        if with_alignment:
            alignment = tf.reduce_mean(tf.cast(cross_weights, tf.float32), axis=1)
        else:
            alignment = tf.zeros(tf.concat([tf.shape(tar), [0]], axis=0))
        return DecoderOutput(logits, alignment, {**cache, "decoder": decoder_cache})

    def reorder_cache(self, cache, indices):
        """The cache of the rows `indices` `(batch,)` int32, as beam search needs it: each row
        takes the target prefix of row `indices[i]`, a row of the same source sentence."""
        return {**cache, "decoder": self.decoder.reorder_cache(cache["decoder"], indices)}

    def call(self, inputs, training=False, return_attention_weights=False):
        inp, tar = inputs
        enc_output, enc_padding_mask, encoder_weights = self.encode(
            inp, training=training, return_attention_weights=True
        )
        hidden, decoder_weights = self.decoder(
            tar,
            enc_output,
            training=training,
            look_ahead_mask=create_decoder_self_attention_mask(tar),
            padding_mask=enc_padding_mask,
        )
        logits = self.final_layer(hidden)
        if return_attention_weights:
            return logits, {**encoder_weights, **decoder_weights}
        return logits

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_layers": self.num_layers,
                "d_model": self.d_model,
                "num_heads": self.num_heads,
                "dff": self.dff,
                "input_vocab_size": self.input_vocab_size,
                "target_vocab_size": self.target_vocab_size,
                "pe_input": self.pe_input,
                "pe_target": self.pe_target,
                "rate": self.rate,
                "norm_first": self.norm_first,
                "tie_embeddings": self.tie_embeddings,
                "share_embeddings": self.share_embeddings,
            }
        )
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        # Every model saved before weight tying was untied, and its weights fit only that model.
        config = {"tie_embeddings": False, "share_embeddings": False, **config}
        return super().from_config(config, custom_objects=custom_objects)
