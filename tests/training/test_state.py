"""Weights as NumPy: `to_numpy`, `copy_weights` and `local_copy`."""

import numpy as np

from keras_transformer.models import Transformer
from keras_transformer.training.state import copy_weights, local_copy, to_numpy


def tiny_model(seed):
    return Transformer.from_preset("tiny", vocabulary_size=11, num_layers=1, seed=seed)


def test_local_copy_has_the_same_weights_and_its_own_variables():
    model = tiny_model(seed=1)
    copy = local_copy(model)
    assert len(copy.weights) == len(model.weights)
    for original, copied in zip(model.weights, copy.weights, strict=True):
        np.testing.assert_array_equal(to_numpy(copied), to_numpy(original))
    first = copy.weights[0]
    first.assign(first + 1.0)
    assert not np.array_equal(to_numpy(first), to_numpy(model.weights[0]))


def test_copy_weights_overwrites_every_weight():
    source, destination = tiny_model(seed=1), tiny_model(seed=2)
    assert not np.array_equal(to_numpy(source.weights[0]), to_numpy(destination.weights[0]))
    copy_weights(source, destination)
    for original, copied in zip(source.weights, destination.weights, strict=True):
        np.testing.assert_array_equal(to_numpy(copied), to_numpy(original))
