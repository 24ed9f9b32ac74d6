"""The paper's learning-rate schedule (§5.3): linear warm-up, then inverse square root."""

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
