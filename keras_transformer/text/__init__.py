"""Tokenizers: WordPiece (`Tokenizer`, `train_tokenizer`) and SentencePiece
(`SentencePieceTokenizer`, `train_sentencepiece`) layers.

Importing this package does not import TensorFlow: TensorFlow and tensorflow-text are imported
lazily, when a tokenizer is trained or first used.
"""

from keras_transformer.text.normalization import normalize, normalize_text
from keras_transformer.text.preprocessor import TranslationPreprocessor
from keras_transformer.text.sentencepiece import SentencePieceTokenizer, train_sentencepiece
from keras_transformer.text.tokenizer import (
    END_TOKEN,
    PAD_TOKEN,
    RESERVED_TOKENS,
    START_TOKEN,
    UNK_TOKEN,
    Tokenizer,
)
from keras_transformer.text.training import train_tokenizer

__all__ = [
    "END_TOKEN",
    "PAD_TOKEN",
    "RESERVED_TOKENS",
    "START_TOKEN",
    "SentencePieceTokenizer",
    "UNK_TOKEN",
    "Tokenizer",
    "TranslationPreprocessor",
    "normalize",
    "normalize_text",
    "train_sentencepiece",
    "train_tokenizer",
]
