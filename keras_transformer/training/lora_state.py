"""The training state of a LoRA run: the LoRA factors and the optimizer, plus a reference to
the frozen base weights, which are written once.

A run with `training.lora_rank` trains the LoRA matrices only
(`keras_transformer.models.lora`); every other weight stays as `init_from` gave it. Its
checkpoints, backups and final `model.weights.h5` therefore hold, in one HDF5 file:

```
attrs["format"]     "keras_transformer.lora_state/1"
attrs["base"]       {"path": "../lora_base.weights.h5", "sha256": "..."} (JSON; the path is
                    relative to the file's directory)
lora/<layer path>/lora_kernel_a, lora_kernel_b      the factors of each adapted layer
optimizer/<index>                                   `model.optimizer.variables`, in order
```

and the frozen base is one file of the run, `lora_base.weights.h5` (each base weight by its
path), written by the first save of a process that has not loaded it. Loading a state file
(`load_weights`, which loads any other weights file as Keras does) reads the base only when
the model does not hold it already: checking a 5-checkpoint average reads it once. The
reference names a file called `lora_base.weights.h5` in the state file's directory or its
parent, nothing else, and its SHA-256 must match: a state file is never applied to another
base.

Keras' own weights file of a LoRA model would hold the merged kernels (and, loaded, zero
`A` and `B`: a training state that cannot go on); this format needs no change to Keras'
`Dense` saving, and a checkpoint is the size of the factors and their optimizer moments.
"""

import hashlib
import io
import json
import os
import weakref

import h5py
import numpy as np

from keras_transformer.files import write_bytes
from keras_transformer.models.lora import base_weights, lora_layers
from keras_transformer.saving.weights import check_sha256
from keras_transformer.training.state import to_numpy

FORMAT = "keras_transformer.lora_state/1"
BASE_FILENAME = "lora_base.weights.h5"

# The SHA-256 of the base file each LoRA model holds the base weights of (loaded or written
# by this process), and where a training run keeps its base (`use_base_path`).
_HELD = weakref.WeakKeyDictionary()
_BASE_PATHS = weakref.WeakKeyDictionary()


def is_lora_state(path):
    """Whether `path` is a LoRA state file (`state_bytes`)."""
    with h5py.File(path, "r") as file:
        return file.attrs.get("format") == FORMAT


def use_base_path(model, directory):
    """Makes the state files of `model` refer to `directory/lora_base.weights.h5` (a run's
    output directory) instead of a base file next to each of them."""
    _BASE_PATHS[model] = os.path.join(os.path.abspath(directory), BASE_FILENAME)


def state_bytes(model, path, write_base=True):
    """The bytes of the LoRA state file of `model` to be written at `path`, writing the base
    file first when `model`'s base is not in it yet (and `write_base`: process 0).

    Args:
        model: a compiled model with LoRA enabled, its state synced (`sync_model_state`).
        path: str. Where the state file goes (its reference is relative to it).
        write_base: bool. Whether this process writes files. Defaults to `True`.

    Returns:
        bytes.
    """
    base_path = _BASE_PATHS.get(model) or os.path.join(os.path.dirname(path), BASE_FILENAME)
    if _HELD.get(model) is None or (write_base and not os.path.exists(base_path)):
        base = _base_bytes(model)  # Local reads: the same on every process.
        if write_base:
            write_bytes(base_path, base)
        _HELD[model] = hashlib.sha256(base).hexdigest()
    reference = {
        "path": os.path.relpath(base_path, os.path.dirname(os.path.abspath(path))),
        "sha256": _HELD[model],
    }
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as file:
        file.attrs["format"] = FORMAT
        file.attrs["base"] = json.dumps(reference)
        for layer_path, dense in lora_layers(model).items():
            group = file.create_group(f"lora/{layer_path}")
            group["lora_kernel_a"] = to_numpy(dense.lora_kernel_a)
            group["lora_kernel_b"] = to_numpy(dense.lora_kernel_b)
        for index, variable in enumerate(_optimizer_variables(model)):
            file[f"optimizer/{index}"] = to_numpy(variable)
    return buffer.getvalue()


def load(model, path):
    """Loads the LoRA state file `path` into `model` (LoRA enabled as when it was saved): the
    base weights of its reference (unless `model` holds them), the factors, and the optimizer
    variables (the optimizer built first).

    Raises:
        ValueError: the file does not fit `model` (other layers, shapes, optimizer) or its
            reference names another file than a `lora_base.weights.h5` beside it.
        DamagedFileError: the base file differs from the SHA-256 of the reference.
    """
    path = os.fspath(path)
    with h5py.File(path, "r") as file:
        reference = json.loads(file.attrs["base"])
        base_path = _base_path(path, reference.get("path"))
        sha256 = reference.get("sha256")
        if not isinstance(sha256, str):
            raise ValueError(f"{path}: its base reference records no SHA-256: it is not loaded")
        if _HELD.get(model) != sha256:
            check_sha256(base_path, sha256, path)
            _load_base(model, base_path)
            _HELD[model] = sha256
        layers = lora_layers(model)
        names = []
        if "lora" in file:
            file["lora"].visit(names.append)
        saved = [name.rsplit("/", 1)[0] for name in names if name.endswith("/lora_kernel_a")]
        if set(saved) != set(layers):
            raise ValueError(
                f"{path}: LoRA factors of {len(saved)} layers; the model has LoRA on "
                f"{len(layers)} ({sorted(set(saved) ^ set(layers))[:2]} differ)"
            )
        for layer_path, dense in layers.items():
            for name in ("lora_kernel_a", "lora_kernel_b"):
                _assign(getattr(dense, name), file[f"lora/{layer_path}/{name}"][()], path)
        if model.optimizer is not None:
            variables = _optimizer_variables(model)
            count = len(file["optimizer"]) if "optimizer" in file else 0
            if count != len(variables):
                raise ValueError(
                    f"{path}: {count} optimizer variables; the model's optimizer has "
                    f"{len(variables)}"
                )
            for index, variable in enumerate(variables):
                _assign(variable, file[f"optimizer/{index}"][()], path)


def _base_path(path, relative):
    """The base file a state file at `path` refers to: `lora_base.weights.h5` in its directory
    or its parent, and nothing else (a path written in a file is not followed anywhere)."""
    directory = os.path.dirname(os.path.abspath(path))
    allowed = {BASE_FILENAME: directory, f"../{BASE_FILENAME}": os.path.dirname(directory)}
    relative = str(relative).replace(os.sep, "/")
    if relative not in allowed:
        raise ValueError(
            f"{path}: its base reference must be {BASE_FILENAME} in its directory or the one "
            f"above. Received: path={relative!r}"
        )
    return os.path.join(allowed[relative], BASE_FILENAME)


def _base_bytes(model):
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as file:
        for variable in base_weights(model):
            file[variable.path] = to_numpy(variable)
    return buffer.getvalue()


def _load_base(model, base_path):
    with h5py.File(base_path, "r") as file:
        for variable in base_weights(model):
            if variable.path not in file:
                raise ValueError(f"{base_path}: no weight {variable.path} of the model")
            _assign(variable, file[variable.path][()], base_path)


def _assign(variable, value, path):
    if tuple(value.shape) != tuple(variable.shape):
        raise ValueError(
            f"{path}: {variable.path} has shape {tuple(value.shape)}; the model's has "
            f"{tuple(variable.shape)}"
        )
    variable.assign(np.asarray(value))


def _optimizer_variables(model):
    optimizer = model.optimizer
    if optimizer is None:
        return []
    if not optimizer.built:
        optimizer.build(model.trainable_variables)
    return list(optimizer.variables)
