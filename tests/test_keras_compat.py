"""Each Keras workaround of `keras_transformer._keras_compat` is still needed (these tests
fail once Keras no longer needs it: then remove the workaround), and does what it says."""

import gc
import weakref

import keras

from keras_transformer import _keras_compat


def _full_collections(function):
    """How many full (generation 2) collections `function()` runs."""
    starts = []

    def callback(phase, info):
        if phase == "start" and info["generation"] == 2:
            starts.append(info)

    gc.callbacks.append(callback)
    try:
        function()
    finally:
        gc.callbacks.remove(callback)
    return len(starts)


def test_keras_still_collects_garbage_at_each_deleted_variable():
    # Needed by `deferred_collection`: without it, quantizing runs a full collection of the
    # heap per Dense layer.
    layer = keras.layers.Dense(2)
    layer.build((None, 3))
    gc.disable()  # Only the collections Keras asks for.
    try:
        assert _full_collections(lambda: delattr(layer, "_kernel")) >= 1
    finally:
        gc.enable()


class _Cycle:
    def __init__(self):
        self.itself = self


def test_deferred_collection_frees_the_garbage_made_before_and_inside_once_left():
    gc.disable()  # Only the collections asked for.
    try:
        before = _Cycle()
        reference = weakref.ref(before)
        del before
        with _keras_compat.deferred_collection():
            assert gc.get_freeze_count() > 0
            gc.collect()  # Keras' collection at a deleted variable: the frozen stay.
            assert reference() is not None
            inside = weakref.ref(_Cycle())
            gc.collect()
            assert inside() is None  # What is made inside is collected as usual.
        assert gc.get_freeze_count() == 0 and reference() is None
    finally:
        gc.enable()


def _is_frozen(obj):
    # Frozen objects sit outside the collector's generations, where `get_objects` looks.
    return not any(tracked is obj for tracked in gc.get_objects())


def test_deferred_collection_keeps_objects_frozen_by_others_frozen():
    # Asked of one object, not of `get_freeze_count()`: another thread of the test worker may
    # free frozen objects meanwhile (the count once fell by 2 in CI).
    sentinel = _Cycle()
    gc.freeze()
    try:
        assert _is_frozen(sentinel)
        with _keras_compat.deferred_collection():
            pass
        assert _is_frozen(sentinel)
    finally:
        gc.unfreeze()
    assert not _is_frozen(sentinel)  # The check can tell the two apart.


def _model_with_policy_map():
    policies = keras.dtype_policies.DTypePolicyMap(default_policy="float32")
    policies["dense"] = keras.dtype_policies.get("int8_from_float32")
    inputs = keras.Input((3,))
    dense = keras.layers.Dense(2, name="dense", dtype=policies)
    return keras.Model(inputs, dense(inputs)), dense


def test_keras_still_answers_a_policy_map_s_default_for_a_layer_of_the_map():
    # Needed by `set_layer_policy` (`models.transformer._resolve_policies`).
    _, dense = _model_with_policy_map()
    assert dense.path == "dense"
    assert dense.dtype_policy.quantization_mode is None  # Its map entry says int8.


def test_set_layer_policy_gives_the_layer_its_own_policy():
    model, dense = _model_with_policy_map()
    assert dense in list(_keras_compat.flatten_layers(model))
    _keras_compat.set_layer_policy(dense, dense.dtype_policy[dense.path])
    assert dense.dtype_policy.quantization_mode == "int8" == dense.quantization_mode


def test_keras_still_has_the_private_autocast_scope():
    # Without it `layers.sublayer_calls` falls back to `Layer.__call__` (slower decoding).
    assert None not in (
        _keras_compat.AutocastScope,
        _keras_compat.get_autocast_scope,
        _keras_compat.is_float_dtype,
    )


def test_weights_h5_bytes_load_back_as_the_model_s_weights(tmp_path):
    def model(seed):
        inputs = keras.Input((3,))
        dense = keras.layers.Dense(2, kernel_initializer=keras.initializers.GlorotUniform(seed))
        return keras.Model(inputs, dense(inputs))

    written, loaded = model(1), model(2)
    path = tmp_path / "model.weights.h5"
    path.write_bytes(_keras_compat.weights_h5_bytes(written))  # Keras' writer, not the fallback.
    loaded.load_weights(path)
    for ours, theirs in zip(written.get_weights(), loaded.get_weights(), strict=True):
        assert (ours == theirs).all()
