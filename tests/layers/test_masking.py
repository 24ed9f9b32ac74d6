"""`keras_transformer.layers.masking`: combining padding and causal masks."""

import numpy as np

from keras_transformer.layers.masking import merge_masks
from tests.test_case import to_numpy


def test_merge_masks_combines_all_kinds():
    mask = merge_masks(
        3, 3, query_mask=np.array([[1, 1, 0]]), key_mask=np.array([[1, 0, 1]]),
        use_causal_mask=True,
    )
    expected = np.array([[1, 0, 0], [1, 0, 0], [0, 0, 0]], bool)
    np.testing.assert_array_equal(to_numpy(mask)[0, 0], expected)
