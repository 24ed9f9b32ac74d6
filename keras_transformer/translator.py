"""`Translator`: a preprocessor, a `Transformer` and beam search; strings in, strings out."""

import contextlib
import dataclasses
import inspect

import keras
import numpy as np

from keras_transformer.data.buckets import bucket_batches, padded_batch_size
from keras_transformer.generation import Generator

# Imported so that `keras.saving.load_model` finds the registered classes a Translator holds.
from keras_transformer.models.transformer import Transformer, _physical_memory_bytes
from keras_transformer.text.preprocessor import TranslationPreprocessor
from keras_transformer.text.tokenizer import Tokenizer


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

    Sentences go through a `keras_transformer.text.TranslationPreprocessor` (`[START] pieces
    [END]`, truncation to `max_source_length`, empty input, buckets: the rules are written
    there), are sorted by length, batched `batch_size` at a time within a bucket, translated
    with beam search (beam size 4, length penalty `alpha=0.6`, at most `source_length +
    extra_length` tokens, as in the paper §6.1) by a `keras_transformer.generation.Generator`
    and detokenized. A sentence without any token translates to `""` with score `0.0`; invalid
    UTF-8 becomes U+FFFD and unknown characters `[UNK]`: no input string raises. The compiled
    search sees a bounded set of shapes, so a repeated call never recompiles.

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
            longer inputs are truncated. Defaults to `128`.
        extra_length: int. Translations have at most `padded_source_length + extra_length`
            tokens. Defaults to `50`.
        batch_size: int. Sentences decoded together. Defaults to `32`.
        bucket_boundaries: ascending list of int `>= 2`, the padded source lengths. Defaults to
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
        for name, value in (
            ("beam_size", beam_size),
            ("extra_length", extra_length),
            ("batch_size", batch_size),
        ):
            _check_int(name, value, 1)
        _check_alpha(alpha)
        if not all(hasattr(model, attr) for attr in ("encode", "init_cache", "decode_step")):
            raise ValueError(
                f"`model` must be a `keras_transformer.Transformer`. Received: model={model!r}"
            )
        self.model = model
        self.tokenizer = tokenizer
        self.target_tokenizer = target_tokenizer
        self.preprocessor = TranslationPreprocessor(
            tokenizer, target_tokenizer, max_source_length, bucket_boundaries
        )
        self._generator = None
        self.beam_size = beam_size
        self.alpha = float(alpha)
        self.max_source_length = max_source_length
        self.extra_length = extra_length
        self.batch_size = batch_size
        self.bucket_boundaries = self.preprocessor.bucket_boundaries
        self.jit_compile = bool(jit_compile)
        # Strings in, strings out: Keras must not convert the inputs to backend tensors.
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        self.built = True

    def call(self, sentences, beam_size=None, alpha=None):
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
        _check_int("beam_size", beam_size, 1)
        alpha = _check_alpha(self.alpha if alpha is None else alpha)
        if not strings:
            return []
        import tensorflow as tf

        features = self.preprocessor.generate_preprocess(strings)
        source = features["encoder_inputs"]  # (batch, None)
        lengths = source.row_lengths().numpy()
        nonempty = {index: lengths[index] for index in np.flatnonzero(~features["empty"].numpy())}
        outputs = {}  # index -> (tokens, score, text)
        targets = self.preprocessor._targets
        for bucket, indices in bucket_batches(nonempty, self.bucket_boundaries, self.batch_size):
            rows = self.preprocessor.pad_batch(tf.gather(source, indices), bucket).numpy()
            sequences, scores = self._search(rows, beam_size, alpha)
            texts = self.preprocessor.generate_postprocess(sequences[: len(indices)]).numpy()
            for row, index in enumerate(indices):
                tokens = _trim(sequences[row], targets.end_id, targets.pad_id)
                outputs[index] = (tokens, scores[row], texts[row].decode("utf-8", "replace"))
        truncated, translations = features["truncated"].numpy(), []
        for index, ids in enumerate(source.to_list()):
            tokens, score, text = outputs.get(index, ([], 0.0, ""))
            translations.append(
                Translation(
                    text=text,
                    score=float(score),
                    tokens=tokens,
                    truncated=bool(truncated[index]),
                    source_tokens=[self.tokenizer.id_to_token(i) for i in ids],
                    target_tokens=[targets.id_to_token(i) for i in tokens],
                )
            )
            if return_attention:
                translations[-1].attention = _attention(self.model, targets.start_id, ids, tokens)
        return translations[0] if single else translations

    def encode_sources(self, sentences):
        """Encoder ids `[START] pieces [END]` of each sentence, truncated to `max_source_length`.

        Returns:
            `(ids, truncated)`: a list of int32 NumPy arrays, and a bool NumPy array.
        """
        strings = _to_bytes_list(sentences)
        if not strings:
            return [], np.zeros((0,), bool)
        ids, truncated = self.preprocessor.encode_source(strings)
        return [np.array(row, "int32") for row in ids.to_list()], truncated.numpy()

    @property
    def generator(self):
        """The `keras_transformer.generation.Generator` running the compiled searches."""
        if self._generator is None:  # Built on first use: a loaded vocabulary comes late.
            self._generator = self.make_generator(self.jit_compile)
        return self._generator

    def make_generator(self, jit_compile):
        """A new `Generator` for this translator's model and target tokens.

        Args:
            jit_compile: bool. Compile the searches (see `Generator`).
        """
        targets = self.preprocessor._targets
        return Generator(
            self.model,
            start_id=targets.start_id,
            end_id=targets.end_id,
            pad_id=targets.pad_id,
            extra_length=self.extra_length,
            jit_compile=jit_compile,
        )

    # === Helpers ===
    def _search(self, encoder_inputs, beam_size, alpha):
        with _no_grad():
            if beam_size == 1:
                return self.generator(encoder_inputs, search="greedy")
            sequences, scores = self.generator(
                encoder_inputs, search="beam", beam_size=beam_size, alpha=alpha
            )
        return sequences[:, 0], scores[:, 0]

    # === Saving ===
    def save_to_preset(self, directory):
        """Writes this translator as a preset directory (keras-hub's layout; see
        `keras_transformer.presets`). Returns `directory`."""
        from keras_transformer.presets import save_translator

        return save_translator(self, directory)

    @classmethod
    def from_preset(cls, directory):
        """Loads a `Translator` from a preset directory (`save_to_preset`), under any backend;
        a directory that does not fit together raises one `ValueError` listing why."""
        from keras_transformer.presets import load_translator

        return load_translator(directory)

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
        for tokenizer in (translator.tokenizer, translator.target_tokenizer):
            if tokenizer is not None and tokenizer._vocabulary is None:
                # A file without any asset loads without calling `load_assets`.
                raise ValueError(
                    f"`path` holds no vocabulary asset for the tokenizer {tokenizer.name!r}. "
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
        # A configuration may come from a crafted file: each part must be what it claims to
        # be, the tokenizers must fit the model's embeddings (checked again when their
        # `vocabulary.txt` assets load) and the decoding state must fit in memory.
        config = dict(config)
        for key, expected in (
            ("model", Transformer),
            ("tokenizer", Tokenizer),
            ("target_tokenizer", Tokenizer),
        ):
            if config.get(key) is not None:
                config[key] = _deserialize_part(key, config[key], expected)
        model = config.get("model")
        if model is not None:
            _expect_vocabulary_sizes(model, config.get("tokenizer"), config.get("target_tokenizer"))
            _check_decoding_memory(model, config)
        return cls(**config)


def _deserialize_part(key, config, expected):
    """Deserializes `config` only if it names a registered subclass of `expected`: a crafted
    file cannot make a Translator build some other object in its place."""
    name = None
    if isinstance(config, dict):
        name = config.get("registered_name") or config.get("class_name")
    cls = keras.saving.get_registered_object(name) if isinstance(name, str) else None
    if not (isinstance(cls, type) and issubclass(cls, expected)):
        received = f"class {name!r}" if isinstance(config, dict) else type(config).__name__
        raise ValueError(
            f"`{key}` must be the configuration of a `{expected.__name__}`. "
            f"Received: {key} of {received}"
        )
    return keras.saving.deserialize_keras_object(config)


def _expect_vocabulary_sizes(model, tokenizer, target_tokenizer):
    """Makes each tokenizer refuse a vocabulary of another size than the model's embedding."""
    pairs = [(tokenizer, "vocab_size", model.vocab_size)]
    if target_tokenizer is not None:
        pairs.append((target_tokenizer, "target_vocab_size", model.target_vocab_size))
    elif model.target_vocab_size != model.vocab_size:
        raise ValueError(
            "A Translator without `target_tokenizer` shares one vocabulary, so the model "
            "needs `vocab_size == target_vocab_size`. Received: "
            f"vocab_size={model.vocab_size}, target_vocab_size={model.target_vocab_size}"
        )
    for layer, argument, size in pairs:
        if layer is not None:
            layer._expected_vocabulary_size = (size, argument)
            layer._check_expected_vocabulary_size()


def _check_decoding_memory(model, config):
    """Refuses batch, beam and length settings whose decoding state (a batch of the longest
    inputs: cached keys and values, sequences and logits) cannot fit in this machine's memory."""
    defaults = inspect.signature(Translator).parameters
    sizes = {}
    for name in ("beam_size", "max_source_length", "extra_length", "batch_size"):
        value = config.get(name, defaults[name].default)
        _check_int(name, value, 1)
        sizes[name] = value
    rows = padded_batch_size(sizes["batch_size"]) * sizes["beam_size"]
    length = sizes["max_source_length"] + sizes["extra_length"]
    # Per row: self-attention and cross-attention keys and values of every decoder layer,
    # the generated ids and one step's logits, all 4 bytes wide.
    per_row = 4 * model.num_decoder_layers * model.d_model * length + length
    per_row += model.target_vocab_size
    needed = 4 * rows * per_row
    available = _physical_memory_bytes()
    if needed > available:
        received = ", ".join(f"{name}={value}" for name, value in sizes.items())
        raise ValueError(
            f"Decoding a batch with these settings needs about {needed} bytes, more than this "
            f"machine's {available} bytes of memory. Received: {received}"
        )


def _check_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"`{name}` must be an int >= {minimum}. Received: {name}={value!r}")


def _check_alpha(alpha):
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha < 0:
        raise ValueError(f"`alpha` must be a number >= 0. Received: alpha={alpha!r}")
    return alpha


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


def _attention(model, start_id, source_ids, tokens):
    """Cross-attention `(layers, heads, len(tokens), len(source_ids))` of one translation."""
    if not tokens:
        return None
    decoder_inputs = np.array([[start_id, *tokens[:-1]]], "int32")
    with _no_grad():
        encoder_outputs, padding_mask = model.encode(
            np.array([source_ids], "int32"), training=False
        )
        _, scores = model.decode(
            decoder_inputs, encoder_outputs, padding_mask, return_attention_scores=True
        )
    return np.stack([keras.ops.convert_to_numpy(layer)[0] for layer in scores]).astype("float32")


def _no_grad():
    if keras.backend.backend() == "torch":
        import torch

        return torch.no_grad()
    return contextlib.nullcontext()
