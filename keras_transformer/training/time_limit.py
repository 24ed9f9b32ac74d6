"""Stop training cleanly when a wall-clock budget is spent."""

import logging
import time

import keras

from keras_transformer._checks import check_number
from keras_transformer.training.strategy import all_processes_agree, process_count

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
            logger.warning("Time budget of %g minutes spent: stopping training.", self.minutes)
