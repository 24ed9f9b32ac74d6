"""The tokenizer of a training run: a shared WordPiece vocabulary, or SentencePiece
(`[data] tokenizer = "sentencepiece"`), trained once and kept in the run's `tokenizer.json`.

`tokenizer.json` holds the tokenizer's configuration and its vocabulary (WordPiece) or its
serialized model (SentencePiece, base64), so a resumed run tokenizes exactly as the run that
trained it.
"""

import base64

from keras_transformer.files import read_json, write_json
from keras_transformer.text import (
    SentencePieceTokenizer,
    Tokenizer,
    train_sentencepiece,
    train_tokenizer,
)
from keras_transformer.training.config import ConfigError


def load_or_train_tokenizer(path, pairs, data, is_chief=True):
    """The tokenizer saved at `path`, or a new shared vocabulary trained on both sides of
    `pairs` (and saved there by process 0).

    Args:
        path: str. The `tokenizer.json` file (configuration and vocabulary).
        pairs: list of `(source, target)` training pairs.
        data: `DataConfig` (`vocabulary_size`, `lowercase`).
        is_chief: bool. Whether this process writes the file. Defaults to `True`.

    Returns:
        A `keras_transformer.text.Tokenizer`.
    """
    saved = read_json(path)
    if data.tokenizer == "sentencepiece":
        return load_or_train_sentencepiece(path, saved, pairs, data, is_chief)
    if saved:
        config = {key: value for key, value in saved["config"].items() if key != "vocabulary"}
        return Tokenizer.from_config({**config, "vocabulary": saved["vocabulary"]})
    tokenizer = train_tokenizer(
        [text for pair in pairs for text in pair],
        vocabulary_size=data.vocabulary_size,
        lowercase=data.lowercase,
    )
    if is_chief:
        save_tokenizer(tokenizer, path)
    return tokenizer


def save_tokenizer(tokenizer, path):
    """Writes `tokenizer` as a run's `tokenizer.json` (what `load_or_train_tokenizer` reads)."""
    write_json(path, {"config": tokenizer.get_config(), "vocabulary": tokenizer.get_vocabulary()})


def load_or_train_sentencepiece(path, saved, pairs, data, is_chief=True):
    """The SentencePiece tokenizer saved in `saved`, else the `.model` file
    `data.sentencepiece_model`, else one trained on both sides of `pairs` (and saved at `path`
    by process 0).

    Args:
        path: str. The run's `tokenizer.json`.
        saved: dict or `None`. What `path` holds.
        pairs: list of `(source, target)` training pairs.
        data: `DataConfig` (`vocabulary_size`, `lowercase`, `sentencepiece_model`,
            `sentencepiece_options`).
        is_chief: bool. Whether this process writes `path`. Defaults to `True`.

    Returns:
        A `keras_transformer.text.SentencePieceTokenizer`.
    """
    if saved:
        if "sentencepiece" not in saved:
            raise ValueError(
                f"The run's {path} holds a WordPiece vocabulary, but the configuration asks "
                "for `data.tokenizer = 'sentencepiece'`: use a new `output_dir`. "
                "Received: data.tokenizer='sentencepiece'"
            )
        config = {key: value for key, value in saved["config"].items() if key != "proto"}
        return SentencePieceTokenizer(base64.b64decode(saved["sentencepiece"]), **config)
    if data.sentencepiece_model:
        tokenizer = load_sentencepiece_model(data)
    else:
        tokenizer = train_sentencepiece(
            [text for pair in pairs for text in pair],
            vocabulary_size=data.vocabulary_size,
            lowercase=data.lowercase,
            **data.sentencepiece_options,
        )
    if is_chief:
        write_json(
            path,
            {
                "config": tokenizer.get_config(),
                "sentencepiece": base64.b64encode(tokenizer.proto).decode("ascii"),
            },
        )
    return tokenizer


def load_sentencepiece_model(data):
    """The tokenizer of `data.sentencepiece_model` (a SentencePiece `.model` file).

    Raises:
        ConfigError: the file is missing, unreadable or no SentencePiece model (e.g. empty or
            random bytes), naming the setting and its value.
    """
    try:
        return SentencePieceTokenizer(data.sentencepiece_model, lowercase=data.lowercase)
    except (OSError, ValueError) as error:
        raise ConfigError(
            f"`data.sentencepiece_model` is not a SentencePiece model file: {error}. "
            f"Received: data.sentencepiece_model={data.sentencepiece_model!r}"
        ) from None
