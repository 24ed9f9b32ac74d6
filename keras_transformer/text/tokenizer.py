"""A reversible WordPiece tokenizer layer (tensorflow-text `FastWordpieceTokenizer` inside).

TensorFlow and tensorflow-text are imported lazily, on the first `tokenize`/`detokenize` call, so
importing this module, building a `Tokenizer` or loading a `.keras` file that contains one does
not import TensorFlow. Tokenizing needs TensorFlow on every Keras backend: it is preprocessing
that runs in `tf.data` and in the exported SavedModel.
"""

import os

import keras

from keras_transformer.text.normalization import collapse_spaces, normalize

PAD_TOKEN = "[PAD]"
UNK_TOKEN = "[UNK]"
START_TOKEN = "[START]"
END_TOKEN = "[END]"
RESERVED_TOKENS = (PAD_TOKEN, UNK_TOKEN, START_TOKEN, END_TOKEN)
SUFFIX_INDICATOR = "##"
VOCABULARY_FILENAME = "vocabulary.txt"


@keras.saving.register_keras_serializable(package="keras_transformer")
class Tokenizer(keras.layers.Layer):
    """Reversible WordPiece tokenizer with `[PAD]=0`, `[UNK]`, `[START]` and `[END]`.

    Text is normalized (see `keras_transformer.text.normalization`: NFC, optional lower-casing
    and accent stripping, whitespace collapsed), split on spaces only, and each word is split
    into WordPieces; pieces that continue a word carry the `##` prefix. Punctuation stays
    attached to its word ("está?" -> "está", "##?"), so `detokenize` can glue the pieces back:
    `detokenize(tokenize(x)) == normalize(x)` exactly whenever every character of `x` was seen
    in training (`train_tokenizer` puts every seen character `c` and its continuation `##c` in
    the vocabulary, so no word of known characters ever maps to `[UNK]`). A character never
    seen in training is split off as its own word and maps to `[UNK]`; it never fails.

    The vocabulary is saved as an asset (`vocabulary.txt`) when the tokenizer is part of a
    model saved to a `.keras` file, and restored on loading; `get_config` therefore stores
    `vocabulary=None` (as keras-hub tokenizers do). Import `keras_transformer.text` before
    `keras.saving.load_model` so the class is registered.

    Args:
        vocabulary: list of str, or a path to a text file with one token per line. Must start
            with `[PAD]` (id 0) and contain `[UNK]`, `[START]` and `[END]`. `None` builds an
            empty tokenizer whose vocabulary is loaded later (`set_vocabulary`, or from the
            assets of a `.keras` file). Defaults to `None`.
        lowercase: bool. Lower-case text before tokenizing. Defaults to `False` (Spanish and
            English keep their case).
        strip_accents: bool. Remove accents before tokenizing. Defaults to `False`.
        max_bytes_per_word: int. Longer words (in UTF-8 bytes) map to a single `[UNK]`.
            Defaults to `100`.
        **kwargs: base `keras.layers.Layer` arguments (`name`, ...).

    Call arguments:
        inputs: a Python `str`, list of `str`, NumPy array or string `tf.Tensor`. Calling the
            layer is `tokenize(inputs)`.

    Returns:
        `tokenize`: for a scalar string, a dense 1-D int32 `tf.Tensor` of ids; for a batch of
        shape `(batch,)`, a `tf.RaggedTensor` int32 of shape `(batch, None)`. No `[START]` or
        `[END]` is added (see `keras_transformer.data.encode_source`).
        `detokenize`: a string `tf.Tensor` with one dimension fewer than the ids.

    Example:

    >>> from keras_transformer.text import train_tokenizer
    >>> tokenizer = train_tokenizer(["¿Dónde está?", "Where is it?"], vocabulary_size=100)
    >>> ids = tokenizer.tokenize("¿Dónde está?")
    >>> tokenizer.detokenize(ids).numpy().decode()
    '¿Dónde está?'
    >>> tokenizer.pad_id, tokenizer.unk_id, tokenizer.start_id, tokenizer.end_id
    (0, 1, 2, 3)

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762), section 5.1: a shared
          source-target vocabulary.
        - [Song et al., 2020](https://arxiv.org/abs/2012.15524): fast WordPiece tokenization.
    """

    def __init__(
        self,
        vocabulary=None,
        lowercase=False,
        strip_accents=False,
        max_bytes_per_word=100,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not isinstance(max_bytes_per_word, int) or max_bytes_per_word < 1:
            raise ValueError(
                "`max_bytes_per_word` must be a positive int. "
                f"Received: max_bytes_per_word={max_bytes_per_word}"
            )
        self.lowercase = bool(lowercase)
        self.strip_accents = bool(strip_accents)
        self.max_bytes_per_word = max_bytes_per_word
        # Strings in, ids out: Keras must not convert the inputs to backend tensors.
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        self.built = True
        self.set_vocabulary(vocabulary)

    def call(self, inputs):
        return self.tokenize(inputs)

    # Vocabulary -----------------------------------------------------------------------------

    def set_vocabulary(self, vocabulary):
        """Sets the vocabulary from a list of tokens or a file with one token per line."""
        self._wordpiece = None
        self._unknown_char_regex = None
        if vocabulary is None:
            self._vocabulary = None
            self._token_to_id = None
            return
        if isinstance(vocabulary, (str, os.PathLike)):
            with open(vocabulary, encoding="utf-8") as file:
                vocabulary = [line.rstrip("\n") for line in file]
        vocabulary = tuple(str(token) for token in vocabulary)
        if not vocabulary or vocabulary[0] != PAD_TOKEN:
            first = vocabulary[0] if vocabulary else None
            raise ValueError(
                f"`vocabulary` must start with {PAD_TOKEN!r} (id 0). Received: vocabulary[0]={first!r}"
            )
        missing = [token for token in RESERVED_TOKENS if token not in vocabulary]
        if missing:
            raise ValueError(
                f"`vocabulary` must contain the reserved tokens {list(RESERVED_TOKENS)}. "
                f"Received: a vocabulary of {len(vocabulary)} tokens without {missing}"
            )
        if len(set(vocabulary)) != len(vocabulary):
            raise ValueError(
                "`vocabulary` must not contain duplicate tokens. Received: "
                f"{len(vocabulary) - len(set(vocabulary))} duplicates"
            )
        if any(not token or "\n" in token for token in vocabulary):
            raise ValueError("`vocabulary` tokens must be non-empty and contain no newline.")
        self._vocabulary = vocabulary
        self._token_to_id = {token: index for index, token in enumerate(vocabulary)}

    def get_vocabulary(self):
        """Returns the vocabulary as a list of tokens; index = id."""
        self._check_vocabulary()
        return list(self._vocabulary)

    def vocabulary_size(self):
        """Returns the number of tokens in the vocabulary (the model's vocabulary size)."""
        self._check_vocabulary()
        return len(self._vocabulary)

    def token_to_id(self, token):
        """Returns the id of `token`; raises `ValueError` if it is not in the vocabulary."""
        self._check_vocabulary()
        if token not in self._token_to_id:
            raise ValueError(f"`token` is not in the vocabulary. Received: token={token!r}")
        return self._token_to_id[token]

    def id_to_token(self, id):
        """Returns the token of `id`; raises `ValueError` if it is out of range."""
        self._check_vocabulary()
        if not 0 <= int(id) < len(self._vocabulary):
            raise ValueError(f"`id` must be in [0, {len(self._vocabulary) - 1}]. Received: id={id}")
        return self._vocabulary[int(id)]

    @property
    def pad_id(self):
        return self.token_to_id(PAD_TOKEN)

    @property
    def unk_id(self):
        return self.token_to_id(UNK_TOKEN)

    @property
    def start_id(self):
        return self.token_to_id(START_TOKEN)

    @property
    def end_id(self):
        return self.token_to_id(END_TOKEN)

    # Tokenization ---------------------------------------------------------------------------

    def normalize(self, inputs):
        """Normalizes strings exactly as `tokenize` does (a string `tf.Tensor` back)."""
        return normalize(inputs, lowercase=self.lowercase, strip_accents=self.strip_accents)

    def tokenize(self, inputs):
        """Strings to ids: dense 1-D for a scalar string, `tf.RaggedTensor` for a batch."""
        import tensorflow as tf

        self._maybe_build_tf()
        if not isinstance(inputs, (tf.Tensor, tf.RaggedTensor)):
            inputs = tf.convert_to_tensor(_to_python_strings(inputs), dtype=tf.string)
        scalar = inputs.shape.rank == 0
        if scalar:
            inputs = inputs[tf.newaxis]
        text = self.normalize(inputs)
        # Characters the vocabulary lacks become words of their own, so that they, and not the
        # whole word around them, map to [UNK].
        text = collapse_spaces(tf.strings.regex_replace(text, self._unknown_char_regex, r" \0 "))
        words = tf.strings.split(text, sep=" ")  # (batch, words)
        ids = self._wordpiece.tokenize(words)  # (batch, words, pieces)
        ids = ids.merge_dims(-2, -1)  # (batch, pieces)
        if scalar:
            return ids[0]
        return ids

    def detokenize(self, ids):
        """Ids to text. `[PAD]` and `[START]` are dropped, and so is everything from `[END]` on.

        Args:
            ids: int ids of shape `(length,)` or `(batch, length)`: dense (0-padded) or ragged;
                a `tf.Tensor`, NumPy array, backend tensor or nested Python list.

        Returns:
            A string `tf.Tensor`: a scalar for 1-D ids, shape `(batch,)` for 2-D ids.
        """
        import tensorflow as tf

        self._maybe_build_tf()
        if not isinstance(ids, (tf.Tensor, tf.RaggedTensor)):
            ids = _to_tf_ids(ids)
        scalar = ids.shape.rank == 1
        if scalar:
            ids = ids[tf.newaxis]
        ids = tf.cast(ids, tf.int32)
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=self.pad_id)  # (batch, length)
        after_end = tf.cumsum(tf.cast(tf.equal(ids, self.end_id), tf.int32), axis=-1) > 0
        keep = (
            tf.logical_not(after_end)
            & tf.not_equal(ids, self.pad_id)
            & tf.not_equal(ids, self.start_id)
        )
        ids = tf.ragged.boolean_mask(ids, keep)  # (batch, None)
        text = self._wordpiece.detokenize(ids)  # (batch,)
        if scalar:
            return text[0]
        return text

    def _maybe_build_tf(self):
        """Builds the tf-text tokenizer once, eagerly (also when first called in a trace)."""
        self._check_vocabulary()
        if self._wordpiece is not None:
            return
        import tensorflow as tf
        import tensorflow_text as tf_text

        with tf.init_scope():
            wordpiece = tf_text.FastWordpieceTokenizer(
                vocab=list(self._vocabulary),
                suffix_indicator=SUFFIX_INDICATOR,
                max_bytes_per_word=self.max_bytes_per_word,
                token_out_type=tf.int32,
                unknown_token=UNK_TOKEN,
                no_pretokenization=True,
                support_detokenization=True,
            )
        characters = sorted(
            {token for token in self._vocabulary if len(token) == 1 and token != " "}
        )
        self._unknown_char_regex = (
            "[^ " + "".join(f"\\x{{{ord(char):x}}}" for char in characters) + "]"
        )
        self._wordpiece = wordpiece

    def _check_vocabulary(self):
        if self._vocabulary is None:
            raise ValueError(
                "This Tokenizer has no vocabulary yet: pass `vocabulary=`, call "
                "`set_vocabulary()`, train one with `keras_transformer.text.train_tokenizer`, "
                "or load it from a `.keras` file."
            )

    # Saving ---------------------------------------------------------------------------------

    def save_assets(self, dir_path):
        self._check_vocabulary()
        with open(os.path.join(dir_path, VOCABULARY_FILENAME), "w", encoding="utf-8") as file:
            for token in self._vocabulary:
                file.write(token + "\n")

    def load_assets(self, dir_path):
        self.set_vocabulary(os.path.join(dir_path, VOCABULARY_FILENAME))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary": None,  # Saved as the `vocabulary.txt` asset.
                "lowercase": self.lowercase,
                "strip_accents": self.strip_accents,
                "max_bytes_per_word": self.max_bytes_per_word,
            }
        )
        return config

    def compute_output_spec(self, inputs):
        return keras.KerasTensor(tuple(inputs.shape) + (None,), dtype="int32")


def _to_python_strings(inputs):
    """Python str / bytes / list / NumPy array of strings -> something `tf.constant` takes."""
    if isinstance(inputs, (str, bytes)):
        return inputs
    if hasattr(inputs, "tolist"):
        inputs = inputs.tolist()
    return list(inputs)


def _to_tf_ids(ids):
    """Python lists (possibly ragged), NumPy arrays and backend tensors -> tf int32."""
    import numpy as np
    import tensorflow as tf

    if isinstance(ids, (list, tuple)):
        lengths = {len(row) for row in ids if isinstance(row, (list, tuple, np.ndarray))}
        if len(lengths) > 1:
            return tf.ragged.constant([list(row) for row in ids], dtype=tf.int32)
        return tf.constant(np.asarray(ids, dtype="int32").reshape(np.shape(ids)), tf.int32)
    return tf.convert_to_tensor(np.asarray(keras.ops.convert_to_numpy(ids)).astype("int32"))
