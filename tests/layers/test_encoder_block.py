"""`keras_transformer.layers.EncoderBlock`: padding masks, the paper's post-LN formula."""

import numpy as np
import pytest

from keras_transformer.layers import EncoderBlock
from tests.test_case import (
    HARNESS_CHECKS,
    assert_config_round_trip,
    assert_symbolic_matches_eager,
    layer_case,
    run_layer_test,
    to_numpy,
)

RNG = np.random.default_rng(0)
X = RNG.normal(size=(2, 6, 16)).astype("float32")
X_MASK = np.array([[1] * 6, [1] * 4 + [0] * 2], bool)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_padding_content_does_not_leak(norm_first):
    block = EncoderBlock(num_heads=4, ff_dim=32, dropout=0.0, norm_first=norm_first)
    base = to_numpy(block(X, padding_mask=X_MASK))
    changed = X.copy()
    changed[1, 4:] = 100.0
    out = to_numpy(block(changed, padding_mask=X_MASK))
    np.testing.assert_allclose(out[1, :4], base[1, :4], atol=1e-5)
    np.testing.assert_allclose(out[0], base[0], atol=1e-5)


def test_post_ln_equals_paper_formula():
    block = EncoderBlock(num_heads=4, ff_dim=32, dropout=0.0)
    out = to_numpy(block(X))
    attention = to_numpy(block.self_attention(X, X))
    h = to_numpy(block.self_attention_norm(X + attention))
    expected = to_numpy(block.feed_forward_norm(h + to_numpy(block.feed_forward(h))))
    np.testing.assert_allclose(out, expected, atol=1e-5)
    ffn = block.feed_forward
    relu = np.maximum(0, h @ to_numpy(ffn.inner_dense.kernel) + to_numpy(ffn.inner_dense.bias))
    np.testing.assert_allclose(
        to_numpy(ffn(h)),
        relu @ to_numpy(ffn.output_dense.kernel) + to_numpy(ffn.output_dense.bias),
        atol=1e-4,
    )


def test_config_symbolic_and_bad_arguments():
    block = EncoderBlock(
        num_heads=4, ff_dim=32, dropout=0.2, attention_dropout=0.1, norm_first=True, seed=3
    )
    assert_symbolic_matches_eager(block, [X])
    assert_config_round_trip(block)
    with pytest.raises(ValueError, match="ff_dim=0"):
        EncoderBlock(num_heads=4, ff_dim=0)
    with pytest.raises(ValueError, match="dropout=1.0"):
        EncoderBlock(num_heads=4, ff_dim=8, dropout=1.0)
    with pytest.raises(ValueError, match="num_heads=-1"):
        EncoderBlock(num_heads=-1, ff_dim=8)


CASE = layer_case(
    EncoderBlock,
    {"num_heads": 4, "ff_dim": 32, "norm_first": True, "seed": 1},
    {"x": X, "padding_mask": X_MASK},
    dropout_kwargs={"dropout": 0.3, "attention_dropout": 0.3},
    unchanged_by_training=("key/bias",),
)


@pytest.mark.parametrize("check", HARNESS_CHECKS)
def test_layer_harness(check, request):
    run_layer_test(CASE, check, request)
