"""The paper's optimizer (§5.3)."""

import keras

from keras_transformer.schedules import WarmupSchedule


def transformer_adam(d_model, warmup_steps=4000, scale=1.0, **kwargs):
    """Adam with β1 = 0.9, β2 = 0.98, ε = 1e-9 and the warm-up schedule.

    Args:
        d_model: int. Model width, used by the schedule.
        warmup_steps: int. Defaults to `4000`.
        scale: float. Multiplier of the schedule. Defaults to `1.0`.
        **kwargs: other `keras.optimizers.Adam` arguments (e.g. `clipnorm`).

    Returns:
        A `keras.optimizers.Adam`.

    Example:

    >>> optimizer = transformer_adam(d_model=512)
    >>> optimizer.beta_2
    0.98

    References:
        Vaswani et al., "Attention Is All You Need", 2017, §5.3.
    """
    return keras.optimizers.Adam(
        learning_rate=WarmupSchedule(d_model, warmup_steps=warmup_steps, scale=scale),
        beta_1=kwargs.pop("beta_1", 0.9),
        beta_2=kwargs.pop("beta_2", 0.98),
        epsilon=kwargs.pop("epsilon", 1e-9),
        **kwargs,
    )
