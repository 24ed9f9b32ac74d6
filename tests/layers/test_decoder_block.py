"""`keras_transformer.layers.DecoderBlock`: causal self-attention, masked cross-attention, cache."""

import keras
import numpy as np
import pytest

from keras_transformer.layers import DecoderBlock, EncoderBlock, PositionalEmbedding
from tests.test_case import (
    HARNESS_CHECKS,
    assert_config_round_trip,
    assert_symbolic_matches_eager,
    layer_case,
    restore,
    run_layer_test,
    snapshot,
    to_numpy,
)

RNG = np.random.default_rng(0)
X = RNG.normal(size=(2, 6, 16)).astype("float32")
CONTEXT = RNG.normal(size=(2, 5, 16)).astype("float32")
CONTEXT_MASK = np.array([[1] * 5, [1] * 3 + [0] * 2], bool)


@pytest.mark.parametrize("attention_dropout", [0.0, 0.3], ids=["fused", "explicit"])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_decoder_is_causal(dropout, attention_dropout):
    block = DecoderBlock(
        num_heads=4, ff_dim=32, dropout=dropout, attention_dropout=attention_dropout, seed=5
    )
    block(X, CONTEXT)
    state = snapshot(block)
    base = to_numpy(block(X, CONTEXT, context_padding_mask=CONTEXT_MASK, training=True))
    for t in range(5):
        changed = X.copy()
        changed[:, t + 1 :] = RNG.normal(size=changed[:, t + 1 :].shape)
        restore(block, state)
        out = to_numpy(block(changed, CONTEXT, context_padding_mask=CONTEXT_MASK, training=True))
        np.testing.assert_allclose(out[:, : t + 1], base[:, : t + 1], atol=1e-5)
        restore(block, state)


def test_cross_attention_uses_encoder_mask():
    block = DecoderBlock(num_heads=4, ff_dim=32, dropout=0.0)
    base, scores = block(X, CONTEXT, context_padding_mask=CONTEXT_MASK, return_attention_scores=True)
    scores = to_numpy(scores)
    assert scores.shape == (2, 4, 6, 5)
    np.testing.assert_allclose(scores[1, :, :, 3:], 0.0, atol=1e-7)
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)
    changed = CONTEXT.copy()
    changed[1, 3:] = 50.0
    out = to_numpy(block(X, changed, context_padding_mask=CONTEXT_MASK))
    np.testing.assert_allclose(out, to_numpy(base), atol=1e-5)
    unmasked = to_numpy(block(X, changed))
    assert not np.allclose(unmasked[1], to_numpy(base)[1], atol=1e-3)


def test_implicit_keras_masks_equal_explicit_masks():
    ids = np.array([[5, 6, 7, 8, 9, 3], [5, 6, 7, 8, 0, 0]])
    source_ids = np.array([[4, 5, 6, 7, 8], [4, 5, 6, 0, 0]])
    embedding = PositionalEmbedding(vocabulary_size=10, d_model=16, dropout=0.0)
    encoder = EncoderBlock(num_heads=4, ff_dim=32, dropout=0.0)
    decoder = DecoderBlock(num_heads=4, ff_dim=32, dropout=0.0)

    source, target = embedding(source_ids), embedding(ids)
    explicit_context = encoder(source, padding_mask=source_ids != 0)
    explicit = decoder(
        target, explicit_context, padding_mask=ids != 0, context_padding_mask=source_ids != 0
    )
    # Functional model where masks only travel implicitly from the embedding.
    source_in = keras.Input((None,), dtype="int32")
    target_in = keras.Input((None,), dtype="int32")
    context = encoder(embedding(source_in))
    out = decoder(embedding(target_in), context)
    model = keras.Model([source_in, target_in], [context, out])
    implicit_context, implicit = model([source_ids, ids])
    np.testing.assert_allclose(to_numpy(implicit_context), to_numpy(explicit_context), atol=1e-5)
    np.testing.assert_allclose(to_numpy(implicit), to_numpy(explicit), atol=1e-5)
    # And without any mask the padded rows do differ (the masks were really used).
    # (NumPy copies carry no implicit mask.)
    unmasked = to_numpy(decoder(to_numpy(target), to_numpy(encoder(to_numpy(source)))))
    assert not np.allclose(unmasked[1, :4], to_numpy(explicit)[1, :4], atol=1e-4)


def test_decoder_cache_matches_full_pass():
    block = DecoderBlock(num_heads=4, ff_dim=32, dropout=0.0)
    full = to_numpy(block(X, CONTEXT, context_padding_mask=CONTEXT_MASK))
    cache = block.init_cache(CONTEXT, max_length=6)
    for index in range(6):
        step, cache = block(
            X[:, index : index + 1], None, context_padding_mask=CONTEXT_MASK,
            cache=cache, cache_index=index,
        )
        np.testing.assert_allclose(to_numpy(step)[:, 0], full[:, index], atol=1e-5)


def test_config_symbolic_and_bad_arguments():
    block = DecoderBlock(
        num_heads=4, ff_dim=32, dropout=0.2, attention_dropout=0.1, norm_first=True, seed=3
    )
    assert_symbolic_matches_eager(block, [X, CONTEXT])
    assert_config_round_trip(block)
    with pytest.raises(ValueError, match="ff_dim=0"):
        DecoderBlock(num_heads=4, ff_dim=0)
    with pytest.raises(ValueError, match="dropout=1.0"):
        DecoderBlock(num_heads=4, ff_dim=8, dropout=1.0)
    with pytest.raises(ValueError, match="num_heads=-1"):
        DecoderBlock(num_heads=-1, ff_dim=8)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_mixed_precision_blocks_run_and_stay_finite(policy):
    keras.config.set_dtype_policy(policy)
    block = DecoderBlock(num_heads=4, ff_dim=32)
    out = block(X, CONTEXT, context_padding_mask=np.zeros((2, 5), bool))
    assert keras.backend.standardize_dtype(out.dtype) == ("float32" if policy == "float32" else "bfloat16")
    assert np.isfinite(to_numpy(out).astype("float32")).all()


CASE = layer_case(
    DecoderBlock,
    {"num_heads": 4, "ff_dim": 32, "seed": 1},
    {"x": X, "context": CONTEXT, "context_padding_mask": CONTEXT_MASK},
    dropout_kwargs={"dropout": 0.3, "attention_dropout": 0.3},
    unchanged_by_training=("key/bias",),
)


@pytest.mark.parametrize("check", HARNESS_CHECKS)
def test_layer_harness(check, request):
    run_layer_test(CASE, check, request)
