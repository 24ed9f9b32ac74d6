"""Checkpoint averaging (paper §6.1: the base models average the last 5 checkpoints)."""

import logging

import numpy as np

from keras_transformer._checks import check_int
from keras_transformer.training.checkpoints import check_checkpoint, list_checkpoints, load_weights
from keras_transformer.training.state import sync_model_state, to_numpy

logger = logging.getLogger("keras_transformer")


def average_checkpoints(model, paths):
    """Sets `model`'s weights to the element-wise mean of the weights in `paths`.

    Each `.weights.h5` file (as written by `model.save_weights` or `PeriodicCheckpoint`) is
    loaded into `model` in turn and its weights summed in float64; floating-point weights
    get the mean, other weights (integer counters) the value of the last file. If the files
    hold optimizer state, the model's optimizer ends with the last file's.

    Args:
        model: a built `keras.Model` with the architecture of the checkpoints.
        paths: non-empty list of str, the checkpoint files (the last one's non-float
            weights are kept).

    Returns:
        The list of averaged NumPy weights, in `model.weights` order.

    Example:

    >>> import keras, tempfile, os
    >>> model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False)])
    >>> directory = tempfile.mkdtemp()
    >>> for value in (1.0, 3.0):
    ...     model.set_weights([np.full((1, 1), value)])
    ...     model.save_weights(os.path.join(directory, f"{value}.weights.h5"))
    >>> paths = [os.path.join(directory, f"{v}.weights.h5") for v in (1.0, 3.0)]
    >>> float(average_checkpoints(model, paths)[0][0, 0])
    2.0

    References:
        Vaswani et al., "Attention Is All You Need", 2017, §6.1.
    """
    paths = list(paths)
    if not paths:
        raise ValueError("`paths` must name at least one checkpoint. Received: paths=[]")
    sync_model_state(model)
    if model.optimizer is not None and not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    sums = None
    for path in paths:
        check_checkpoint(path)
        load_weights(model, path)
        values = [to_numpy(variable) for variable in model.weights]
        if sums is None:
            sums = [value.astype("float64") for value in values]
        else:
            for total, value in zip(sums, values, strict=True):
                total += value
        last = values
    averaged = []
    for total, value in zip(sums, last, strict=True):
        if np.issubdtype(value.dtype, np.floating):
            averaged.append((total / len(paths)).astype(value.dtype))
        else:
            averaged.append(value)
    model.set_weights(averaged)
    return averaged


def average_last_checkpoints(model, directory, num_checkpoints=5):
    """Averages the newest `num_checkpoints` checkpoints of `directory` into `model`.

    Args:
        model: a built `keras.Model`.
        directory: str. A directory of `ckpt-STEP.weights.h5` files (see `PeriodicCheckpoint`).
        num_checkpoints: int. How many of the newest to average. Defaults to `5`.

    Returns:
        The list of `(step, path)` averaged (empty, and `model` untouched, if there is none).
    """
    check_int("num_checkpoints", num_checkpoints, minimum=1)
    checkpoints = list_checkpoints(directory)[-num_checkpoints:]
    if checkpoints:
        average_checkpoints(model, [path for _, path in checkpoints])
        logger.info(
            "Averaged %d checkpoints (steps %s).",
            len(checkpoints),
            ", ".join(str(step) for step, _ in checkpoints),
        )
    return checkpoints
