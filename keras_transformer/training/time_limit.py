"""Stop training cleanly when a wall-clock budget is spent."""

import logging
import time

import keras

from keras_transformer._checks import check_number
from keras_transformer.training.recipe import checkpoint_spacing
from keras_transformer.training.strategy import (
    all_processes_agree,
    broadcast_from_first,
    process_count,
)

logger = logging.getLogger("keras_transformer")


class TimeLimit(keras.callbacks.Callback):
    """Sets `model.stop_training` after the step during which the time budget ran out.

    `fit` then ends normally: the current epoch's end-of-epoch callbacks run and
    `on_train_end` follows, so checkpoints and backups are written as usual. With several JAX
    processes, process 0's clock decides and all processes stop at the same step.

    Args:
        minutes: float. The budget, `> 0`.
        start_time: float. `time.monotonic()` value the budget counts from. Defaults to
            `None`: the first `on_train_begin`.
        check_every: int. With several processes, steps between (collective) checks.
            Defaults to `10`.

    Attributes:
        stopped: bool. Whether the budget stopped training.

    Example:

    >>> import numpy as np
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", "mse")
    >>> limit = TimeLimit(minutes=1e-9)
    >>> history = model.fit(np.ones((8, 2)), np.ones((8, 1)), batch_size=2, epochs=5,
    ...                     verbose=0, callbacks=[limit])
    >>> limit.stopped, len(history.history["loss"])
    (True, 1)
    """

    def __init__(self, minutes, start_time=None, check_every=10):
        super().__init__()
        check_number("minutes", minutes, minimum=0, strict=True)
        self.minutes = float(minutes)
        self.start_time = start_time
        self.check_every = check_every
        self.stopped = False
        self._batches = 0
        self._multi_process = False

    @property
    def deadline(self):
        return None if self.start_time is None else self.start_time + 60.0 * self.minutes

    def remaining_seconds(self):
        """Seconds left in the budget (negative once spent)."""
        start = time.monotonic() if self.start_time is None else self.start_time
        return start + 60.0 * self.minutes - time.monotonic()

    def on_train_begin(self, logs=None):
        if self.start_time is None:
            self.start_time = time.monotonic()
        self._multi_process = process_count() > 1

    def on_train_batch_end(self, batch, logs=None):
        self._batches += 1
        if self._multi_process:
            if self._batches % self.check_every:
                return
            spent = all_processes_agree(time.monotonic() >= self.deadline)
        else:
            spent = time.monotonic() >= self.deadline
        if spent:
            self.stopped = True
            self.model.stop_training = True
            # Not a warning: the trainer reports the stop, and at the end whether the run
            # reached its goal or how to continue (`verdict.run_verdict`).
            logger.info("Time budget of %g minutes spent: stopping training.", self.minutes)


class StepRateForecast(keras.callbacks.Callback):
    """Measures the step rate once and says when the run will take far longer than its budget.

    The first `skip` steps (compilation) are not timed; after `measure` more steps, the time
    the remaining steps take at that rate is compared with the time budget (`minutes`), or,
    without a budget, with `hours` hours. Far beyond it, one line goes to `report`: the rate,
    the projected time, and what to change (`training.minutes`, `training.train_steps`).

    Args:
        train_steps: int. The step the run trains to.
        step_counter: an object whose `step` attribute is the run's optimizer step (the
            backup callback).
        report: callable, str -> None. Where the line goes.
        time_limit: `TimeLimit` or `None`. The budget.
        hours: float. Without a budget, the projected time worth a warning. Defaults to `1`.
        steps_named: bool. Whether the config names `train_steps`. A time budget with
            `train_steps` left at its default is a run that trains until the time is spent:
            the line is then a forecast (`forecast: the time budget ... stops the run near
            step N`), not a note to lower `train_steps`. Defaults to `True`.
        skip: int. Steps not timed. Defaults to `2`.
        measure: int. Steps timed. Defaults to `10`.

    Attributes:
        message: str or `None`. The line reported.

    Example:

    >>> class Counter:
    ...     step = 0
    >>> lines = []
    >>> forecast = StepRateForecast(10**9, Counter(), lines.append, skip=0, measure=1)
    >>> forecast.forecast(seconds_per_step=0.5, step=1)
    >>> lines[0].split(";")[0]
    'note: at the measured 0.50 s per step, the 999,999,999 steps left take about 15.8 years'
    """

    def __init__(
        self, train_steps, step_counter, report, time_limit=None, hours=1.0, steps_named=True,
        skip=2, measure=10,
    ):
        super().__init__()
        self.train_steps = train_steps
        self.steps_named = steps_named
        self.step_counter = step_counter
        self.report = report
        self.time_limit = time_limit
        self.hours = hours
        self.skip = skip
        self.measure = measure
        self.message = None
        self._batches = 0
        self._start = None

    def on_train_begin(self, logs=None):
        if self.skip == 0 and self._start is None:
            self._start = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        self._batches += 1
        if self._batches == self.skip:
            self._start = time.monotonic()
        elif self._batches == self.skip + self.measure and self._start is not None:
            if self.message is None:
                rate = (time.monotonic() - self._start) / self.measure
                self.forecast(rate, self.step_counter.step)

    def forecast(self, seconds_per_step, step):
        """Reports (once) when `train_steps - step` steps at `seconds_per_step` overrun."""
        left = self.train_steps - step
        projected = left * seconds_per_step
        head = (
            f"at the measured {seconds_per_step:.2f} s per step, the {left:,} steps left take "
            f"about {_duration(projected)}"
        )
        if self.time_limit is not None:
            budget = self.time_limit.remaining_seconds()
            if projected <= 2 * max(budget, 0.0):
                return
            reachable = step + int(max(budget, 0.0) / seconds_per_step)
            if not self.steps_named:  # Trains until the time is spent, as the config says.
                self.message = (
                    f"the time budget (training.minutes = {self.time_limit.minutes:g}) stops "
                    f"the run near step {reachable:,}, at the measured {seconds_per_step:.2f} s "
                    "per step"
                )
                self.report(f"forecast: {self.message}")
                return
            self.message = (
                f"{head}; the time budget (training.minutes = {self.time_limit.minutes:g}) stops "
                f"the run near step {reachable:,} of {self.train_steps:,}: that is fine if "
                "intended; otherwise lower training.train_steps (the learning-rate schedule and "
                "checkpoint averaging count on reaching it) or raise training.minutes"
            )
        else:
            if projected <= 3600 * self.hours:
                return
            self.message = (
                f"{head}; set a time budget (training.minutes, --minutes) or fewer "
                "training.train_steps, or use a GPU"
            )
        self.report(f"note: {self.message}")


def _duration(seconds):
    """A readable duration: `'42 s'`, `'12 min'`, `'3.5 h'`, `'2.1 days'`, `'15.9 years'`."""
    for unit, size in (("years", 365.25 * 86400), ("days", 86400), ("h", 3600)):
        if seconds >= 2 * size if unit != "h" else seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


class _BudgetPlan(keras.callbacks.Callback):
    """Re-plans, at the start of each epoch after the first, from the step the time budget
    will reach: the step rate of the epoch before (its end-of-epoch work included, which
    recurs) and the budget's remaining seconds. Subclasses define `replan`.

    Args:
        time_limit: `TimeLimit`. The budget.
        step_counter: an object whose `step` attribute is the run's optimizer step (the
            backup callback).
        train_steps: int. The step budget, an upper bound for the reachable step.
    """

    def __init__(self, time_limit, step_counter, train_steps):
        super().__init__()
        self.time_limit = time_limit
        self.step_counter = step_counter
        self.train_steps = train_steps
        self.plans = []
        self._mark = None

    def on_epoch_begin(self, epoch, logs=None):
        now, step = time.monotonic(), self.step_counter.step
        if self._mark is not None and step > self._mark[1]:
            rate = (now - self._mark[0]) / (step - self._mark[1])
            self.replan(step, rate, self.time_limit.remaining_seconds())
        self._mark = (now, step)

    def reachable(self, step, seconds_per_step, remaining_seconds):
        """The step the run reaches: `step` plus the steps `remaining_seconds` hold, at most
        `train_steps` and at least `step + 1`."""
        end = step + int(max(remaining_seconds, 0.0) / seconds_per_step)
        return max(min(end, self.train_steps), step + 1)

    def replan(self, step, seconds_per_step, remaining_seconds):
        raise NotImplementedError


class DecayPlan(_BudgetPlan):
    """Moves a linear learning-rate decay's end to the step where the time budget runs out.

    At the start of each epoch after the first, the step rate of the epoch before (its
    end-of-epoch work included, which recurs) and the budget's remaining seconds give the
    step the run will reach; `end` (the `decay_end` variable of `transformer_adam`) is set
    to it, at most `train_steps` and at least one step past both the warm-up and the current
    step. Assigned at an epoch's start, the new end reaches the compiled step on every
    backend (JAX reads the optimizer's variables again there). With several JAX processes
    the plan of process 0 is used by all.

    Args:
        end: the scalar variable the schedule reads (`optimizers.decay_end(optimizer)`).
        time_limit: `TimeLimit`. The budget.
        step_counter: an object whose `step` attribute is the run's optimizer step (the
            backup callback).
        train_steps: int. The step budget, an upper bound for the end.
        warmup_steps: int. The end stays after the warm-up.

    Attributes:
        plans: list of `(step, end)`: each re-planned end and the step it was made at.

    Example:

    >>> class Counter:
    ...     step = 0
    >>> end = keras.Variable(1000.0)
    >>> plan = DecayPlan(end, TimeLimit(minutes=1), Counter(), train_steps=1000, warmup_steps=10)
    >>> plan.replan(step=100, seconds_per_step=0.5, remaining_seconds=30)
    160
    >>> float(keras.ops.convert_to_numpy(end))
    160.0
    """

    def __init__(self, end, time_limit, step_counter, train_steps, warmup_steps):
        super().__init__(time_limit, step_counter, train_steps)
        self.end = end
        self.warmup_steps = warmup_steps

    def replan(self, step, seconds_per_step, remaining_seconds):
        """Sets and returns the end: `step` plus the steps `remaining_seconds` hold."""
        end = max(self.reachable(step, seconds_per_step, remaining_seconds), self.warmup_steps + 1)
        end = broadcast_from_first(end)
        self.end.assign(float(end))
        self.plans.append((step, end))
        return end


class CheckpointPlan(_BudgetPlan):
    """Spaces a `PeriodicCheckpoint`'s files so that the `keep` newest span the last `share`
    of the steps the time budget will reach.

    Before training, a time budget's steps are an estimate (`training.recipe`: the row's step
    time on a quiet 2-core CPU); a faster machine makes more steps, and the averaged
    checkpoints then span less than planned (measured: 4.7 % of a 12,883-step `make bible`
    planned for ~9,900). At the start of each epoch after the first, the step rate of the
    epoch before and the budget's remaining seconds give the step the run will reach, and the
    checkpoints' spacing (`save_freq`) becomes `share` of it over `keep`. With several JAX
    processes the plan of process 0 is used by all.

    A run resumed from its backup starts again from the config's spacing, and restores a
    checkpoint the kill interrupted only at a step of that spacing (`train`).

    Args:
        checkpoints: the `PeriodicCheckpoint` (its `save_freq` an int, and `keep`).
        time_limit: `TimeLimit`. The budget.
        step_counter: an object whose `step` attribute is the run's optimizer step (the
            backup callback).
        train_steps: int. The step budget, an upper bound for the reachable step.
        share: float in (0, 1]. The share of the steps the `keep` newest checkpoints span.

    Attributes:
        plans: list of `(step, save_freq)`: each re-planned spacing and the step it was made at.

    Example:

    >>> class Counter:
    ...     step = 0
    >>> class Checkpoints:
    ...     save_freq, keep = 198, 5
    >>> checkpoints = Checkpoints()
    >>> plan = CheckpointPlan(checkpoints, TimeLimit(minutes=1), Counter(), 10**5, share=0.1)
    >>> plan.replan(step=1000, seconds_per_step=0.25, remaining_seconds=3000)
    260
    >>> checkpoints.save_freq
    260
    """

    def __init__(self, checkpoints, time_limit, step_counter, train_steps, share):
        super().__init__(time_limit, step_counter, train_steps)
        share = check_number("share", share, minimum=0, strict=True)
        if share > 1:
            raise ValueError(f"`share` must be in (0, 1]. Received: share={share!r}")
        self.checkpoints = checkpoints
        self.share = share

    def replan(self, step, seconds_per_step, remaining_seconds):
        """Sets and returns the spacing: `share` of the reachable step over `keep`."""
        end = self.reachable(step, seconds_per_step, remaining_seconds)
        every = broadcast_from_first(checkpoint_spacing(end, self.checkpoints.keep, self.share))
        self.checkpoints.save_freq = every
        self.plans.append((step, every))
        return every
