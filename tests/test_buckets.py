"""Tests for `keras_transformer.buckets`: the bucket rules shared by training and inference."""

import pytest

from keras_transformer.buckets import (
    bucket_batches,
    check_bucket_boundaries,
    merge_buckets,
    padded_batch_size,
)

# Pure-Python shape rules: one_backend.
pytestmark = pytest.mark.one_backend


def test_check_bucket_boundaries_has_one_minimum():
    # 2 is `[START] [END]`, the shortest sequence: accepted; anything shorter is not.
    assert check_bucket_boundaries([2, 8, 64], 32) == (2, 8, 32)
    assert check_bucket_boundaries(None, 128) == (8, 16, 24, 32, 48, 64, 88, 128)
    for boundaries in ([1, 8], [0], [], [8, 8]):
        with pytest.raises(ValueError, match="bucket_boundaries="):
            check_bucket_boundaries(boundaries, 32)


def test_bucket_batches_cut_the_length_order_from_the_longest():
    lengths = {0: 9, 1: 3, 2: 5, 3: 12, 4: 3, 6: 16}
    batches = bucket_batches(lengths, (8, 16), batch_size=4)
    # Only the shortest batch is partial; a batch takes the bucket of its longest sequence.
    assert batches == [(8, [1, 4]), (16, [2, 0, 3, 6])]
    assert bucket_batches(lengths, (8, 16), batch_size=2) == [
        (8, [1, 4]),
        (16, [2, 0]),
        (16, [3, 6]),
    ]
    assert bucket_batches([4, 2], (8,), batch_size=4) == [(8, [1, 0])]
    assert bucket_batches({}, (8,), batch_size=4) == []
    with pytest.raises(ValueError, match="length=17"):
        bucket_batches([17], (8, 16), batch_size=4)


def test_bucket_batches_compile_at_most_one_shape_per_bucket_and_one_more():
    # Every index exactly once, in length order; full batches but the first.
    lengths = [(7 * i) % 61 + 2 for i in range(500)]
    boundaries = (8, 16, 24, 32, 48, 64)
    batches = bucket_batches(lengths, boundaries, batch_size=64)
    indices = [index for _, batch in batches for index in batch]
    assert sorted(indices) == list(range(500))
    assert [lengths[i] for i in indices] == sorted(lengths)
    assert [len(batch) for _, batch in batches] == [500 - 7 * 64] + [64] * 7
    for bucket, batch in batches:
        assert bucket == min(b for b in boundaries if b >= max(lengths[i] for i in batch))
    shapes = {(padded_batch_size(len(batch)), bucket) for bucket, batch in batches}
    assert len(shapes) <= len({bucket for bucket, _ in batches}) + 1


def test_padded_batch_size_of_a_tensor_equals_that_of_an_int():
    tf = pytest.importorskip("tensorflow")
    traced = tf.function(padded_batch_size, autograph=False)
    for size in (0, 1, 2, 3, 5, 32, 33):
        expected = padded_batch_size(size)
        assert int(padded_batch_size(tf.constant(size))) == expected
        assert int(traced(tf.constant(size))) == expected


def test_merge_buckets_compiles_the_fewest_lengths_then_pads_the_least():
    buckets = [8, 16, 24, 32, 48, 64, 88, 128]
    assert merge_buckets(buckets, 1) == {bucket: bucket for bucket in buckets}
    lengths = merge_buckets(buckets, 2)
    assert lengths == {8: 16, 16: 16, 24: 48, 32: 48, 48: 48, 64: 128, 88: 128, 128: 128}
    assert all(bucket <= length <= 2 * bucket for bucket, length in lengths.items())
    # The Bible test verses' 16 batches: 3 lengths are needed within 2x either way; padding
    # 24 and 32 to 48 fills fewer positions than 48 to 96 (6 batches of 48).
    bible = [24] * 3 + [32] * 3 + [48] * 6 + [64] * 2 + [96] * 2
    assert merge_buckets(bible, 2) == {24: 48, 32: 48, 48: 48, 64: 96, 96: 96}
    assert merge_buckets(bible, 4) == dict.fromkeys([24, 32, 48, 64, 96], 96)
    # Batches counted: with many batches of 32, 48 goes up to 96 instead.
    assert set(merge_buckets([24] + [32] * 9 + [48, 96], 2).values()) == {32, 96}
    # Compiled lengths are free and reused first, the shortest that holds a bucket.
    assert merge_buckets([24, 32], 2, shapes=[40, 64]) == {24: 40, 32: 40}
    assert merge_buckets([16], 1.5, shapes=[40]) == {16: 16}
    assert merge_buckets([100], 2, shapes=[60, 150]) == {100: 150}
    assert merge_buckets([], 2) == {}
    for bad in (0.5, True, "2", float("nan")):
        with pytest.raises(ValueError, match=f"max_ratio={bad!r}"):
            merge_buckets([8], bad)
