"""The paper's optimizer (§5.3)."""

import keras

from keras_transformer.schedules import (
    AccumulatedSchedule,
    WarmupLinearDecaySchedule,
    WarmupSchedule,
)

# The name of the optimizer variable holding a movable linear decay's end (`decay_end`).
DECAY_END = "decay_end"


def transformer_adam(
    d_model,
    warmup_steps=4000,
    scale=1.0,
    gradient_accumulation_steps=None,
    decay="inverse_sqrt",
    total_steps=None,
    movable_end=False,
    **kwargs,
):
    """Adam with β1 = 0.9, β2 = 0.98, ε = 1e-9 and the warm-up schedule.

    Args:
        d_model: int. Model width, used by the schedule.
        warmup_steps: int. Defaults to `4000`.
        scale: float. Multiplier of the schedule. Defaults to `1.0`.
        gradient_accumulation_steps: int. Micro-batches whose mean gradient makes one update
            (Keras' argument); the schedule counts updates, not micro-batches
            (`AccumulatedSchedule`). `None` or `1` updates every batch. Defaults to `None`.
        decay: str. After the warm-up, `"inverse_sqrt"` (the paper, `WarmupSchedule`) or
            `"linear"` to zero at `total_steps` (`WarmupLinearDecaySchedule`). Defaults to
            `"inverse_sqrt"`.
        total_steps: int. The update where `"linear"` reaches zero; required by it.
        movable_end: bool. With `"linear"`, hold `total_steps` in an optimizer variable
            (`decay_end(optimizer)`), so that a callback can move the end while training
            (`assign` it at an epoch's start for JAX to see it). Defaults to `False`.
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
    if decay == "inverse_sqrt":
        schedule = WarmupSchedule(d_model, warmup_steps=warmup_steps, scale=scale)
    elif decay == "linear":
        schedule = WarmupLinearDecaySchedule(d_model, warmup_steps, total_steps, scale=scale)
    else:
        raise ValueError(f"`decay` must be 'inverse_sqrt' or 'linear'. Received: decay={decay!r}")
    linear = schedule
    if steps is not None and steps > 1:
        schedule = AccumulatedSchedule(schedule, steps)
    else:
        steps = None  # Keras wants None or >= 2.
    optimizer = keras.optimizers.Adam(
        learning_rate=schedule,
        gradient_accumulation_steps=steps,
        beta_1=kwargs.pop("beta_1", 0.9),
        beta_2=kwargs.pop("beta_2", 0.98),
        epsilon=kwargs.pop("epsilon", 1e-9),
        **kwargs,
    )
    if movable_end and decay == "linear":
        # An optimizer variable: part of the state JAX's compiled step reads, and of backups.
        linear.total_steps = optimizer.add_variable(
            (),
            initializer=keras.initializers.Constant(float(total_steps)),
            dtype="float32",
            aggregation="only_first_replica",
            name=DECAY_END,
        )
    return optimizer


def decay_end(optimizer):
    """The variable holding the step where a movable linear decay ends, or `None`.

    Example:

    >>> optimizer = transformer_adam(128, 800, decay="linear", total_steps=5000, movable_end=True)
    >>> end = decay_end(optimizer)
    >>> _ = end.assign(4000.0)
    >>> float(keras.ops.convert_to_numpy(end))
    4000.0
    >>> decay_end(transformer_adam(128)) is None
    True
    """
    return next((v for v in optimizer.variables if v.name == DECAY_END), None)
