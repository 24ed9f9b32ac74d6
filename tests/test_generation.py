"""Tests for `keras_transformer.generation`: compiled cached searches and the uncached reference.

The search tests use a tiny model trained to copy its input (the copy task). It is trained in
this process on JAX and in a `KERAS_BACKEND=jax` subprocess on the other backends (PyTorch
trains it about ten times slower on 2 CPU cores), then loaded from its `.keras` file, so every
backend decodes the same weights.
"""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_transformer import LabelSmoothedCrossentropy, Transformer, transformer_adam
from keras_transformer.buckets import bucket_length, padded_batch_size
from keras_transformer.datasets import copy_task, to_model_inputs
from keras_transformer.datasets.copy_task import END_ID, START_ID
from keras_transformer.decoding import Sampling, beam_search, length_penalty
from keras_transformer.generation import Generator, cached_next_logits, generate, grow_cache

BACKEND = keras.backend.backend()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COPY_VOCAB_SIZE = 14


# --------------------------------------------------------------------------- fixtures


def train_copy_model(path=None):
    """Trains the tiny copy-task model (about 40 s on JAX); saves it to `path` if given."""
    keras.utils.set_random_seed(0)
    splits = copy_task(num_train=4000, vocabulary_size=COPY_VOCAB_SIZE, max_length=8)
    inputs, targets = to_model_inputs(splits.train)
    model = Transformer.from_preset("tiny", vocabulary_size=COPY_VOCAB_SIZE, dropout=0.0)
    model.compile(
        optimizer=transformer_adam(64, warmup_steps=100), loss=LabelSmoothedCrossentropy(0.0)
    )
    # 30 epochs: after 10, a machine without AVX-512 left 1 to 8 of the 64 test rows wrong,
    # greedy and beam alike, where the machines before copied all of them; after 20, an
    # Intel Xeon with AMX (2026-11-28) still left one row's beam wrong.
    model.fit(inputs, targets, batch_size=32, epochs=30, verbose=0)
    if path is not None:
        model.save(path)
    return model


@pytest.fixture(scope="module")
def copy_model(tmp_path_factory):
    if BACKEND == "jax":
        return train_copy_model()
    path = tmp_path_factory.mktemp("copy_model") / "copy.keras"
    script = "import sys\nfrom tests.test_generation import train_copy_model\n"
    script += "train_copy_model(sys.argv[1])\n"
    result = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        cwd=ROOT,
        env={**os.environ, "KERAS_BACKEND": "jax"},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return keras.saving.load_model(path)


@pytest.fixture(scope="module")
def copy_generator(copy_model):
    """One generator for all copy tests: each search and shape is compiled once."""
    return Generator(copy_model, start_id=START_ID, end_id=END_ID, extra_length=4)


@pytest.fixture(scope="module")
def copy_test_inputs():
    pairs = copy_task(num_train=4000, vocabulary_size=COPY_VOCAB_SIZE, max_length=8).test[:64]
    sources = [list(source) for source, _ in pairs]
    return to_model_inputs(pairs)[0]["encoder_inputs"], sources


def greedy_penalized(sequences, scores, alpha):
    """Greedy scores divided by the length penalty of each sequence (end token included)."""
    lengths = np.array([_length(sequence) for sequence in sequences])
    return scores / keras.ops.convert_to_numpy(length_penalty(lengths, alpha))


def _length(sequence):
    sequence = list(sequence)
    return sequence.index(END_ID) + 1 if END_ID in sequence else len(sequence)


# --------------------------------------------------------------------------- searches


@pytest.mark.slow
def test_cached_greedy_equals_uncached_greedy(copy_generator, copy_test_inputs):
    inputs, _ = copy_test_inputs
    cached, cached_scores = copy_generator(inputs, beam_size=1)
    uncached, uncached_scores = copy_generator.uncached_greedy(inputs)
    assert cached.shape == uncached.shape == (len(inputs), 1, inputs.shape[1] + 4)
    np.testing.assert_array_equal(cached, uncached)
    np.testing.assert_allclose(cached_scores, uncached_scores, rtol=1e-4, atol=1e-4)


def test_next_logits_rows_grouped_by_source_match_a_repeated_batch():
    # Beam search calls `next_logits` with `beam_size` rows per source; the cross-attention
    # keys/values and the padding mask stay one row per source (not in the gathered cache).
    model = Transformer.from_preset("tiny", vocabulary_size=COPY_VOCAB_SIZE)
    inputs = np.array([[5, 6, 7, 8], [9, 10, 0, 0]], "int32")
    next_logits, cache = cached_next_logits(model, inputs, max_new_tokens=3, by_head=False)
    repeated_logits, repeated_cache = cached_next_logits(
        model, np.repeat(inputs, 3, axis=0), max_new_tokens=3
    )
    cache = keras.tree.map_structure(lambda leaf: keras.ops.repeat(leaf, 3, axis=0), cache)
    assert len(keras.tree.flatten(cache)) == 2 * model.num_decoder_layers  # self k/v only
    tokens = np.array([[START_ID], [4], [5], [START_ID], [6], [7]], "int32")
    for index in range(3):
        logits, cache = next_logits(tokens, cache, index)
        expected, repeated_cache = repeated_logits(tokens, repeated_cache, index)
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(logits), keras.ops.convert_to_numpy(expected), atol=1e-4
        )
        tokens = (tokens + 1) % COPY_VOCAB_SIZE


@pytest.mark.parametrize(
    "trained", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["untrained", "copy_model"]
)
def test_beam_search_reading_ancestors_in_place_equals_reordering_the_cache(
    trained, request, copy_test_inputs
):
    # `cached_next_logits(beam_size=4)` leaves the keys/values in their beam slots and masks
    # each beam to its own past; `beam_size=1` gives a plain cache that the search reorders.
    # Both searches must find the same hypotheses with the same scores, all four of them.
    if trained:
        model = request.getfixturevalue("copy_model")
    else:
        keras.utils.set_random_seed(7)
        model = Transformer.from_preset("tiny", vocabulary_size=COPY_VOCAB_SIZE, dropout=0.0)
    inputs, _ = copy_test_inputs
    inputs = inputs[:6]
    max_new_tokens = inputs.shape[1] + 4
    start_tokens = np.full((len(inputs),), START_ID, "int32")
    found = []
    for group in (1, 4):
        # Group 1: the batch-major cache, reordered by the search; group 4: in place, by head.
        next_logits, cache = cached_next_logits(
            model, inputs, max_new_tokens, beam_size=group, by_head=group > 1
        )
        sequences, scores = beam_search(
            next_logits, cache, start_tokens, max_new_tokens, END_ID, beam_size=4, alpha=0.6
        )
        found.append((keras.ops.convert_to_numpy(sequences), keras.ops.convert_to_numpy(scores)))
    np.testing.assert_array_equal(found[1][0], found[0][0])
    np.testing.assert_allclose(found[1][1], found[0][1], rtol=1e-5, atol=1e-5)
    assert len(np.unique(found[0][0].reshape(-1, max_new_tokens), axis=0)) > len(inputs)


def ending_problem(seed):
    """An untrained tiny model that ends some of its hypotheses, 16 sources of 6 tokens (some
    padded) and each row's most tokens (1 to 10): `(model, inputs, limits)`."""
    keras.utils.set_random_seed(11)
    model = Transformer.from_preset("tiny", vocabulary_size=COPY_VOCAB_SIZE, dropout=0.0)
    embeddings = model.target_embedding.embeddings
    table = keras.ops.convert_to_numpy(embeddings)
    table[END_ID] *= 3.0
    embeddings.assign(table)
    rng = np.random.default_rng(seed)
    inputs = rng.integers(3, COPY_VOCAB_SIZE, size=(16, 6)).astype("int32")
    inputs[::3, 4:] = 0
    return model, inputs, rng.integers(1, 11, size=16).astype("int32")


@pytest.mark.parametrize("beam_size, patience", [(4, None), (4, 2), (1, None)])
def test_a_shrinking_compiled_search_finds_what_the_whole_batch_finds(beam_size, patience):
    # `Generator(shrink_by=...)`: compiled (XLA on TensorFlow, jax.jit), the batch goes on
    # smaller once most of its rows are done (the encoder's keys, values and padding mask
    # selected with them); every row's hypotheses and scores are the whole batch's.
    model, inputs, limits = ending_problem(seed=0)
    found = [
        Generator(model, START_ID, END_ID, extra_length=4, shrink_by=shrink_by)(
            inputs, beam_size=beam_size, max_lengths=limits, patience=patience
        )
        for shrink_by in (None, 2)
    ]
    np.testing.assert_array_equal(found[1][0], found[0][0])
    np.testing.assert_allclose(found[1][1], found[0][1], rtol=1e-5, atol=1e-5)
    ended = (found[0][0][:, 0] == END_ID).any(axis=-1)
    assert 0 < ended.sum() < len(inputs)  # Some rows end, some run to their limit.


@pytest.mark.parametrize("patience, shrink_by", [(None, None), (2, 2), (None, 2)])
def test_a_growing_cache_gives_the_results_of_a_whole_cache(patience, shrink_by):
    # `Generator(grow_cache_from=2)`: compiled, the self-attention cache starts with 2
    # positions and doubles (4, 8, then the 10 of `max_new_tokens`) as the search reaches
    # its end; each step attends over the positions it holds. Every row's hypotheses and
    # scores are those of a cache of 10 positions, its own most tokens kept, whether the
    # batch shrinks too or not.
    model, inputs, limits = ending_problem(seed=1)
    decode_step, read = model.decode_step, set()

    def recording(tokens, cache, *args, **kwargs):  # The positions per slot each step reads.
        read.add(int(keras.ops.shape(cache[0]["self"]["value_by_head"])[2]) // 4)
        return decode_step(tokens, cache, *args, **kwargs)

    model.decode_step = recording
    found, lengths_read = [], []
    for grow in (None, 2):
        read.clear()
        found.append(
            Generator(
                model, START_ID, END_ID, extra_length=4, shrink_by=shrink_by, grow_cache_from=grow
            )(inputs, beam_size=4, max_lengths=limits, patience=patience)
        )
        lengths_read.append(set(read))
    # Compiled, every loop is traced. PyTorch's search is not compiled: it keeps the whole
    # cache (as `jit_compile=False` does).
    grown = {10} if BACKEND == "torch" else {2, 4, 8, 10}
    assert lengths_read == [{10}, grown]
    # One source keeps the whole cache (the one-sentence searches a server warms first).
    read.clear()
    generator = Generator(model, START_ID, END_ID, extra_length=4, grow_cache_from=2)
    one, _ = generator(inputs[:1], beam_size=4, max_lengths=limits[:1])
    assert read == {10}
    np.testing.assert_array_equal(one, found[0][0][:1])
    np.testing.assert_array_equal(found[1][0], found[0][0])
    np.testing.assert_allclose(found[1][1], found[0][1], rtol=1e-5, atol=1e-5)
    lengths = (found[0][0][:, 0] != 0).sum(axis=-1)
    assert lengths.max() > 4  # Some rows wrote past the first two lengths of the cache.


def test_grow_cache_keeps_each_slot_s_positions_where_a_step_reads_them():
    # The decoding layout holds slot j's position p at key j * length + p: a grown cache
    # holds every written key and value at its new place, zeros after them.
    model = Transformer.from_preset("tiny", vocabulary_size=COPY_VOCAB_SIZE, num_layers=1)
    inputs = np.array([[5, 6, 7, 8], [9, 10, 0, 0]], "int32")
    _, cache = cached_next_logits(model, inputs, 9, beam_size=3, cache_length=2)
    layer = cache.slots[0]
    heads, rows, key_dim, _ = keras.ops.shape(layer["key_by_head"])
    rng = np.random.default_rng(0)
    keys = rng.normal(size=(heads, rows, key_dim, 3 * 2)).astype("float32")
    values = rng.normal(size=(heads, rows, 3 * 2, 5)).astype("float32")
    cache = cache._replace(slots=[{**layer, "key_by_head": keys, "value_by_head": values}])
    grown = grow_cache(cache, 5).slots[0]
    grown_keys = keras.ops.convert_to_numpy(grown["key_by_head"])
    grown_values = keras.ops.convert_to_numpy(grown["value_by_head"])
    assert grown_keys.shape == (heads, rows, key_dim, 15) and grown_values.shape[2] == 15
    for slot in range(3):
        np.testing.assert_array_equal(
            grown_keys[..., slot * 5 : slot * 5 + 2], keys[..., slot * 2 : slot * 2 + 2]
        )
        np.testing.assert_array_equal(
            grown_values[:, :, slot * 5 : slot * 5 + 2], values[:, :, slot * 2 : slot * 2 + 2]
        )
        assert not grown_keys[..., slot * 5 + 2 : slot * 5 + 5].any()
        assert not grown_values[:, :, slot * 5 + 2 : slot * 5 + 5].any()
    assert keras.ops.shape(grown["group"]) == (3,)


@pytest.mark.slow
def test_beam_size_one_equals_greedy(copy_model, copy_generator, copy_test_inputs):
    # `beam_size=1` asks for greedy search; the beam search algorithm with one beam (and no
    # length penalty) finds the same tokens and scores.
    inputs, _ = copy_test_inputs
    greedy, greedy_scores = copy_generator(inputs, beam_size=1)
    max_new_tokens = inputs.shape[1] + 4
    next_logits, cache = cached_next_logits(copy_model, inputs, max_new_tokens, by_head=False)
    start_tokens = np.full((len(inputs),), START_ID, "int32")
    beam, beam_scores = beam_search(
        next_logits, cache, start_tokens, max_new_tokens, END_ID, beam_size=1, alpha=0.0
    )
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(beam), greedy)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(beam_scores)[:, 0], greedy_scores[:, 0], rtol=1e-4, atol=1e-4
    )
    np.testing.assert_array_equal(greedy, copy_generator.uncached_greedy(inputs)[0])


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_of_four_scores_at_least_greedy(copy_generator, copy_test_inputs, alpha):
    inputs, _ = copy_test_inputs
    greedy, greedy_scores = copy_generator(inputs, beam_size=1)
    beam, beam_scores = copy_generator(inputs, beam_size=4, alpha=alpha)
    assert beam.shape == (len(inputs), 4, inputs.shape[1] + 4)
    # Same scale: log probability / length penalty (alpha=0: plain log probability).
    greedy_scores = greedy_penalized(greedy[:, 0], greedy_scores[:, 0], alpha)
    assert np.all(beam_scores[:, 0] >= greedy_scores - 1e-4)
    assert np.all(np.diff(beam_scores, axis=1) <= 1e-6)  # Best first.


@pytest.mark.slow
def test_beam_search_copies_the_input(copy_generator, copy_test_inputs):
    inputs, sources = copy_test_inputs
    beam, _ = copy_generator(inputs)
    for row, source in enumerate(sources):
        assert beam[row, 0, : len(source) + 1].tolist() == source + [END_ID]


# --------------------------------------------------------------------------- compilation


@pytest.mark.skipif(BACKEND not in ("tensorflow", "jax"), reason="TF and JAX compile")
def test_a_second_call_with_the_same_shapes_does_not_retrace():
    model = Transformer.from_preset("tiny", vocabulary_size=20, num_layers=1)
    generator = Generator(model, start_id=1, end_id=2, extra_length=3)
    first = np.array([[5, 6, 7, 0], [8, 9, 0, 0]], "int32")
    second = np.array([[9, 8, 7, 6], [5, 0, 0, 0]], "int32")
    generator(first, beam_size=1)
    assert generator.trace_count == 1
    generator(second, beam_size=1)  # Same shape, new values.
    assert generator.trace_count == 1
    # A new batch size: a new trace.
    new_shape_traces = 2
    generator(np.zeros((4, 4), "int32"), beam_size=1)
    assert generator.trace_count == new_shape_traces
    generator(second, beam_size=1)
    generator(np.ones((4, 4), "int64"), beam_size=1)  # Any integer dtype.
    assert generator.trace_count == new_shape_traces


@pytest.mark.skipif(BACKEND not in ("tensorflow", "jax"), reason="TF and JAX compile")
def test_sampling_values_are_inputs_of_the_compiled_search_not_new_compilations():
    # A server's clients choose temperatures, top-k and top-p: each new value used to compile
    # a new search. Now one program serves every temperature and one every cut.
    model = Transformer.from_preset("tiny", vocabulary_size=20, num_layers=1)
    generator = Generator(model, start_id=1, end_id=2, extra_length=3)
    inputs = np.array([[5, 6, 7, 0], [8, 9, 0, 0]], "int32")
    for temperature in (0.5, 0.7, 1.3, 2.0):
        generator(inputs, beam_size=1, sampling=Sampling(temperature=temperature), seed=1)
    assert generator.trace_count == 1
    for top_k, top_p in ((3, 1.0), (5, 0.9), (0, 0.5), (7, 0.3)):
        generator(inputs, beam_size=1, sampling=Sampling(top_k, top_p, 0.8), seed=1)
    assert generator.trace_count == 2
    # The values still act: top-k 1 (any temperature, as a run-time input) is greedy search,
    # and a top-p cut to the first token is too.
    greedy, greedy_scores = generator(inputs, beam_size=1)
    for sampling in (Sampling(top_k=1, temperature=3.0), Sampling(top_p=1e-6)):
        drawn, scores = generator(inputs, beam_size=1, sampling=sampling, seed=5)
        np.testing.assert_array_equal(drawn, greedy)
        np.testing.assert_allclose(scores, greedy_scores, atol=1e-5)
    assert generator.trace_count == 3  # ...and greedy search its own.


@pytest.mark.skipif(BACKEND != "tensorflow", reason="TensorFlow's retracing warning")
def test_one_trace_per_bucket_gives_no_retracing_warning():
    # One compiled function per search length (source bucket) traces once each, by design:
    # TensorFlow must not warn of "excessive retracing" (the BLEU callback's epoch logs did).
    import logging

    class Records(logging.Handler):
        def __init__(self):
            super().__init__()
            self.messages = []

        def emit(self, record):
            self.messages.append(record.getMessage())

    records = Records()
    logger = logging.getLogger("tensorflow")
    logger.addHandler(records)
    try:
        model = Transformer.from_preset("tiny", vocabulary_size=20, num_layers=1, d_model=16)
        generator = Generator(model, start_id=1, end_id=2, extra_length=1)
        for length in range(1, 8):
            generator(np.full((1, length), 5, "int32"), beam_size=1)
    finally:
        logger.removeHandler(records)
    assert generator.trace_count == 7
    assert not [message for message in records.messages if "retracing" in message]


@pytest.mark.skipif(BACKEND not in ("tensorflow", "jax"), reason="TF and JAX compile")
def test_weights_are_inputs_of_the_compiled_function_not_constants():
    keras.utils.set_random_seed(1)
    model = Transformer.from_preset("tiny", vocabulary_size=20, num_layers=1)
    other = Transformer.from_preset("tiny", vocabulary_size=20, num_layers=1)
    generator = Generator(model, start_id=1, end_id=2, extra_length=3)
    inputs = np.array([[5, 6, 7, 0], [8, 9, 0, 0]], "int32")
    before, _ = generator(inputs, beam_size=1)
    for variable, value in zip(model.variables, other.variables, strict=True):
        variable.assign(value)
    after, _ = generator(inputs, beam_size=1)
    expected, _ = generate(other, inputs, 1, 2, max_new_tokens=7, beam_size=1)
    np.testing.assert_array_equal(after, keras.ops.convert_to_numpy(expected))
    assert generator.trace_count == 1
    assert not np.array_equal(before, after)


def test_uncompiled_generation_equals_compiled():
    model = Transformer.from_preset("tiny", vocabulary_size=20, num_layers=1)
    inputs = np.array([[5, 6, 7, 0], [8, 9, 0, 0]], "int32")
    compiled = Generator(model, start_id=1, end_id=2, extra_length=3)
    eager = Generator(model, start_id=1, end_id=2, extra_length=3, jit_compile=False)
    for beam_size in (1, 4):
        expected = compiled(inputs, beam_size=beam_size)
        actual = eager(inputs, beam_size=beam_size)
        np.testing.assert_array_equal(actual[0], expected[0])
        np.testing.assert_allclose(actual[1], expected[1], rtol=1e-4, atol=1e-4)


def test_buckets_and_padded_batch_sizes():
    assert [bucket_length(n, (8, 16, 32)) for n in (1, 8, 9, 32)] == [8, 8, 16, 32]
    with pytest.raises(ValueError, match="length=33"):
        bucket_length(33, (8, 16, 32))
    assert [padded_batch_size(n) for n in (0, 1, 2, 3, 5, 32, 33)] == [1, 1, 2, 4, 8, 32, 64]


def test_generator_bad_arguments_are_named():
    model = Transformer.from_preset("tiny", vocabulary_size=20, num_layers=1)
    with pytest.raises(ValueError, match="extra_length=0"):
        Generator(model, start_id=1, end_id=2, extra_length=0)
    with pytest.raises(ValueError, match="grow_cache_from=0"):
        Generator(model, start_id=1, end_id=2, grow_cache_from=0)
    generator = Generator(model, start_id=1, end_id=2)
    with pytest.raises(ValueError, match="beam_size=0"):
        generator(np.ones((1, 3), "int32"), beam_size=0)
    with pytest.raises(ValueError, match="max_new_tokens=0"):
        generator(np.ones((1, 3), "int32"), max_new_tokens=0)
    with pytest.raises(ValueError, match=r"encoder_inputs.shape=\(3,\)"):
        generator(np.ones((3,), "int32"))


def test_generator_rejects_out_of_range_ids_before_compiling():
    model = Transformer.from_preset("tiny", vocabulary_size=20, num_layers=1)
    with pytest.raises(ValueError, match="start_id=20, vocabulary_size=20"):
        Generator(model, start_id=20, end_id=2)
    with pytest.raises(ValueError, match="end_id=-1, vocabulary_size=20"):
        Generator(model, start_id=1, end_id=-1)
    generator = Generator(model, start_id=1, end_id=2)
    # The compiled search would not check: JAX would decode from NaN embeddings.
    with pytest.raises(ValueError, match=r"encoder_inputs\[1, 0\]=20, vocabulary_size=20"):
        generator(np.array([[5, 6], [20, 0]], "int32"), beam_size=1)
    with pytest.raises(ValueError, match="encoder_inputs.dtype=float"):
        generator(np.array([[5.0, 6.0]]), beam_size=1)
    assert generator.trace_count == 0
