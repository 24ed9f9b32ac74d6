"""The base of `EncoderBlock` and `DecoderBlock`: their shared constructor, sub-layer wiring
and configuration (not a layer to use on its own)."""

import functools

import keras

from keras_transformer.hyperparameters import validate_block_args
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.multi_head_attention import MultiHeadAttention
from keras_transformer.layers.sublayer_calls import call_sublayer


class ResidualBlock(keras.layers.Layer):
    """Shared constructor, sub-layer wiring and config of encoder and decoder blocks."""

    def __init__(
        self,
        num_heads,
        ff_dim,
        dropout=0.1,
        attention_dropout=0.0,
        activation="relu",
        norm_first=False,
        layer_norm_epsilon=1e-6,
        kernel_initializer="glorot_uniform",
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        validate_block_args(num_heads, ff_dim, dropout, attention_dropout, layer_norm_epsilon)
        self.num_heads = num_heads
        self.ff_dim = ff_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation = keras.activations.get(activation)
        self.norm_first = norm_first
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.seed = seed
        self.supports_masking = True

    def _build_attention(self, name, query_shape, value_shape):
        attention = MultiHeadAttention(
            num_heads=self.num_heads,
            dropout=self.attention_dropout,
            kernel_initializer=self.kernel_initializer,
            seed=self.seed,
            dtype=self.dtype_policy,
            name=name,
        )
        attention.build(query_shape, value_shape)
        return attention

    def _build_norm_and_dropout(self, name, x_shape):
        norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=f"{name}_norm"
        )
        norm.build(x_shape)
        dropout = Dropout(
            self.dropout, seed=self.seed, dtype=self.dtype_policy, name=f"{name}_dropout"
        )
        return norm, dropout

    def _build_feed_forward(self, x_shape):
        self.feed_forward = FeedForward(
            self.ff_dim,
            activation=self.activation,
            kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy,
            name="feed_forward",
        )
        self.feed_forward.build(x_shape)
        self.feed_forward_norm, self.feed_forward_dropout = self._build_norm_and_dropout(
            "feed_forward", x_shape
        )

    def _sublayer(self, x, norm, dropout, sublayer, training):
        """Post-LN: `LayerNorm(x + Dropout(Sublayer(x)))`; pre-LN: `x + Dropout(Sublayer(LayerNorm(x)))`.

        `sublayer` returns either the output or a tuple `(output, *extras)`; extras
        (attention scores, caches) are passed through.
        """
        if isinstance(sublayer, keras.layers.Layer):
            sublayer = functools.partial(call_sublayer, sublayer)
        result = sublayer(call_sublayer(norm, x) if self.norm_first else x)
        outputs, extras = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
        x = x + call_sublayer(dropout, outputs, training=training)
        if not self.norm_first:
            x = call_sublayer(norm, x)
        return (x, *extras)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "ff_dim": self.ff_dim,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "activation": keras.activations.serialize(self.activation),
                "norm_first": self.norm_first,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "seed": self.seed,
            }
        )
        return config
