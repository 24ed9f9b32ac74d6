"""A reversible WordPiece tokenizer layer (tensorflow-text `FastWordpieceTokenizer` inside).

TensorFlow and tensorflow-text are imported lazily, on the first `tokenize`/`detokenize` call, so
importing this module, building a `Tokenizer` or loading a `.keras` file that contains one does
not import TensorFlow. Tokenizing needs TensorFlow on every Keras backend: it is preprocessing
that runs in `tf.data` and in the exported SavedModel.
"""

import os
import stat

import keras

from keras_transformer._checks import short_repr
from keras_transformer.text.normalization import collapse_spaces, normalize

PAD_TOKEN = "[PAD]"
UNK_TOKEN = "[UNK]"
START_TOKEN = "[START]"
END_TOKEN = "[END]"
RESERVED_TOKENS = (PAD_TOKEN, UNK_TOKEN, START_TOKEN, END_TOKEN)
SUFFIX_INDICATOR = "##"
VOCABULARY_FILENAME = "vocabulary.txt"
# Bounds on a vocabulary file (the largest public WordPiece / SentencePiece vocabularies have
# about 256k tokens): a file beyond them is refused before it is read.
MAX_VOCABULARY_SIZE = 1 << 22
MAX_VOCABULARY_BYTES = 1 << 27


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
        vocabulary: list of str, or a path to a UTF-8 text file with one token per line (at
            most 4,194,304 tokens and 128 MiB). Must start with `[PAD]` (id 0) and contain
            `[UNK]`, `[START]` and `[END]`. `None` builds an empty tokenizer whose vocabulary
            is loaded later (`set_vocabulary`, or from the assets of a `.keras` file). Paths
            are for user code only: `from_config` refuses them, so loading a `.keras` file
            never opens a path written in it. Defaults to `None`.
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
        # Set by the object that deserializes this tokenizer next to a model (`Translator`):
        # `(size, argument)`, the vocabulary size the model's embedding needs and the model
        # argument that holds it; `load_assets` refuses any other size.
        self._expected_vocabulary_size = None
        self._asset_error = None  # Why the last `load_assets` refused its asset.
        self.set_vocabulary(vocabulary)

    def call(self, inputs):
        return self.tokenize(inputs)

    # Vocabulary -----------------------------------------------------------------------------

    def set_vocabulary(self, vocabulary):
        """Sets the vocabulary from a list of tokens or a file with one token per line."""
        self._tf_tokenizer = None  # tensorflow-text's, built on first use
        self._unknown_char_regex = None
        if vocabulary is None:
            self._vocabulary = None
            self._token_to_id = None
            return
        if isinstance(vocabulary, (str, os.PathLike)):
            vocabulary = _read_vocabulary_file(vocabulary, follow_symlinks=True)
        vocabulary = tuple(str(token) for token in vocabulary)
        if not vocabulary or vocabulary[0] != PAD_TOKEN:
            first = short_repr(vocabulary[0]) if vocabulary else None
            raise ValueError(
                f"`vocabulary` must start with {PAD_TOKEN!r} (id 0). Received: vocabulary[0]={first}"
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
        index = first_nul_token(vocabulary)
        if index is not None:
            raise ValueError(
                f"`vocabulary` tokens must contain no NUL byte. Received: vocabulary[{index}]="
                f"{short_repr(vocabulary[index])}"
            )
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
        ids = self._tokenize_normalized(self.normalize(inputs))  # (batch, pieces)
        if scalar:
            return ids[0]
        return ids

    def _tokenize_normalized(self, text):
        """Normalized strings `(batch,)` to ragged ids `(batch, pieces)`."""
        import tensorflow as tf

        # Characters the vocabulary lacks become words of their own, so that they, and not the
        # whole word around them, map to [UNK].
        text = collapse_spaces(tf.strings.regex_replace(text, self._unknown_char_regex, r" \0 "))
        words = tf.strings.split(text, sep=" ")  # (batch, words)
        ids = self._tf_tokenizer.tokenize(words)  # (batch, words, pieces)
        return ids.merge_dims(-2, -1)  # (batch, pieces)

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
        text = self._detokenize_pieces(ids)  # (batch,)
        if scalar:
            return text[0]
        return text

    def _detokenize_pieces(self, ids):
        """Ragged int32 ids `(batch, None)` without special tokens to strings `(batch,)`."""
        return self._tf_tokenizer.detokenize(ids)

    def _maybe_build_tf(self):
        """Builds the tf-text tokenizer once, eagerly (also when first called in a trace)."""
        self._check_vocabulary()
        if self._tf_tokenizer is not None:
            return
        import tensorflow as tf

        with tf.init_scope():
            self._tf_tokenizer = self._make_tf_tokenizer()

    def _make_tf_tokenizer(self):
        import tensorflow as tf
        import tensorflow_text as tf_text

        characters = sorted(
            {token for token in self._vocabulary if len(token) == 1 and token != " "}
        )
        self._unknown_char_regex = (
            "[^ " + "".join(f"\\x{{{ord(char):x}}}" for char in characters) + "]"
        )
        return tf_text.FastWordpieceTokenizer(
            vocab=list(self._vocabulary),
            suffix_indicator=SUFFIX_INDICATOR,
            max_bytes_per_word=self.max_bytes_per_word,
            token_out_type=tf.int32,
            unknown_token=UNK_TOKEN,
            no_pretokenization=True,
            support_detokenization=True,
        )

    def _check_vocabulary(self):
        if self._vocabulary is None:
            raise ValueError(
                "This Tokenizer has no vocabulary yet: pass `vocabulary=`, call "
                "`set_vocabulary()`, train one with `keras_transformer.text.train_tokenizer`, "
                "or load it from a `.keras` file."
            )

    def _check_expected_vocabulary_size(self):
        if self._expected_vocabulary_size is None or self._vocabulary is None:
            return
        expected, argument = self._expected_vocabulary_size
        if len(self._vocabulary) != expected:
            raise ValueError(
                f"The tokenizer {self.name!r} has {len(self._vocabulary)} tokens but the "
                f"model's embedding has {argument}={expected} rows: they must agree. "
                f"Received: vocabulary_size={len(self._vocabulary)}, {argument}={expected}"
            )

    # Saving ---------------------------------------------------------------------------------

    def save_assets(self, dir_path):
        self._check_vocabulary()
        with open(os.path.join(dir_path, VOCABULARY_FILENAME), "w", encoding="utf-8") as file:
            for token in self._vocabulary:
                file.write(token + "\n")

    def load_assets(self, dir_path, follow_symlinks=False):
        # Only this tokenizer's own asset is read: a regular file (no link, device or pipe) of
        # bounded size, and exactly the size the model's embedding needs when that is known.
        # `follow_symlinks=True` reads it through a link: only for a caller that checked where
        # the links of `dir_path` lead (a preset's reader, `keras_transformer.saving.preset`).
        if dir_path is None:
            # Keras tries every path that reaches this layer and reports the last failure; a
            # path without assets must not hide why the asset that was found is refused.
            raise ValueError(
                self._asset_error
                or f"The `.keras` file holds no `{self._asset_filename}` asset for the "
                f"tokenizer {self.name!r}; it cannot be loaded without its vocabulary."
            )
        expected, argument = self._expected_vocabulary_size or (None, None)
        path = os.path.join(dir_path, self._asset_filename)
        try:
            vocabulary, size = self._read_asset(
                path,
                max_tokens=MAX_VOCABULARY_SIZE if expected is None else expected,
                follow_symlinks=follow_symlinks,
            )
            if expected is not None and size != expected:
                raise ValueError(
                    f"it has {size} tokens. Received: "
                    f"vocabulary_size={size}, {argument}={expected}"
                )
            self.set_vocabulary(vocabulary)
        except (ValueError, OSError) as error:
            needed = "" if expected is None else f" for the model's {argument}={expected}"
            self._asset_error = (
                f"The `{self._asset_filename}` asset of the tokenizer {self.name!r} is not a "
                f"valid vocabulary{needed}: {error}"
            )
            raise ValueError(self._asset_error) from None
        self._asset_error = None

    _asset_filename = VOCABULARY_FILENAME

    def _read_asset(self, path, max_tokens, follow_symlinks=False):
        """`(vocabulary, number of tokens)` of the asset file at `path`: a bounded read that
        follows no link unless told; `set_vocabulary` takes the vocabulary."""
        vocabulary = _read_vocabulary_file(path, follow_symlinks, max_tokens=max_tokens)
        return vocabulary, len(vocabulary)

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

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        vocabulary = config.get("vocabulary")
        # A configuration comes from a file: its vocabulary may be the tokens themselves
        # (data from that file), never a path to open (the vocabulary of a `.keras` file is
        # its `vocabulary.txt` asset).
        if vocabulary is not None and not (
            isinstance(vocabulary, (list, tuple))
            and all(isinstance(token, str) for token in vocabulary)
        ):
            received = (
                f"vocabulary={short_repr(vocabulary)}"
                if isinstance(vocabulary, str)
                else f"vocabulary of type {type(vocabulary).__name__}"
            )
            raise ValueError(
                "`Tokenizer.from_config` takes `vocabulary` only as `None` (loaded from the "
                "`.keras` file's assets) or a list of str tokens; it never opens a path. To "
                "read a vocabulary file in your own code, pass its path to the constructor "
                f"`Tokenizer(vocabulary=path)` or to `set_vocabulary`. Received: {received}"
            )
        return cls(**config)

    def compute_output_spec(self, inputs):
        return keras.KerasTensor(tuple(inputs.shape) + (None,), dtype="int32")


def _read_vocabulary_file(path, follow_symlinks=True, max_tokens=MAX_VOCABULARY_SIZE):
    """Tokens of a UTF-8 file with one token per line: a bounded read of a regular file.

    Args:
        path: str or `os.PathLike`.
        follow_symlinks: bool. `False` refuses a symbolic link (a `.keras` asset is never one).
        max_tokens: int. More lines than this are refused.

    Returns:
        A list of str.
    """
    # At most 1 KiB a token on average (real tokens are words or pieces of words).
    limit = min(MAX_VOCABULARY_BYTES, 1024 * (max_tokens + 1))
    data = read_bounded_file(
        path, limit, follow_symlinks, "vocabulary file", f"for at most {max_tokens} tokens"
    )
    path = os.fspath(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"The vocabulary file is not valid UTF-8 (byte {error.start}). Received: path={path!r}"
        ) from None
    # Universal newlines, as text-mode `open` reads them (a file written on Windows has CRLF).
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) > max_tokens:
        raise ValueError(
            f"The vocabulary file has {len(lines)} tokens, more than {max_tokens}. "
            f"Received: path={path!r}"
        )
    index = first_nul_token(lines)
    if index is not None:
        raise ValueError(
            f"The vocabulary file's token {index} (line {index + 1}) holds a NUL byte, which "
            f"no text can contain. Received: path={path!r}"
        )
    return lines


def first_nul_token(tokens):
    """The index of the first token holding a NUL byte (`"\\x00"`), or `None`: such a token
    matches no text and breaks the tokenizer ops on every batch."""
    return next((index for index, token in enumerate(tokens) if "\x00" in token), None)


def read_bounded_file(path, limit, follow_symlinks, what, reason=""):
    """The bytes of a regular file of at most `limit` bytes (checked before and while reading).

    Args:
        path: str or `os.PathLike`.
        limit: int. Largest accepted size in bytes.
        follow_symlinks: bool. `False` refuses a symbolic link (a `.keras` asset is never one).
        what: str. What the file is, for the error messages (`"vocabulary file"`).
        reason: str. Why `limit`, for the error messages. Defaults to `""`.

    Returns:
        bytes.
    """
    path = os.fspath(path)
    status = os.stat(path) if follow_symlinks else os.lstat(path)
    if not stat.S_ISREG(status.st_mode):
        # Devices, pipes and (for assets) links could stream without end or point elsewhere.
        raise ValueError(f"The {what} must be a regular file. Received: path={path!r}")
    reason = f" {reason}" if reason else ""
    if status.st_size > limit:
        raise ValueError(
            f"The {what} is too large: {status.st_size} bytes, more than {limit}{reason}. "
            f"Received: path={path!r}"
        )
    with open(path, "rb") as file:
        data = file.read(limit + 1)
    if len(data) > limit:  # It grew while being read.
        raise ValueError(
            f"The {what} is too large: more than {limit} bytes{reason}. Received: path={path!r}"
        )
    return data


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
