"""Model and optimizer state as NumPy, on every backend and strategy.

The callbacks (checkpoints, averaging, BLEU, TensorBoard, backups) and `train` read and copy
weights through these helpers, so that TensorFlow mirrored variables, JAX arrays replicated
across processes and the JAX trainer's in-flight state all read the same way.
"""

import keras
from keras import ops

# JAX is imported inside `to_numpy` on the JAX backend only (the other backends never load it).

def sync_model_state(model):
    """Writes the JAX trainer's in-flight state back into the model's variables.

    During `fit`, the JAX backend keeps the variables outside the model until the end of the
    epoch; a callback that reads or saves weights in the middle of an epoch calls this first.
    A no-op on the other backends.
    """
    if keras.backend.backend() == "jax" and hasattr(model, "jax_state_sync"):
        model.jax_state_sync()


def to_numpy(value):
    """A variable or tensor as a NumPy array, on every backend and strategy.

    Handles TensorFlow mirrored variables and JAX arrays replicated across processes.
    """
    if isinstance(value, keras.Variable):
        value = value.value
    if keras.backend.backend() == "jax":
        import jax

        if isinstance(value, jax.Array) and not value.is_fully_addressable:
            value = value.addressable_data(0)
    return ops.convert_to_numpy(value)


def local_copy(model):
    """A copy of `model` outside any strategy, with the same weights, for decoding and export.

    Call it outside `DistributionContext.scope()`.
    """
    copy = model.__class__.from_config(model.get_config())
    copy_weights(model, copy)
    return copy


def copy_weights(source, destination):
    """Copies `source`'s weights into `destination` (same architecture) through NumPy."""
    sync_model_state(source)
    destination.set_weights([to_numpy(variable) for variable in source.weights])
