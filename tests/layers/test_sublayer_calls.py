import keras
import numpy as np
import pytest

from keras_transformer.layers.decoder_block import DecoderBlock
from keras_transformer.layers.sublayer_calls import call_sublayer, direct_sublayer_calls
from tests.test_case import to_numpy

X = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
CONTEXT = np.random.default_rng(1).normal(size=(2, 5, 8)).astype("float32")
CONTEXT_MASK = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], bool)


@pytest.mark.parametrize("policy", ["float32", "mixed_float16", "mixed_bfloat16"])
def test_direct_calls_equal_layer_calls(policy):
    block = DecoderBlock(num_heads=2, ff_dim=16, dropout=0.0, dtype=policy)
    expected = block(X, CONTEXT, context_padding_mask=CONTEXT_MASK)
    with direct_sublayer_calls():
        direct = call_sublayer(block, X, CONTEXT, context_padding_mask=CONTEXT_MASK)
    # Without the policy's casts and autocast scope, float32 kernels would promote the
    # half-precision activations back to float32.
    assert keras.backend.standardize_dtype(direct.dtype) == block.compute_dtype
    np.testing.assert_array_equal(
        to_numpy(direct).astype("float32"), to_numpy(expected).astype("float32")
    )


def test_direct_calls_skip_layer_call_only_inside_the_context(monkeypatch):
    block = DecoderBlock(num_heads=2, ff_dim=16, dropout=0.0)
    block(X, CONTEXT)  # builds
    calls = []
    dense = block.feed_forward.inner_dense
    original = type(dense).__call__
    monkeypatch.setattr(
        type(dense), "__call__", lambda self, *a, **k: calls.append(self) or original(self, *a, **k)
    )
    call_sublayer(block, X, CONTEXT)
    assert dense in calls
    calls.clear()
    with direct_sublayer_calls():
        call_sublayer(block, X, CONTEXT)
    assert not calls
