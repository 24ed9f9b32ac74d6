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


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="PyTorch's dispatch-free calls")
@pytest.mark.parametrize("policy", ["float32", "mixed_float16", "mixed_bfloat16"])
def test_dispatch_free_dense_and_layer_norm_equal_their_keras_calls(policy):
    from keras_transformer import _backend
    from keras_transformer._backend import AutocastScope

    dense = keras.layers.Dense(8, activation="relu", dtype=policy)
    norm = keras.layers.LayerNormalization(epsilon=1e-6, dtype=policy)
    x = keras.ops.convert_to_tensor(X)
    dense.build(X.shape)
    norm.build(X.shape)
    norm.gamma.assign(np.linspace(0.5, 1.5, 8).astype("float32"))
    norm.beta.assign(np.linspace(-1, 1, 8).astype("float32"))
    x = keras.ops.cast(x, dense.compute_dtype)
    with AutocastScope(dense.compute_dtype):  # as `call_sublayer` reads the kernel
        fast_dense, keras_dense = _backend.dense(dense, x), dense.call(x)
    fast_norm, keras_norm = _backend.layer_norm(norm, x), norm.call(x)
    if policy == "mixed_float16":
        # Keras multiplies float16 in float32 on CPU: no dispatch-free path there.
        assert fast_dense is None
    else:
        assert fast_dense.dtype == keras_dense.dtype
        np.testing.assert_array_equal(to_numpy(fast_dense), to_numpy(keras_dense))
    assert fast_norm.dtype == keras_norm.dtype
    np.testing.assert_array_equal(to_numpy(fast_norm), to_numpy(keras_norm))
    # Not a plain Dense / LayerNormalization, or not a tensor: the caller calls `layer.call`.
    assert _backend.dense(keras.layers.EinsumDense("ab,bc->ac", 8), x) is None
    across_time = keras.layers.LayerNormalization(axis=1)
    across_time.build(X.shape)
    assert _backend.layer_norm(across_time, x) is None
    assert _backend.dense(dense, X) is None
