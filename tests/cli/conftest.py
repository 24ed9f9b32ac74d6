"""Fixtures of the command's tests: the SavedModel engine of the `exported` fixture
(`tests/conftest.py`) and a small untrained `.keras` Translator."""

import keras
import pytest

from keras_transformer import Transformer, engines
from keras_transformer.translator import Translator
from tests.export_helpers import SENTENCES


@pytest.fixture(scope="module")
def loaded_saved_model(exported):
    """The SavedModel, loaded once for the in-process tests (each load compiles anew)."""
    _, _, saved_model_path = exported
    return engines.SavedModelTranslator(str(saved_model_path))


@pytest.fixture(scope="module")
def small_keras_translator(tmp_path_factory):
    """`(translator, path)`: an untrained Translator saved to a `.keras` file."""
    from keras_transformer.text import train_tokenizer

    keras.utils.set_random_seed(0)
    tokenizer = train_tokenizer(SENTENCES, vocabulary_size=100)
    model = Transformer.from_preset("tiny", vocabulary_size=tokenizer.vocabulary_size(), num_layers=1)
    translator = Translator(
        model, tokenizer, max_source_length=16, extra_length=4, beam_size=2, jit_compile=False
    )
    path = tmp_path_factory.mktemp("cli") / "small.keras"
    translator.save(path)
    return translator, path
