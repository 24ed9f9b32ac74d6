"""A SentencePiece tokenizer layer (tensorflow-text's `SentencepieceTokenizer` op inside).

The model is the serialized SentencePiece `ModelProto` (the bytes of a `.model` file). It is
trained with the `sentencepiece` package (`train_sentencepiece`) or read from a `.model` file,
saved as the `sentencepiece.model` asset of a `.keras` file, and served by tensorflow-text's
C++ op, so an exported SavedModel runs it without Python. Reading and checking a model (its
pieces and reserved ids) and training one need the `sentencepiece` package (the
`sentencepiece` extra); TensorFlow, tensorflow-text and `sentencepiece` are imported lazily.
"""

import io
import logging
import os
import time

import keras

from keras_transformer._checks import short_repr
from keras_transformer.text.normalization import normalized_batches
from keras_transformer.text.tokenizer import (
    END_TOKEN,
    MAX_VOCABULARY_SIZE,
    PAD_TOKEN,
    START_TOKEN,
    UNK_TOKEN,
    Tokenizer,
    first_nul_token,
    read_bounded_file,
)
from keras_transformer.text.training import check_training_arguments

logger = logging.getLogger("keras_transformer")

MODEL_FILENAME = "sentencepiece.model"
# The largest public SentencePiece models (256k pieces) take a few MiB.
MAX_MODEL_BYTES = 1 << 27
MODEL_TYPES = ("unigram", "bpe")
# `ModelProto.SentencePiece.Type` values.
_NORMAL, _UNKNOWN, _CONTROL = 1, 2, 3


@keras.saving.register_keras_serializable(package="keras_transformer")
class SentencePieceTokenizer(Tokenizer):
    """SentencePiece tokenizer with `[PAD]=0`, `[UNK]=1`, `[START]=2` and `[END]=3`.

    A drop-in for the WordPiece `Tokenizer` (same methods, same reserved ids): text is
    normalized as `Tokenizer` does it (`keras_transformer.text.normalization`), then split into
    pieces by the SentencePiece model, where a word boundary is part of the piece that follows
    it (`"▁casa"`). For a model trained by `train_sentencepiece` (identity normalization, every
    character of the corpus covered), `detokenize(tokenize(x)) == normalize(x)` whenever every
    character of `x` was seen in training; a run of unseen characters maps to one `[UNK]`,
    which detokenizes as `"[UNK]"`.

    A model trained elsewhere (a `.model` file) is reordered on loading so that its padding,
    unknown, begin and end pieces get ids 0-3 (pieces it lacks are added as control pieces
    named `[PAD]`, `[START]`, `[END]`): the `Transformer` pads with id 0. Its own
    normalization (usually NFKC) then also applies.

    The model is saved as the `sentencepiece.model` asset of a `.keras` file, and restored on
    loading; `get_config` stores `proto=None`. Import `keras_transformer.text` before
    `keras.saving.load_model` so the class is registered.

    Args:
        proto: bytes (a serialized SentencePiece `ModelProto`), or the path of a `.model`
            file (at most 128 MiB and 4,194,304 pieces). `None` builds an empty tokenizer
            whose model is loaded later (`set_proto`, or from the assets of a `.keras` file).
            Paths are for user code only: `from_config` refuses anything but `None`.
            Defaults to `None`.
        lowercase: bool. Lower-case text before tokenizing. Defaults to `False`.
        strip_accents: bool. Remove accents before tokenizing. Defaults to `False`.
        **kwargs: base `keras.layers.Layer` arguments (`name`, ...).

    Call arguments:
        inputs: a Python `str`, list of `str`, NumPy array or string `tf.Tensor`. Calling the
            layer is `tokenize(inputs)`.

    Returns:
        As `Tokenizer`: `tokenize` gives dense 1-D int32 ids for a scalar string and a
        `tf.RaggedTensor` `(batch, None)` for a batch; `detokenize` gives strings.

    Example:

    >>> from keras_transformer.text import train_sentencepiece
    >>> tokenizer = train_sentencepiece(["¿Dónde está?", "Where is it?"] * 20, 40)
    >>> ids = tokenizer.tokenize("¿Dónde está?")
    >>> tokenizer.detokenize(ids).numpy().decode()
    '¿Dónde está?'
    >>> tokenizer.pad_id, tokenizer.unk_id, tokenizer.start_id, tokenizer.end_id
    (0, 1, 2, 3)

    References:
        - [Kudo and Richardson, 2018](https://arxiv.org/abs/1808.06226): SentencePiece.
        - [Kudo, 2018](https://arxiv.org/abs/1804.10959): the unigram language model.
    """

    _asset_filename = MODEL_FILENAME

    def __init__(self, proto=None, lowercase=False, strip_accents=False, **kwargs):
        self._proto = None
        super().__init__(
            vocabulary=None, lowercase=lowercase, strip_accents=strip_accents, **kwargs
        )
        self.set_proto(proto)

    # Model ----------------------------------------------------------------------------------

    def set_proto(self, proto):
        """Sets the model from serialized `ModelProto` bytes or the path of a `.model` file."""
        self._tf_tokenizer = None
        if proto is None:
            self._proto, self._vocabulary, self._token_to_id = None, None, None
            return
        if isinstance(proto, (str, os.PathLike)):
            proto = read_bounded_file(proto, MAX_MODEL_BYTES, True, "SentencePiece model file")
        if not isinstance(proto, bytes):
            raise ValueError(
                "`proto` must be bytes (a serialized SentencePiece model) or a path. "
                f"Received: proto of type {type(proto).__name__}"
            )
        proto, pieces = canonical_proto(proto)
        self._proto = proto
        self._vocabulary = tuple(pieces)
        self._token_to_id = {piece: index for index, piece in enumerate(pieces)}

    def set_vocabulary(self, vocabulary):
        """Sets the model (SentencePiece's vocabulary is its model): see `set_proto`."""
        self.set_proto(vocabulary)

    @property
    def proto(self):
        """The serialized SentencePiece `ModelProto` (bytes), reserved pieces at ids 0-3."""
        self._check_vocabulary()
        return self._proto

    # The reserved pieces are ids 0-3 whatever their names (`<unk>`, `<s>`, ... elsewhere).
    @property
    def pad_id(self):
        return 0

    @property
    def unk_id(self):
        return 1

    @property
    def start_id(self):
        return 2

    @property
    def end_id(self):
        return 3

    # Tokenization ---------------------------------------------------------------------------

    def _tokenize_normalized(self, text):
        return self._tf_tokenizer.tokenize(text)  # (batch, pieces)

    def _make_tf_tokenizer(self):
        import tensorflow as tf
        import tensorflow_text as tf_text

        tokenizer = tf_text.SentencepieceTokenizer(
            model=self._proto, out_type=tf.int32, add_bos=False, add_eos=False
        )
        # tf-text's model resource belongs to the op's kernel, which
        # `keras.backend.clear_session()` deletes (clearing TensorFlow's kernel cache) while
        # this tokenizer still holds its handle; a resource under a shared name outlives it.
        tokenizer._model_resource = _shared_model_resource(self._proto)
        return tokenizer

    def _check_vocabulary(self):
        if self._proto is None:
            raise ValueError(
                "This SentencePieceTokenizer has no model yet: pass `proto=`, call "
                "`set_proto()`, train one with `keras_transformer.text.train_sentencepiece`, "
                "or load it from a `.keras` file."
            )

    # Saving ---------------------------------------------------------------------------------

    def save_assets(self, dir_path):
        with open(os.path.join(dir_path, MODEL_FILENAME), "wb") as file:
            file.write(self.proto)

    def _read_asset(self, path, max_tokens, follow_symlinks=False):
        data = read_bounded_file(path, MAX_MODEL_BYTES, follow_symlinks, "SentencePiece model file")
        proto, pieces = canonical_proto(data, max_pieces=max_tokens)
        if proto != data:  # `save_assets` writes the canonical form.
            raise ValueError("its reserved pieces are not ids 0-3 (`[PAD] [UNK] [START] [END]`).")
        return proto, len(pieces)

    def get_config(self):
        config = super().get_config()
        del config["vocabulary"], config["max_bytes_per_word"]
        config["proto"] = None  # Saved as the `sentencepiece.model` asset.
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        proto = config.get("proto")
        # A configuration comes from a file: the model of a `.keras` file is its asset.
        if proto is not None:
            raise ValueError(
                "`SentencePieceTokenizer.from_config` takes `proto` only as `None` (loaded "
                "from the `.keras` file's assets); it never opens a path. To read a `.model` "
                "file in your own code, pass its path to `SentencePieceTokenizer(proto=path)`. "
                f"Received: proto={short_repr(proto)}"
            )
        return cls(**config)


def _shared_model_resource(proto):
    """The SentencePiece op's resource for `proto`, under a name derived from its bytes (the
    same model shares one resource, also across loaded SavedModels)."""
    import hashlib

    import tensorflow as tf
    from tensorflow_text.python.ops.sentencepiece_tokenizer import gen_sentencepiece_tokenizer

    class SharedModelResource(tf.saved_model.experimental.TrackableResource):
        def __init__(self, model):
            super().__init__()
            self._model = model
            _ = self.resource_handle  # Creates the resource.

        def _create_resource(self):
            name = "keras_transformer_sentencepiece_" + hashlib.sha256(self._model).hexdigest()
            return gen_sentencepiece_tokenizer.sentencepiece_op(model=self._model, shared_name=name)

    return SharedModelResource(proto)


def canonical_proto(data, max_pieces=MAX_VOCABULARY_SIZE):
    """Checks a serialized SentencePiece model and moves its reserved pieces to ids 0-3.

    The padding, unknown, begin- and end-of-sentence pieces become ids 0, 1, 2, 3 (the other
    pieces keep their order and scores, which is all unigram and BPE encoding use); those the
    model lacks are added as control pieces named `[PAD]`, `[START]`, `[END]`. A model
    already in that form is returned unchanged.

    Args:
        data: bytes. A serialized `ModelProto`.
        max_pieces: int. More pieces than this are refused. Defaults to 4,194,304.

    Returns:
        `(proto, pieces)`: the canonical serialized model (bytes) and its pieces (list of str,
        index = id).
    """
    from google.protobuf.message import DecodeError
    from sentencepiece import sentencepiece_model_pb2

    model = sentencepiece_model_pb2.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError):
        raise ValueError(
            f"The data is not a serialized SentencePiece model. Received: {len(data)} bytes"
        ) from None
    pieces = model.pieces
    if not 0 < len(pieces) <= max_pieces:
        raise ValueError(
            f"A SentencePiece model must have between 1 and {max_pieces} pieces. "
            f"Received: {len(pieces)} pieces"
        )
    names = [piece.piece for piece in pieces]
    if len(set(names)) != len(names) or not all(names):
        raise ValueError("The SentencePiece model's pieces must be non-empty and distinct.")
    index = first_nul_token(names)
    if index is not None:
        raise ValueError(
            f"The SentencePiece model's pieces must contain no NUL byte. Received: piece {index}"
            f" = {names[index]!r}"
        )
    unknown = [index for index, piece in enumerate(pieces) if piece.type == _UNKNOWN]
    if len(unknown) != 1:
        raise ValueError(
            f"A SentencePiece model must have exactly one unknown piece. Received: {len(unknown)}"
        )
    spec = model.trainer_spec
    reserved = []
    for kind, index, default in (
        ("pad", spec.pad_id, PAD_TOKEN),
        ("unk", unknown[0], UNK_TOKEN),
        ("bos", spec.bos_id, START_TOKEN),
        ("eos", spec.eos_id, END_TOKEN),
    ):
        if kind != "unk" and not (0 <= index < len(pieces) and pieces[index].type == _CONTROL):
            # No such piece (SentencePiece's default has no padding): take or add `default`.
            if default not in names:
                pieces.add(piece=default, score=0.0, type=_CONTROL)
                names.append(default)
            index = names.index(default)
            if pieces[index].type != _CONTROL:
                raise ValueError(
                    f"The SentencePiece model has no {kind} piece, and its piece {default!r} "
                    f"is not a control piece. Received: {kind}_id={getattr(spec, kind + '_id')}"
                )
        reserved.append(index)
    if len(set(reserved)) != len(reserved):
        raise ValueError(
            "The SentencePiece model's pad, unk, bos and eos pieces must be distinct. "
            f"Received: ids {reserved}"
        )
    if len(pieces) > max_pieces:
        raise ValueError(
            f"A SentencePiece model must have at most {max_pieces} pieces (reserved pieces "
            f"included). Received: {len(pieces)} pieces"
        )
    order = reserved + sorted(set(range(len(pieces))) - set(reserved))
    names = [names[index] for index in order]
    ids = (spec.pad_id, spec.unk_id, spec.bos_id, spec.eos_id)
    specified = (spec.pad_piece, spec.unk_piece, spec.bos_piece, spec.eos_piece)
    if order == list(range(len(pieces))) and ids == (0, 1, 2, 3) and specified == tuple(names[:4]):
        return data, names  # Already canonical: kept byte for byte.
    copies = [type(pieces[0])() for _ in order]
    for copy, index in zip(copies, order, strict=True):
        copy.CopyFrom(pieces[index])
    del pieces[:]
    pieces.extend(copies)
    spec.pad_id, spec.unk_id, spec.bos_id, spec.eos_id = 0, 1, 2, 3
    spec.pad_piece, spec.unk_piece, spec.bos_piece, spec.eos_piece = names[:4]
    return model.SerializeToString(deterministic=True), names


def train_sentencepiece(
    sentences,
    vocabulary_size=8000,
    model_type="unigram",
    lowercase=False,
    strip_accents=False,
    character_coverage=1.0,
    byte_fallback=False,
    max_sentences=None,
    batch_size=4096,
    **trainer_kwargs,
):
    """Trains a SentencePiece model on `sentences` and returns a `SentencePieceTokenizer`.

    Sentences are normalized exactly as `SentencePieceTokenizer.tokenize` normalizes them and
    streamed to `sentencepiece.SentencePieceTrainer` from memory (no file is written). The model
    reserves `[PAD]=0 [UNK]=1 [START]=2 [END]=3`, uses identity normalization (ours is applied
    first), covers every character by default, and is trained with one thread, so the same
    sentences give the same model.

    For a shared source-target vocabulary (the paper's setup), pass both sides of the pairs.

    Args:
        sentences: iterable of str. The training corpus.
        vocabulary_size: int. Maximum number of pieces, reserved pieces included (a small
            corpus may give fewer). Defaults to `8000`.
        model_type: str. `"unigram"` ([Kudo, 2018](https://arxiv.org/abs/1804.10959)) or
            `"bpe"`. Defaults to `"unigram"`.
        lowercase: bool. Lower-case the text. Defaults to `False`.
        strip_accents: bool. Remove accents. Defaults to `False`.
        character_coverage: float in `(0, 1]`. Share of the corpus' characters the model
            covers; rarer characters map to `[UNK]`. Defaults to `1.0`.
        byte_fallback: bool. Spell unknown characters as UTF-8 byte pieces instead of `[UNK]`
            (adds 256 pieces). Defaults to `False`.
        max_sentences: int. Train on at most this many sentences, evenly spaced over the
            corpus (SentencePiece's authors sample about a million from large corpora).
            Defaults to `None`: all.
        batch_size: int. Sentences normalized per TensorFlow call. Defaults to `4096`.
        **trainer_kwargs: other `SentencePieceTrainer.train` options (e.g.
            `max_sentencepiece_length`, `split_digits`); the reserved ids, normalization and
            input options above cannot be overridden.

    Returns:
        A `SentencePieceTokenizer`.

    Example:

    >>> tokenizer = train_sentencepiece(["hola mundo", "hello world"] * 20, 40, "bpe")
    >>> tokenizer.get_vocabulary()[:4]
    ['[PAD]', '[UNK]', '[START]', '[END]']
    """
    import sentencepiece

    if model_type not in MODEL_TYPES:
        raise ValueError(
            f"`model_type` must be one of {list(MODEL_TYPES)}. Received: model_type={model_type!r}"
        )
    check_training_arguments(sentences, vocabulary_size)
    options = {
        "model_type": model_type,
        "vocab_size": vocabulary_size,  # SentencePiece's name
        "character_coverage": character_coverage,
        "byte_fallback": bool(byte_fallback),
        **trainer_kwargs,
        # Fixed: the reserved ids the model and preprocessor use, our normalization, all input.
        "pad_id": 0,
        "unk_id": 1,
        "bos_id": 2,
        "eos_id": 3,
        "pad_piece": PAD_TOKEN,
        "unk_piece": UNK_TOKEN,
        "bos_piece": START_TOKEN,
        "eos_piece": END_TOKEN,
        "unk_surface": UNK_TOKEN,
        "normalization_rule_name": "identity",
        "input_sentence_size": 0,
        "hard_vocab_limit": False,
        "num_threads": 1,
        "minloglevel": 2,
    }
    start = time.perf_counter()
    sentences = list(sentences)
    if max_sentences is not None:
        if (
            isinstance(max_sentences, bool)
            or not isinstance(max_sentences, int)
            or max_sentences < 1
        ):
            raise ValueError(
                f"`max_sentences` must be a positive int. Received: max_sentences={max_sentences!r}"
            )
        if len(sentences) > max_sentences:
            step = len(sentences) / max_sentences
            sentences = [sentences[int(index * step)] for index in range(max_sentences)]

    def normalized():
        for batch in normalized_batches(sentences, lowercase, strip_accents, batch_size):
            for text in batch.numpy().tolist():
                if text:
                    yield text.decode("utf-8")

    writer = io.BytesIO()
    try:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=normalized(), model_writer=writer, **options
        )
    except RuntimeError as error:
        raise ValueError(f"SentencePiece training failed: {error}") from None
    tokenizer = SentencePieceTokenizer(
        writer.getvalue(), lowercase=lowercase, strip_accents=strip_accents
    )
    logger.info(
        "Trained a SentencePiece %s model of %d pieces on %d sentences in %.1f s.",
        model_type,
        tokenizer.vocabulary_size(),
        len(sentences),
        time.perf_counter() - start,
    )
    if tokenizer.vocabulary_size() < vocabulary_size:
        # `hard_vocab_limit=False`: a small corpus yields what it has, which is fine; say so.
        logger.warning(
            "train_sentencepiece: the corpus gave %d pieces, fewer than the %d asked "
            "(vocabulary_size); the model uses %d.",
            tokenizer.vocabulary_size(),
            vocabulary_size,
            tokenizer.vocabulary_size(),
        )
    return tokenizer
