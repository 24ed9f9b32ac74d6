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


def argmax_accuracy(y_true, y_pred, weights):
    """The textbook definition: the argmax is the label, over the weighted real tokens."""
    hits = (y_pred.argmax(-1) == y_true) * weights
    return hits.sum() / weights.sum()


def test_masked_accuracy_equals_argmax_accuracy_on_untied_logits():
    # Distinct float32 scores in each row (no ties): the largest-score rule is the argmax.
    rng = np.random.default_rng(3)
    y_pred = rng.normal(size=(4, 7, 50)).astype("float32")
    y_true = rng.integers(1, 50, size=(4, 7))
    y_true[:, 5:] = 0  # padding
    y_true[0, :4] = y_pred[0, :4].argmax(-1)  # some hits; id 0 never is a real target here
    sample_weight = rng.uniform(0.5, 2.0, size=(4,)).astype("float32")
    metric = MaskedAccuracy()
    metric.update_state(y_true, y_pred, sample_weight=sample_weight)
    weights = (y_true != 0) * sample_weight[:, None]
    expected = argmax_accuracy(y_true, y_pred, weights)
    assert 0 < expected < 1
    assert float(to_numpy(metric.result())) == pytest.approx(expected, rel=1e-6)


def test_masked_accuracy_counts_a_tied_best_score_as_right():
    # Token 2 ties token 1 for the best score: argmax would pick 1 (vocabulary order), the
    # metric counts the label 2 as right; a label below the best score stays wrong.
    y_pred = np.array([[[0.0, 3.0, 3.0, 1.0], [0.0, 3.0, 3.0, 1.0]]], "float32")
    metric = MaskedAccuracy()
    metric.update_state(np.array([[2, 3]]), y_pred)
    assert float(to_numpy(metric.result())) == pytest.approx(0.5)


def test_masked_accuracy_without_ignore_class_counts_every_position():
    y_pred = np.eye(3, dtype="float32")[np.array([[0, 1, 2]])]
    metric = MaskedAccuracy(ignore_class=None)
    metric.update_state(np.array([[0, 1, 1]]), y_pred)
    assert float(to_numpy(metric.result())) == pytest.approx(2 / 3)
