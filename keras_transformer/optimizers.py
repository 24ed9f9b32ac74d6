"""The paper's optimizer (§5.3)."""

import keras

from keras_transformer.schedules import AccumulatedSchedule, WarmupSchedule


def transformer_adam(d_model, warmup_steps=4000, scale=1.0, gradient_accumulation_steps=None, **kwargs):
    """Adam with β1 = 0.9, β2 = 0.98, ε = 1e-9 and the warm-up schedule.

    Args:
        d_model: int. Model width, used by the schedule.
        warmup_steps: int. Defaults to `4000`.
        scale: float. Multiplier of the schedule. Defaults to `1.0`.
        gradient_accumulation_steps: int. Micro-batches whose mean gradient makes one update
            (Keras' argument); the schedule counts updates, not micro-batches
            (`AccumulatedSchedule`). `None` or `1` updates every batch. Defaults to `None`.
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
    steps = gradient_accumulation_steps
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(
            "`gradient_accumulation_steps` must be None or an int >= 1. "
            f"Received: gradient_accumulation_steps={steps!r}"
        )
    schedule = WarmupSchedule(d_model, warmup_steps=warmup_steps, scale=scale)
    if steps is not None and steps > 1:
        schedule = AccumulatedSchedule(schedule, steps)
    else:
        steps = None  # Keras wants None or >= 2.
    return keras.optimizers.Adam(
        learning_rate=schedule,
        gradient_accumulation_steps=steps,
        beta_1=kwargs.pop("beta_1", 0.9),
        beta_2=kwargs.pop("beta_2", 0.98),
        epsilon=kwargs.pop("epsilon", 1e-9),
        **kwargs,
    )
