"""Where the package reaches into Keras internals, in one place: each workaround with the Keras
versions it is for, the upstream issue if any, and a test (tests/test_keras_compat.py) that
fails once Keras no longer needs it (or moves what it uses), so that it can be removed.

Here: the collection Keras runs at each deleted variable (`deferred_collection`), a layer's
own policy out of a `DTypePolicyMap` (`set_layer_policy`), the recursive layer listing
(`flatten_layers`), the autocast scope (`AutocastScope`, ...) and the in-memory weights
writer (`weights_h5_bytes`).

For Keras 3 (pyproject.toml's `keras>=3.10,<4`); "to 3.15.1" below: tested on the installed
version, 3.15.1 in November 2026, not on each earlier one. LoRA's store keys
(`keras_transformer.models.lora`) are not here yet.
"""

import contextlib
import gc
import io

# Keras has no public API for the autocast scope that `Layer.__call__` enters under a mixed
# precision policy; `layers/sublayer_calls.py` needs it to call sub-layers directly (Keras 3
# to 3.15.1; `None` if it moves, and the caller then keeps `Layer.__call__`).
try:
    from keras.src.backend import AutocastScope, get_autocast_scope, is_float_dtype
except ImportError:  # pragma: no cover - private API moved
    AutocastScope = get_autocast_scope = is_float_dtype = None


def flatten_layers(model):
    """Every layer nested in `model` (not `model` itself), depth first.

    Keras has no public recursive listing (`Model.layers` is one level); `_flatten_layers` is
    the private one every Keras model has (Keras 3 to 3.15.1).
    """
    return model._flatten_layers(include_self=False)


def set_layer_policy(layer, policy):
    """Gives `layer` the dtype policy `policy` itself, not through a `DTypePolicyMap`.

    A layer built from a `DTypePolicyMap` keeps the map as its `dtype_policy`, and the parts of
    Keras that read `layer.dtype_policy.quantization_mode` get the map's default: a quantized
    `Dense` of a loaded model would call and save as a float one (Keras 3 to 3.15.1). The
    public `dtype_policy` setter writes into the map when the layer has one, so the attribute
    is written directly. No upstream issue found (the map came with keras-team/keras#19858).
    """
    layer._dtype_policy = policy


@contextlib.contextmanager
def deferred_collection():
    """Makes Keras' garbage collection at each deleted variable cheap, and collects once on
    leaving.

    `Layer.__delattr__` runs a full `gc.collect()` for every variable it deletes (Keras 3 to
    3.15.1; no upstream issue found), and `Dense.quantize` deletes each layer's float kernel:
    a collection of the whole heap per Dense layer (96 of them in an OPUS-sized model). The
    objects alive on entering are frozen (`gc.freeze`: moved where collections do not look),
    so each of those collections walks only what was made since; on leaving they are unfrozen
    and one collection frees what is garbage. Nothing is patched: other threads' collections
    run as they would, over the unfrozen objects. When objects are frozen already (a server
    preparing to fork), it does nothing, so as not to unfreeze them.
    """
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.collect()


def weights_h5_bytes(model):
    """The bytes of the `.weights.h5` file `model.save_weights` writes, built in memory by
    Keras' own writer handed a buffer (`saving_lib._save_state` on an `H5IOStore`: Keras 3
    to 3.15.1; `save_weights` itself takes only a path).

    Raises:
        ImportError, AttributeError or TypeError: Keras moved or changed its writer (the
        caller then goes through a scratch file).
    """
    from keras.src.saving import saving_lib

    buffer = io.BytesIO()
    store = saving_lib.H5IOStore(buffer, mode="w")
    try:
        saving_lib._save_state(
            model,
            weights_store=store,
            assets_store=None,
            inner_path="",
            visited_saveables=set(),
        )
    finally:
        store.close()
    return buffer.getvalue()
