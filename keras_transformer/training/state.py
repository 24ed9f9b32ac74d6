"""Model and optimizer state as NumPy, on every backend and strategy.

The callbacks (checkpoints, averaging, BLEU, TensorBoard, backups) and `train` read and copy
weights through these helpers, so that TensorFlow mirrored variables, JAX arrays replicated
across processes and the JAX trainer's in-flight state all read the same way.
"""

import keras
from keras import ops

from keras_transformer import _backend
from keras_transformer.models.lora import lora_layers, merged_weights


def sync_model_state(model):
    """Writes the JAX trainer's in-flight state back into the model's variables.

    During `fit`, the JAX backend keeps the variables outside the model until the end of the
    epoch; a callback that reads or saves weights in the middle of an epoch calls this first.
    A no-op on the other backends.
    """
    _backend.sync_trainer_state(model)


def to_numpy(value):
    """A variable or tensor as a NumPy array, on every backend and strategy.

    Handles TensorFlow mirrored variables and JAX arrays replicated across processes.
    """
    if isinstance(value, keras.Variable):
        if keras.backend.backend() == "tensorflow":
            # The variable converts itself: its value, a `MirroredVariable` of a scalar (the
            # optimizer's `iteration`), makes NumPy refuse a 0-d `__array__`.
            return ops.convert_to_numpy(value)
        value = value.value
    return ops.convert_to_numpy(_backend.local_value(value))


def local_copy(model, dtype=None):
    """A copy of `model` outside any strategy, with the same weights, for decoding and export:
    a plain model, with the LoRA of a LoRA model merged.

    Call it outside `DistributionContext.scope()`.

    Args:
        model: a `Transformer`.
        dtype: str or None. The copy's dtype policy (e.g. `"float32"` for a model that trains
            in mixed precision); `None` keeps `model`'s. Defaults to `None`.
    """
    config = model.get_config()
    if dtype is not None:
        config["dtype"] = dtype
    copy = model.__class__.from_config(config)
    copy_weights(model, copy)
    return copy


def copy_weights(source, destination):
    """Copies `source`'s weights into `destination` (same architecture) through NumPy; a
    LoRA model's into a plain `destination` (as `local_copy` makes) merged."""
    sync_model_state(source)
    if lora_layers(source) and not lora_layers(destination):
        destination.set_weights(merged_weights(source))
    else:
        destination.set_weights([to_numpy(variable) for variable in source.weights])
