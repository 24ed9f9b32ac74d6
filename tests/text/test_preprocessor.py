"""Tests for `TranslationPreprocessor`: one contract, eager, traced and mapped in tf.data."""

import keras
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
pytest.importorskip("tensorflow_text")

# The translation contract in TensorFlow ops whatever the Keras backend: one_backend.
pytestmark = pytest.mark.one_backend

from keras_transformer.text import TranslationPreprocessor, train_tokenizer  # noqa: E402

SOURCES = ["uno dos tres cuatro cinco seis siete", "", "   \t ", "dos", "你好 mil"]
TARGETS = ["one two three four five six seven", "", "x", "two", "thousand"]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(SOURCES + TARGETS, vocabulary_size=120)


@pytest.fixture(scope="module")
def preprocessor(tokenizer):
    return TranslationPreprocessor(tokenizer, max_source_length=6, bucket_boundaries=(4,))


def _numpy(structure):
    def convert(value):
        return value.to_list() if isinstance(value, tf.RaggedTensor) else value.numpy().tolist()

    return tf.nest.map_structure(convert, structure)


def test_start_end_truncation_and_empty_input(preprocessor, tokenizer):
    features = preprocessor.generate_preprocess(SOURCES)
    pieces = tokenizer.tokenize(SOURCES).to_list()
    s, e = tokenizer.start_id, tokenizer.end_id
    assert features["encoder_inputs"].to_list() == [[s, *p[:4], e] for p in pieces]
    truncated = features["truncated"].numpy().tolist()
    assert truncated == [len(p) > 4 for p in pieces] and truncated[0] and not truncated[3]
    assert features["empty"].numpy().tolist() == [False, True, True, False, False]
    ids, truncated = preprocessor.encode_source(SOURCES[:1], truncate=False)
    assert ids.to_list() == [[s, *pieces[0], e]] and truncated.numpy().tolist() == [False]


def test_pad_batch_repeats_the_last_row_to_a_power_of_two(preprocessor, tokenizer):
    ids = tf.ragged.constant([[1, 5, 2], [1, 6, 7, 2], [1, 8, 2]], tf.int32)
    padded = preprocessor.pad_batch(ids).numpy()
    pad = tokenizer.pad_id
    # Longest row 4 -> bucket 4; 3 rows -> 4 rows, the last one repeated.
    assert padded.tolist() == [[1, 5, 2, pad], [1, 6, 7, 2], [1, 8, 2, pad], [1, 8, 2, pad]]
    assert preprocessor.pad_batch(ids[:1], 6).numpy().tolist() == [[1, 5, 2, pad, pad, pad]]
    # The NumPy twin a translate call pads with gives the same rows.
    for count in (1, 2, 3):
        for length in (4, 6):
            np.testing.assert_array_equal(
                preprocessor.pad_rows(ids[:count].to_list(), length),
                preprocessor.pad_batch(ids[:count], length).numpy(),
            )


def test_the_compiled_encoding_and_decoding_are_the_eager_ones(preprocessor, tokenizer):
    sources = ["hola mundo", "", "   ", "el perro come " * 40, "ñandú ü 😀"]
    features = preprocessor.generate_preprocess(sources)
    ids, truncated, empty = preprocessor.encode_for_search([s.encode() for s in sources])
    assert ids == features["encoder_inputs"].to_list()
    assert truncated.tolist() == features["truncated"].numpy().tolist()
    assert truncated[3] and not truncated[1]
    assert empty.tolist() == features["empty"].numpy().tolist()
    nothing, no_flags, _ = preprocessor.encode_for_search([])
    assert nothing == [] and no_flags.shape == (0,)
    rows = preprocessor.pad_rows(ids, max(map(len, ids)))
    eager = [text.decode() for text in preprocessor.generate_postprocess(rows).numpy()]
    assert preprocessor.decode_for_search(rows) == eager
    assert eager[0].startswith("hola")  # (The fixture keeps few pieces.)
    # The compiled count is the eager tokenization's, untruncated (past max_source_length).
    counts = preprocessor.count_pieces(sources)
    assert counts == [len(row) for row in tokenizer.tokenize(sources).to_list()]
    assert counts[3] > preprocessor.max_source_pieces and counts[1] == 0
    assert preprocessor.count_pieces([s.encode() for s in sources[::-1]]) == counts[::-1]
    assert preprocessor.count_pieces([]) == []


def test_bucket_index_matches_bucket_length(preprocessor):
    from keras_transformer.buckets import bucket_length

    boundaries = preprocessor.bucket_boundaries
    assert boundaries == (4, 6)
    for length in range(1, 7):
        index = int(preprocessor.bucket_index(tf.constant(length)))
        assert boundaries[index] == bucket_length(length, boundaries)
    # Each row's own bucket at once (the SavedModel's per-source maximum output lengths).
    indices = preprocessor.bucket_index(tf.constant([6, 1, 4, 5], tf.int64)).numpy().tolist()
    assert [boundaries[i] for i in indices] == [6, 4, 4, 6]


def test_fit_inputs_are_shifted_and_share_one_bucket_length(preprocessor, tokenizer):
    inputs, targets = preprocessor(SOURCES, TARGETS)
    encoder, decoder, targets = (
        inputs["encoder_inputs"].numpy(),
        inputs["decoder_inputs"].numpy(),
        targets.numpy(),
    )
    assert encoder.shape == decoder.shape == targets.shape == (5, 6)
    for row, target in enumerate(tokenizer.tokenize(TARGETS).to_list()):
        kept = target[:5]
        assert decoder[row, : len(kept) + 1].tolist() == [tokenizer.start_id, *kept]
        assert targets[row, : len(kept) + 1].tolist() == [*kept, tokenizer.end_id]
        assert not targets[row, len(kept) + 1 :].any()


def test_eager_traced_and_tf_data_give_the_same_outputs(preprocessor):
    eager = _numpy((preprocessor.generate_preprocess(SOURCES), preprocessor(SOURCES, TARGETS)))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)] * 2)
    def traced(sources, targets):
        return preprocessor.generate_preprocess(sources), preprocessor(sources, targets)

    assert _numpy(traced(tf.constant(SOURCES), tf.constant(TARGETS))) == eager
    dataset = tf.data.Dataset.from_tensor_slices((SOURCES, TARGETS)).batch(len(SOURCES))
    mapped = dataset.map(
        lambda sources, targets: (
            preprocessor.generate_preprocess(sources),
            preprocessor(sources, targets),
        )
    )
    assert _numpy(next(iter(mapped))) == eager


def test_generate_postprocess_stops_at_end(preprocessor, tokenizer):
    ids = tokenizer.tokenize(["dos", "mil"]).to_list()
    e, pad = tokenizer.end_id, tokenizer.pad_id
    rows = [[*ids[0], e, *ids[1]], [*ids[1], e, pad]]
    width = max(map(len, rows))
    rows = [row + [pad] * (width - len(row)) for row in rows]
    texts = preprocessor.generate_postprocess(np.array(rows, "int32")).numpy().tolist()
    assert texts == [b"dos", b"mil"]


def test_bad_arguments_are_named(tokenizer):
    with pytest.raises(ValueError, match="max_source_length=2"):
        TranslationPreprocessor(tokenizer, max_source_length=2)
    with pytest.raises(ValueError, match=r"bucket_boundaries=\[1, 8\]"):
        TranslationPreprocessor(tokenizer, bucket_boundaries=[1, 8])
    with pytest.raises(ValueError, match="tokenizer="):
        TranslationPreprocessor("not a tokenizer")


def test_saves_and_loads_with_safe_mode(preprocessor, tmp_path):
    clone = TranslationPreprocessor.from_config(preprocessor.get_config())
    assert clone.get_config() == preprocessor.get_config()
    path = tmp_path / "preprocessor.keras"
    wrapper = keras.Sequential([preprocessor])
    wrapper.save(path)
    loaded = keras.saving.load_model(path).layers[0]
    assert isinstance(loaded, TranslationPreprocessor)
    assert _numpy(loaded.generate_preprocess(SOURCES)) == _numpy(
        preprocessor.generate_preprocess(SOURCES)
    )
