"""int8 quantization (`Transformer.quantize`, `Translator.quantize`): what changes, what a
quantized model saves and loads as, and how it decodes."""

import keras
import numpy as np
import pytest

from keras_transformer import Transformer, Translator

BATCH = {
    "encoder_inputs": np.array([[5, 6, 7, 9, 0, 0], [11, 12, 13, 14, 15, 3]]),
    "decoder_inputs": np.array([[2, 5, 6, 8], [2, 11, 12, 0]]),
}


def logits(model):
    return keras.ops.convert_to_numpy(model(BATCH))


def quantized_tiny(**kwargs):
    model = Transformer.from_preset("tiny", vocabulary_size=100, seed=1, **kwargs)
    before = logits(model)
    model.quantize("int8")
    return model, before


def test_quantize_stores_every_projection_and_the_embedding_as_int8():
    model, before = quantized_tiny()
    after = logits(model)
    kernels = [w for w in model.weights if w.path.endswith("/kernel")]
    assert len(kernels) == 2 * 6 + 2 * 10  # 2 encoder blocks of 6 Dense, 2 decoder of 10
    assert {w.dtype for w in kernels} == {"int8"}
    embedding = model.source_embedding
    assert embedding.embeddings.dtype == "int8"
    assert tuple(embedding.embeddings_scale.shape) == (100,)
    assert model.quantization == "int8"
    # int8 rounding moves each logit a little, not the model: the same argmax nearly
    # everywhere and a change far below the logits' own spread.
    assert np.abs(after - before).max() < 0.1 * before.std()
    assert (after.argmax(-1) == before.argmax(-1)).mean() > 0.9
    # Norms and biases stay float.
    assert all(w.dtype == "float32" for w in model.weights if "norm" in w.path)


def test_the_int8_embedding_reads_back_its_rows_within_one_step_of_its_scale():
    model = Transformer.from_preset("tiny", vocabulary_size=100, seed=1)
    table = keras.ops.convert_to_numpy(model.source_embedding.embeddings)
    model.quantize("int8")
    embedding = model.source_embedding
    values = keras.ops.convert_to_numpy(embedding.embeddings).astype("float32")
    scale = keras.ops.convert_to_numpy(embedding.embeddings_scale)
    # Each row's largest value maps to +-127; every value is within half a step.
    np.testing.assert_array_equal(np.abs(values).max(axis=1), 127)
    assert np.abs(values / scale[:, None] - table).max() <= 0.5 / scale.min() + 1e-7


@pytest.mark.parametrize("share_embeddings", [True, False])
def test_a_quantized_model_reloads_equal_from_keras_file_and_preset(tmp_path, share_embeddings):
    model, _ = quantized_tiny(share_embeddings=share_embeddings)
    expected = logits(model)
    model.save(tmp_path / "model.keras")
    reloaded = keras.saving.load_model(tmp_path / "model.keras")
    np.testing.assert_array_equal(logits(reloaded), expected)
    assert reloaded.quantization == "int8"
    assert {w.dtype for w in reloaded.weights if w.path.endswith("/kernel")} == {"int8"}
    model.save_to_preset(tmp_path / "preset")
    from_preset = Transformer.from_preset(tmp_path / "preset")  # no argument says int8
    np.testing.assert_array_equal(logits(from_preset), expected)
    # The file holds int8 weights (a quarter of the bytes; h5 overhead, biases and norms stay).
    float_model = Transformer.from_preset("tiny", vocabulary_size=100, seed=1)
    float_model.save(tmp_path / "float.keras")
    assert (tmp_path / "model.keras").stat().st_size < 0.5 * (tmp_path / "float.keras").stat().st_size


def test_quantize_refuses_other_modes_and_a_second_call():
    model = Transformer.from_preset("tiny", vocabulary_size=100)
    with pytest.raises(ValueError, match="mode='int4'"):
        model.quantize("int4")
    model.quantize("int8")
    with pytest.raises(ValueError, match="already quantized"):
        model.quantize("int8")


def test_a_quantized_translator_translates_as_the_float_one_and_reloads_equal(
    number_translator, tmp_path
):
    translator, test_pairs, keras_path = number_translator
    sources = [source for source, _ in test_pairs[:24]]
    expected = [t.text for t in translator.translate(sources)]
    quantized = Translator.load(keras_path)
    assert not quantized.jit_compile  # the fixture's: a few sentences decode eagerly
    if keras.backend.backend() == "tensorflow":
        with pytest.warns(UserWarning, match="jit_compile=False"):
            quantized.quantize("int8")
    else:
        quantized.quantize("int8")
    got = quantized.translate(sources)
    agreement = np.mean([a.text == b for a, b in zip(got, expected)])
    assert agreement >= 0.9, agreement
    # The cached decoding step (direct sub-layer calls) and the whole-prefix decoder read
    # the same int8 weights: a translation's score is its forced-decoding score (within
    # 5e-3: the two paths' float differences of ~1e-6 can round one activation the other
    # way when each row is quantized; measured 1.1e-3 on JAX).
    greedy = quantized.translate(sources[:4], beam_size=1, alpha=0.0)
    scores = quantized.score(sources[:4], [t.text for t in greedy])
    np.testing.assert_allclose([s.score for s in scores], [t.score for t in greedy], atol=5e-3)
    quantized.save(tmp_path / "int8.keras")
    reloaded = Translator.load(tmp_path / "int8.keras")
    assert [t.text for t in reloaded.translate(sources)] == [t.text for t in got]
    reloaded.save_to_preset(tmp_path / "preset")  # a loaded quantized model saves again
    from_preset = Translator.from_preset(tmp_path / "preset")
    assert [t.text for t in from_preset.translate(sources)] == [t.text for t in got]


@pytest.mark.slow
def test_a_quantized_translator_exports_a_saved_model_that_translates_as_it_does(
    number_translator, tmp_path
):
    if keras.backend.backend() != "tensorflow":
        # JAX and PyTorch export through a TensorFlow subprocess that loads the `.keras` file
        # (tested above on every backend): about two minutes of CI per backend.
        pytest.skip("the SavedModel export traces under TensorFlow")
    import tensorflow as tf

    from keras_transformer.export import export_saved_model

    _, test_pairs, keras_path = number_translator
    sources = [source for source, _ in test_pairs[:8]]
    quantized = Translator.load(keras_path)
    quantized.quantize("int8")
    expected = [t.text for t in quantized.translate(sources)]
    export_saved_model(quantized, tmp_path / "saved_model")
    served = tf.saved_model.load(str(tmp_path / "saved_model"))
    outputs = served.signatures["serving_default"](tf.constant(sources))
    assert [x.decode() for x in outputs["translations"].numpy()] == expected
