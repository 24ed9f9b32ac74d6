"""A `translator.keras` written by keras-transformer 0.1.0 still loads and translates the same.

`tests/fixtures/translator_v0_1.keras` (a one-layer tiny model trained briefly on number words)
and the outputs that version gave, `tests/fixtures/translator_v0_1.json`, were written by
`tests/fixtures/make_translator_v0_1.py`. Token ids and strings must match exactly; scores to
float32 rounding (the backends and XLA sum in different orders).
"""

import json
import os

import keras
import numpy as np
import pytest

from keras_transformer import Translator

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
KERAS_PATH = os.path.join(FIXTURES, "translator_v0_1.keras")


@pytest.fixture(scope="module")
def record():
    with open(os.path.join(FIXTURES, "translator_v0_1.json"), encoding="utf-8") as file:
        return json.load(file)


def test_fixture_is_small():
    assert os.path.getsize(KERAS_PATH) < 1_000_000


@pytest.mark.parametrize("search, beam_size", [("beam", None), ("greedy", 1)])
def test_old_file_loads_and_translates_the_same(record, search, beam_size):
    translator = keras.saving.load_model(KERAS_PATH)  # safe_mode=True, no custom_objects.
    assert isinstance(translator, Translator)
    translations = translator.translate(record["sources"], beam_size=beam_size)
    expected = record[search]
    assert [t.text for t in translations] == expected["translations"]
    assert [t.tokens for t in translations] == expected["tokens"]
    assert [t.source_tokens for t in translations] == expected["source_tokens"]
    assert [t.truncated for t in translations] == expected["truncated"]
    np.testing.assert_allclose(
        [t.score for t in translations], expected["scores"], rtol=1e-4, atol=1e-4
    )
    assert translator(record["sources"], beam_size=beam_size) == expected["translations"]


@pytest.mark.slow
@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="SavedModel export runs on TensorFlow"
)
def test_saved_model_exported_from_old_file_serves_the_same(record, tmp_path):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    from keras_transformer.export import export_saved_model

    path = export_saved_model(KERAS_PATH, tmp_path / "saved_model")
    serve = tf.saved_model.load(path).signatures["serving_default"]
    outputs = serve(inputs=tf.constant(record["sources"]))
    expected = record["saved_model"]
    texts = [text.decode("utf-8") for text in outputs["translations"].numpy()]
    assert texts == expected["translations"]
    assert outputs["truncated"].numpy().tolist() == expected["truncated"]
    np.testing.assert_allclose(outputs["scores"].numpy(), expected["scores"], rtol=1e-4, atol=1e-4)
