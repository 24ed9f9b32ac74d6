"""`keras_transformer.metrics.MaskedAccuracy`: token accuracy that ignores padding."""

import numpy as np
import pytest

from keras_transformer import MaskedAccuracy
from tests.test_case import to_numpy


def test_masked_accuracy_ignores_padding():
    metric = MaskedAccuracy()
    y_true = np.array([[1, 2, 0, 0], [2, 2, 2, 0]])
    y_pred = np.eye(3)[np.array([[1, 1, 2, 2], [2, 2, 1, 0]])]
    metric.update_state(y_true, y_pred)
    assert float(to_numpy(metric.result())) == pytest.approx(3 / 5)
    metric.reset_state()
    assert float(to_numpy(metric.result())) == 0.0
    assert MaskedAccuracy.from_config(metric.get_config()).ignore_class == 0
