"""Validation of token ids where they enter the model: integer dtype, `0 <= id < vocabulary_size`.

An embedding lookup does not check its indices the same way on every backend. Out of range
ids give NaN embeddings on JAX, are clamped to the last row by XLA (TensorFlow with
`jit_compile=True`), raise on TensorFlow's CPU gather and on PyTorch; negative ids wrap to the
end of the vocabulary everywhere, and float ids are truncated by the cast to int32. So the
entry points (`Transformer.__call__`, `encode`, `decode`, `Generator`, `make_dataset`) call
`check_token_ids` first.

Ids are checked only where they are concrete: NumPy arrays and lists always; backend tensors
in eager mode. Inside `tf.function`, `jax.jit` or `torch.compile`, and on Keras' symbolic
tensors, nothing is checked: the values would need a host round trip per call, or cannot be
read at all, and the dtype is not the user's there (Keras' data adapters may feed integer
arrays as floats, e.g. `evaluate` under `MirroredStrategy`), so the model's int32 cast stays.
"""

import keras
import numpy as np
from keras import ops

from keras_transformer._backend import is_concrete


def check_token_ids(ids, vocabulary_size, name="token_ids"):
    """Raises a `ValueError` unless `ids` are integers in `[0, vocabulary_size)`.

    Checks concrete inputs only (NumPy arrays, lists, eager tensors): inside a compiled
    function (`tf.function`, `jax.jit`, `torch.compile`) and on symbolic `keras.KerasTensor`s
    it is a no-op.

    Args:
        ids: array-like or tensor of token ids, any shape. `None` is accepted and not checked.
        vocabulary_size: int. Number of ids in the vocabulary.
        name: str. Argument name used in the error message. Defaults to `"token_ids"`.

    Example:

    >>> import numpy as np
    >>> check_token_ids(np.array([[5, 0]]), vocabulary_size=6)
    >>> check_token_ids(np.array([[5, 6]]), vocabulary_size=6, name="encoder_inputs")
    Traceback (most recent call last):
    ...
    ValueError: `encoder_inputs` must hold token ids in [0, vocabulary_size); id 6 at position
    (0, 1) is not. Received: encoder_inputs[0, 1]=6, vocabulary_size=6
    """
    if ids is None:
        return
    if not hasattr(ids, "dtype"):  # lists, tuples, scalars
        ids = np.asarray(ids)
    if not is_concrete(ids):
        return
    dtype = keras.backend.standardize_dtype(ids.dtype)
    if "int" not in dtype:
        raise ValueError(
            f"`{name}` must hold integer token ids; floats would be truncated silently. Cast "
            f"them to int32 first. Received: {name}.dtype={dtype}"
        )
    if 0 in tuple(ids.shape):
        return
    for offset, values in _host_parts(ids):
        if values.size and (values.min() < 0 or values.max() >= vocabulary_size):
            found = np.argwhere((values < 0) | (values >= vocabulary_size))[0]
            position = tuple(int(i) + start for i, start in zip(found, offset, strict=True))
            _raise_out_of_range(name, int(values[tuple(found)]), position, vocabulary_size)


def _host_parts(ids):
    """`[(offset, NumPy values)]`: the ids this process can read, each part with the index
    of its first element.

    A batch of ids is small (a few hundred KB at most): one copy to the host and two NumPy
    reductions cost less than dispatching backend ops. A JAX array spread over several
    processes (`keras.distribution` across hosts) cannot be copied whole: each process
    checks the shards it holds (together the processes check every id)."""
    if getattr(ids, "is_fully_addressable", True):
        return [((0,) * len(ids.shape), np.asarray(ops.convert_to_numpy(ids)))]
    return [
        (tuple(part.start or 0 for part in shard.index), np.asarray(shard.data))
        for shard in ids.addressable_shards
    ]


def _raise_out_of_range(name, value, position, vocabulary_size):
    """The error of an id `value` outside `[0, vocabulary_size)` at `position` (a tuple)."""
    where = ", ".join(str(i) for i in position)
    at, element = (f" at position ({where})", f"{name}[{where}]") if position else ("", name)
    raise ValueError(
        f"`{name}` must hold token ids in [0, vocabulary_size); id {value}{at} is not. "
        f"Received: {element}={value}, vocabulary_size={vocabulary_size}"
    )
