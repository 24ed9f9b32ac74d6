"""Gradient accumulation: `[training] accumulate_steps = k` counts optimizer updates.

The optimizer accumulates (Keras' `gradient_accumulation_steps`): `fit` runs `k` batches
(micro-batches) per optimizer update, and the update applies the mean of their `k`
gradients. Everything the run counts is counted in updates:

- the learning-rate schedule (`keras_transformer.schedules.AccumulatedSchedule`) and Adam's
  bias correction (Keras' `optimizer.iterations` is the update count);
- the run's callbacks (backups, checkpoints, validation BLEU, TensorBoard, the time budget,
  the stop at `train_steps`) are wrapped in `PerUpdate`, which shows them one batch per
  update: their steps, `every` settings, file names and resume positions are updates, and
  they act (stop, save) only between updates, when no gradient is half accumulated;
- `data.tokens_per_batch` stays the size of one update's batch; each micro-batch gets
  `tokens_per_batch // k` (`micro_batch_tokens`), so changing `k` trades memory for time
  without changing the recipe.

What differs from one large batch: the loss of each micro-batch is the mean over its own
target tokens, and the update takes the mean of the `k` gradients. This equals the gradient
of one batch's token mean exactly when the micro-batches hold the same number of target
tokens; otherwise a token of a sparse micro-batch weighs a little more. (Weighting by the
true count would need all `k` micro-batches before the first backward pass.) The
token-budgeted batches of `keras_transformer.data.make_dataset` hold similar counts. Keras'
progress bar and extra callbacks passed to `train` see micro-batches.
"""

import keras

from keras_transformer._checks import check_int


def micro_batch_tokens(tokens_per_batch, accumulate_steps):
    """Padded positions per micro-batch: `tokens_per_batch // accumulate_steps`.

    Example:

    >>> micro_batch_tokens(25000, 4)
    6250
    """
    return tokens_per_batch // accumulate_steps


def check_strategy(strategy, accumulate_steps):
    """Raises a `ValueError` for accumulation under `MirroredStrategy`.

    Keras 3's optimizer applies the accumulated update inside a `cond`, and under
    `tf.distribute` the gradients' all-reduce in it is a `merge_call`, which TensorFlow does
    not allow inside control flow (`RuntimeError` at the first step). JAX `DataParallel` and
    single-device training on every backend accumulate.

    Args:
        strategy: str. The `DistributionContext.strategy`.
        accumulate_steps: int.
    """
    if strategy == "mirrored" and accumulate_steps > 1:
        raise ValueError(
            "Gradient accumulation does not work with MirroredStrategy in Keras 3 (the "
            "all-reduce would run inside the optimizer's cond); use one device, or JAX with "
            f"strategy='data_parallel'. Received: accumulate_steps={accumulate_steps}, "
            f"strategy={strategy!r}"
        )


def per_update(callbacks, accumulate_steps):
    """`callbacks`, each wrapped in `PerUpdate` (the list itself when `accumulate_steps` is 1)."""
    if accumulate_steps == 1:
        return list(callbacks)
    return [PerUpdate(callback, accumulate_steps) for callback in callbacks]


class PerUpdate(keras.callbacks.Callback):
    """Shows a callback one training batch per optimizer update.

    `fit` calls `on_train_batch_begin` and `on_train_batch_end` for every micro-batch; the
    wrapped callback gets `on_train_batch_begin` before the first micro-batch of each update
    and `on_train_batch_end` after its last one, with the update's index in the epoch as the
    batch number, and `params["steps"]` in updates. Every other hook is passed on as it is.
    Epochs must hold a whole number of updates (`train` runs `k` times as many batches).

    Args:
        callback: `keras.callbacks.Callback`.
        accumulate_steps: int. Micro-batches per update, `>= 1`.

    Example:

    >>> import numpy as np
    >>> class Count(keras.callbacks.Callback):
    ...     batches = 0
    ...     def on_train_batch_end(self, batch, logs=None):
    ...         self.batches += 1
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile(keras.optimizers.SGD(gradient_accumulation_steps=2), "mse")
    >>> count = Count()
    >>> _ = model.fit(np.ones((8, 2)), np.ones((8, 1)), batch_size=2, verbose=0,
    ...               callbacks=[PerUpdate(count, 2)])
    >>> count.batches, int(model.optimizer.iterations)
    (2, 2)
    """

    def __init__(self, callback, accumulate_steps):
        super().__init__()
        check_int("accumulate_steps", accumulate_steps, minimum=1)
        self.callback = callback
        self.accumulate_steps = accumulate_steps

    def set_model(self, model):
        # Stored, never read here: reading `self.model` syncs the JAX state.
        super().set_model(model)
        self.callback.set_model(model)

    def set_params(self, params):
        super().set_params(params)
        params = dict(params or {})
        if params.get("steps") is not None:
            params["steps"] = params["steps"] // self.accumulate_steps
        self.callback.set_params(params)

    def on_train_batch_begin(self, batch, logs=None):
        if batch % self.accumulate_steps == 0:
            self.callback.on_train_batch_begin(batch // self.accumulate_steps, logs)

    def on_train_batch_end(self, batch, logs=None):
        if (batch + 1) % self.accumulate_steps == 0:
            self.callback.on_train_batch_end(batch // self.accumulate_steps, logs)

    def on_train_begin(self, logs=None):
        self.callback.on_train_begin(logs)

    def on_train_end(self, logs=None):
        self.callback.on_train_end(logs)

    def on_epoch_begin(self, epoch, logs=None):
        self.callback.on_epoch_begin(epoch, logs)

    def on_epoch_end(self, epoch, logs=None):
        self.callback.on_epoch_end(epoch, logs)

    def on_test_begin(self, logs=None):
        self.callback.on_test_begin(logs)

    def on_test_end(self, logs=None):
        self.callback.on_test_end(logs)

    def on_test_batch_begin(self, batch, logs=None):
        self.callback.on_test_batch_begin(batch, logs)

    def on_test_batch_end(self, batch, logs=None):
        self.callback.on_test_batch_end(batch, logs)
