"""The number-words Translator that `tests/export/test_export.py`, `tests/cli/` and
`tests/export/test_ctranslate2.py` share.

A helper module (not a test module): the `number_translator` fixture in `tests/conftest.py`
trains it once per test run, and `exported` exports it; the tests import the sentences they
send to it from here."""

import keras

from keras_transformer import LabelSmoothedCrossentropy, Transformer, transformer_adam
from keras_transformer.translator import Translator

MAX_SOURCE_LENGTH = 32

SENTENCES = [
    "dos mil trescientos ochenta y tres",
    "mil novecientos sesenta y seis",
    "setecientos dieciocho",
    "cuarenta y dos",
    "tres",
    "cuatro mil cuatrocientos cuarenta y cuatro",
]
BAD_INPUTS = [
    b"",
    b"   \t  ",
    b"x" * 10_000,
    ("mil " * 2_500).encode(),
    b"\xff\xfe dos \xc3",
    "😀🎉 dos".encode(),
    "你好，世界".encode(),
]
TRUNCATED = [False, False, False, True, False, False, False]

def train_number_translator():
    """`(translator, test_pairs)`: a tiny Translator trained on Spanish -> English number words
    (2,000 pairs, 4 epochs: about 20 s on TensorFlow) and 100 held-out test pairs.

    The `number_translator` fixture of `tests/conftest.py` trains it once per test run."""
    from keras_transformer.data import make_dataset
    from keras_transformer.datasets import number_words
    from keras_transformer.text import train_tokenizer

    keras.utils.set_random_seed(0)
    splits = number_words(num_train=2000, num_validation=0, num_test=100, max_number=5000)
    tokenizer = train_tokenizer([text for pair in splits.train for text in pair], 400)
    # One bucket, so the train step is traced once.
    data = make_dataset(
        splits.train, tokenizer, tokens_per_batch=768, max_length=24, bucket_boundaries=[24]
    )
    model = Transformer.from_preset("tiny", vocabulary_size=tokenizer.vocabulary_size(), dropout=0.0)
    model.compile(
        optimizer=transformer_adam(64, warmup_steps=400), loss=LabelSmoothedCrossentropy(0.1)
    )
    model.fit(data.dataset, epochs=4, verbose=0)
    # In-process translations (the expected outputs) run eagerly: a few sentences cost less
    # than an XLA compile per shape. The SavedModel is compiled either way.
    translator = Translator(
        model, tokenizer, max_source_length=MAX_SOURCE_LENGTH, bucket_boundaries=(16,), jit_compile=False
    )
    return translator, splits.test
