"""The SentencePiece tokenizer of a training run (`[data] tokenizer = "sentencepiece"`).

The run's `tokenizer.json` holds the tokenizer's configuration and its serialized model
(base64), so a resumed run tokenizes exactly as the run that trained it.
"""

import base64

from keras_transformer.files import write_json


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
    from keras_transformer.text import SentencePieceTokenizer, train_sentencepiece

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
        tokenizer = SentencePieceTokenizer(data.sentencepiece_model, lowercase=data.lowercase)
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
