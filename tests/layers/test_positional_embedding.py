import math

import keras
import numpy as np
import pytest

from keras_transformer.layers import PositionalEmbedding, sinusoidal_encoding
from tests.test_case import (
    HARNESS_CHECKS,
    assert_config_round_trip,
    layer_case,
    run_layer_test,
    to_numpy,
)


def test_sinusoid_equals_paper_formula_for_any_length():
    d_model = 16
    for length, start in [(7, 0), (300, 0), (5, 1000)]:
        encoding = to_numpy(sinusoidal_encoding(length, d_model, start_index=start))
        for pos in range(length):
            p = pos + start
            for i in range(d_model // 2):
                angle = p / 10000 ** (2 * i / d_model)
                assert encoding[pos, 2 * i] == pytest.approx(math.sin(angle), abs=2e-4)
                assert encoding[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=2e-4)


def test_embeddings_scaled_by_sqrt_d_model_plus_encoding():
    layer = PositionalEmbedding(vocabulary_size=10, d_model=8, dropout=0.0)
    ids = np.array([[3, 4, 5, 0]])
    out = to_numpy(layer(ids))
    table = to_numpy(layer.embeddings)
    expected = table[ids[0]] * math.sqrt(8) + to_numpy(sinusoidal_encoding(4, 8))
    np.testing.assert_allclose(out[0], expected, atol=1e-5)
    unscaled = PositionalEmbedding(vocabulary_size=10, d_model=8, dropout=0.0, scale=False)
    unscaled(ids)
    unscaled.embeddings.assign(table)
    np.testing.assert_allclose(
        to_numpy(unscaled(ids))[0], table[ids[0]] + to_numpy(sinusoidal_encoding(4, 8)), atol=1e-5
    )


def test_start_index_continues_positions():
    layer = PositionalEmbedding(vocabulary_size=10, d_model=8, dropout=0.0)
    ids = np.array([[3, 4, 5, 6]])
    full = to_numpy(layer(ids))
    step = to_numpy(layer(ids[:, 2:3], start_index=2))
    np.testing.assert_allclose(step[:, 0], full[:, 2], atol=1e-5)


def test_mask_propagation_and_tied_logits():
    layer = PositionalEmbedding(vocabulary_size=10, d_model=8)
    ids = np.array([[3, 4, 0]])
    np.testing.assert_array_equal(to_numpy(layer.compute_mask(ids)), [[True, True, False]])
    hidden = np.random.default_rng(0).normal(size=(1, 3, 8)).astype("float32")
    logits = layer(hidden, reverse=True)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"
    np.testing.assert_allclose(to_numpy(logits), hidden @ to_numpy(layer.embeddings).T, atol=1e-5)
    assert layer.compute_mask(hidden) is None
    no_mask = PositionalEmbedding(vocabulary_size=10, d_model=8, mask_zero=False)
    assert no_mask.compute_mask(ids) is None


def test_projection_runs_in_the_compute_dtype_unless_told_float32():
    """Under `mixed_bfloat16` the pre-softmax product runs in bfloat16 (a GPU's fast units)
    and the logits come back float32; `projection_dtype="float32"` keeps the 0.3.0 product."""
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(2, 3, 16)).astype("float32")
    keras.config.set_dtype_policy("mixed_bfloat16")
    fast = PositionalEmbedding(vocabulary_size=50, d_model=16)
    exact = PositionalEmbedding(vocabulary_size=50, d_model=16, projection_dtype="float32")
    exact.build()
    fast.build()
    table = to_numpy(fast.embeddings)
    exact.embeddings.assign(table)
    # Under the policy the call sees its float inputs and its variables in the compute dtype
    # (Keras' autocast): the float32 product multiplies bfloat16-rounded operands.
    def rounded(array):
        return to_numpy(keras.ops.cast(keras.ops.cast(array, "bfloat16"), "float32"))

    reference = rounded(hidden) @ rounded(table).T
    fast_logits, exact_logits = fast(hidden, reverse=True), exact(hidden, reverse=True)
    for logits in (fast_logits, exact_logits):
        assert keras.backend.standardize_dtype(logits.dtype) == "float32"
    np.testing.assert_allclose(to_numpy(exact_logits), reference, rtol=1e-4, atol=1e-4)
    error = np.abs(to_numpy(fast_logits) - reference).max() / np.abs(reference).max()
    assert 1e-6 < error < 1e-2  # the product rounded to bfloat16, then float32 logits
    keras.config.set_dtype_policy("float32")
    plain = PositionalEmbedding(vocabulary_size=50, d_model=16)
    plain.build()
    plain.embeddings.assign(table)
    np.testing.assert_allclose(to_numpy(plain(hidden, reverse=True)), hidden @ table.T, atol=1e-5)
    assert_config_round_trip(exact)
    assert PositionalEmbedding.from_config(exact.get_config()).projection_dtype == "float32"
    with pytest.raises(ValueError, match="projection_dtype='int8'"):
        PositionalEmbedding(vocabulary_size=10, d_model=8, projection_dtype="int8")


def test_dropout_only_in_training_and_config():
    layer = PositionalEmbedding(vocabulary_size=10, d_model=8, dropout=0.5, seed=1)
    ids = np.array([[3, 4, 5]])
    np.testing.assert_allclose(to_numpy(layer(ids)), to_numpy(layer(ids, training=False)))
    assert not np.allclose(to_numpy(layer(ids, training=True)), to_numpy(layer(ids)))
    assert_config_round_trip(layer)
    with pytest.raises(ValueError, match="d_model=7"):
        PositionalEmbedding(vocabulary_size=10, d_model=7)
    with pytest.raises(ValueError, match="vocabulary_size=0"):
        PositionalEmbedding(vocabulary_size=0, d_model=8)


CASE = layer_case(
    PositionalEmbedding,
    {"vocabulary_size": 10, "d_model": 16, "seed": 1},
    {"inputs": np.array([[5, 6, 7, 0], [8, 9, 0, 0]], "int32")},
    dropout_kwargs={"dropout": 0.5},
)


@pytest.mark.parametrize("check", HARNESS_CHECKS)
def test_layer_harness(check, request):
    run_layer_test(CASE, check, request)


def test_configs_written_before_0_2_0_load():
    layer = PositionalEmbedding(vocabulary_size=11, d_model=8)
    config = layer.get_config()
    config["vocab_size"] = config.pop("vocabulary_size")  # the name until 0.2.0
    restored = PositionalEmbedding.from_config(config)
    assert restored.vocabulary_size == 11
    assert restored.get_config() == layer.get_config()


def test_marian_frequencies_option():
    """`sinusoid_frequencies="marian"`: 10000^(-i/(d/2 - 1)); files without the key (0.2.0,
    0.3.0) load with the paper's, bit for bit as before."""
    ids = np.array([[3, 4, 5]])
    layer = PositionalEmbedding(vocabulary_size=10, d_model=8, dropout=0.0)
    marian = PositionalEmbedding.from_config(
        dict(layer.get_config(), sinusoid_frequencies="marian")
    )
    layer(ids), marian(ids)
    marian.embeddings.assign(layer.embeddings)
    angle = 2 * 10000 ** (-1 / 3)  # position 2, frequency 1 (d/2 - 1 = 3): dimension 2
    assert to_numpy(marian(ids) - layer(ids))[0, 2, 2] == pytest.approx(
        math.sin(angle) - math.sin(2 * 10000 ** (-2 / 8)), abs=1e-5
    )
    assert_config_round_trip(marian)
    config = layer.get_config()
    del config["sinusoid_frequencies"]
    assert PositionalEmbedding.from_config(config).sinusoid_frequencies == "paper"
    with pytest.raises(ValueError, match="sinusoid_frequencies='tatoeba'"):
        PositionalEmbedding(vocabulary_size=10, d_model=8, sinusoid_frequencies="tatoeba")
