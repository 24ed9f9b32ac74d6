"""`[optimizer]`: Adam and the learning-rate schedule (paper §5.3)."""

import dataclasses

# `optimizer.decay`: the learning rate after the warm-up.
DECAYS = ("inverse_sqrt", "linear")


@dataclasses.dataclass
class OptimizerConfig:
    """`[optimizer]`: Adam and the learning-rate schedule (paper §5.3).

    `lr = learning_rate_scale · d_model^-0.5 · min(step^-0.5, step · warmup_steps^-1.5)`.

    Args:
        beta_1: float. Defaults to `0.9`.
        beta_2: float. Defaults to `0.98`.
        epsilon: float. Defaults to `1e-9`.
        warmup_steps: int. Defaults to `4000`.
        learning_rate_scale: float. Multiplier of the schedule. Defaults to `1.0`.
        clipnorm: float. Clip each gradient to this norm; `0` does not clip (the paper does
            not). Defaults to `0.0`.
        decay: str. After the warm-up: `"inverse_sqrt"` (the paper's `step^-0.5`) or
            `"linear"`, a straight line from the same peak to zero at the run's last step:
            `training.train_steps`, or with a time budget the step where the time runs out,
            planned again at each epoch's start from the step rate measured
            (`training.time_limit.DecayPlan`). Defaults to `"inverse_sqrt"`.
    """

    beta_1: float = dataclasses.field(default=0.9, metadata={"min": 0, "below": 1})
    beta_2: float = dataclasses.field(default=0.98, metadata={"min": 0, "below": 1})
    epsilon: float = dataclasses.field(default=1e-9, metadata={"above": 0})
    warmup_steps: int = dataclasses.field(default=4000, metadata={"min": 1})
    learning_rate_scale: float = dataclasses.field(default=1.0, metadata={"min": 0})
    clipnorm: float = dataclasses.field(default=0.0, metadata={"min": 0})
    decay: str = dataclasses.field(default="inverse_sqrt", metadata={"choices": DECAYS})
