"""`keras_transformer.layers.FeedForward`: the position-wise feed-forward network."""

import numpy as np
import pytest

from keras_transformer.layers import FeedForward
from tests.test_case import HARNESS_CHECKS, layer_case, run_layer_test

CASE = layer_case(
    FeedForward,
    {"ff_dim": 32},
    {"x": np.random.default_rng(0).normal(size=(2, 4, 16)).astype("float32")},
)


@pytest.mark.parametrize("check", HARNESS_CHECKS)
def test_layer_harness(check, request):
    run_layer_test(CASE, check, request)
