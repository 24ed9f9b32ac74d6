"""`keras_transformer.layers.dropout.Dropout`: Keras' dropout distribution on every path
(TensorFlow + XLA and JAX draw their bits with XLA's ThreeFry, PyTorch with one seeded draw)."""

import keras
import numpy as np
import pytest

from keras_transformer.layers.dropout import Dropout
from tests.test_case import HARNESS_CHECKS, layer_case, run_layer_test, to_numpy


def dropped(layer, inputs, jit):
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        function = tf.function(lambda x: layer(x, training=True), jit_compile=jit)
        return to_numpy(function(tf.constant(inputs)))
    return to_numpy(layer(inputs, training=True))


@pytest.mark.parametrize("jit", [False, True], ids=["eager-or-graph", "xla"])
def test_keeps_one_minus_rate_and_rescales(jit):
    if jit and keras.backend.backend() != "tensorflow":
        pytest.skip("the XLA-only path is TensorFlow's")
    inputs = np.ones((64, 512), "float32")
    layer = Dropout(0.3, seed=7)
    first = dropped(layer, inputs, jit)
    kept = first != 0
    assert abs(kept.mean() - 0.7) < 0.01  # 32,768 draws: 4.5 standard deviations
    np.testing.assert_allclose(first[kept], 1 / 0.7, rtol=1e-6)
    # Fresh masks on every call, and not a repeating pattern across rows.
    second = dropped(layer, inputs, jit)
    assert (second != 0).mean() > 0.68 and not np.array_equal(first, second)
    assert not np.array_equal(kept[0], kept[1])
    # The seed generator's state decides the mask: restoring it replays the same mask.
    replay = Dropout(0.3, seed=7)
    np.testing.assert_array_equal(dropped(replay, inputs, jit), first)
    # Not training, or rate 0: the identity.
    np.testing.assert_array_equal(to_numpy(layer(inputs, training=False)), inputs)
    np.testing.assert_array_equal(dropped(Dropout(0.0, seed=1), inputs, jit), inputs)


def test_serializes_as_our_layer():
    layer = Dropout(0.25, seed=3, name="drop")
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(clone) is Dropout and clone.get_config() == layer.get_config()


CASE = layer_case(
    Dropout,
    {"rate": 0.5, "seed": 1},
    {"inputs": np.random.default_rng(0).normal(size=(2, 4, 16)).astype("float32")},
    dropout_kwargs={"rate": 0.5},
)


@pytest.mark.parametrize("check", HARNESS_CHECKS)
def test_layer_harness(check, request):
    run_layer_test(CASE, check, request)
