"""Multi-head scaled dot-product attention (paper §3.2), with a decoding cache."""

import math

import keras
from keras import ops

from keras_transformer import _backend
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.masking import ensure_attendable, large_negative_number, merge_masks
from keras_transformer.layers.sublayer_calls import call_sublayer


def _update_cache(cache, index, heads, axis=1):
    """`cache` with `heads` written along `axis` at positions `index .. index + q_len - 1`
    (`heads` has the cache's shape but `q_len` on `axis`; a new tensor). The batch-major
    cache is `(batch, max_len, heads, dim)`, `axis=1`."""
    heads = _backend.cast_like(heads, cache)
    updated = _backend.update_cache(cache, index, heads, axis=axis)
    if updated is not None:
        return updated
    zero = ops.zeros((), "int32")
    start = [zero] * len(cache.shape)
    start[axis] = index
    return ops.slice_update(cache, start, heads)


def _attention_mask(q_len, k_len, key_mask, attention_mask, use_causal_mask, query_offset):
    """The merged boolean mask `(batch or 1, 1, q_len, k_len)`, every query row allowed at
    least one key (a causal mask alone always allows key 0)."""
    mask = merge_masks(
        q_len,
        k_len,
        key_mask=key_mask,
        attention_mask=attention_mask,
        use_causal_mask=use_causal_mask,
        query_offset=query_offset,
    )
    if key_mask is not None or attention_mask is not None or not use_causal_mask:
        mask = ensure_attendable(mask)
    return mask


def _written_keys(key_mask, max_len, index, q_len, rows):
    """`key_mask` (or none) restricted to the cache positions written so far,
    `< index + q_len`: `(rows, max_len)`."""
    written = ops.less(ops.arange(max_len, dtype="int32"), index + q_len)
    written = ops.broadcast_to(written[None], (rows, max_len))
    return written if key_mask is None else ops.logical_and(key_mask, written)


def _check_no_other_mask(key_mask, attention_mask, use_causal_mask):
    """A cache that holds the mask of its keys takes no other mask."""
    if key_mask is not None or attention_mask is not None or use_causal_mask:
        raise ValueError(
            "This `cache` holds the mask of its keys (`precompute_cache` was "
            "given `value_mask`): pass no `value_mask`, `key_mask`, "
            "`attention_mask` or `use_causal_mask` with it. Received: "
            f"value_mask/key_mask={key_mask is not None}, "
            f"attention_mask={attention_mask is not None}, "
            f"use_causal_mask={use_causal_mask}"
        )


def _cache_group(attention_mask, max_len):
    """How many consecutive cache rows each query row attends over: 1, or `group` when the
    self-attention `attention_mask` of a cached step spans `group * max_len` keys."""
    if attention_mask is None:
        return 1
    keys = attention_mask.shape[-1]
    if keys is None or int(keys) == int(max_len):
        return 1
    if int(keys) % int(max_len):
        raise ValueError(
            "With a self-attention `cache`, `attention_mask` must span the cache's "
            f"`max_len` ({max_len}) keys, or `group * max_len`. Received: "
            f"attention_mask.shape={tuple(attention_mask.shape)}"
        )
    return int(keys) // int(max_len)


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head scaled dot-product attention with an optional key/value cache.

    `Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V`, computed by `num_heads` heads in
    parallel on learned projections, concatenated and projected back to the query's
    feature size: `MultiHead(Q, K, V) = Concat(head_1..head_h) W^O`.

    When no attention dropout is active and no scores are requested, the fused
    `keras.ops.dot_product_attention` kernel is used on PyTorch and on GPUs; otherwise
    (and with TensorFlow or JAX on CPU, where Keras' version is the same
    einsum-softmax-einsum composition, measured slower) an explicit float32 softmax.

    Args:
        num_heads: int. Number of attention heads (paper: 8).
        key_dim: int. Size of each head for query and key. Defaults to the query
            feature size // `num_heads` (paper: d_k = d_model / h).
        value_dim: int. Size of each head for value. Defaults to `key_dim`.
        dropout: float. Dropout rate on the attention probabilities. Defaults to `0.0`.
        use_bias: bool. Whether the projections use biases. Defaults to `True`.
        kernel_initializer: initializer for the projection kernels. Defaults to
            `"glorot_uniform"`.
        bias_initializer: initializer for the biases. Defaults to `"zeros"`.
        seed: int. Seed of the attention dropout. Defaults to `None`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `(batch, q_len, dim)` query sequence.
        value: `(batch, v_len, dim_v)` value sequence. May be `None` when `cache`
            holds precomputed keys/values and `cache_index` is `None`.
        key: `(batch, v_len, dim_k)`, defaults to `value`.
        query_mask: `(batch, q_len)` bool, `True` at real query positions. Accepted
            (and filled from implicit masks) for Keras compatibility; padded query
            rows are computed like real ones and never influence real positions, so
            it does not restrict attention (restricting it would make padded rows
            attend nowhere, and a fallback could break causality).
        value_mask: `(batch, v_len)` bool, `True` at real value positions (the padding
            mask of the attended sequence). Filled from the implicit Keras mask.
        attention_mask: `(batch, q_len, v_len)` bool, `True` where attending is allowed.
        use_causal_mask: bool. Forbid attending to later positions.
        return_attention_scores: bool. Also return `(batch, heads, q_len, v_len)`
            attention probabilities.
        training: bool. Enables attention dropout.
        key_mask: `(batch, v_len)` bool, defaults to `value_mask`.
        cache: optional dict `{"key": (batch, max_len, heads, key_dim),
            "value": (batch, max_len, heads, value_dim)}`. With `cache_index`, the
            keys/values of the new positions are written into it at `cache_index`
            (static shapes, `slice_update`) and attention runs over the whole cache,
            masked to the positions written so far. Without `cache_index`, the cache
            holds precomputed keys/values (cross-attention) that are used as they are;
            `query` may then have `group * batch` rows, each `group` consecutive rows (the
            beams of one source in beam search) attending to one cache row; `value_mask`
            then has the cache's `batch` rows, outputs and scores the query's rows. A
            precomputed cache may also hold the mask of its keys, `"mask"` (`batch, 1, 1,
            v_len)`, from `precompute_cache(value_mask=...)`: no other mask is then passed.
            With `cache_index`, `attention_mask` may instead be `(batch, q_len, group *
            max_len)`: each `group` consecutive rows then attend over the cached keys of
            all `group` rows (key `j * max_len + p`: row `j` of the group, position `p`),
            where the mask allows, and the mask alone decides (it must itself forbid
            unwritten and later positions). Beam search uses it to read each hypothesis'
            ancestors where they were written, instead of reordering the cache.
        cache_index: int or scalar int tensor. Position of the first query token.

    Returns:
        `(batch, q_len, dim)` outputs; then the scores if `return_attention_scores`;
        then the updated cache if `cache` was given (as a tuple).

    Example:

    >>> import numpy as np
    >>> layer = MultiHeadAttention(num_heads=2)
    >>> x = np.random.rand(3, 5, 8).astype("float32")
    >>> tuple(layer(x, x, use_causal_mask=True).shape)
    (3, 5, 8)

    References:
        Vaswani et al., "Attention Is All You Need", 2017, §3.2.
    """

    def __init__(
        self,
        num_heads,
        key_dim=None,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not isinstance(num_heads, int) or num_heads < 1:
            raise ValueError(f"`num_heads` must be a positive int. Received: num_heads={num_heads}")
        for arg, val in (("key_dim", key_dim), ("value_dim", value_dim)):
            if val is not None and (not isinstance(val, int) or val < 1):
                raise ValueError(f"`{arg}` must be a positive int or None. Received: {arg}={val}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"`dropout` must be in [0, 1). Received: dropout={dropout}")
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.seed = seed
        self.supports_masking = True

    def build(self, query_shape, value_shape=None, key_shape=None):
        query_dim = query_shape[-1]
        if value_shape is None:
            value_shape = query_shape
        if key_shape is None:
            key_shape = value_shape
        if self.key_dim is None and query_dim % self.num_heads:
            raise ValueError(
                "The query feature size must be divisible by `num_heads` when `key_dim` is "
                f"not given. Received: query feature size={query_dim}, num_heads={self.num_heads}"
            )
        self._key_dim = self.key_dim or query_dim // self.num_heads
        self._value_dim = self.value_dim or self._key_dim

        def dense(units, name):
            return keras.layers.Dense(
                units,
                use_bias=self.use_bias,
                kernel_initializer=self.kernel_initializer,
                bias_initializer=self.bias_initializer,
                dtype=self.dtype_policy,
                name=name,
            )

        self.query_dense = dense(self.num_heads * self._key_dim, "query")
        self.query_dense.build(query_shape)
        self.key_dense = dense(self.num_heads * self._key_dim, "key")
        self.key_dense.build(key_shape)
        self.value_dense = dense(self.num_heads * self._value_dim, "value")
        self.value_dense.build(value_shape)
        self.output_dense = dense(query_dim, "attention_output")
        self.output_dense.build((None, None, self.num_heads * self._value_dim))
        self.dropout_layer = Dropout(
            self.dropout, seed=self.seed, dtype=self.dtype_policy, name="attention_dropout"
        )
        self.built = True

    def call(
        self,
        query,
        value=None,
        key=None,
        query_mask=None,
        value_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        key_mask=None,
        cache=None,
        cache_index=None,
    ):
        if key_mask is None:
            key_mask = value_mask
        query_heads = self._split_heads(call_sublayer(self.query_dense, query), self._key_dim)  # (b, q, h, dk)
        if cache is not None and "key_by_head" in cache:
            return self._call_by_head(
                query_heads, value, key, key_mask, attention_mask, use_causal_mask,
                return_attention_scores, training, cache, cache_index,
            )  # fmt: skip
        query_batch, q_len = _backend.dims(query)[:2]
        query_offset = 0
        grouped = False
        precomputed_mask = None
        if cache is not None and cache_index is None:
            grouped = True
            # Precomputed keys/values (cross-attention while decoding). `group` consecutive
            # query rows may share one key/value row (the beams of one example in beam
            # search): they attend as `group * q_len` queries of that row, so the keys and
            # values are neither repeated nor copied. (b * group, q, h, dk) -> (b, group * q, h, dk)
            key_heads, value_heads = cache["key"], cache["value"]
            key_batch = _backend.dims(key_heads)[0]
            query_heads = _backend.reshape(query_heads, (key_batch, -1, self.num_heads, self._key_dim))
            q_len = _backend.dims(query_heads)[1]
            if attention_mask is not None:
                attention_mask = _backend.reshape(attention_mask, (key_batch, q_len, -1))
            if "mask" in cache:
                # The mask of the keys, merged once by `precompute_cache(value_mask=...)`.
                _check_no_other_mask(key_mask, attention_mask, use_causal_mask)
                precomputed_mask = cache["mask"]
        else:
            if value is None:
                raise ValueError("`value` is required unless a precomputed `cache` is given.")
            if key is None:
                key = value
            key_heads = self._split_heads(call_sublayer(self.key_dense, key), self._key_dim)  # (b, k, h, dk)
            value_heads = self._split_heads(call_sublayer(self.value_dense, value), self._value_dim)
            if cache is not None:
                index = ops.cast(cache_index, "int32")
                key_heads = _update_cache(cache["key"], index, key_heads)
                value_heads = _update_cache(cache["value"], index, value_heads)
                cache = {"key": key_heads, "value": value_heads}
                query_offset = index
                max_len = _backend.dims(key_heads)[1]
                group = _cache_group(attention_mask, max_len)
                if group > 1:
                    # Each `group` consecutive rows (the slots of one source in beam search)
                    # attend over all their cached keys/values, as `group * q_len` queries
                    # of one row of `group * max_len` keys; `attention_mask` picks each
                    # query's own (causal, written) keys, so the cache is never reordered.
                    grouped = True
                    key_heads = _backend.reshape(
                        key_heads, (-1, group * max_len, self.num_heads, self._key_dim)
                    )
                    value_heads = _backend.reshape(
                        value_heads, (-1, group * max_len, self.num_heads, self._value_dim)
                    )
                    query_heads = _backend.reshape(
                        query_heads, (-1, group * q_len, self.num_heads, self._key_dim)
                    )
                    attention_mask = _backend.reshape(
                        attention_mask, (-1, group * q_len, group * max_len)
                    )
                    q_len = group * q_len
                    use_causal_mask, key_mask = False, None
                elif not use_causal_mask:
                    # Only positions written so far are valid keys (the causal mask, which
                    # allows keys up to index + q_len - 1, implies it).
                    key_mask = _written_keys(key_mask, max_len, index, q_len, query_batch)
        k_len = _backend.dims(key_heads)[1]
        if precomputed_mask is not None:
            mask = precomputed_mask  # (batch, 1, 1, k_len)
        else:
            mask = _attention_mask(
                q_len, k_len, key_mask, attention_mask, use_causal_mask, query_offset
            )  # (batch or 1, 1, q_len, k_len)
        use_dropout = bool(training) and self.dropout > 0
        scores = None
        # The fused kernels need equal key and value head sizes on some backends.
        explicit = return_attention_scores or use_dropout or self._key_dim != self._value_dim
        if explicit or not _backend.use_fused_attention():
            outputs, scores = self._explicit_attention(
                query_heads, key_heads, value_heads, mask, training
            )
        else:
            outputs = ops.dot_product_attention(
                query_heads,
                _backend.cast_like(key_heads, query_heads),
                _backend.cast_like(value_heads, query_heads),
                mask=mask,
                scale=1.0 / math.sqrt(self._key_dim),
            )  # (batch, q_len, heads, value_dim)
        if grouped:  # (b, group * q, h, dv) -> (b * group, q, h, dv)
            q_len = _backend.dims(query)[1]
            outputs = _backend.reshape(outputs, (query_batch, q_len, self.num_heads, self._value_dim))
        batch = _backend.dims(outputs)[0]
        outputs = _backend.reshape(outputs, (batch, q_len, self.num_heads * self._value_dim))
        outputs = call_sublayer(self.output_dense, outputs)  # (batch, q_len, query_dim)
        results = (outputs,)
        if return_attention_scores:
            if grouped:
                # Grouped rows back apart: (b, h, group * q, k) -> (b * group, h, q, k).
                shape = (_backend.dims(scores)[0], self.num_heads, -1, _backend.dims(query)[1], k_len)
                scores = ops.transpose(_backend.reshape(scores, shape), (0, 2, 1, 3, 4))
                scores = _backend.reshape(scores, (query_batch, self.num_heads, -1, k_len))
            results += (scores,)
        if cache is not None:
            results += (cache,)
        return results[0] if len(results) == 1 else results

    def _split_heads(self, x, head_dim):
        shape = _backend.dims(x)
        return _backend.reshape(x, (shape[0], shape[1], self.num_heads, head_dim))

    def _explicit_attention(self, query_heads, key_heads, value_heads, mask, training):
        scale = 1.0 / math.sqrt(self._key_dim)
        key_heads = _backend.cast_like(key_heads, query_heads)
        value_heads = _backend.cast_like(value_heads, query_heads)
        # Softmax in float32 for stability under mixed precision.
        logits = ops.einsum("bqhd,bkhd->bhqk", query_heads, key_heads)  # (b, h, q, k)
        logits = ops.cast(logits, "float32") * scale
        if mask is not None:
            logits = ops.where(mask, logits, large_negative_number("float32"))
        probs = ops.softmax(logits, axis=-1)
        probs = ops.cast(probs, query_heads.dtype)
        dropped = call_sublayer(self.dropout_layer, probs, training=training)
        outputs = ops.einsum("bhqk,bkhd->bqhd", dropped, value_heads)  # (b, q, h, dv)
        return outputs, probs

    def _call_by_head(
        self,
        query_heads,
        value,
        key,
        key_mask,
        attention_mask,
        use_causal_mask,
        return_attention_scores,
        training,
        cache,
        cache_index,
    ):
        """`call` with a cache in the decoding layout (`init_cache(group=...)`,
        `precompute_cache(by_head=True)`): keys `(heads, batch, key_dim, group * max_len)`,
        values `(heads, batch, group * max_len, value_dim)`, key `j * max_len + p` being
        position `p` of row `j` of the group (`init_cache`'s `"group"`, `(group,)`, says how
        many rows; a precomputed cache is shared by any number).

        Batched matrix products want their batch dimensions first and, for the keys, the
        contracted `key_dim` before the positions: in this layout the cache is read as it
        is, where the batch-major one is transposed (copied) by every step (TensorFlow's
        XLA spent 40 % of a Bible beam-search step on those copies). The rows of a group
        (the beams of one source) share one cache row, whose `group * max_len` keys all of
        them attend over, masked. A step writes each row's new key and value with its own
        in-place update (`group` of them): one update of a reshaped view was fused twice by
        XLA, copying the cache."""
        query_rows, q_len = _backend.dims(query_heads)[:2]
        heads, key_dim, value_dim = self.num_heads, self._key_dim, self._value_dim
        keys, values = cache["key_by_head"], cache["value_by_head"]
        batch, k_len = _backend.dims(values)[1:3]
        new_cache, query_offset = None, 0
        if cache_index is not None:
            group = int(cache["group"].shape[0])  # static, whatever the batch size
            if value is None:
                raise ValueError("`value` is required with `cache_index`.")
            key = value if key is None else key
            key_rows = self._split_heads(call_sublayer(self.key_dense, key), key_dim)
            value_rows = self._split_heads(call_sublayer(self.value_dense, value), value_dim)
            max_len = k_len // group
            if group != _cache_group(attention_mask, max_len):
                raise ValueError(
                    f"This cache holds {group} rows per source: `attention_mask` must span "
                    f"{group} * max_len = {k_len} keys. Received: attention_mask.shape="
                    f"{None if attention_mask is None else tuple(attention_mask.shape)}"
                )
            index = ops.cast(cache_index, "int32")
            # (batch * group, q, h, d) -> per row j of the group, keys (h, batch, d, q) and
            # values (h, batch, q, d), written at positions j * max_len + index ...
            key_rows = _backend.reshape(key_rows, (batch, group, q_len, heads, key_dim))
            value_rows = _backend.reshape(value_rows, (batch, group, q_len, heads, value_dim))
            # PyTorch: one index_copy per tensor.
            updated = _backend.write_group_positions((keys, values), index, max_len, (key_rows, value_rows))
            if updated is not None:
                keys, values = updated
            for row in range(group if updated is None else 0):
                start = index + row * max_len
                keys = _update_cache(keys, start, ops.transpose(key_rows[:, row], (2, 0, 3, 1)), axis=3)
                values = _update_cache(
                    values, start, ops.transpose(value_rows[:, row], (2, 0, 1, 3)), axis=2
                )
            new_cache = {"key_by_head": keys, "value_by_head": values, "group": cache["group"]}
            if group > 1:  # The group mask alone decides (it forbids later positions).
                use_causal_mask, key_mask = False, None
            elif not use_causal_mask:
                key_mask = _written_keys(key_mask, max_len, index, q_len, query_rows)
            query_offset = index
        # The queries of a cache row's `group` rows together: (h, batch, group * q, dk).
        queries = _backend.reshape(query_heads, (batch, -1, heads, key_dim))
        rows_q = _backend.dims(queries)[1]
        queries = ops.transpose(queries, (2, 0, 1, 3))
        if "mask" in cache:
            _check_no_other_mask(key_mask, attention_mask, use_causal_mask)
            mask = cache["mask"]  # (batch, 1, 1, k_len)
        else:
            if attention_mask is not None:
                attention_mask = _backend.reshape(attention_mask, (batch, rows_q, k_len))
            mask = _attention_mask(
                rows_q, k_len, key_mask, attention_mask, use_causal_mask, query_offset
            )
        # (batch or 1, 1, q, k) -> (1, batch or 1, q, k): a reshape, the heads axis has size 1.
        mask = _backend.reshape(mask, (1, -1, *_backend.dims(mask)[2:]))
        scale = 1.0 / math.sqrt(key_dim)
        logits = ops.matmul(queries, _backend.cast_like(keys, queries))  # (h, batch, gq, k)
        logits = ops.where(mask, ops.cast(logits, "float32") * scale, large_negative_number("float32"))
        probs = ops.cast(ops.softmax(logits, axis=-1), queries.dtype)
        dropped = call_sublayer(self.dropout_layer, probs, training=training)
        outputs = ops.matmul(dropped, _backend.cast_like(values, queries))  # (h, batch, gq, dv)
        outputs = ops.transpose(outputs, (1, 2, 0, 3))  # (batch, gq, h, dv)
        outputs = _backend.reshape(outputs, (query_rows, q_len, heads * value_dim))
        results = (call_sublayer(self.output_dense, outputs),)
        if return_attention_scores:
            # (h, batch, group * q, k) -> (batch * group, h, q, k)
            scores = _backend.reshape(probs, (heads, query_rows, q_len, k_len))
            results += (ops.transpose(scores, (1, 0, 2, 3)),)
        results += (cache if new_cache is None else new_cache,)  # as the batch-major path
        return results

    def init_cache(self, batch_size, max_length, dtype=None, group=None):
        """Zero self-attention cache of `max_length` positions.

        Args:
            batch_size: int. Rows of the cache (sources, with `group`).
            max_length: int. Positions.
            dtype: the cache's dtype. Defaults to the layer's compute dtype.
            group: optional int `>= 1`. Defaults to `None`: the batch-major cache
                `{"key", "value"}`, `(batch_size, max_length, heads, dim)`. An int asks for
                the decoding layout, `{"key_by_head": (heads, batch_size, key_dim, group *
                max_length), "value_by_head": (heads, batch_size, group * max_length,
                value_dim), "group": (group,)}` (row `j` of a group at keys `j *
                max_length ...`; `group` only holds its size, statically), which a
                step reads without a transpose: `batch_size * group` query rows, each `group` consecutive ones (the beams of one source, with an
                `attention_mask` of `group * max_length` keys) sharing a cache row.
        """
        dtype = dtype or self.compute_dtype
        heads = self.num_heads
        if group is not None:
            return {
                "key_by_head": ops.zeros((heads, batch_size, self._key_dim, group * max_length), dtype),
                "value_by_head": ops.zeros(
                    (heads, batch_size, group * max_length, self._value_dim), dtype
                ),
                # Its static length is the group size, which a step cannot always infer
                # (a SavedModel's batch size is not known when it is traced).
                "group": ops.zeros((group,), "int32"),
            }
        return {
            "key": ops.zeros((batch_size, max_length, heads, self._key_dim), dtype),
            "value": ops.zeros((batch_size, max_length, heads, self._value_dim), dtype),
        }

    def precompute_cache(self, value, key=None, value_mask=None, by_head=False):
        """Projects `value` (and `key`) once into a cache for cross-attention.

        Args:
            value: `(batch, v_len, dim_v)` value sequence.
            key: `(batch, v_len, dim_k)`. Defaults to `value`.
            value_mask: optional `(batch, v_len)` bool, `True` at real value positions. The
                cache then also holds the attention mask built from it (`"mask"`), which
                calls with this cache use instead of rebuilding it each decoding step (they
                must then pass no `value_mask`). Defaults to `None`.
            by_head: bool. The decoding layout of `init_cache(group=...)`:
                `"key_by_head"` `(heads, batch, key_dim, v_len)`, `"value_by_head"`
                `(heads, batch, v_len, value_dim)`; queries may then have `group * batch`
                rows. Defaults to `False`.

        Returns:
            `{"key": (batch, v_len, heads, key_dim), "value": (batch, v_len, heads,
            value_dim)}` (or the `by_head` layout), and `"mask"`: bool `(batch, 1, 1,
            v_len)` with `value_mask`.
        """
        key = value if key is None else key
        keys = self._split_heads(self.key_dense(key), self._key_dim)
        values = self._split_heads(self.value_dense(value), self._value_dim)
        if by_head:
            cache = {
                "key_by_head": ops.transpose(keys, (2, 0, 3, 1)),
                "value_by_head": ops.transpose(values, (2, 0, 1, 3)),
            }
        else:
            cache = {"key": keys, "value": values}
        if value_mask is not None:
            v_len = _backend.dims(keys)[1]
            cache["mask"] = ensure_attendable(merge_masks(1, v_len, key_mask=value_mask))
        return cache

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "seed": self.seed,
            }
        )
        return config
