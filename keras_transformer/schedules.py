"""The paper's learning-rate schedule (§5.3): linear warm-up, then inverse square root; and
the same warm-up followed by a linear decay to zero at the end of a known budget."""

import keras
from keras import ops

from keras_transformer._checks import check_int


@keras.saving.register_keras_serializable(package="keras_transformer")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """`lr = scale · d_model^-0.5 · min(step^-0.5, step · warmup_steps^-1.5)`.

    The rate grows linearly for `warmup_steps` steps, then decays with the inverse
    square root of the step. Step 0 (Keras' first update) uses step 1's rate, so no
    update is wasted and nothing divides by zero.

    Args:
        d_model: int. Model width (paper: 512).
        warmup_steps: int. Warm-up length (paper: 4000). Defaults to `4000`.
        scale: float. Multiplier of the whole schedule. Defaults to `1.0`.

    Example:

    >>> schedule = WarmupSchedule(d_model=512)
    >>> round(float(schedule(4000)), 6)
    0.000699

    References:
        Vaswani et al., "Attention Is All You Need", 2017, §5.3, equation (3).
    """

    def __init__(self, d_model, warmup_steps=4000, scale=1.0):
        if not d_model or d_model <= 0:
            raise ValueError(f"`d_model` must be > 0. Received: d_model={d_model}")
        if not warmup_steps or warmup_steps <= 0:
            raise ValueError(f"`warmup_steps` must be > 0. Received: warmup_steps={warmup_steps}")
        if scale <= 0:
            raise ValueError(f"`scale` must be > 0. Received: scale={scale}")
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, step):
        step = ops.maximum(ops.cast(step, "float32"), 1.0)
        warmup = float(self.warmup_steps)
        rate = ops.minimum(ops.rsqrt(step), step * warmup**-1.5)
        return self.scale * float(self.d_model) ** -0.5 * rate

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}


@keras.saving.register_keras_serializable(package="keras_transformer")
class WarmupLinearDecaySchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The paper's warm-up to the same peak, then a straight line to zero at `total_steps`.

    `peak = scale · d_model^-0.5 · warmup_steps^-0.5` (the peak of `WarmupSchedule` with the
    same arguments); the rate rises linearly to it over `warmup_steps` steps and then falls
    linearly to 0 at step `total_steps`, where it stays. For a run whose length is known in
    advance (a step budget), a decay to zero ends training at a rate of zero instead of the
    inverse square root's `sqrt(warmup / steps)` of the peak (Li et al., 2020, "Budgeted
    Training"). Step 0 uses step 1's rate.

    Args:
        d_model: int. Model width.
        warmup_steps: int. Warm-up length, `< total_steps`.
        total_steps: int, or a scalar `keras.Variable` holding it: the step where the rate
            reaches zero (the run's last step). A variable lets a callback move the end while
            training (a time budget's re-planned end, `training.time_limit.DecayPlan`); it
            must then be one of the optimizer's variables (`transformer_adam` makes it so) for
            JAX's compiled step to see the new value, which it does from the next epoch on.
            An end at or before the warm-up's counts as one step after it.
        scale: float. Multiplier of the whole schedule. Defaults to `1.0`.

    Example:

    >>> schedule = WarmupLinearDecaySchedule(512, warmup_steps=4000, total_steps=10000)
    >>> round(float(schedule(4000)), 6), round(float(schedule(7000)), 6), float(schedule(10000))
    (0.000699, 0.000349, 0.0)

    References:
        Li, Yumer and Ramanan, "Budgeted Training: Rethinking Deep Neural Network Training
        Under Resource Constraints", ICLR 2020.
    """

    def __init__(self, d_model, warmup_steps, total_steps, scale=1.0):
        if not d_model or d_model <= 0:
            raise ValueError(f"`d_model` must be > 0. Received: d_model={d_model}")
        check_int("warmup_steps", warmup_steps, minimum=1)
        if isinstance(total_steps, keras.Variable):
            if tuple(total_steps.shape) != ():
                raise ValueError(
                    "`total_steps` must be an int or a scalar keras.Variable. Received: "
                    f"total_steps of shape {tuple(total_steps.shape)}"
                )
        else:
            check_int("total_steps", total_steps, minimum=warmup_steps + 1)
        if scale <= 0:
            raise ValueError(f"`scale` must be > 0. Received: scale={scale}")
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.scale = scale

    def __call__(self, step):
        step = ops.maximum(ops.cast(step, "float32"), 1.0)
        warmup = float(self.warmup_steps)
        total = ops.maximum(ops.cast(self.total_steps, "float32"), warmup + 1.0)
        peak = self.scale * (float(self.d_model) * warmup) ** -0.5
        rise = step / warmup
        fall = ops.maximum(total - step, 0.0) / (total - warmup)
        return peak * ops.minimum(rise, fall)

    def get_config(self):
        return {
            "d_model": self.d_model,
            "warmup_steps": self.warmup_steps,
            "total_steps": _as_int(self.total_steps),
            "scale": self.scale,
        }


@keras.saving.register_keras_serializable(package="keras_transformer")
class AccumulatedSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """A schedule counted in optimizer updates when gradients are accumulated.

    With `gradient_accumulation_steps = k`, a Keras optimizer counts every micro-batch in its
    step variable and calls its learning-rate schedule with that count, so a warm-up of
    `warmup_steps` would end after `warmup_steps / k` updates. This wrapper gives `schedule`
    the update count instead: `schedule(step // k)`. Keras applies update `n` (counted from
    0) at micro-step `n · k + k - 1`, so update `n` uses `schedule(n)`, the rate it has
    without accumulation. (Adam's bias correction already counts updates: Keras' public
    `iterations` is the update count.)

    Args:
        schedule: `keras.optimizers.schedules.LearningRateSchedule`. The schedule in updates.
        accumulate_steps: int. Micro-batches per update (the optimizer's
            `gradient_accumulation_steps`), `>= 1`.

    Example:

    >>> schedule = AccumulatedSchedule(WarmupSchedule(d_model=512), accumulate_steps=4)
    >>> float(schedule(4 * 4000 + 3)) == float(WarmupSchedule(d_model=512)(4000))
    True
    """

    def __init__(self, schedule, accumulate_steps):
        if not isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
            raise ValueError(
                "`schedule` must be a keras.optimizers.schedules.LearningRateSchedule. "
                f"Received: schedule={schedule!r}"
            )
        check_int("accumulate_steps", accumulate_steps, minimum=1)
        self.schedule = schedule
        self.accumulate_steps = accumulate_steps

    def __call__(self, step):
        return self.schedule(ops.floor_divide(step, self.accumulate_steps))

    def get_config(self):
        return {
            "schedule": keras.saving.serialize_keras_object(self.schedule),
            "accumulate_steps": self.accumulate_steps,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["schedule"] = keras.saving.deserialize_keras_object(config["schedule"])
        return cls(**config)


def _as_int(value):
    """An int, or a variable's current value as an int (for `get_config`)."""
    if isinstance(value, keras.Variable):
        return int(round(float(ops.convert_to_numpy(value.value))))
    return value
