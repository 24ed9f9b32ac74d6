"""Tests for keras_transformer.data.make_dataset: batches, bucketing, filtering, fit."""

import logging
import random

import keras
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
pytest.importorskip("tensorflow_text")

# tf.data pipelines run TensorFlow whatever the Keras backend: one_backend, but for the model
# each backend fits on them (`all_backends`).
pytestmark = pytest.mark.one_backend

from keras_transformer.data import (  # noqa: E402
    default_bucket_boundaries,
    encode_source,
    encode_target,
    make_dataset,
)
from keras_transformer.datasets import copy_task  # noqa: E402
from keras_transformer.text import train_tokenizer  # noqa: E402

WORDS = (
    "el la de que y en un los se del las por con no una su para es al lo como más pero sus le "
    "the of and to in is was that he for it with as his on be at by had not are but from"
).split()
TOKENS_PER_BATCH = 256
MAX_LENGTH = 48


def _sentence(rng, length):
    return " ".join(rng.choice(WORDS) for _ in range(length))


@pytest.fixture(scope="module")
def pairs():
    rng = random.Random(0)
    result = []
    for _ in range(600):
        # Mostly short, a few longer than MAX_LENGTH so that some are dropped.
        length = rng.choice([rng.randint(1, 12), rng.randint(1, 30), rng.randint(30, 60)])
        result.append((_sentence(rng, length), _sentence(rng, max(1, length + rng.randint(-3, 3)))))
    return result


@pytest.fixture(scope="module")
def tokenizer(pairs):
    return train_tokenizer([text for pair in pairs for text in pair], vocabulary_size=200)


@pytest.fixture(scope="module")
def result(pairs, tokenizer):
    return make_dataset(
        pairs, tokenizer, tokens_per_batch=TOKENS_PER_BATCH, max_length=MAX_LENGTH, seed=1
    )


def _batches(dataset):
    return [
        (
            inputs["encoder_inputs"].numpy(),
            inputs["decoder_inputs"].numpy(),
            targets.numpy(),
        )
        for inputs, targets in dataset
    ]


def _lengths(pairs, tokenizer):
    source = tokenizer.tokenize([p[0] for p in pairs]).row_lengths().numpy() + 2
    target = tokenizer.tokenize([p[1] for p in pairs]).row_lengths().numpy() + 1
    return source, target


def test_element_spec_shapes_and_dtypes(result):
    inputs, targets = result.dataset.element_spec
    assert set(inputs) == {"encoder_inputs", "decoder_inputs"}
    for spec in (inputs["encoder_inputs"], inputs["decoder_inputs"], targets):
        assert spec.dtype == tf.int32 and spec.shape.rank == 2
    for encoder, decoder, target in _batches(result.dataset):
        assert encoder.shape == decoder.shape == target.shape
        assert encoder.dtype == decoder.dtype == target.dtype == np.int32


def test_targets_are_decoder_inputs_shifted_by_one(result, tokenizer):
    start, end = tokenizer.start_id, tokenizer.end_id
    rows = 0
    for encoder, decoder, target in _batches(result.dataset):
        for enc, dec, tgt in zip(encoder, decoder, target, strict=True):
            if not dec.any():
                continue  # an all-[PAD] row filling the last batch of a bucket
            rows += 1
            n = int((dec != 0).sum())
            assert (tgt != 0).sum() == n
            assert dec[0] == start and start not in tgt[:n]
            assert tgt[n - 1] == end and end not in dec[:n]
            np.testing.assert_array_equal(dec[1:n], tgt[: n - 1])
            m = int((enc != 0).sum())
            assert enc[0] == start and enc[m - 1] == end
    assert rows == result.num_examples


def test_padding_is_zero_and_only_at_the_end(result):
    for batch in _batches(result.dataset):
        for array in batch:
            nonzero = array != 0
            lengths = nonzero.sum(axis=1)
            positions = np.arange(array.shape[1])[None, :]
            np.testing.assert_array_equal(nonzero, positions < lengths[:, None])


def test_token_budget_is_respected(result):
    for encoder, _, _ in _batches(result.dataset):
        assert encoder.shape[0] * encoder.shape[1] <= TOKENS_PER_BATCH
    assert all(
        size * length <= TOKENS_PER_BATCH
        for size, length in zip(result.batch_sizes, result.bucket_boundaries, strict=True)
    )


def test_number_of_padded_shapes_is_bounded(pairs, tokenizer, result):
    repeated = make_dataset(
        pairs, tokenizer, tokens_per_batch=TOKENS_PER_BATCH, max_length=MAX_LENGTH, repeat=True
    )
    shapes = {tuple(targets.shape) for _, targets in repeated.dataset.take(5 * result.num_batches)}
    assert shapes <= set(repeated.padded_shapes)
    assert len(shapes) <= len(result.bucket_boundaries) == len(default_bucket_boundaries(48))
    one_epoch = {batch[2].shape for batch in _batches(result.dataset)}
    assert one_epoch == set(result.padded_shapes)
    assert all(length <= MAX_LENGTH for _, length in one_epoch)


def test_without_pad_remainder_at_most_two_shapes_per_bucket(pairs, tokenizer):
    result = make_dataset(
        pairs,
        tokenizer,
        tokens_per_batch=TOKENS_PER_BATCH,
        max_length=MAX_LENGTH,
        pad_remainder=False,
    )
    batches = _batches(result.dataset)
    assert sum(batch[2].shape[0] for batch in batches) == result.num_examples
    assert len({batch[2].shape for batch in batches}) <= 2 * len(result.bucket_boundaries)


def test_dropped_pairs_are_counted_and_logged(pairs, tokenizer, caplog):
    source, target = _lengths(pairs, tokenizer)
    expected = int(((source > MAX_LENGTH) | (target > MAX_LENGTH)).sum())
    assert expected > 0
    with caplog.at_level(logging.WARNING, logger="keras_transformer"):
        result = make_dataset(
            pairs, tokenizer, tokens_per_batch=TOKENS_PER_BATCH, max_length=MAX_LENGTH
        )
    assert result.num_dropped == expected
    assert result.num_examples == len(pairs) - expected
    assert f"dropped {expected} of {len(pairs)}" in caplog.text
    assert sum(result.bucket_counts) == result.num_examples
    real_rows = sum(int(batch[1][:, 0].astype(bool).sum()) for batch in _batches(result.dataset))
    assert real_rows == result.num_examples
    everything = make_dataset(pairs, tokenizer, tokens_per_batch=256, max_length=256)
    assert everything.num_dropped == 0 and everything.num_examples == len(pairs)


def test_every_kept_pair_appears_once_per_epoch(pairs, tokenizer, result):
    expected = sorted(
        tuple(ids)
        for ids, length in zip(
            encode_source(tokenizer, [p[0] for p in pairs]).to_list(),
            np.maximum(*_lengths(pairs, tokenizer)),
            strict=True,
        )
        if length <= MAX_LENGTH
    )
    seen = sorted(
        tuple(row[row != 0]) for batch in _batches(result.dataset) for row in batch[0] if row.any()
    )
    assert seen == expected


def test_cardinality_is_the_number_of_batches(result):
    assert int(result.dataset.cardinality()) == result.num_batches == len(_batches(result.dataset))


def test_deterministic_with_a_seed(pairs, tokenizer):
    def build(seed):
        return make_dataset(
            pairs, tokenizer, tokens_per_batch=TOKENS_PER_BATCH, max_length=MAX_LENGTH, seed=seed
        ).dataset

    first, second, other = build(7), build(7), build(8)
    batches = _batches(first)
    for a, b in zip(batches, _batches(second), strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
    flat = [row.tobytes() for batch in batches for row in batch[0]]
    assert flat != [row.tobytes() for batch in _batches(other) for row in batch[0]]
    # Each epoch is shuffled anew, reproducibly.
    assert flat != [row.tobytes() for batch in _batches(first) for row in batch[0]]
    unshuffled = make_dataset(
        pairs, tokenizer, tokens_per_batch=TOKENS_PER_BATCH, max_length=MAX_LENGTH, shuffle=False
    ).dataset
    a, b = _batches(unshuffled), _batches(unshuffled)
    assert all((x[0] == y[0]).all() for x, y in zip(a, b, strict=True))


def test_separate_target_tokenizer(pairs, tokenizer):
    target_tokenizer = train_tokenizer([p[1] for p in pairs], vocabulary_size=150)
    result = make_dataset(
        pairs[:50],
        tokenizer,
        target_tokenizer=target_tokenizer,
        max_length=256,
        tokens_per_batch=512,
        shuffle=False,
    )
    _, decoder, _ = _batches(result.dataset)[0]
    assert decoder.max() < target_tokenizer.vocabulary_size()


def test_pre_tokenized_pairs_copy_task():
    splits = copy_task(num_train=100, num_validation=10, num_test=10)
    result = make_dataset(
        splits.train, None, start_id=1, end_id=2, tokens_per_batch=64, max_length=16
    )
    assert result.num_examples == 100 and result.num_dropped == 0
    for inputs, targets in result.dataset:
        encoder, targets = inputs["encoder_inputs"].numpy(), targets.numpy()
        for enc, tgt in zip(encoder, targets, strict=True):
            if enc.any():
                np.testing.assert_array_equal(enc[1 : (enc != 0).sum()], tgt[: (tgt != 0).sum()])


def test_encode_source_and_target(tokenizer):
    ids = tokenizer.tokenize(["el la", "the"]).to_list()
    encoder = encode_source(tokenizer, ["el la", "the"]).to_list()
    decoder, targets = encode_target(tokenizer, tf.constant(["el la", "the"]))
    s, e = tokenizer.start_id, tokenizer.end_id
    assert encoder == [[s] + ids[0] + [e], [s] + ids[1] + [e]]
    assert decoder.to_list() == [[s] + ids[0], [s] + ids[1]]
    assert targets.to_list() == [ids[0] + [e], ids[1] + [e]]


def test_default_bucket_boundaries():
    assert default_bucket_boundaries(128) == (8, 16, 24, 32, 48, 64, 88, 128)
    assert default_bucket_boundaries(256)[-1] == 256
    assert default_bucket_boundaries(5) == (5,)
    for max_length in (10, 64, 100, 200, 512, 1024):
        boundaries = default_bucket_boundaries(max_length)
        assert boundaries[-1] == max_length and list(boundaries) == sorted(set(boundaries))
        assert len(boundaries) <= 16


def test_custom_bucket_boundaries(pairs, tokenizer):
    result = make_dataset(
        pairs, tokenizer, tokens_per_batch=512, max_length=MAX_LENGTH, bucket_boundaries=[16, 32]
    )
    assert result.bucket_boundaries == (16, 32, MAX_LENGTH)
    assert {batch[0].shape[1] for batch in _batches(result.dataset)} <= {16, 32, MAX_LENGTH}


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"tokens_per_batch": 10, "max_length": 48}, "tokens_per_batch=10"),
        ({"max_length": 1}, "max_length=1"),
        ({"bucket_boundaries": [16, 8]}, "bucket_boundaries=\\[16, 8\\]"),
        ({"bucket_boundaries": [0, 8]}, "bucket_boundaries"),
    ],
)
def test_invalid_arguments(pairs, tokenizer, kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_dataset(pairs, tokenizer, **kwargs)


def test_invalid_pairs(tokenizer):
    with pytest.raises(ValueError, match="empty"):
        make_dataset([], tokenizer)
    with pytest.raises(ValueError, match="start_id"):
        make_dataset([([3], [4])], None)


@pytest.mark.parametrize(
    "pairs, kwargs, match",
    [
        (
            [([3, 4], [5]), ([6], [7, 20])],
            {"vocabulary_size": 20},
            r"pairs\[1\]\[1\]\[1\]=20, vocabulary_size=20",
        ),
        ([([3, -4], [5])], {}, r"pairs\[0\]\[0\]\[1\]=-4"),
        ([([3.0, 4.0], [5])], {}, r"pairs\[0\]\[0\].dtype=float64"),
        ([([3], [5])], {"vocabulary_size": 20, "target_vocabulary_size": 5}, r"pairs\[0\]\[1\]\[0\]=5"),
        ([([3], [5])], {"vocabulary_size": 20, "end_id": 20}, "end_id=20, vocabulary_size=20"),
    ],
)
def test_pretokenized_ids_are_checked(pairs, kwargs, match):
    kwargs = {"start_id": 1, "end_id": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        make_dataset(pairs, None, tokens_per_batch=16, max_length=8, **kwargs)


def test_tokenized_ids_are_checked_against_the_model_vocabulary(pairs, tokenizer):
    with pytest.raises(ValueError, match="vocabulary_size=10"):
        make_dataset(pairs[:20], tokenizer, vocabulary_size=10)
    fits = make_dataset(pairs[:20], tokenizer, vocabulary_size=tokenizer.vocabulary_size())
    assert fits.num_examples == 20


@pytest.mark.all_backends
def test_model_fit_on_the_dataset_under_the_current_backend(result, tokenizer):
    vocabulary_size = tokenizer.vocabulary_size()
    encoder_inputs = keras.Input((None,), dtype="int32", name="encoder_inputs")
    decoder_inputs = keras.Input((None,), dtype="int32", name="decoder_inputs")
    embedding = keras.layers.Embedding(vocabulary_size, 16)
    context = keras.layers.GlobalAveragePooling1D()(embedding(encoder_inputs))  # (batch, 16)
    hidden = embedding(decoder_inputs) + keras.ops.expand_dims(context, 1)  # (batch, T, 16)
    logits = keras.layers.Dense(vocabulary_size)(hidden)  # (batch, T, vocabulary)
    model = keras.Model(
        {"encoder_inputs": encoder_inputs, "decoder_inputs": decoder_inputs}, logits
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0),
    )
    history = model.fit(result.dataset, epochs=2, shuffle=False, verbose=0)
    losses = history.history["loss"]
    assert len(losses) == 2 and np.isfinite(losses).all()
    assert losses[1] < losses[0]
