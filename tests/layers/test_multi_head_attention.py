"""`keras_transformer.layers.MultiHeadAttention`: the paper's formula, masks, dropout, cache."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer import _backend
from keras_transformer.layers import MultiHeadAttention
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


def numpy_attention(layer, query, value, mask=None):
    """Reference softmax(Q Kᵀ / √d_k) V with the layer's own projection weights."""
    heads, key_dim = layer.num_heads, layer._key_dim

    def project(dense, x, dim):
        y = x @ to_numpy(dense.kernel) + to_numpy(dense.bias)
        return y.reshape(x.shape[0], x.shape[1], heads, dim).transpose(0, 2, 1, 3)

    q = project(layer.query_dense, query, key_dim)
    k = project(layer.key_dense, value, key_dim)
    v = project(layer.value_dense, value, layer._value_dim)
    logits = q @ k.transpose(0, 1, 3, 2) / np.sqrt(key_dim)  # (b, h, q, k)
    if mask is not None:
        logits = np.where(mask, logits, -1e9)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    out = (probs @ v).transpose(0, 2, 1, 3).reshape(query.shape[0], query.shape[1], -1)
    return out @ to_numpy(layer.output_dense.kernel) + to_numpy(layer.output_dense.bias), probs


@pytest.mark.parametrize(
    "scores, fused",
    [(False, True), (False, False), (True, False)],
    ids=["fused", "explicit", "scores"],
)
def test_matches_numpy_reference_with_and_without_masks(scores, fused, monkeypatch):
    # Force the kernel choice (by default the fused kernel is skipped on TF/JAX CPUs).
    monkeypatch.setitem(_backend._FUSED_ATTENTION, keras.backend.backend(), fused)
    rng = np.random.default_rng(0)
    query = rng.normal(size=(2, 5, 16)).astype("float32")
    value = rng.normal(size=(2, 7, 16)).astype("float32")
    layer = MultiHeadAttention(num_heads=4)
    layer(query, value)
    value_mask = np.array([[1] * 7, [1] * 4 + [0] * 3], bool)
    for kwargs, mask in [
        ({}, None),
        ({"value_mask": value_mask}, value_mask[:, None, None, :]),
    ]:
        expected, expected_probs = numpy_attention(layer, query, value, mask)
        result = layer(query, value, return_attention_scores=scores, **kwargs)
        if scores:
            result, probs = result
            np.testing.assert_allclose(to_numpy(probs), expected_probs, atol=1e-5)
        np.testing.assert_allclose(to_numpy(result), expected, atol=1e-4)
    # Causal self-attention.
    causal = np.tril(np.ones((5, 5), bool))[None, None]
    expected, _ = numpy_attention(layer, query, query, causal)
    result = layer(query, query, use_causal_mask=True, return_attention_scores=scores)
    result = result[0] if scores else result
    np.testing.assert_allclose(to_numpy(result), expected, atol=1e-4)


def test_key_dim_defaults_to_paper_width_and_output_to_query_size():
    layer = MultiHeadAttention(num_heads=8)
    out = layer(np.zeros((1, 3, 64), "float32"), np.zeros((1, 4, 32), "float32"))
    assert layer._key_dim == 8  # d_k = d_model / h, not d_model
    assert tuple(layer.query_dense.kernel.shape) == (64, 64)
    assert tuple(out.shape) == (1, 3, 64)


@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_causal_with_and_without_dropout(dropout):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    layer = MultiHeadAttention(num_heads=2, dropout=dropout, seed=3)
    layer(x, x)
    state = snapshot(layer)
    base = to_numpy(layer(x, x, use_causal_mask=True, training=True))
    for t in range(5):
        changed = x.copy()
        changed[:, t + 1 :] = rng.normal(size=changed[:, t + 1 :].shape)
        restore(layer, state)  # same dropout masks
        out = to_numpy(layer(changed, changed, use_causal_mask=True, training=True))
        np.testing.assert_allclose(out[:, : t + 1], base[:, : t + 1], atol=1e-5)
        assert not np.allclose(out[:, t + 1 :], base[:, t + 1 :], atol=1e-3)


def test_fully_masked_rows_are_finite_on_both_paths():
    x = np.random.default_rng(2).normal(size=(2, 4, 8)).astype("float32")
    layer = MultiHeadAttention(num_heads=2)
    empty = np.zeros((2, 4), bool)
    for scores in (False, True):
        out = layer(x, x, value_mask=empty, return_attention_scores=scores)
        out = out[0] if scores else out
        assert np.isfinite(to_numpy(out)).all()


def test_cache_matches_full_attention_step_by_step():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    layer = MultiHeadAttention(num_heads=2)
    full = to_numpy(layer(x, x, use_causal_mask=True))
    cache = layer.init_cache(2, 5)
    for index in range(5):
        step, cache = layer(
            x[:, index : index + 1], x[:, index : index + 1], use_causal_mask=True,
            cache=cache, cache_index=index,
        )
        np.testing.assert_allclose(to_numpy(step)[:, 0], full[:, index], atol=1e-5)


def _cross_attention_case(monkeypatch, fused, value_mask, group):
    """A built layer, a context of `len(value_mask)` sources and `group` one-token queries
    per source (beam search's cross-attention), with the fused kernel on or off."""
    monkeypatch.setitem(_backend._FUSED_ATTENTION, keras.backend.backend(), fused)
    rng = np.random.default_rng(len(value_mask) * 10 + group)
    context = rng.normal(size=(len(value_mask), 6, 8)).astype("float32")
    query = rng.normal(size=(len(value_mask) * group, 1, 8)).astype("float32")
    layer = MultiHeadAttention(num_heads=2)
    layer(query, np.repeat(context, group, axis=0))
    return layer, context, query


@pytest.mark.parametrize("fused", [False, True], ids=["explicit", "fused"])
def test_rows_sharing_a_precomputed_cache_row_match_a_repeated_cache(fused, monkeypatch):
    # Beam search: `group` consecutive query rows (the beams of one source) attend to one
    # precomputed cross-attention row, never repeated; same result as repeating it.
    value_mask = np.array([[1] * 6, [1] * 2 + [0] * 4], bool)
    layer, context, query = _cross_attention_case(monkeypatch, fused, value_mask, group=3)
    shared = layer.precompute_cache(context)
    repeated = {name: ops.repeat(leaf, 3, axis=0) for name, leaf in shared.items()}
    grouped, grouped_scores, _ = layer(
        query, value_mask=value_mask, cache=shared, return_attention_scores=True
    )
    expected, expected_scores, _ = layer(
        query, value_mask=np.repeat(value_mask, 3, axis=0), cache=repeated,
        return_attention_scores=True,
    )
    np.testing.assert_allclose(to_numpy(grouped), to_numpy(expected), atol=1e-5)
    np.testing.assert_allclose(to_numpy(grouped_scores), to_numpy(expected_scores), atol=1e-6)
    assert to_numpy(grouped_scores)[3:, :, :, 2:].max() == 0.0  # the second source's padding
    if not fused:  # the fused kernel is used without scores only
        alone = layer(query, value_mask=value_mask, cache=shared)[0]
        np.testing.assert_allclose(to_numpy(alone), to_numpy(expected), atol=1e-5)


@pytest.mark.parametrize("fused", [False, True], ids=["explicit", "fused"])
def test_a_cache_holding_its_mask_equals_passing_the_mask_each_call(fused, monkeypatch):
    # `precompute_cache(value_mask=...)` builds the cross-attention mask once; the decoding
    # steps then pass none. An empty source (no real key) still attends somewhere finite.
    value_mask = np.array([[1] * 6, [1] * 2 + [0] * 4, [0] * 6], bool)
    layer, context, query = _cross_attention_case(monkeypatch, fused, value_mask, group=2)
    plain = layer.precompute_cache(context)
    masked = layer.precompute_cache(context, value_mask=value_mask)
    assert tuple(masked["mask"].shape) == (3, 1, 1, 6)
    expected = layer(query, value_mask=value_mask, cache=plain)
    outputs = layer(query, cache=masked)
    np.testing.assert_array_equal(to_numpy(outputs[0]), to_numpy(expected[0]))
    assert np.isfinite(to_numpy(outputs[0])).all()
    with pytest.raises(ValueError, match="holds the mask of its keys"):
        layer(query, value_mask=value_mask, cache=masked)
    with pytest.raises(ValueError, match="use_causal_mask=True"):
        layer(query, use_causal_mask=True, cache=masked)


@pytest.mark.parametrize("fused", [False, True], ids=["explicit", "fused"])
def test_slot_cache_read_through_a_group_mask_matches_a_gathered_cache(fused, monkeypatch):
    # Beam search without reordering: 2 sources x 3 slots; each row's past positions live in
    # the slots given by `ancestry`, and its group mask picks them. The same attention as the
    # usual cache holding, in its own row, the keys/values gathered from those slots.
    monkeypatch.setitem(_backend._FUSED_ATTENTION, keras.backend.backend(), fused)
    rng = np.random.default_rng(5)
    group, max_len, index = 3, 5, 3
    layer = MultiHeadAttention(num_heads=2)
    x = rng.normal(size=(2 * group, 1, 8)).astype("float32")
    layer(x, np.repeat(x, 2, axis=1))  # builds the layer
    slots = {
        name: ops.convert_to_tensor(rng.normal(size=(2 * group, max_len, 2, 4)).astype("float32"))
        for name in ("key", "value")
    }
    ancestry = rng.integers(0, group, size=(2 * group, max_len))  # slot of each past position
    ancestry[:, index] = np.arange(2 * group) % group  # the new position: the row's own slot
    sources = (np.arange(2 * group) // group)[:, None] * group  # first row of each source
    written = np.arange(max_len) <= index
    mask = (ancestry[:, None, :] == np.arange(group)[None, :, None]) & written
    grouped, new_slots = layer(
        x, x, cache=slots, cache_index=index, attention_mask=mask.reshape(2 * group, 1, -1)
    )
    gathered = {
        name: np.take_along_axis(
            to_numpy(leaf)[None], (sources + ancestry)[None, :, :, None, None], axis=1
        )[0]
        for name, leaf in slots.items()
    }  # (rows, max_len, heads, dim): row r's past, position by position
    expected, _ = layer(x, x, use_causal_mask=True, cache=gathered, cache_index=index)
    np.testing.assert_allclose(to_numpy(grouped), to_numpy(expected), atol=1e-5)
    # The slots keep their rows: only position `index` of each row is written.
    for name in ("key", "value"):
        before, after = to_numpy(slots[name]), to_numpy(new_slots[name])
        np.testing.assert_array_equal(np.delete(after, index, 1), np.delete(before, index, 1))
    with pytest.raises(ValueError, match=r"attention_mask.shape=\(6, 1, 7\)"):
        layer(x, x, cache=slots, cache_index=index, attention_mask=np.ones((6, 1, 7), bool))


def _by_head(slots, group):
    """A batch-major slot cache `{"key", "value"}` `(sources * group, max_len, heads, dim)`
    in the by-head layout of `init_cache(group=...)`."""
    keys, values = to_numpy(slots["key"]), to_numpy(slots["value"])
    rows, max_len, heads, dim = keys.shape
    keys = keys.reshape(rows // group, group, max_len, heads, dim).transpose(3, 0, 4, 1, 2)
    values = values.reshape(rows // group, group, max_len, heads, dim).transpose(3, 0, 1, 2, 4)
    return {
        "key_by_head": keys.reshape(heads, rows // group, dim, group * max_len),
        "value_by_head": values.reshape(heads, rows // group, group * max_len, dim),
        "group": np.zeros((group,), "int32"),
    }


def test_the_by_head_cache_attends_as_the_batch_major_one():
    # The decoding layout (heads first, keys transposed, a group's rows side by side) is
    # read without a transpose; it must give the batch-major cache's results: step by step
    # (causal), through a group mask (beam search in place), and precomputed (cross).
    rng = np.random.default_rng(6)
    layer = MultiHeadAttention(num_heads=2)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    full = to_numpy(layer(x, x, use_causal_mask=True))
    cache = layer.init_cache(2, 5, group=1)
    assert tuple(cache["key_by_head"].shape) == (2, 2, 4, 5)
    for index in range(5):
        step, cache = layer(
            x[:, index : index + 1], x[:, index : index + 1], use_causal_mask=True,
            cache=cache, cache_index=index,
        )  # fmt: skip
        np.testing.assert_allclose(to_numpy(step)[:, 0], full[:, index], atol=1e-5)
    group, max_len, index = 3, 5, 3
    query = rng.normal(size=(2 * group, 1, 8)).astype("float32")
    slots = {
        name: rng.normal(size=(2 * group, max_len, 2, 4)).astype("float32")
        for name in ("key", "value")
    }
    ancestry = rng.integers(0, group, size=(2 * group, max_len))
    ancestry[:, index] = np.arange(2 * group) % group
    mask = (ancestry[:, None, :] == np.arange(group)[None, :, None]) & (np.arange(max_len) <= index)
    mask = mask.reshape(2 * group, 1, -1)
    expected, expected_slots = layer(query, query, cache=slots, cache_index=index, attention_mask=mask)
    found, found_slots = layer(
        query, query, cache=_by_head(slots, group), cache_index=index, attention_mask=mask
    )
    np.testing.assert_allclose(to_numpy(found), to_numpy(expected), atol=1e-5)
    for name, leaf in _by_head(expected_slots, group).items():  # "group" unchanged too
        np.testing.assert_allclose(to_numpy(found_slots[name]), leaf, atol=1e-6)
    with pytest.raises(ValueError, match="3 rows per source"):
        layer(query, query, cache=_by_head(slots, group), cache_index=index)
    value_mask = np.array([[1] * 6, [1] * 2 + [0] * 4], bool)
    context = rng.normal(size=(2, 6, 8)).astype("float32")
    batch_major = layer(
        query, cache=layer.precompute_cache(context, value_mask=value_mask),
        return_attention_scores=True,
    )  # fmt: skip
    by_head = layer(
        query, cache=layer.precompute_cache(context, value_mask=value_mask, by_head=True),
        return_attention_scores=True,
    )  # fmt: skip
    for found, expected in zip(by_head[:2], batch_major[:2], strict=True):  # outputs, scores
        np.testing.assert_allclose(to_numpy(found), to_numpy(expected), atol=1e-5)


def test_config_symbolic_and_errors():
    layer = MultiHeadAttention(num_heads=2, key_dim=3, value_dim=5, dropout=0.1, seed=4)
    x = np.zeros((2, 3, 8), "float32")
    assert_symbolic_matches_eager(layer, [x, x], return_attention_scores=True)
    assert_config_round_trip(layer)
    with pytest.raises(ValueError, match="num_heads=0"):
        MultiHeadAttention(num_heads=0)
    with pytest.raises(ValueError, match="dropout=1.5"):
        MultiHeadAttention(num_heads=2, dropout=1.5)
    with pytest.raises(ValueError, match="num_heads=3"):
        MultiHeadAttention(num_heads=3)(x, x)
    assert ops.shape(layer(x, x))[-1] == 8


CASE = layer_case(
    MultiHeadAttention,
    {"num_heads": 4, "seed": 1},
    {
        "query": np.random.default_rng(4).normal(size=(2, 4, 16)).astype("float32"),
        "value": np.random.default_rng(5).normal(size=(2, 3, 16)).astype("float32"),
    },
    dropout_kwargs={"dropout": 0.5},
    unchanged_by_training=("key/bias",),
)


@pytest.mark.parametrize("check", HARNESS_CHECKS)
def test_layer_harness(check, request):
    run_layer_test(CASE, check, request)
