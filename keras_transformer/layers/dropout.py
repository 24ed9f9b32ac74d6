"""Dropout with faster random bits on TensorFlow + XLA, JAX and seeded PyTorch (paper §5.4)."""

import keras

from keras_transformer import _backend


@keras.saving.register_keras_serializable(package="keras_transformer")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` with faster masks (TensorFlow + XLA, JAX, seeded PyTorch).

    The distribution is Keras' own: each element is kept with probability `1 - rate`
    and scaled by `1 / (1 - rate)`; the seed comes from the layer's `SeedGenerator`,
    so restoring its state replays the same masks. Only the bit generator differs:

    - inside an XLA-compiled TensorFlow function (`jit_compile=True`), ThreeFry instead
      of the Philox of Keras' `stateless_dropout`, which XLA expands on CPU into 64-bit
      multiplies that vectorize poorly;
    - on JAX, XLA's own ThreeFry generator (`jax.lax.rng_bit_generator`) instead of
      `jax.random.bernoulli`, which builds ThreeFry out of generic HLO operations.
    Both compare 32 random bits with `rate · 2³²` (Keras compares a float32 uniform with
    `rate`: the same probability, to 2⁻²³). On PyTorch a layer given a `seed` makes one
    seeded in-place Bernoulli draw instead of Keras' seeded path (a filled probability
    tensor, a draw from it and a select); unseeded layers keep Keras'
    `torch.nn.functional.dropout`. Eager and graph TensorFlow (whose CPU kernels lack
    ThreeFry) use Keras' implementation. `benchmarks/results/train_throughput_history.md` has the
    timings.

    Args:
        rate: float in [0, 1). Fraction of the inputs to drop.
        noise_shape: optional shape of the binary mask (broadcast over the inputs).
        seed: int. Seed of the mask. Defaults to `None`.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: a float tensor of any shape.
        training: bool. Drop only when `True`.

    Returns:
        A tensor of the shape and dtype of `inputs`.

    Example:

    >>> import numpy as np
    >>> layer = Dropout(0.5, seed=1)
    >>> tuple(layer(np.ones((2, 3), "float32"), training=True).shape)
    (2, 3)
    """

    def call(self, inputs, training=False):
        if training and self.rate > 0 and self.noise_shape is None:
            outputs = _backend.dropout(
                inputs, self.rate, self.seed_generator, seeded=self.seed is not None
            )
            if outputs is not None:
                return outputs
        return super().call(inputs, training=training)
