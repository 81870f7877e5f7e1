"""Multi-head attention (§3.2.2), with the key/value cache used by incremental decoding."""

import keras
import tensorflow as tf

from model.attention import scaled_dot_product_attention
from model.buffers import write_slot
from model.dense import apply_dense
from model.masks import AttentionMaskArgument, create_cache_mask


@keras.saving.register_keras_serializable(package="transformer")
class MultiHeadAttention(AttentionMaskArgument, keras.layers.Layer):
    """MultiHead(Q, K, V) = Concat(head_1, …, head_h)·W^O, head_i = Attention(Q·W_i^Q, K·W_i^K, V·W_i^V).

    The per-head projections are computed as one `d_model`-wide Dense each (`wq`, `wk`, `wv`) and
    split into `num_heads` heads of depth `d_model // num_heads`; `dense` is W^O.

    Args:
        d_model: model width; must be divisible by `num_heads`.
        num_heads: number of attention heads.

    Call arguments (note the classic argument order v, k, q):
        v: values `(batch, seq_len_k, d_model_v)`.
        k: keys `(batch, seq_len_k, d_model_k)`.
        q: queries `(batch, seq_len_q, d_model_q)`.
        mask: optional, broadcastable to `(batch, num_heads, seq_len_q, seq_len_k)`, 1 = may not attend.

    Returns:
        `(output, attention_weights)`: output `(batch, seq_len_q, d_model)`, weights
        `(batch, num_heads, seq_len_q, seq_len_k)`.

    Incremental decoding goes through two other methods over a key/value cache (dict
    `{"key", "value"}` of projected heads `(batch, num_heads, slots, depth)`):
    `attend_to_cache` (cross-attention over keys/values projected once by `compute_key_value`)
    and `write_cache_and_attend` (self-attention, one new position per step written into a
    fixed-size cache from `empty_cache` under XLA, appended to a growing one in a plain graph).
    """

    def __init__(self, d_model, num_heads, **kwargs):
        super().__init__(**kwargs)
        if d_model % num_heads != 0:
            raise ValueError(
                f"d_model ({d_model}) must be divisible by num_heads ({num_heads}): "
                "each head gets d_model // num_heads dimensions."
            )
        self.d_model = d_model
        self.num_heads = num_heads
        self.depth = d_model // num_heads
        self.wq = keras.layers.Dense(d_model, name="wq", dtype=self.dtype_policy)
        self.wk = keras.layers.Dense(d_model, name="wk", dtype=self.dtype_policy)
        self.wv = keras.layers.Dense(d_model, name="wv", dtype=self.dtype_policy)
        self.dense = keras.layers.Dense(d_model, name="dense", dtype=self.dtype_policy)

    def build(self, v_shape, k_shape=None, q_shape=None):
        v_shape = tuple(v_shape) if v_shape is not None else (None, None, self.d_model)
        self.wv.build(v_shape)
        self.wk.build(tuple(k_shape) if k_shape is not None else v_shape)
        self.wq.build(tuple(q_shape) if q_shape is not None else v_shape)
        self.dense.build((None, None, self.d_model))
        self.built = True

    def named_weights(self):
        """The projections' variables in the paper's names (§3.2.2), every head at once.

        Returns:
            `{"W_Q", "W_K", "W_V": (d_in, d_model), "W_O": (d_model, d_model), "b_Q", "b_K",
            "b_V", "b_O": (d_model,)}`; each projection is `x·W + b`, head i reads columns
            `i·depth` to `(i + 1)·depth` of `W_Q`, `W_K`, `W_V` and rows of `W_O`.
        """
        projections = {"Q": self.wq, "K": self.wk, "V": self.wv, "O": self.dense}
        weights = {}
        for name, projection in projections.items():
            weights[f"W_{name}"] = projection.kernel
            weights[f"b_{name}"] = projection.bias
        return weights

    def split_heads(self, x, batch_size):
        """`(batch, seq_len, d_model)` → `(batch, num_heads, seq_len, depth)`."""
        x = tf.reshape(x, (batch_size, -1, self.num_heads, self.depth))
        return tf.transpose(x, perm=[0, 2, 1, 3])

    def compute_key_value(self, k, v, fused=False):
        """Projects keys and values once, for a cache reused at every decoding step.

        Args:
            k: `(batch, seq_len_k, d_model_k)`; v: `(batch, seq_len_k, d_model_v)`.
            fused: projections as the decoding step computes them (`model.dense.apply_dense`).

        Returns:
            dict `{"key", "value"}`, each `(batch, num_heads, seq_len_k, depth)`.
        """
        batch_size = tf.shape(k)[0]
        return {
            "key": self.split_heads(apply_dense(self.wk, k, fused), batch_size),
            "value": self.split_heads(apply_dense(self.wv, v, fused), batch_size),
        }

    def empty_cache(self, batch_size, cache_slots, compiled=False):
        """A self-attention cache before the first position, for `write_cache_and_attend` with
        the same `compiled`.

        Compiled (XLA): room for `cache_slots` positions, a size fixed for the whole decoding
        loop, since XLA compiles the loop once for one set of shapes; each step writes one slot.
        A plain graph: no slot at all (`cache_slots` unused); each step appends its positions,
        so that attention reads and beam search's `reorder_cache` gathers the written slots
        only, and no step copies a whole buffer to write one slot (which TensorStridedSliceUpdate
        does inside a `tf.while_loop`: `model.buffers.write_slot`).

        Returns:
            dict `{"key", "value"}`, each zeros `(batch, num_heads, slots, depth)`, slots
            `cache_slots` compiled, else 0.
        """
        slots = cache_slots if compiled else 0
        empty = tf.zeros((batch_size, self.num_heads, slots, self.depth), self.compute_dtype)
        return {"key": empty, "value": empty}

    def call(self, v, k, q, mask=None):
        return self._attend(q, self.compute_key_value(k, v), mask)

    def attend_to_cache(self, q, cache, mask=None):
        """Attention of `q` over keys/values projected beforehand (`compute_key_value`).

        Args:
            q: `(batch, seq_len_q, d_model_q)`.
            cache: dict `{"key", "value"}`, each `(batch, num_heads, seq_len_k, depth)`.
            mask: as in `call`.

        Returns:
            `(output, attention_weights)` as `call`.
        """
        return self._attend(q, cache, mask, fused=True)

    def write_cache_and_attend(self, v, k, q, cache, cache_update_index, compiled=False):
        """Causal self-attention of new positions over a cache: projects `v`/`k`, writes them
        into the cache, and lets each new position attend to the slots up to its own.

        Args:
            v, k, q: as in `call`, the same `n` new positions each (decoding: one).
            cache: dict `{"key", "value"}` from `empty_cache` with the same `compiled`, or from
                the previous step: `(batch, num_heads, slots, depth)`.
            cache_update_index: int32 scalar, the slot of the first new position; a plain
                graph's cache holds exactly the positions before it.
            compiled: whether XLA compiles the caller. XLA needs every step to have the same
                shapes, so there the new positions are written into the fixed-size cache and a
                step attends over every slot (those not yet written masked). A plain graph's
                cache grows by the new positions, and a step attends over it whole: its cost
                grows with its position instead of being the longest output's. The results are
                the same either way.

        Returns:
            `(output, cache)`: output `(batch, n, d_model)`; the updated cache. (No attention
            weights: their width would depend on `compiled`.)
        """
        new = self.compute_key_value(k, v, fused=True)
        if compiled:
            cache = {
                name: write_slot(cache[name], new[name], cache_update_index, axis=2, compiled=True)
                for name in ("key", "value")
            }
        else:
            cache = {name: tf.concat([cache[name], new[name]], axis=2) for name in ("key", "value")}
        mask = create_cache_mask(tf.shape(cache["key"])[2], cache_update_index, tf.shape(q)[1])
        output, _ = self._attend(q, cache, mask, fused=True)
        return output, cache

    def _attend(self, q, key_value, mask, fused=False):
        """Scaled dot-product attention of the projected `q` over projected keys/values, each
        head separately, then W^O: `(output, attention_weights)`. `fused`: the decoding step's
        projections (`model.dense.apply_dense`)."""
        batch_size = tf.shape(q)[0]
        q_heads = self.split_heads(apply_dense(self.wq, q, fused), batch_size)
        scaled_attention, attention_weights = scaled_dot_product_attention(
            q_heads, key_value["key"], key_value["value"], mask
        )
        # (batch, num_heads, seq_len_q, depth) → (batch, seq_len_q, d_model): concatenate the heads.
        scaled_attention = tf.transpose(scaled_attention, perm=[0, 2, 1, 3])
        concat_attention = tf.reshape(scaled_attention, (batch_size, -1, self.d_model))
        return apply_dense(self.dense, concat_attention, fused), attention_weights

    def get_config(self):
        config = super().get_config()
        config.update({"d_model": self.d_model, "num_heads": self.num_heads})
        return config
