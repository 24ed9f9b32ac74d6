"""Reads the settings and tokenizers that `keras_transformer.formats.ctranslate2.writer` stores
beside a CTranslate2 model (the engine's input; CTranslate2 itself reads `model.bin`)."""

import json
import os

from keras_transformer.formats.ctranslate2.layout import METADATA_FILENAME, TOKENIZERS
from keras_transformer.saving.checks import deserialize_part
from keras_transformer.text.tokenizer import Tokenizer


def read_settings(directory):
    """`(settings, tokenizer, target_tokenizer or None)` stored by `write_settings`."""
    path = os.path.join(directory, METADATA_FILENAME)
    if not os.path.isfile(path):
        raise ValueError(
            f"`directory` holds no `{METADATA_FILENAME}`: it was not written by "
            f"`export_ctranslate2`. Received: directory={directory!r}"
        )
    with open(path, encoding="utf-8") as file:
        settings = json.load(file)
    tokenizers = []
    for name in TOKENIZERS:
        if settings.get(name) is None:
            tokenizers.append(None)
            continue
        tokenizer = deserialize_part(name, settings[name], Tokenizer)
        tokenizer.load_assets(os.path.join(directory, name))
        tokenizers.append(tokenizer)
    return settings, *tokenizers
