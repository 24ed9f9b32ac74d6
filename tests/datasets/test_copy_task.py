"""Tests for keras_transformer.datasets.copy_task."""

import numpy as np

from keras_transformer.datasets import copy_task
from keras_transformer.datasets.splits import normalized_source


def test_held_out_sequences_never_occur_in_training():
    # A small vocabulary, so that draws repeat and must be rejected.
    splits = copy_task(num_train=300, num_validation=50, num_test=50, vocabulary_size=5, max_length=8)
    assert tuple(map(len, splits)) == (300, 50, 50)
    keys = [{normalized_source(source) for source, _ in split} for split in splits]
    assert len(keys[0]) == 300 and not keys[0] & keys[1] and not keys[0] & keys[2]
    assert not keys[1] & keys[2]
    for source, target in splits.test:
        np.testing.assert_array_equal(source, target)
    again = copy_task(num_train=300, num_validation=50, num_test=50, vocabulary_size=5, max_length=8)
    assert all((a[0] == b[0]).all() for a, b in zip(again.test, splits.test, strict=True))
