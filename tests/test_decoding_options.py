"""Target prefixes and sampling in `keras_transformer.decoding`'s searches, on every backend.

A bigram stub (the next-token logits depend on the previous token only) makes the expected
continuations of a prefix plain searches started from its last token, and the sampling
distribution the stub's softmax row.
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer.decoding import Sampling, beam_search, check_sampling, greedy_search

PAD, END, START = 0, 1, 2
VOCAB_SIZE = 8


def bigram(seed=0):
    rng = np.random.default_rng(seed)
    table = np.log(rng.dirichlet(np.full(VOCAB_SIZE, 0.7), size=VOCAB_SIZE)).astype("float32")
    tensor = ops.convert_to_tensor(table)

    def next_logits(tokens, cache, index):
        return ops.take(tensor, tokens[:, 0], axis=0), cache

    return table, next_logits


def log_softmax(row):
    row = np.asarray(row, "float64")
    return row - np.log(np.exp(row - row.max()).sum()) - row.max()


def numpy(x):
    return ops.convert_to_numpy(x)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_prefix_is_kept_and_continued_as_a_search_from_its_last_token(beam_size):
    table, next_logits = bigram()
    prefixes = [[5, 6, 3], [7], []]  # ragged, one row without a prefix
    prefix = np.full((3, 3), -1, "int32")
    for row, ids in enumerate(prefixes):
        prefix[row, : len(ids)] = ids
    starts = np.full((3,), START, "int32")
    options = dict(max_new_tokens=8, end_id=END)

    def search(start_tokens, max_new_tokens, prefix=None):
        if beam_size == 1:
            sequences, scores = greedy_search(
                next_logits, {}, start_tokens, max_new_tokens, END, prefix=prefix
            )
            return numpy(sequences)[:, None], numpy(scores)[:, None]
        sequences, scores = beam_search(
            next_logits,
            {},
            start_tokens,
            max_new_tokens,
            END,
            beam_size=beam_size,
            alpha=0.0,
            prefix=prefix,
        )
        return numpy(sequences), numpy(scores)

    sequences, scores = search(starts, options["max_new_tokens"], prefix)
    plain, plain_scores = search(starts, options["max_new_tokens"])
    np.testing.assert_array_equal(sequences[2], plain[2])  # no prefix: untouched
    for row, ids in enumerate(prefixes[:2]):
        # Every hypothesis starts with the prefix ...
        assert (sequences[row, :, : len(ids)] == ids).all()
        # ... and goes on as a search started from its last token (the stub is a bigram).
        rest, rest_scores = search(np.array([ids[-1]], "int32"), 8 - len(ids))
        np.testing.assert_array_equal(sequences[row, :, len(ids) :], rest[0])
        previous = [START, *ids[:-1]]
        prefix_log_prob = sum(log_softmax(table[a])[b] for a, b in zip(previous, ids))
        np.testing.assert_allclose(scores[row], prefix_log_prob + rest_scores[0], atol=1e-4)


def sample(sampling, seed, rows=4000, table_seed=1):
    table, next_logits = bigram(table_seed)
    generator = keras.random.SeedGenerator(0)
    sequences, scores = greedy_search(
        next_logits,
        {},
        np.full((rows,), START, "int32"),
        1,
        END,
        sampling=sampling,
        seed=(generator, np.array([seed, 0])),
    )
    return table, numpy(sequences)[:, 0], numpy(scores)


def test_sampling_with_a_seed_is_reproducible_and_top_k_one_is_greedy():
    _, first, _ = sample(Sampling(), seed=7, rows=64)
    _, again, _ = sample(Sampling(), seed=7, rows=64)
    _, other, _ = sample(Sampling(), seed=8, rows=64)
    np.testing.assert_array_equal(first, again)
    assert (first != other).any()
    table, greedy, _ = sample(Sampling(top_k=1, temperature=3.0), seed=7, rows=16)
    assert (greedy == np.argmax(table[START])).all()


@pytest.mark.parametrize(
    "sampling",
    [Sampling(), Sampling(top_k=3), Sampling(top_p=0.6), Sampling(temperature=0.5)],
    ids=["full", "top_k", "top_p", "temperature"],
)
def test_sample_frequencies_match_the_models_distribution(sampling):
    table, drawn, scores = sample(sampling, seed=3)
    logits = table[START].astype("float64") / sampling.temperature
    order = np.argsort(-logits, kind="stable")
    keep = np.ones(VOCAB_SIZE, bool)
    if sampling.top_k:
        keep[order[sampling.top_k :]] = False
    if sampling.top_p < 1:
        probabilities = np.exp(log_softmax(logits))[order]
        before = np.cumsum(probabilities) - probabilities
        keep[order[before >= sampling.top_p]] = False
    expected = np.where(keep, np.exp(log_softmax(logits)), 0.0)
    expected /= expected.sum()
    frequencies = np.bincount(drawn, minlength=VOCAB_SIZE) / len(drawn)
    # 4,000 draws: a frequency's standard deviation is at most 0.008; 0.035 is over 4 of them
    # (fixed seed: the test is deterministic, the tolerance says how far chance may go).
    assert np.abs(frequencies - expected).max() < 0.035, (frequencies, expected)
    assert (frequencies[~keep] == 0).all()
    # Scores are the model's own log probabilities (temperature 1, no cut).
    np.testing.assert_allclose(scores, log_softmax(table[START])[drawn], atol=1e-5)


def test_sampling_and_prefix_arguments_are_checked():
    _, next_logits = bigram()
    starts = np.full((2,), START, "int32")
    with pytest.raises(ValueError, match="sampling_topp"):
        greedy_search(
            next_logits,
            {},
            starts,
            3,
            END,
            sampling=Sampling(top_p=0.0),
            seed=keras.random.SeedGenerator(0),
        )
    with pytest.raises(ValueError, match="seed"):
        greedy_search(next_logits, {}, starts, 3, END, sampling=Sampling(), seed=3)
    # Below 1e-6 float32 logits divided by the temperature overflow (1e-300 is 0 in float32).
    for temperature in (1e-300, 0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match=r"sampling_temperature.*>= 1e-06"):
            check_sampling(Sampling(temperature=temperature))
    check_sampling(Sampling(temperature=1e-6))
    with pytest.raises(ValueError, match="prefix"):
        greedy_search(next_logits, {}, starts, 3, END, prefix=np.zeros((2, 4), "int32"))
