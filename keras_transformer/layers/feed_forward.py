"""Position-wise feed-forward network (paper §3.3)."""

import keras

from keras_transformer.layers.sublayer_calls import call_sublayer


@keras.saving.register_keras_serializable(package="keras_transformer")
class FeedForward(keras.layers.Layer):
    """Position-wise feed-forward network `FFN(x) = max(0, x W1 + b1) W2 + b2`.

    Args:
        ff_dim: int. Inner width (paper: 2048).
        activation: str or callable. Inner activation. Defaults to `"relu"`.
        kernel_initializer: initializer of both kernels. Defaults to `"glorot_uniform"`.
        **kwargs: base layer arguments.

    Call arguments:
        x: `(batch, length, d_model)`.

    Returns:
        `(batch, length, d_model)`.

    Example:

    >>> import numpy as np
    >>> tuple(FeedForward(ff_dim=16)(np.zeros((2, 3, 4), "float32")).shape)
    (2, 3, 4)

    References:
        Vaswani et al., "Attention Is All You Need", 2017, §3.3.
    """

    def __init__(self, ff_dim, activation="relu", kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        if not isinstance(ff_dim, int) or ff_dim < 1:
            raise ValueError(f"`ff_dim` must be a positive int. Received: ff_dim={ff_dim}")
        self.ff_dim = ff_dim
        self.activation = keras.activations.get(activation)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True

    def build(self, x_shape):
        self.inner_dense = keras.layers.Dense(
            self.ff_dim,
            activation=self.activation,
            kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy,
            name="inner",
        )
        self.inner_dense.build(x_shape)
        self.output_dense = keras.layers.Dense(
            x_shape[-1],
            kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy,
            name="output",
        )
        self.output_dense.build(tuple(x_shape[:-1]) + (self.ff_dim,))
        self.built = True

    def call(self, x):
        return call_sublayer(self.output_dense, call_sublayer(self.inner_dense, x))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "ff_dim": self.ff_dim,
                "activation": keras.activations.serialize(self.activation),
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config

    def compute_output_shape(self, x_shape):
        return tuple(x_shape)
