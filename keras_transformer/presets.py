"""Moved to `keras_transformer.saving.preset` in 0.3.0 (the file format, for any class handed
in) and `keras_transformer.engines.load_translator`; this path keeps the 0.2.0 functions for
one release."""

from keras_transformer.engines import load_translator as _load_translator
from keras_transformer.models.transformer import Transformer
from keras_transformer.saving import preset as _preset
from keras_transformer.saving.preset import (  # noqa: F401
    ASSETS_DIR,
    CONFIG_FILE,
    FORMAT_VERSION,
    MAX_JSON_BYTES,
    METADATA_FILE,
    MODEL_GROUPS,
    TOKENIZER_PARTS,
    TRANSLATOR_FILE,
    WEIGHTS_FILE,
    is_preset,
)
from keras_transformer.translator import Translator


def save_translator(translator, directory):
    """`translator.save_to_preset(directory)`."""
    return _preset.save_translator(translator, directory, Translator)


def save_transformer(model, directory):
    """`model.save_to_preset(directory)`."""
    return _preset.save_transformer(model, directory, Transformer)


def load_translator(directory):
    """`Translator.from_preset(directory)`."""
    return _preset.load_translator(directory, Translator)


def load_transformer(directory, load_weights=True, **kwargs):
    """`Transformer.from_preset(directory, load_weights=..., **kwargs)`."""
    return _preset.load_transformer(directory, Transformer, load_weights=load_weights, **kwargs)


def load_saved_translator(path):
    """`keras_transformer.engines.load_translator(path, engine="keras")`."""
    return _load_translator(path, engine="keras")
