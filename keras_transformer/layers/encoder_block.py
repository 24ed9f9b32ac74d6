"""One encoder layer (paper §3.1): self-attention and feed-forward sub-layers."""

import keras

from keras_transformer.layers.residual_block import ResidualBlock
from keras_transformer.layers.sublayer_calls import call_sublayer


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderBlock(ResidualBlock):
    """One Transformer encoder layer: self-attention then a position-wise FFN.

    Each sub-layer is `LayerNorm(x + Dropout(Sublayer(x)))` (post-LN, the paper), or
    `x + Dropout(Sublayer(LayerNorm(x)))` with `norm_first=True` (pre-LN; put a final
    `LayerNormalization` after a pre-LN stack, as `Transformer` does).

    Args:
        num_heads: int. Attention heads (paper: 8); d_k = d_model / num_heads.
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
        x: `(batch, length, d_model)` input sequence.
        padding_mask: `(batch, length)` bool/int, `True`/1 at real tokens. When not
            given, the implicit Keras mask of `x` (e.g. from
            `PositionalEmbedding(mask_zero=True)`) is used.
        training: bool. Enables dropout.

    Returns:
        `(batch, length, d_model)`, carrying the input's Keras mask.

    Example:

    >>> import numpy as np
    >>> block = EncoderBlock(num_heads=2, ff_dim=16)
    >>> x = np.random.rand(2, 5, 8).astype("float32")
    >>> tuple(block(x, padding_mask=np.array([[1, 1, 1, 0, 0]] * 2)).shape)
    (2, 5, 8)

    References:
        Vaswani et al., "Attention Is All You Need", 2017, §3.1.
    """

    def build(self, x_shape):
        self.self_attention = self._build_attention("self_attention", x_shape, x_shape)
        self.self_attention_norm, self.self_attention_dropout = self._build_norm_and_dropout(
            "self_attention", x_shape
        )
        self._build_feed_forward(x_shape)
        self.built = True

    def call(self, x, padding_mask=None, training=None, mask=None):
        if padding_mask is None:
            padding_mask = mask  # implicit Keras mask of `x`

        def attend(y):
            return call_sublayer(
                self.self_attention, y, y, query_mask=padding_mask, value_mask=padding_mask, training=training
            )

        (x,) = self._sublayer(
            x, self.self_attention_norm, self.self_attention_dropout, attend, training
        )
        (x,) = self._sublayer(
            x, self.feed_forward_norm, self.feed_forward_dropout, self.feed_forward, training
        )
        return x

    def compute_output_shape(self, x_shape):
        return tuple(x_shape)
