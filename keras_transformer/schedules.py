"""The paper's learning-rate schedule (§5.3): linear warm-up, then inverse square root."""

import keras
from keras import ops


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
