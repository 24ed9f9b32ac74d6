"""`TranslationPreprocessor`: the translation contract, strings to ids and ids to strings."""

import keras
import numpy as np

from keras_transformer.buckets import bucket_length, check_bucket_boundaries, padded_batch_size

# The ASCII whitespace `bytes.strip` removes: a source of these only (`is_blank`).
_ASCII_WHITESPACE = b" \t\n\r\x0b\x0c"


@keras.saving.register_keras_serializable(package="keras_transformer")
class TranslationPreprocessor(keras.layers.Layer):
    """Turns `(source, target)` strings into `Transformer` inputs, and generated ids into text.

    The one place the translation contract is written; the `Translator` runs it eagerly, its
    SavedModel (`keras_transformer.export`) traces it, and `keras_transformer.data.make_dataset`
    builds its training examples with it. Only TensorFlow ops, so it also maps over a
    `tf.data.Dataset`.

    - Encoder inputs are `[START] pieces [END]`; decoder inputs `[START] pieces` and targets
      `pieces [END]` (teacher forcing).
    - Truncation: a source of more than `max_source_length - 2` word pieces keeps its first
      `max_source_length - 2` (then `[END]`); `truncated` tells which were cut. Training
      targets keep at most `max_source_length - 1`.
    - Empty input: a source without any token (`""`, only whitespace or invisible characters)
      encodes as `[START] [END]` and is flagged `empty`; it translates to `""` without running
      the model.
    - Buckets: a batch is padded to the smallest of `bucket_boundaries` that holds its longest
      sequence, and to a power-of-two number of rows by repeating its last row (a copy finishes
      with that row, so it never makes a search run longer); see
      `keras_transformer.buckets`.

    Args:
        tokenizer: `keras_transformer.text.Tokenizer` for the sources (and the targets, unless
            `target_tokenizer` is given).
        target_tokenizer: `Tokenizer` for the targets. Defaults to `None` (shared vocabulary).
        max_source_length: int `>= 3`. Longest encoder input, `[START]` and `[END]` included.
            Defaults to `128`.
        bucket_boundaries: ascending list of int `>= 2`, the padded lengths; `max_source_length`
            is always the last. Defaults to `None`:
            `keras_transformer.data.default_bucket_boundaries(max_source_length)`.
        source_start_token: bool. Encoder inputs begin with `[START]`. `False` encodes sources
            as `pieces [END]` (Marian / OPUS-MT models); truncation then keeps
            `max_source_length - 1` pieces. Defaults to `True`.
        **kwargs: `keras.layers.Layer` arguments (`name`).

    Call arguments:
        sources: string `tf.Tensor` `(batch,)` or a list of str.
        targets: string `tf.Tensor` `(batch,)` or a list of str.

    Returns:
        `({"encoder_inputs": int32 (batch, length), "decoder_inputs": int32 (batch, length)},
        targets int32 (batch, length))`, 0-padded to one bucket length: what `fit` takes.

    Example:

    >>> from keras_transformer.text import train_tokenizer
    >>> tokenizer = train_tokenizer(["hola mundo", "hello world"], vocabulary_size=64)
    >>> preprocessor = TranslationPreprocessor(tokenizer, max_source_length=8)
    >>> inputs, targets = preprocessor(["hola mundo"], ["hello world"])
    >>> tuple(targets.shape)
    (1, 8)
    >>> preprocessor.generate_preprocess(["hola mundo", ""])["empty"].numpy().tolist()
    [False, True]
    """

    def __init__(
        self,
        tokenizer,
        target_tokenizer=None,
        max_source_length=128,
        bucket_boundaries=None,
        source_start_token=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        for name, value in (("tokenizer", tokenizer), ("target_tokenizer", target_tokenizer)):
            if value is None and name == "target_tokenizer":
                continue
            if not all(hasattr(value, attr) for attr in ("tokenize", "detokenize")):
                raise ValueError(
                    f"`{name}` must be a `keras_transformer.text.Tokenizer`. "
                    f"Received: {name}={value!r}"
                )
        if (
            isinstance(max_source_length, bool)
            or not isinstance(max_source_length, int)
            or max_source_length < 3
        ):
            raise ValueError(
                "`max_source_length` must be an int >= 3. "
                f"Received: max_source_length={max_source_length!r}"
            )
        self.tokenizer = tokenizer
        self.target_tokenizer = target_tokenizer
        self.max_source_length = max_source_length
        self.bucket_boundaries = check_bucket_boundaries(bucket_boundaries, max_source_length)
        if not isinstance(source_start_token, bool):
            raise ValueError(
                "`source_start_token` must be a bool. "
                f"Received: source_start_token={source_start_token!r}"
            )
        self.source_start_token = source_start_token
        # Strings in, ids out: Keras must not convert the inputs to backend tensors.
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        self._whitespace_is_empty = None  # `is_blank`: found at its first whitespace line.
        self.built = True

    def call(self, sources, targets):
        encoder_inputs, _ = self.encode_source(sources)
        decoder_inputs, labels = self.encode_target(targets)
        tf = _tf()
        longest = tf.maximum(encoder_inputs.bounding_shape(1), decoder_inputs.bounding_shape(1))
        length = tf.gather(self.bucket_boundaries, self.bucket_index(longest))
        inputs = {
            "encoder_inputs": _pad(encoder_inputs, length, self.tokenizer.pad_id),
            "decoder_inputs": _pad(decoder_inputs, length, self.targets.pad_id),
        }
        return inputs, _pad(labels, length, self.targets.pad_id)

    def encode_source(self, sources, truncate=True):
        """`[START] pieces [END]` (or `pieces [END]`) of each source, and which were truncated.

        Args:
            sources: string `tf.Tensor` `(batch,)` or a list of str.
            truncate: bool. Keep at most `max_source_length` ids. Defaults to `True`.

        Returns:
            `(ids, truncated)`: int32 `tf.RaggedTensor` `(batch, None)` and bool `(batch,)`.
        """
        tokenizer = self.tokenizer
        max_length = self.max_source_length if truncate else None
        pieces = tokenizer.tokenize(sources)  # (batch, None)
        start_id = tokenizer.start_id if self.source_start_token else None
        return source_ids(pieces, start_id, tokenizer.end_id, max_length)

    def encode_target(self, targets):
        """`([START] pieces, pieces [END])` of each target (truncated as the sources).

        Returns:
            Two int32 `tf.RaggedTensor`s `(batch, None)`, row lengths equal.
        """
        tokenizer = self.targets
        pieces = tokenizer.tokenize(targets)[:, : self.max_source_length - 1]
        return target_ids(pieces, tokenizer.start_id, tokenizer.end_id)

    @property
    def max_source_pieces(self):
        """The most word pieces of a source that are translated whole: `max_source_length`
        less `[START]` (when sources have it) and `[END]`."""
        return self.max_source_length - (2 if self.source_start_token else 1)

    def count_pieces(self, sources):
        """The number of word pieces of each source (a list of `str` or `bytes`), untruncated,
        through one compiled graph (a server counts the sentences of each request it plans:
        eagerly the tokenization's ops cost ~10 ms of Python dispatch per call).

        Returns:
            list of int.
        """
        if not len(sources):
            return []
        tf = _tf()
        function = self._compiled("count", self._count_graph, tf.TensorSpec([None], tf.string))
        return function(tf.constant(as_byte_strings(list(sources)))).numpy().tolist()

    def generate_preprocess(self, sources):
        """Encoder inputs for generation, and the per-source flags.

        Args:
            sources: string `tf.Tensor` `(batch,)` or a list of str.

        Returns:
            A dict: `encoder_inputs`, int32 `tf.RaggedTensor` `(batch, None)` (truncated; pad
            a batch of them with `pad_batch`); `truncated`, bool `(batch,)`; `empty`, bool
            `(batch,)`, the sources without any token, which translate to `""`.
        """
        encoder_inputs, truncated = self.encode_source(sources)
        empty = encoder_inputs.row_lengths() <= (2 if self.source_start_token else 1)
        return {"encoder_inputs": encoder_inputs, "truncated": truncated, "empty": empty}

    def encode_for_search(self, sources):
        """`generate_preprocess` of a list of `bytes`/`str`, as Python values, through one
        compiled graph (`tf.function`, traced once for any batch): what a translate call
        runs before its search. Eagerly, its few dozen tf-text and ragged ops cost ~16 ms of
        Python dispatch per call (the `make bible` translator, one sentence: 28 % of a warm
        call); in a graph they cost ~1 ms. Same ops, same ids.

        Returns:
            `(ids, truncated, empty)`: a list of lists of int (`encoder_inputs`, unpadded),
            and two bool NumPy arrays `(batch,)`.
        """
        tf = _tf()
        if not len(sources):
            return [], np.zeros((0,), bool), np.zeros((0,), bool)
        function = self._compiled("encode", self._encode_graph, tf.TensorSpec([None], tf.string))
        values, lengths, truncated, empty = (
            array.numpy() for array in function(tf.constant(as_byte_strings(list(sources))))
        )
        ids = np.split(values, np.cumsum(lengths)[:-1]) if len(lengths) else []
        return [row.tolist() for row in ids], truncated, empty

    def decode_for_search(self, rows):
        """`generate_postprocess` of equal-length rows of ids (a list of lists of int, or an
        int array `(batch, length)`) through one compiled graph: a list of `str`."""
        tf = _tf()
        function = self._compiled("decode", self._decode_graph, tf.TensorSpec([None, None], tf.int32))
        texts = function(tf.constant(np.asarray(rows, "int32").reshape(len(rows), -1))).numpy()
        return [text.decode("utf-8", "replace") for text in texts]

    def _encode_graph(self, sources):
        features = self.generate_preprocess(sources)
        ids = features["encoder_inputs"]
        return ids.flat_values, ids.row_lengths(), features["truncated"], features["empty"]

    def _count_graph(self, sources):
        return self.tokenizer.tokenize(sources).row_lengths()

    def _decode_graph(self, ids):
        return self.generate_postprocess(ids)

    def _compiled(self, name, function, spec):
        """`function` as a `tf.function` of one tensor (`spec`), made once per preprocessor
        (kept out of Keras's attribute tracking)."""
        compiled = self.__dict__.setdefault("_graphs", {})
        if name not in compiled:
            compiled[name] = _tf().function(function, input_signature=[spec], autograph=False)
        return compiled[name]

    def is_blank(self, source):
        """Whether the source `source` (`bytes`) has no token without encoding it: it is empty,
        or only ASCII whitespace and this tokenizer encodes whitespace to no token (every
        tokenizer of this package does with its defaults; checked once, with one encoding).
        Such a source translates to `""` (`generate_preprocess`'s `empty`)."""
        if not source:
            return True
        if source.strip():
            return False
        if self._whitespace_is_empty is None:
            flags = self.generate_preprocess([_ASCII_WHITESPACE])["empty"]
            self._whitespace_is_empty = bool(np.asarray(flags)[0])
        return self._whitespace_is_empty

    def pad_batch(self, encoder_inputs, length=None):
        """Pads ragged encoder inputs to `(padded_batch_size(batch), length)`.

        Rows are added by repeating the last row (at least one row is needed).

        Args:
            encoder_inputs: int32 `tf.RaggedTensor` `(batch, None)`, `batch >= 1`.
            length: int. The padded length, a bucket boundary. Defaults to `None`: the
                bucket of the longest row (eager only; traced code passes each bucket).

        Returns:
            int32 `tf.Tensor` `(padded_batch_size(batch), length)`.
        """
        tf = _tf()
        if length is None:
            length = bucket_length(int(encoder_inputs.bounding_shape(1)), self.bucket_boundaries)
        num_rows = encoder_inputs.nrows(out_type=tf.int32)
        rows = tf.minimum(tf.range(padded_batch_size(num_rows)), num_rows - 1)
        return _pad(tf.gather(encoder_inputs, rows), length, self.tokenizer.pad_id)

    def pad_rows(self, source_ids, length):
        """`pad_batch` of Python lists of ids, in NumPy (no TensorFlow op: a translate call
        pads each batch, and eager ops cost ~2 ms of dispatch each time).

        Args:
            source_ids: a non-empty list of lists of int, each at most `length` long.
            length: int. The padded length, a bucket boundary.

        Returns:
            int32 NumPy array `(padded_batch_size(len(source_ids)), length)`.
        """
        rows = np.full((padded_batch_size(len(source_ids)), length), self.tokenizer.pad_id, "int32")
        for row in range(len(rows)):
            ids = source_ids[min(row, len(source_ids) - 1)]
            rows[row, : len(ids)] = ids
        return rows

    def bucket_index(self, length):
        """Index in `bucket_boundaries` of the bucket that holds each `length` (an integer
        tensor of any shape; int32 of the same shape).

        The traced counterpart of `keras_transformer.buckets.bucket_length`, for
        `tf.switch_case` over the buckets and each source's own maximum output length.
        """
        tf = _tf()
        boundaries = tf.constant(self.bucket_boundaries, tf.int32)
        length = tf.cast(length, tf.int32)
        index = tf.searchsorted(boundaries, tf.reshape(length, [-1]), side="left")
        return tf.reshape(index, tf.shape(length))

    def generate_postprocess(self, token_ids):
        """Generated ids `(batch, length)` to UTF-8 strings `(batch,)`, up to `[END]`."""
        return self.targets.detokenize(token_ids)

    @property
    def targets(self):
        """The tokenizer of the targets: `target_tokenizer`, or the shared `tokenizer`."""
        return self.target_tokenizer if self.target_tokenizer is not None else self.tokenizer

    def get_config(self):
        serialize = keras.saving.serialize_keras_object
        config = super().get_config()
        config.update(
            {
                "tokenizer": serialize(self.tokenizer),
                "target_tokenizer": (
                    None if self.target_tokenizer is None else serialize(self.target_tokenizer)
                ),
                "max_source_length": self.max_source_length,
                "bucket_boundaries": list(self.bucket_boundaries),
                "source_start_token": self.source_start_token,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in ("tokenizer", "target_tokenizer"):
            if config.get(key) is not None:
                config[key] = keras.saving.deserialize_keras_object(config[key])
        return cls(**config)


def source_ids(pieces, start_id, end_id, max_length=None):
    """`[START] pieces [END]`, keeping at most `max_length - 2` pieces (`pieces [END]` and
    `max_length - 1` pieces when `start_id` is `None`).

    Args:
        pieces: int `tf.RaggedTensor` `(batch, None)`, the word pieces.
        start_id: int, or `None` for no start token.
        end_id: int.
        max_length: int, or `None` for no truncation. Defaults to `None`.

    Returns:
        `(ids, truncated)`: int32 `tf.RaggedTensor` `(batch, None)` and bool `(batch,)`.
    """
    tf = _tf()
    pieces = tf.cast(pieces, tf.int32)
    truncated = tf.zeros_like(pieces.row_lengths(), tf.bool)
    added = 1 if start_id is None else 2
    if max_length is not None:
        truncated = pieces.row_lengths() > max_length - added
        pieces = pieces[:, : max_length - added]
    start = [] if start_id is None else [_column(pieces, start_id)]
    return tf.concat([*start, pieces, _column(pieces, end_id)], axis=1), truncated


def target_ids(pieces, start_id, end_id):
    """`([START] pieces, pieces [END])`: decoder inputs and targets (teacher forcing).

    Args:
        pieces: int `tf.RaggedTensor` `(batch, None)`, the word pieces.
        start_id: int.
        end_id: int.

    Returns:
        Two int32 `tf.RaggedTensor`s `(batch, None)`, row lengths equal.
    """
    tf = _tf()
    pieces = tf.cast(pieces, tf.int32)
    return (
        tf.concat([_column(pieces, start_id), pieces], axis=1),
        tf.concat([pieces, _column(pieces, end_id)], axis=1),
    )


def _column(pieces, value):
    tf = _tf()
    return tf.fill([pieces.nrows(), 1], tf.constant(value, tf.int32))  # (batch, 1)


def _pad(ids, length, pad_id):
    """Ragged `(batch, None)` to dense `(batch, length)`, padded with `pad_id`."""
    if not isinstance(length, int):  # A tensor: traced code's shape is then (None, None).
        tf = _tf()
        length = tf.stack([ids.nrows(), tf.cast(length, tf.int64)])
        return ids.to_tensor(default_value=pad_id, shape=length)
    return ids.to_tensor(default_value=pad_id, shape=[None, length])


def _tf():
    import tensorflow as tf

    return tf


def as_byte_strings(sentences):
    """Sentences as a list of UTF-8 `bytes`, the input every translation engine accepts.

    Lone surrogates (what Python makes of invalid UTF-8 in `argv`) are kept as invalid bytes,
    which the tokenizer later reads as U+FFFD: no string raises.

    Args:
        sentences: a list, tuple or NumPy array of `str` or `bytes`.

    Returns:
        list of `bytes`.

    Example:

    >>> as_byte_strings(["dos", b"tres"])
    [b'dos', b'tres']
    """
    if isinstance(sentences, np.ndarray):
        sentences = sentences.reshape(-1).tolist()
    if not isinstance(sentences, (list, tuple)):
        raise ValueError(
            "`sentences` must be a str or a list of str. "
            f"Received: sentences of type {type(sentences).__name__}"
        )
    strings = []
    for sentence in sentences:
        if isinstance(sentence, str):
            sentence = sentence.encode("utf-8", errors="surrogatepass")
        elif not isinstance(sentence, bytes):
            raise ValueError(
                "`sentences` must contain only str or bytes. "
                f"Received: an element of type {type(sentence).__name__}: {sentence!r}"
            )
        strings.append(sentence)
    return strings
