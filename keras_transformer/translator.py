"""`Translator`: a tokenizer, a `Transformer` and beam search; strings in, strings out."""

import contextlib
import dataclasses

import keras
import numpy as np

from keras_transformer.data.pipeline import default_bucket_boundaries
from keras_transformer.generation import Generator, bucket_length, padded_batch_size

# Imported so that `keras.saving.load_model` finds the registered classes a Translator holds.
from keras_transformer.models.transformer import Transformer  # noqa: F401
from keras_transformer.text.tokenizer import Tokenizer  # noqa: F401


@dataclasses.dataclass
class Translation:
    """One translation with its details, as returned by `Translator.translate`.

    Attributes:
        text: str. The translation (`""` for an input without any token).
        score: float. Beam search: log probability divided by the length penalty; greedy
            search (`beam_size=1`): sum of the log probabilities. `0.0` for an empty input.
        tokens: list of int. The generated ids, the end token included when generated.
        truncated: bool. The input was longer than `max_source_length` and was truncated.
        source_tokens: list of str. The encoder input tokens, `[START]` and `[END]` included.
        target_tokens: list of str. The generated tokens (`tokens` as strings).
        attention: float32 NumPy array `(num_decoder_layers, num_heads, len(target_tokens),
            len(source_tokens))`, the cross-attention probabilities with which each target
            token was produced, or `None` unless asked for.
    """

    text: str
    score: float
    tokens: list
    truncated: bool
    source_tokens: list
    target_tokens: list
    attention: object = None


@keras.saving.register_keras_serializable(package="keras_transformer")
class Translator(keras.Model):
    """Translates sentences: tokenizer, `Transformer` and beam search in one savable object.

    Each sentence is tokenized (with the tokenizer's normalization), wrapped as
    `[START] pieces [END]` (as `keras_transformer.data.encode_source` does in training),
    translated with beam search (beam size 4, length penalty `alpha=0.6`, at most
    `source_length + extra_length` tokens, as in the paper §6.1) and detokenized.

    Rules for unusual inputs:

    - Truncation: a sentence of more than `max_source_length - 2` word pieces keeps its first
      `max_source_length - 2` pieces (then `[END]`), so the encoder input is at most
      `max_source_length` tokens; `Translation.truncated` tells which were truncated.
    - A sentence without any token (`""`, only whitespace or invisible characters) translates
      to `""` with score `0.0`; the model is not run.
    - Invalid UTF-8 becomes U+FFFD and characters the vocabulary lacks become `[UNK]`
      (see `keras_transformer.text.Tokenizer`); no input string raises.

    Sentences are sorted by length, padded to the smallest of `bucket_boundaries` that fits
    and batched `batch_size` at a time, with batch sizes padded to a power of two; so the
    compiled search (see `keras_transformer.generation.Generator`) sees a bounded set of
    shapes and a repeated call never recompiles.

    Save it with `translator.save("translator.keras")` (model weights, configuration and the
    tokenizer vocabulary in one file) and load it with `Translator.load(path)` (or
    `keras.saving.load_model`), under any backend. `keras_transformer.export` turns it into a
    TensorFlow SavedModel that serves strings.

    Args:
        model: `keras_transformer.Transformer`, trained on `[START] x [END]` encoder inputs and
            `[START] y` decoder inputs built with `tokenizer` (and `target_tokenizer`).
        tokenizer: `keras_transformer.text.Tokenizer` for the sources (and the targets, unless
            `target_tokenizer` is given).
        target_tokenizer: `Tokenizer` for the targets. Defaults to `None` (shared vocabulary,
            the paper's setup).
        beam_size: int. Beam size; `1` runs greedy search. Defaults to `4`.
        alpha: float. Length penalty strength. Defaults to `0.6`.
        max_source_length: int `>= 3`. Longest encoder input, `[START]` and `[END]` included;
            longer inputs are truncated (see above). Defaults to `128`.
        extra_length: int. Translations have at most `padded_source_length + extra_length`
            tokens. Defaults to `50`.
        batch_size: int. Sentences decoded together. Defaults to `32`.
        bucket_boundaries: ascending list of int, the padded source lengths. Defaults to
            `None`: `keras_transformer.data.default_bucket_boundaries(max_source_length)`.
        jit_compile: bool. Compile the search run by this object (XLA on TensorFlow,
            `jax.jit` on JAX; PyTorch runs eagerly under `torch.no_grad()`). `False` runs it
            eagerly, which is quicker for a few one-off calls than a compile per shape. The
            SavedModel export compiles independently (`export_saved_model(jit_compile=...)`).
            Defaults to `True`.
        **kwargs: `keras.Model` arguments (`name`).

    Call arguments:
        sentences: a `str` (or `bytes`), or a list / NumPy array of them.
        beam_size: int. Overrides the default for this call. Defaults to `None`.
        alpha: float. Overrides the default for this call. Defaults to `None`.

    Returns:
        A `str` for one sentence, a list of `str` for a list. `translate` returns
        `Translation`s with scores, tokens and optionally cross-attention weights.

    Example:

    >>> from keras_transformer import Transformer
    >>> from keras_transformer.text import train_tokenizer
    >>> tokenizer = train_tokenizer(["¿Dónde está?", "Where is it?"], vocabulary_size=64)
    >>> model = Transformer.from_preset("tiny", vocab_size=tokenizer.vocabulary_size())
    >>> translator = Translator(model, tokenizer, extra_length=5)
    >>> outputs = translator(["¿Dónde está?", ""])  # untrained: some words, then ""
    >>> len(outputs), outputs[1]
    (2, '')

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762), section 6.1: beam size 4,
          length penalty 0.6, maximum output length input length + 50.
        - [Wu et al., 2016](https://arxiv.org/abs/1609.08144): the length penalty.
    """

    def __init__(
        self,
        model,
        tokenizer,
        target_tokenizer=None,
        beam_size=4,
        alpha=0.6,
        max_source_length=128,
        extra_length=50,
        batch_size=32,
        bucket_boundaries=None,
        jit_compile=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        for name, value, minimum in (
            ("beam_size", beam_size, 1),
            ("max_source_length", max_source_length, 3),
            ("extra_length", extra_length, 1),
            ("batch_size", batch_size, 1),
        ):
            _check_int(name, value, minimum)
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha < 0:
            raise ValueError(f"`alpha` must be a number >= 0. Received: alpha={alpha!r}")
        for name, value in (("model", model),):
            if not all(hasattr(value, attr) for attr in ("encode", "init_cache", "decode_step")):
                raise ValueError(
                    f"`{name}` must be a `keras_transformer.Transformer`. Received: {name}={value!r}"
                )
        for name, value in (("tokenizer", tokenizer), ("target_tokenizer", target_tokenizer)):
            if value is None and name == "target_tokenizer":
                continue
            if not all(hasattr(value, attr) for attr in ("tokenize", "detokenize")):
                raise ValueError(
                    f"`{name}` must be a `keras_transformer.text.Tokenizer`. "
                    f"Received: {name}={value!r}"
                )
        if bucket_boundaries is None:
            bucket_boundaries = default_bucket_boundaries(max_source_length)
        boundaries = [int(length) for length in bucket_boundaries]
        if (
            not boundaries
            or boundaries[0] < 3
            or any(b <= a for a, b in zip(boundaries, boundaries[1:], strict=False))
        ):
            raise ValueError(
                "`bucket_boundaries` must be a non-empty, strictly increasing list of ints "
                f">= 3. Received: bucket_boundaries={bucket_boundaries!r}"
            )
        boundaries = [length for length in boundaries if length < max_source_length]
        boundaries.append(max_source_length)

        self.model = model
        self.tokenizer = tokenizer
        self.target_tokenizer = target_tokenizer
        self.beam_size = beam_size
        self.alpha = float(alpha)
        self.max_source_length = max_source_length
        self.extra_length = extra_length
        self.batch_size = batch_size
        self.bucket_boundaries = tuple(boundaries)
        self.jit_compile = bool(jit_compile)
        self._generator = None
        self.built = True

    # === Translating ===
    def __call__(self, sentences, beam_size=None, alpha=None):
        translations = self.translate(sentences, beam_size=beam_size, alpha=alpha)
        if isinstance(translations, Translation):
            return translations.text
        return [translation.text for translation in translations]

    def translate(self, sentences, beam_size=None, alpha=None, return_attention=False):
        """Translates sentences and returns `Translation`s (text, score, tokens, attention).

        Args:
            sentences: a `str` (or `bytes`), or a list / NumPy array of them.
            beam_size: int. Overrides `self.beam_size`. Defaults to `None`.
            alpha: float. Overrides `self.alpha`. Defaults to `None`.
            return_attention: bool. Fill `Translation.attention` with the cross-attention
                probabilities (one uncached decoder pass over each final output), for
                plotting. Defaults to `False`.

        Returns:
            A `Translation` for one sentence, a list of `Translation`s for a list.
        """
        single = isinstance(sentences, (str, bytes))
        strings = _to_bytes_list([sentences] if single else sentences)
        beam_size = self.beam_size if beam_size is None else beam_size
        alpha = self.alpha if alpha is None else alpha
        _check_int("beam_size", beam_size, 1)
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha < 0:
            raise ValueError(f"`alpha` must be a number >= 0. Received: alpha={alpha!r}")

        source_ids, truncated = self.encode_sources(strings)
        outputs = [None] * len(strings)  # (tokens, score) per sentence
        # Decode non-empty sentences in length order, `batch_size` at a time, so that a batch
        # holds sentences of one bucket.
        order = sorted(
            (i for i, ids in enumerate(source_ids) if len(ids) > 2),
            key=lambda i: len(source_ids[i]),
        )
        batches = []
        for index in order:
            bucket = bucket_length(len(source_ids[index]), self.bucket_boundaries)
            if batches and batches[-1][0] == bucket and len(batches[-1][1]) < self.batch_size:
                batches[-1][1].append(index)
            else:
                batches.append((bucket, [index]))
        for bucket, indices in batches:
            padded_rows = padded_batch_size(len(indices))
            encoder_inputs = np.zeros((padded_rows, bucket), "int32")
            for row in range(padded_rows):
                # Padding rows repeat the last sentence: they finish with it, so they never
                # keep the search running longer than the real rows.
                ids = source_ids[indices[min(row, len(indices) - 1)]]
                encoder_inputs[row, : len(ids)] = ids
            sequences, scores = self._search(encoder_inputs, beam_size, alpha)
            for row, index in enumerate(indices):
                outputs[index] = (_trim(sequences[row], self._end_id, self._pad_id), scores[row])

        texts = self._detokenize([tokens for tokens, _ in filter(None, outputs)])
        texts = iter(texts)
        translations = []
        for index in range(len(strings)):
            tokens, score = outputs[index] if outputs[index] is not None else ([], 0.0)
            translations.append(
                Translation(
                    text=next(texts) if outputs[index] is not None else "",
                    score=float(score),
                    tokens=tokens,
                    truncated=bool(truncated[index]),
                    source_tokens=_id_tokens(self.tokenizer, source_ids[index]),
                    target_tokens=_id_tokens(self._target_tokenizer, tokens),
                )
            )
            if return_attention:
                translations[-1].attention = self._attention(source_ids[index], tokens)
        return translations[0] if single else translations

    def encode_sources(self, sentences):
        """Encoder ids `[START] pieces [END]` of each sentence, truncated to `max_source_length`.

        A sentence without any token gives `[START] [END]`.

        Args:
            sentences: list of `str` or `bytes`.

        Returns:
            `(ids, truncated)`: a list of int32 NumPy arrays, and a bool NumPy array telling
            which sentences were truncated.
        """
        strings = _to_bytes_list(sentences)
        if not strings:
            return [], np.zeros((0,), bool)
        pieces = self.tokenizer.tokenize(strings)  # tf.RaggedTensor (batch, None)
        values = pieces.flat_values.numpy().astype("int32")
        splits = pieces.row_splits.numpy()
        keep = self.max_source_length - 2
        start = np.array([self.tokenizer.start_id], "int32")
        end = np.array([self.tokenizer.end_id], "int32")
        ids, truncated = [], []
        for row in range(len(strings)):
            row_pieces = values[splits[row] : splits[row + 1]]
            truncated.append(len(row_pieces) > keep)
            ids.append(np.concatenate([start, row_pieces[:keep], end]))
        return ids, np.array(truncated, bool)

    @property
    def generator(self):
        """The `keras_transformer.generation.Generator` running the compiled searches."""
        if self._generator is None:
            self._generator = Generator(
                self.model,
                start_id=self._target_tokenizer.start_id,
                end_id=self._end_id,
                pad_id=self._pad_id,
                extra_length=self.extra_length,
                jit_compile=self.jit_compile,
            )
        return self._generator

    # === Helpers ===
    @property
    def _target_tokenizer(self):
        return self.target_tokenizer if self.target_tokenizer is not None else self.tokenizer

    @property
    def _end_id(self):
        return self._target_tokenizer.end_id

    @property
    def _pad_id(self):
        return self._target_tokenizer.pad_id

    def _search(self, encoder_inputs, beam_size, alpha):
        with _no_grad():
            if beam_size == 1:
                return self.generator(encoder_inputs, search="greedy")
            sequences, scores = self.generator(
                encoder_inputs, search="beam", beam_size=beam_size, alpha=alpha
            )
        return sequences[:, 0], scores[:, 0]

    def _detokenize(self, token_lists):
        if not token_lists:
            return []
        width = max(1, max(len(tokens) for tokens in token_lists))
        ids = np.full((len(token_lists), width), self._pad_id, "int32")
        for row, tokens in enumerate(token_lists):
            ids[row, : len(tokens)] = tokens
        texts = self._target_tokenizer.detokenize(ids).numpy()
        return [text.decode("utf-8", errors="replace") for text in texts]

    def _attention(self, source_ids, tokens):
        if not tokens:
            return None
        from keras import ops

        decoder_inputs = np.array([[self._target_tokenizer.start_id, *tokens[:-1]]], "int32")
        with _no_grad():
            encoder_outputs, padding_mask = self.model.encode(source_ids[None], training=False)
            _, scores = self.model.decode(
                decoder_inputs, encoder_outputs, padding_mask, return_attention_scores=True
            )
        # (layers, heads, target, source)
        return np.stack([ops.convert_to_numpy(layer)[0] for layer in scores]).astype("float32")

    # === Saving ===
    @classmethod
    def load(cls, path):
        """Loads a `Translator` saved with `translator.save(path)` (a `.keras` file).

        Args:
            path: str or `os.PathLike`. The `.keras` file.

        Returns:
            A `Translator`.

        Raises:
            FileNotFoundError: `path` is not a file.
            ValueError: `path` is not a `.keras` archive (e.g. a truncated copy), or holds
                something other than a Translator.
        """
        import os
        import zipfile

        if not os.path.isfile(path):
            raise FileNotFoundError(f"No Translator .keras file at {str(path)!r}")
        if not zipfile.is_zipfile(path):
            # Keras would say "File not found" of a truncated archive.
            raise ValueError(
                f"`path` is not a valid .keras archive (a zip file); it may be truncated or "
                f"still being written. Received: path={str(path)!r}"
            )
        translator = keras.saving.load_model(path)
        if not isinstance(translator, cls):
            raise ValueError(
                f"`path` does not hold a Translator but a {type(translator).__name__}. "
                f"Received: path={str(path)!r}"
            )
        return translator

    def get_config(self):
        serialize = keras.saving.serialize_keras_object
        return {
            "name": self.name,
            "trainable": self.trainable,
            "model": serialize(self.model),
            "tokenizer": serialize(self.tokenizer),
            "target_tokenizer": (
                None if self.target_tokenizer is None else serialize(self.target_tokenizer)
            ),
            "beam_size": self.beam_size,
            "alpha": self.alpha,
            "max_source_length": self.max_source_length,
            "extra_length": self.extra_length,
            "batch_size": self.batch_size,
            "bucket_boundaries": list(self.bucket_boundaries),
            "jit_compile": self.jit_compile,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        deserialize = keras.saving.deserialize_keras_object
        for key in ("model", "tokenizer", "target_tokenizer"):
            if config.get(key) is not None:
                config[key] = deserialize(config[key])
        return cls(**config)


def _check_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"`{name}` must be an int >= {minimum}. Received: {name}={value!r}")


def _to_bytes_list(sentences):
    """A list of UTF-8 `bytes` (lone surrogates kept as invalid bytes, later U+FFFD)."""
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


def _trim(sequence, end_id, pad_id):
    """Generated ids up to and including the end token (or up to trailing padding)."""
    tokens = [int(token) for token in sequence]
    if end_id in tokens:
        return tokens[: tokens.index(end_id) + 1]
    while tokens and tokens[-1] == pad_id:
        tokens.pop()
    return tokens


def _id_tokens(tokenizer, ids):
    return [tokenizer.id_to_token(token) for token in ids]


def _no_grad():
    if keras.backend.backend() == "torch":
        import torch

        return torch.no_grad()
    return contextlib.nullcontext()
