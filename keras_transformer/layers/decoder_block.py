"""One decoder layer (paper §3.1): causal self-attention, cross-attention, feed-forward."""

import keras

from keras_transformer.layers.residual_block import ResidualBlock
from keras_transformer.layers.sublayer_calls import call_sublayer


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderBlock(ResidualBlock):
    """One Transformer decoder layer with an optional decoding cache.

    Three sub-layers, each `LayerNorm(x + Dropout(Sublayer(x)))` (post-LN) or
    `x + Dropout(Sublayer(LayerNorm(x)))` (`norm_first=True`): causal self-attention
    (position i sees positions ≤ i), cross-attention over `context` masked with the
    *encoder's* padding mask, and a position-wise FFN.

    Args:
        num_heads: int. Attention heads (paper: 8).
        ff_dim: int. Inner FFN width (paper: 2048).
        dropout: float. Dropout on each sub-layer output. Defaults to `0.1`.
        attention_dropout: float. Dropout on attention probabilities. Defaults to `0.0`.
        activation: str or callable. FFN activation. Defaults to `"relu"`.
        norm_first: bool. Pre-LN instead of the paper's post-LN. Defaults to `False`.
        layer_norm_epsilon: float. Defaults to `1e-6`.
        kernel_initializer: initializer of all kernels. Defaults to `"glorot_uniform"`.
        seed: int. Dropout seed. Defaults to `None`.
        **kwargs: base layer arguments.

    Call arguments:
        x: `(batch, target_length, d_model)` decoder sequence.
        context: `(batch, source_length, d_model)` encoder outputs. May be `None`
            when `cache` holds the precomputed cross-attention keys/values.
        padding_mask: `(batch, target_length)`, `True` at real target tokens. Defaults
            to the implicit Keras mask of `x`.
        context_padding_mask: `(batch, source_length)`, `True` at real source tokens
            (the encoder's padding mask). Defaults to the implicit Keras mask of
            `context`.
        training: bool. Enables dropout.
        return_attention_scores: bool. Also return the cross-attention probabilities
            `(batch, heads, target_length, source_length)`.
        cache: optional dict `{"self": {"key", "value"}, "cross": {"key", "value"}}`
            from `init_cache`, for step-by-step decoding.
        cache_index: int or scalar tensor. Position of the first token of `x` while
            decoding with `cache`.
        self_attention_mask: optional bool `(batch, target_length, keys)`, `True` where the
            self-attention may attend, on top of the causal and padding masks; while
            decoding with `cache`, `keys` may be `group * max_length` (see
            `MultiHeadAttention`'s `attention_mask`: beam search's slots). Defaults to
            `None`.

    Returns:
        `(batch, target_length, d_model)`; then the cross-attention scores if
        requested; then the updated cache if `cache` was given (as a tuple).

    Example:

    >>> import numpy as np
    >>> block = DecoderBlock(num_heads=2, ff_dim=16)
    >>> x = np.random.rand(2, 4, 8).astype("float32")
    >>> context = np.random.rand(2, 6, 8).astype("float32")
    >>> y, scores = block(x, context, return_attention_scores=True)
    >>> tuple(y.shape), tuple(scores.shape)
    ((2, 4, 8), (2, 2, 4, 6))

    References:
        Vaswani et al., "Attention Is All You Need", 2017, §3.1 and §3.2.3.
    """

    def build(self, x_shape, context_shape=None):
        context_shape = x_shape if context_shape is None else context_shape
        self.self_attention = self._build_attention("self_attention", x_shape, x_shape)
        self.self_attention_norm, self.self_attention_dropout = self._build_norm_and_dropout(
            "self_attention", x_shape
        )
        self.cross_attention = self._build_attention("cross_attention", x_shape, context_shape)
        self.cross_attention_norm, self.cross_attention_dropout = self._build_norm_and_dropout(
            "cross_attention", x_shape
        )
        self._build_feed_forward(x_shape)
        self.built = True

    def call(
        self,
        x,
        context=None,
        padding_mask=None,
        context_padding_mask=None,
        training=None,
        return_attention_scores=False,
        cache=None,
        cache_index=None,
        self_attention_mask=None,
        x_mask=None,
        context_mask=None,
    ):
        # `x_mask` / `context_mask` are filled by Keras from implicit masks.
        padding_mask = x_mask if padding_mask is None else padding_mask
        context_padding_mask = context_mask if context_padding_mask is None else context_padding_mask
        if cache is not None and cache_index is None:
            raise ValueError("`cache_index` is required when `cache` is given.")

        def self_attend(y):
            return call_sublayer(
                self.self_attention,
                y,
                y,
                query_mask=padding_mask,
                value_mask=padding_mask,
                attention_mask=self_attention_mask,
                use_causal_mask=True,
                training=training,
                cache=None if cache is None else cache["self"],
                cache_index=cache_index,
            )

        cross_cache = None if cache is None else cache["cross"]
        if cross_cache is not None and "mask" in cross_cache:
            context_padding_mask = None  # merged into the cache by `init_cache`

        def cross_attend(y):
            return call_sublayer(
                self.cross_attention,
                y,
                context,
                query_mask=padding_mask,
                value_mask=context_padding_mask,
                return_attention_scores=return_attention_scores,
                training=training,
                cache=cross_cache,
            )

        x, *self_cache = self._sublayer(
            x, self.self_attention_norm, self.self_attention_dropout, self_attend, training
        )
        x, *cross_extras = self._sublayer(
            x, self.cross_attention_norm, self.cross_attention_dropout, cross_attend, training
        )
        (x,) = self._sublayer(
            x, self.feed_forward_norm, self.feed_forward_dropout, self.feed_forward, training
        )
        results = (x,)
        if return_attention_scores:
            results += (cross_extras[0],)
        if cache is not None:
            results += ({"self": self_cache[0], "cross": cache["cross"]},)
        return results[0] if len(results) == 1 else results

    def init_cache(self, context, max_length, context_padding_mask=None, group=None):
        """Decoding cache: empty self-attention keys/values of `max_length` positions and
        the cross-attention keys/values of `context`, computed once.

        With `context_padding_mask` (`(batch, context_length)`, `True` at real positions),
        the cross-attention mask is also built once and kept in the cache: calls with this
        cache then ignore `context_padding_mask` (the cache's mask is the same one).

        With `group` (an int), both caches take `MultiHeadAttention`'s decoding layout
        (`init_cache(group=...)`, `precompute_cache(by_head=True)`), which steps read without
        a transpose: the self-attention cache holds `group` rows per source (the beams of
        beam search, consecutive, with a `group * max_length` self-attention mask).
        """
        batch_size = keras.ops.shape(context)[0]
        return {
            "self": self.self_attention.init_cache(batch_size, max_length, group=group),
            "cross": self.cross_attention.precompute_cache(
                context, value_mask=context_padding_mask, by_head=group is not None
            ),
        }
