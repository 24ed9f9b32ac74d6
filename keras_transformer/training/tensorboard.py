"""TensorBoard scalars written with TensorFlow alone (no `tensorboard` package needed).

Keras' `TensorBoard` callback calls `tf.summary.scalar`, which lives in the `tensorboard`
package and fails without it. `write_scalar` writes the same event records with TensorFlow's
core `tf.summary.write` and the scalar plugin's metadata, so `tensorboard --logdir` (wherever
it is installed) shows them as usual. TensorFlow is imported lazily.
"""

import os

import keras

from keras_transformer._checks import check_int
from keras_transformer.training.state import sync_model_state


def write_scalar(writer, name, value, step):
    """Writes one scalar event, as `tf.summary.scalar` does.

    Args:
        writer: a `tf.summary` file writer (`create_writer`).
        name: str. The tag.
        value: float.
        step: int.
    """
    import tensorflow as tf
    from tensorflow.core.framework import summary_pb2

    metadata = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars", content=b"")
    )
    with writer.as_default():
        tf.summary.write(
            tag=name,
            tensor=tf.constant(float(value), tf.float32),
            step=int(step),
            metadata=metadata,
        )


def create_writer(log_dir):
    """A `tf.summary` file writer for `log_dir` (created if missing)."""
    import tensorflow as tf

    os.makedirs(log_dir, exist_ok=True)
    return tf.summary.create_file_writer(log_dir)


class TensorBoardLogger(keras.callbacks.Callback):
    """Logs training and validation scalars for TensorBoard, indexed by optimizer step.

    Under `log_dir/train`: `batch_loss` and the other running metrics every `update_freq`
    steps, `learning_rate`, and `epoch_<metric>` at the end of each epoch; under
    `log_dir/validation`: `epoch_<metric>` for each `val_<metric>` of the epoch logs (the
    validation loss, and the BLEU of a `BleuCallback` placed before this callback). Works on
    every backend (TensorFlow must be installed; the `tensorboard` package need not be).

    Args:
        log_dir: str. The log directory.
        update_freq: int. Steps between batch-level records; `0` logs epochs only.
            Defaults to `100`.

    Example:

    >>> import numpy as np, tempfile
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", "mse")
    >>> _ = model.fit(np.ones((8, 2)), np.ones((8, 1)), verbose=0,
    ...               callbacks=[TensorBoardLogger(tempfile.mkdtemp(), update_freq=1)])
    """

    def __init__(self, log_dir, update_freq=100):
        super().__init__()
        check_int("update_freq", update_freq, minimum=0)
        self.log_dir = os.fspath(log_dir)
        self.update_freq = update_freq
        self._writers = {}
        self._step = 0

    def on_train_begin(self, logs=None):
        sync_model_state(self.model)
        self._step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

    def on_train_batch_end(self, batch, logs=None):
        self._step += 1
        if not self.update_freq or self._step % self.update_freq:
            return
        writer = self._writer("train")
        for name, value in (logs or {}).items():
            if _is_number(value):
                write_scalar(writer, f"batch_{name}", value, self._step)
        learning_rate = self._learning_rate()
        if learning_rate is not None:
            write_scalar(writer, "learning_rate", learning_rate, self._step)

    def on_epoch_end(self, epoch, logs=None):
        for name, value in (logs or {}).items():
            if not _is_number(value):
                continue
            if name.startswith("val_"):
                write_scalar(self._writer("validation"), f"epoch_{name[4:]}", value, self._step)
            else:
                write_scalar(self._writer("train"), f"epoch_{name}", value, self._step)
        for writer in self._writers.values():
            writer.flush()

    def on_train_end(self, logs=None):
        for writer in self._writers.values():
            writer.close()
        self._writers = {}

    def _writer(self, name):
        if name not in self._writers:
            self._writers[name] = create_writer(os.path.join(self.log_dir, name))
        return self._writers[name]

    def _learning_rate(self):
        return learning_rate_at(self.model.optimizer, self._step)


def learning_rate_at(optimizer, step):
    """The learning rate of `optimizer`'s schedule at the optimizer step `step` (float), or
    `None` when its rate is no schedule."""
    learning_rate = getattr(optimizer, "_learning_rate", None)
    if callable(learning_rate):
        # The schedule's argument is Keras' micro-batch count under gradient accumulation
        # (`AccumulatedSchedule`): the rate of update `step` is at `step · k`.
        step = step * getattr(learning_rate, "accumulate_steps", 1)
        return float(keras.ops.convert_to_numpy(learning_rate(step)))
    return None


def _is_number(value):
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True
