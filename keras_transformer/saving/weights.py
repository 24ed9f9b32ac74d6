"""Weights files written whole or not at all, and checked when read.

`save_weights` builds a model's `.weights.h5` file in memory (HDF5 writes into a Python
buffer) and writes its bytes with Python through a temporary file, `fsync` and a rename
(`keras_transformer.files.write_bytes`). A full disk or a file size limit is then one
`OSError` from one Python `write`, raised to the caller with the old file untouched and the
temporary removed, not an error inside HDF5's C library halfway through a file (which can
crash the process). It costs a second copy of the file in memory while it is written.

It returns the file's SHA-256, which the writers record (a preset's `metadata.json`, a run's
`backup/state.json` and `checkpoints/sha256.json`); `check_sha256` compares a file with its
record before it is loaded: one changed byte is refused with one line naming the file.
`check_finite` refuses loaded weights that hold NaN or infinite values (a diverged training
saved as it was, or a crafted file), which would translate every sentence to nothing.
"""

import hashlib
import os
import tempfile

import keras
import numpy as np

from keras_transformer import _keras_compat
from keras_transformer.files import write_bytes

_CHUNK = 1 << 20


class DamagedFileError(OSError):
    """A file's bytes differ from the SHA-256 recorded when it was written."""


def weights_bytes(model):
    """The bytes of the `.weights.h5` file `model.save_weights` writes, built in memory.

    Args:
        model: a built `keras.Model`.

    Returns:
        bytes.
    """
    if not model.built:
        raise ValueError(f"`model` must be built to be saved. Received: an unbuilt {model.name!r}")
    try:
        return _keras_compat.weights_h5_bytes(model)
    except (ImportError, AttributeError, TypeError):  # Another Keras: through a scratch file.
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "model.weights.h5")
            model.save_weights(path)
            with open(path, "rb") as file:
                return file.read()


def save_weights(model, path):
    """`model.save_weights(path)`, written whole or not at all (see the module docstring).

    Args:
        model: a built `keras.Model`.
        path: str or `os.PathLike`, ending in `.weights.h5`.

    Returns:
        str, the SHA-256 of the file written (hexadecimal).

    Raises:
        OSError: the write failed (a full disk, a file size limit); `path` is unchanged.
    """
    data = weights_bytes(model)
    write_bytes(path, data)
    return hashlib.sha256(data).hexdigest()


def sha256_file(path):
    """The SHA-256 of the file `path` (hexadecimal)."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def check_sha256(path, expected, record):
    """Raises `DamagedFileError` unless the file `path` has the SHA-256 `expected`.

    Args:
        path: str. The file.
        expected: str or `None`. The recorded SHA-256; `None` (a file written before it was
            recorded, by 0.2.0) checks nothing.
        record: str. Where `expected` was recorded, for the message.
    """
    if expected is None:
        return
    found = sha256_file(path)
    if found != expected:
        raise DamagedFileError(
            f"{path}: damaged or changed since it was written: its SHA-256 is {found[:16]}..., "
            f"{record} records {str(expected)[:16]}...; it is not loaded"
        )


def check_finite(model):
    """Raises `ValueError` (naming the weight) when a weight of `model` holds NaN or infinity.

    Args:
        model: a built `keras.Model`, its weights loaded.
    """
    for variable in model.weights:
        values = keras.ops.convert_to_numpy(variable)
        if values.dtype.kind in "biu" or np.isfinite(values).all():
            continue
        count = int(values.size - np.isfinite(values).sum())
        raise ValueError(
            f"the weight {variable.path} holds {count} NaN or infinite values (a "
            "training that diverged, or a damaged file): it would translate nothing; it is not "
            "loaded"
        )
