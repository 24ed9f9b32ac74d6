"""Tests for `keras_transformer.generation` (compiled searches) and `Translator`.

The search tests use a tiny model trained to copy its input (the copy task). It is trained in
this process on JAX and in a `KERAS_BACKEND=jax` subprocess on the other backends (PyTorch
trains it about ten times slower on 2 CPU cores), then loaded from its `.keras` file, so every
backend decodes the same weights. The `Translator` tests use small untrained models.
"""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_transformer import LabelSmoothedCrossentropy, Transformer, transformer_adam
from keras_transformer.datasets import copy_task, to_model_inputs
from keras_transformer.datasets.copy_task import END_ID, START_ID
from keras_transformer.decoding import length_penalty
from keras_transformer.generation import Generator, bucket_length, generate, padded_batch_size
from keras_transformer.translator import Translation, Translator

BACKEND = keras.backend.backend()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COPY_VOCAB_SIZE = 14

SENTENCES = [
    "uno",
    "dos mil trescientos",
    "¿Dónde está?",
    "cuarenta y dos",
    "mil novecientos sesenta y seis",
]
CORPUS = SENTENCES + [
    "one",
    "two thousand, three hundred",
    "Where is it?",
    "forty-two",
    "one thousand, nine hundred and sixty-six",
]


# --------------------------------------------------------------------------- fixtures


def train_copy_model(path=None):
    """Trains the tiny copy-task model (about 20 s on JAX); saves it to `path` if given."""
    keras.utils.set_random_seed(0)
    splits = copy_task(num_train=4000, vocab_size=COPY_VOCAB_SIZE, max_length=8)
    inputs, targets = to_model_inputs(splits.train)
    model = Transformer.from_preset("tiny", vocab_size=COPY_VOCAB_SIZE, dropout=0.0)
    model.compile(
        optimizer=transformer_adam(64, warmup_steps=100), loss=LabelSmoothedCrossentropy(0.0)
    )
    model.fit(inputs, targets, batch_size=32, epochs=10, verbose=0)
    if path is not None:
        model.save(path)
    return model


@pytest.fixture(scope="module")
def copy_model(tmp_path_factory):
    if BACKEND == "jax":
        return train_copy_model()
    path = tmp_path_factory.mktemp("copy_model") / "copy.keras"
    script = "import sys\nfrom tests.test_translator import train_copy_model\n"
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
    pairs = copy_task(num_train=4000, vocab_size=COPY_VOCAB_SIZE, max_length=8).test[:64]
    sources = [list(source) for source, _ in pairs]
    return to_model_inputs(pairs)[0]["encoder_inputs"], sources


@pytest.fixture(scope="module")
def tokenizer():
    from keras_transformer.text import train_tokenizer

    return train_tokenizer(CORPUS, vocabulary_size=200)


@pytest.fixture(scope="module")
def translator(tokenizer):
    return make_translator(tokenizer, max_source_length=16)


def make_translator(tokenizer, **kwargs):
    """A small untrained Translator. Eager on TensorFlow unless `jit_compile=True` (an XLA
    compile per new shape costs more than running these few sentences eagerly); compiled on
    JAX, whose eager mode compiles every operation for every new shape."""
    keras.utils.set_random_seed(3)
    model = Transformer.from_preset(
        "tiny", vocab_size=tokenizer.vocabulary_size(), num_layers=1, dropout=0.0
    )
    kwargs = {"extra_length": 6, "jit_compile": BACKEND == "jax", **kwargs}
    return Translator(model, tokenizer, **kwargs)


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
    cached, cached_scores = copy_generator(inputs, search="greedy")
    uncached, uncached_scores = copy_generator(inputs, search="uncached_greedy")
    assert cached.shape == uncached.shape == (len(inputs), inputs.shape[1] + 4)
    np.testing.assert_array_equal(cached, uncached)
    np.testing.assert_allclose(cached_scores, uncached_scores, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_beam_size_one_equals_greedy(copy_generator, copy_test_inputs):
    inputs, _ = copy_test_inputs
    greedy, greedy_scores = copy_generator(inputs, search="greedy")
    beam, beam_scores = copy_generator(inputs, search="beam", beam_size=1, alpha=0.0)
    np.testing.assert_array_equal(beam[:, 0], greedy)
    np.testing.assert_allclose(beam_scores[:, 0], greedy_scores, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_of_four_scores_at_least_greedy(copy_generator, copy_test_inputs, alpha):
    inputs, _ = copy_test_inputs
    greedy, greedy_scores = copy_generator(inputs, search="greedy")
    beam, beam_scores = copy_generator(inputs, search="beam", beam_size=4, alpha=alpha)
    assert beam.shape == (len(inputs), 4, inputs.shape[1] + 4)
    # Same scale: log probability / length penalty (alpha=0: plain log probability).
    greedy_scores = greedy_penalized(greedy, greedy_scores, alpha)
    assert np.all(beam_scores[:, 0] >= greedy_scores - 1e-4)
    assert np.all(np.diff(beam_scores, axis=1) <= 1e-6)  # Best first.


@pytest.mark.slow
def test_beam_search_copies_the_input(copy_generator, copy_test_inputs):
    inputs, sources = copy_test_inputs
    beam, _ = copy_generator(inputs, search="beam")
    for row, source in enumerate(sources):
        assert beam[row, 0, : len(source) + 1].tolist() == source + [END_ID]


# --------------------------------------------------------------------------- compilation


@pytest.mark.skipif(BACKEND not in ("tensorflow", "jax"), reason="TF and JAX compile")
def test_a_second_call_with_the_same_shapes_does_not_retrace():
    model = Transformer.from_preset("tiny", vocab_size=20, num_layers=1)
    generator = Generator(model, start_id=1, end_id=2, extra_length=3)
    first = np.array([[5, 6, 7, 0], [8, 9, 0, 0]], "int32")
    second = np.array([[9, 8, 7, 6], [5, 0, 0, 0]], "int32")
    generator(first, search="greedy")
    assert generator.trace_count == 1
    generator(second, search="greedy")  # Same shape, new values.
    assert generator.trace_count == 1
    generator(np.zeros((4, 4), "int32"), search="greedy")  # New batch size.
    assert generator.trace_count == 2
    generator(second, search="greedy")
    generator(np.ones((4, 4), "int32"), search="greedy")
    assert generator.trace_count == 2


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
        model = Transformer.from_preset("tiny", vocab_size=20, num_layers=1, d_model=16)
        generator = Generator(model, start_id=1, end_id=2, extra_length=1)
        for length in range(1, 8):
            generator(np.full((1, length), 5, "int32"), search="greedy")
    finally:
        logger.removeHandler(records)
    assert generator.trace_count == 7
    assert not [message for message in records.messages if "retracing" in message]


@pytest.mark.skipif(BACKEND not in ("tensorflow", "jax"), reason="TF and JAX compile")
def test_weights_are_inputs_of_the_compiled_function_not_constants():
    keras.utils.set_random_seed(1)
    model = Transformer.from_preset("tiny", vocab_size=20, num_layers=1)
    other = Transformer.from_preset("tiny", vocab_size=20, num_layers=1)
    generator = Generator(model, start_id=1, end_id=2, extra_length=3)
    inputs = np.array([[5, 6, 7, 0], [8, 9, 0, 0]], "int32")
    before, _ = generator(inputs, search="greedy")
    for variable, value in zip(model.variables, other.variables, strict=True):
        variable.assign(value)
    after, _ = generator(inputs, search="greedy")
    expected, _ = generate(other, inputs, 1, 2, max_length=7, search="greedy")
    np.testing.assert_array_equal(after, keras.ops.convert_to_numpy(expected))
    assert generator.trace_count == 1
    assert not np.array_equal(before, after)


def test_uncompiled_generation_equals_compiled():
    model = Transformer.from_preset("tiny", vocab_size=20, num_layers=1)
    inputs = np.array([[5, 6, 7, 0], [8, 9, 0, 0]], "int32")
    compiled = Generator(model, start_id=1, end_id=2, extra_length=3)
    eager = Generator(model, start_id=1, end_id=2, extra_length=3, jit_compile=False)
    for search in ("greedy", "beam"):
        expected = compiled(inputs, search=search)
        actual = eager(inputs, search=search)
        np.testing.assert_array_equal(actual[0], expected[0])
        np.testing.assert_allclose(actual[1], expected[1], rtol=1e-4, atol=1e-4)


def test_buckets_and_padded_batch_sizes():
    assert [bucket_length(n, (8, 16, 32)) for n in (1, 8, 9, 32)] == [8, 8, 16, 32]
    with pytest.raises(ValueError, match="length=33"):
        bucket_length(33, (8, 16, 32))
    assert [padded_batch_size(n) for n in (0, 1, 2, 3, 5, 32, 33)] == [1, 1, 2, 4, 8, 32, 64]


def test_generator_bad_arguments_are_named():
    model = Transformer.from_preset("tiny", vocab_size=20, num_layers=1)
    with pytest.raises(ValueError, match="extra_length=0"):
        Generator(model, start_id=1, end_id=2, extra_length=0)
    generator = Generator(model, start_id=1, end_id=2)
    with pytest.raises(ValueError, match="search='sample'"):
        generator(np.ones((1, 3), "int32"), search="sample")
    with pytest.raises(ValueError, match=r"encoder_inputs.shape=\(3,\)"):
        generator(np.ones((3,), "int32"))


def test_generator_rejects_out_of_range_ids_before_compiling():
    model = Transformer.from_preset("tiny", vocab_size=20, num_layers=1)
    with pytest.raises(ValueError, match="start_id=20, vocab_size=20"):
        Generator(model, start_id=20, end_id=2)
    with pytest.raises(ValueError, match="end_id=-1, vocab_size=20"):
        Generator(model, start_id=1, end_id=-1)
    generator = Generator(model, start_id=1, end_id=2)
    # The compiled search would not check: JAX would decode from NaN embeddings.
    with pytest.raises(ValueError, match=r"encoder_inputs\[1, 0\]=20, vocab_size=20"):
        generator(np.array([[5, 6], [20, 0]], "int32"), search="greedy")
    with pytest.raises(ValueError, match="encoder_inputs.dtype=float"):
        generator(np.array([[5.0, 6.0]]), search="greedy")
    assert generator.trace_count == 0


# --------------------------------------------------------------------------- Translator


def test_translator_returns_strings_in_input_order(translator):
    outputs = translator(SENTENCES)
    assert isinstance(outputs, list) and len(outputs) == len(SENTENCES)
    assert all(isinstance(output, str) for output in outputs)
    # Sorting, bucketing and batch padding do not change any translation.
    assert [translator(sentence) for sentence in SENTENCES] == outputs
    assert translator([]) == []
    assert translator(np.array(SENTENCES[:2])) == outputs[:2]


def test_translate_details_scores_and_attention(translator):
    translation = translator.translate("dos mil trescientos", return_attention=True)
    assert isinstance(translation, Translation)
    assert translation.source_tokens[0] == "[START]" and translation.source_tokens[-1] == "[END]"
    assert len(translation.target_tokens) == len(translation.tokens) >= 1
    assert np.isfinite(translation.score) and translation.score <= 0
    model = translator.model
    assert translation.attention.shape == (
        model.num_decoder_layers,
        model.num_heads,
        len(translation.tokens),
        len(translation.source_tokens),
    )
    np.testing.assert_allclose(translation.attention.sum(axis=-1), 1.0, atol=1e-5)
    greedy = translator.translate(["dos mil trescientos"], beam_size=1)[0]  # Greedy search.
    assert isinstance(greedy.score, float) and greedy.attention is None


def test_output_length_is_bounded_by_source_length_plus_extra(tokenizer):
    translator = make_translator(tokenizer, extra_length=3, bucket_boundaries=(8, 16))
    translation = translator.translate("uno")  # An untrained model rarely stops by itself.
    assert len(translation.tokens) <= 8 + 3


@pytest.mark.parametrize(
    "sentence",
    ["", "   \t ", "x" * 10_000, "palabra " * 2_000, b"\xff\xfe\xfa", "😀🎉 dos", "你好，世界"],
    ids=["empty", "whitespace", "10k-chars", "10k-words", "invalid-utf8", "emoji", "chinese"],
)
def test_bad_inputs_give_strings(translator, sentence):
    translation = translator.translate([sentence])[0]
    assert isinstance(translation.text, str)
    assert len(translation.source_tokens) <= 16
    if sentence in ("", "   \t "):
        assert translation.text == "" and translation.score == 0.0
    assert translation.truncated == (sentence == "palabra " * 2_000)


def test_truncation_keeps_the_first_pieces(tokenizer):
    translator = make_translator(tokenizer, max_source_length=6)
    ids, truncated = translator.encode_sources(["uno dos tres cuatro cinco seis", "uno"])
    pieces = tokenizer.tokenize("uno dos tres cuatro cinco seis").numpy().tolist()
    assert len(pieces) > 4
    assert ids[0].tolist() == [tokenizer.start_id, *pieces[:4], tokenizer.end_id]
    assert truncated.tolist() == [True, False]


def test_non_string_inputs_raise_value_error(translator):
    with pytest.raises(ValueError, match="sentences"):
        translator([1, 2])
    with pytest.raises(ValueError, match="sentences"):
        translator(3)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"beam_size": 0}, "beam_size=0"),
        ({"alpha": -1.0}, "alpha=-1.0"),
        ({"max_source_length": 2}, "max_source_length=2"),
        ({"extra_length": 0}, "extra_length=0"),
        ({"batch_size": 0}, "batch_size=0"),
        ({"bucket_boundaries": [16, 8]}, r"bucket_boundaries=\[16, 8\]"),
    ],
)
def test_translator_bad_arguments_are_named(tokenizer, kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_translator(tokenizer, **kwargs)


def test_translator_needs_a_model_and_a_tokenizer(tokenizer):
    with pytest.raises(ValueError, match="model="):
        Translator(object(), tokenizer)
    model = Transformer.from_preset("tiny", vocab_size=tokenizer.vocabulary_size())
    with pytest.raises(ValueError, match="tokenizer="):
        Translator(model, "not a tokenizer")


def test_save_and_load_round_trip(tokenizer, tmp_path):
    translator = make_translator(tokenizer, beam_size=3, alpha=0.5, max_source_length=24)
    expected = translator(SENTENCES)
    path = tmp_path / "translator.keras"
    translator.save(path)
    loaded = Translator.load(path)
    assert isinstance(loaded, Translator)
    assert loaded(SENTENCES) == expected
    config = loaded.get_config()
    assert config["beam_size"] == 3 and config["alpha"] == 0.5
    assert config["max_source_length"] == 24 and config["bucket_boundaries"][-1] == 24
    assert loaded.tokenizer.get_vocabulary() == tokenizer.get_vocabulary()
    # Also through keras.saving.load_model, the generic loader.
    assert isinstance(keras.saving.load_model(path), Translator)


def test_load_rejects_a_file_without_a_translator(tmp_path):
    path = tmp_path / "model.keras"
    Transformer.from_preset("tiny", vocab_size=20, num_layers=1).save(path)
    with pytest.raises(ValueError, match="Transformer"):
        Translator.load(path)


def test_config_round_trip(tokenizer):
    translator = make_translator(tokenizer, beam_size=2, batch_size=8)
    config = translator.get_config()
    clone = Translator.from_config(config)
    assert clone.get_config() == config


@pytest.mark.skipif(BACKEND not in ("tensorflow", "jax"), reason="TF and JAX compile")
def test_translator_second_call_does_not_retrace(tokenizer):
    translator = make_translator(tokenizer, jit_compile=True, beam_size=1)
    translator(SENTENCES)
    traces = translator.generator.trace_count
    assert traces >= 1
    translator(SENTENCES)
    translator(list(reversed(SENTENCES)))  # Same buckets and batch sizes.
    assert translator.generator.trace_count == traces
