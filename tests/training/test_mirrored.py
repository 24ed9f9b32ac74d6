"""`GlobalTokenMeanCrossentropy` and `enable_replica_jit` outside `tf.distribute`.

Under `MirroredStrategy` they are checked against one device in `test_distribution.py`.
"""

import re

import keras
import numpy as np
import pytest

from keras_transformer import LabelSmoothedCrossentropy
from keras_transformer.training import GlobalTokenMeanCrossentropy, enable_replica_jit


def test_outside_a_strategy_the_loss_is_the_label_smoothed_token_mean():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 5)).astype("float32")
    labels = np.array([[1, 2, 0], [3, 0, 0]])  # 0 is padding: 3 real tokens
    expected = LabelSmoothedCrossentropy(label_smoothing=0.1)(labels, logits)
    value = GlobalTokenMeanCrossentropy(label_smoothing=0.1)(labels, logits)
    np.testing.assert_allclose(float(value), float(expected), rtol=1e-6)


def test_the_loss_round_trips_through_keras_serialization():
    loss = GlobalTokenMeanCrossentropy(label_smoothing=0.2)
    restored = keras.losses.deserialize(keras.losses.serialize(loss))
    assert type(restored) is GlobalTokenMeanCrossentropy
    assert restored.get_config() == loss.get_config()


def test_replica_jit_needs_the_global_token_mean_loss():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match=re.escape("Received: loss='mse'")):
        enable_replica_jit(model)
