"""`Translator`: a preprocessor, a `Transformer` and beam search; strings in, strings out."""

import dataclasses
import functools
import inspect
import os
import zipfile

import keras
import numpy as np

from keras_transformer import _backend
from keras_transformer.data.buckets import bucket_batches, bucket_length, padded_batch_size
from keras_transformer.decoding import _check_alpha
from keras_transformer.generation import Generator, _check_positive_int, cross_attention, trim

# Imported so that `keras.saving.load_model` finds the registered classes a Translator holds.
from keras_transformer.models.transformer import Transformer, _physical_memory_bytes
from keras_transformer.text.preprocessor import TranslationPreprocessor, as_byte_strings
from keras_transformer.text.tokenizer import Tokenizer


@dataclasses.dataclass
class Translation:
    """One translation (or one hypothesis of an n-best list) with its details, as returned by
    `Translator.translate`.

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


def check_search_options(beam_size, alpha, num_hypotheses):
    """Checks the search options of a `translate` call (any engine)."""
    _check_positive_int("beam_size", beam_size)
    _check_alpha(alpha)
    if num_hypotheses is not None and (
        isinstance(num_hypotheses, bool)
        or not isinstance(num_hypotheses, int)
        or not 1 <= num_hypotheses <= beam_size
    ):
        raise ValueError(
            f"`num_hypotheses` must be an int from 1 to the beam size ({beam_size}). "
            f"Received: num_hypotheses={num_hypotheses!r}"
        )


def run_translation(
    preprocessor,
    sentences,
    search,
    batch_size,
    extra_length,
    num_hypotheses,
    attention=None,
    workers=1,
):
    """The steps every translation engine shares, around its own search.

    Sentences go through `preprocessor.generate_preprocess` (the translation contract); the
    non-empty ones are cut, in length order, into batches of `batch_size`, each padded to the
    bucket of its longest source (`keras_transformer.data.buckets.bucket_batches`: one batch
    shape per bucket, and one more at most) and handed to `search`, `workers`
    batches at a time; the hypotheses are detokenized with
    `preprocessor.generate_postprocess`. An empty sentence translates to `""` with score `0.0`
    without any search.

    Args:
        preprocessor: `keras_transformer.text.TranslationPreprocessor`.
        sentences: a `str` (or `bytes`), or a list / NumPy array of them.
        search: callable `(source_ids, bucket, max_lengths) -> hypotheses`: `source_ids` a
            list of lists of int (`[START] pieces [END]`, unpadded), `bucket` their padded
            length, `max_lengths` the most tokens of each one's translation (the bucket of that
            source alone + `extra_length`: the same whatever it is batched with); for each
            source, a list of `(tokens, score)`, best first, `tokens` trimmed after the end
            token.
        batch_size: int. Most sources per `search` call.
        extra_length: int. A translation has at most its source's bucket length +
            `extra_length` tokens.
        num_hypotheses: int or `None`, as in `Translator.translate`.
        attention: callable `(source_ids, tokens) -> array`, to fill `Translation.attention`.
            Defaults to `None`.
        workers: int. Batches searched at once, each by its own thread (`search` must then be
            thread-safe). The results do not depend on it. Defaults to `1`.

    Returns:
        As `Translator.translate`.
    """
    single = isinstance(sentences, (str, bytes))
    strings = as_byte_strings([sentences] if single else sentences)
    if not strings:
        return []
    features = preprocessor.generate_preprocess(strings)
    source_ids = features["encoder_inputs"].to_list()
    empty, truncated = features["empty"].numpy(), features["truncated"].numpy()
    lengths = {index: len(ids) for index, ids in enumerate(source_ids) if not empty[index]}
    found = {}  # index -> [(tokens, score)], best first

    def run(batch):
        bucket, indices = batch
        max_lengths = [
            bucket_length(lengths[index], preprocessor.bucket_boundaries) + extra_length
            for index in indices
        ]
        return indices, search([source_ids[index] for index in indices], bucket, max_lengths)

    batches = _search_order(bucket_batches(lengths, preprocessor.bucket_boundaries, batch_size))
    for indices, hypotheses in _map(run, batches, workers):
        for index, options in zip(indices, hypotheses, strict=True):
            found[index] = options[: num_hypotheses or 1]
    texts = _detokenize(
        preprocessor, [tokens for index in sorted(found) for tokens, _ in found[index]]
    )
    targets, results = preprocessor._targets, []
    for index, ids in enumerate(source_ids):
        source_tokens = [preprocessor.tokenizer.id_to_token(i) for i in ids]
        hypotheses = []
        for tokens, score in found.get(index, [([], 0.0)]):
            hypotheses.append(
                Translation(
                    text=next(texts) if index in found else "",
                    score=float(score),
                    tokens=tokens,
                    truncated=bool(truncated[index]),
                    source_tokens=list(source_tokens),
                    target_tokens=[targets.id_to_token(i) for i in tokens],
                    attention=attention(ids, tokens) if attention else None,
                )
            )
        results.append(hypotheses if num_hypotheses is not None else hypotheses[0])
    return results[0] if single else results


def _search_order(batches):
    """`batches` (`(bucket, indices)`) in the order to search them: the first batch of each
    shape, then the others, each part longest bucket first.

    A shape's first batch traces and compiles it (XLA, `jax.jit`): started early, the
    compiles overlap with searches of shapes already compiled, instead of each making the
    other worker wait on the way up the buckets; the short batches last fill the end.
    Measured on 1,000 Bible verses (TensorFlow, two workers): first call 49-59 s instead of
    61 s, the second unchanged (29 s).
    """
    seen, firsts, others = set(), [], []
    for bucket, indices in sorted(batches, key=lambda batch: -batch[0]):
        shape = (bucket, padded_batch_size(len(indices)))
        (others if shape in seen else firsts).append((bucket, indices))
        seen.add(shape)
    return firsts + others


def _map(function, items, workers):
    """`map(function, items)`, in order, run by `workers` threads when that is more than one.

    The compiled searches (XLA, `jax.jit`) release the GIL and use about one core each on a
    CPU, so two batches at once keep two cores busy."""
    if workers <= 1 or len(items) <= 1:
        return map(function, items)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as executor:
        return list(executor.map(function, items))


def _detokenize(preprocessor, sequences):
    """An iterator over the texts of `sequences` (lists of ids), in order."""
    if not sequences:
        return iter(())
    pad_id = preprocessor._targets.pad_id
    longest = max(1, max(len(tokens) for tokens in sequences))
    rows = [tokens + [pad_id] * (longest - len(tokens)) for tokens in sequences]
    texts = preprocessor.generate_postprocess(rows).numpy()
    return iter(text.decode("utf-8", "replace") for text in texts)


@keras.saving.register_keras_serializable(package="keras_transformer")
class Translator(keras.Model):
    """Translates sentences: tokenizer, `Transformer` and beam search in one savable object.

    A `keras_transformer.text.TranslationPreprocessor` (the translation contract: `[START]
    pieces [END]`, truncation, empty input, buckets), a `keras_transformer.generation.Generator`
    (compiled cached search, never recompiled by a repeated call) and detokenization. An empty
    sentence translates to `""` (score `0.0`); invalid UTF-8 becomes U+FFFD and unknown
    characters `[UNK]`: no input string raises. `translator.save("translator.keras")` writes
    weights, configuration and vocabulary; `Translator.load` (or `keras.saving.load_model`)
    reads it under any backend; `keras_transformer.export` serves it as a SavedModel.

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
        extra_length: int. A translation has at most `extra_length` tokens more than its
            source padded to its bucket (`bucket_length`), whatever it is batched with.
            Defaults to `50`.
        batch_size: int. Sentences decoded together. Defaults to `32`.
        bucket_boundaries: ascending list of int `>= 2`, the padded source lengths. Defaults to
            `None`: `keras_transformer.data.default_bucket_boundaries(max_source_length)`.
        jit_compile: bool. Compile the search (XLA on TensorFlow, `jax.jit` on JAX; PyTorch
            runs eagerly under `torch.no_grad()`); `False` (eager) is quicker for a few
            one-off calls. Defaults to `True`.
        concurrent_batches: int `>= 1`. Batches searched at once, each by its own thread, when
            a call has several. A compiled search (XLA, `jax.jit`) keeps about one CPU core
            busy, so two at once use two cores; outputs do not change. Defaults to `None`:
            `min(2, os.cpu_count())` for a compiled search on TensorFlow or JAX, else `1`
            (PyTorch's eager search already uses every thread `torch.set_num_threads` gives).
        **kwargs: `keras.Model` arguments (`name`).

    Call arguments:
        sentences: a `str` (or `bytes`), or a list / NumPy array of them.
        beam_size: int. Overrides the default for this call. Defaults to `None`.
        alpha: float. Overrides the default for this call. Defaults to `None`.

    Returns:
        A `str` for one sentence, a list of `str` for a list. `translate` returns
        `Translation`s with scores, tokens, n-best lists and cross-attention weights.

    Example:

    >>> from keras_transformer import Transformer
    >>> from keras_transformer.text import train_tokenizer
    >>> tokenizer = train_tokenizer(["¿Dónde está?", "Where is it?"], vocabulary_size=64)
    >>> model = Transformer.from_preset("tiny", vocabulary_size=tokenizer.vocabulary_size())
    >>> translator = Translator(model, tokenizer, extra_length=5)
    >>> outputs = translator(["¿Dónde está?", ""])  # untrained: some words, then ""
    >>> len(outputs), outputs[1]
    (2, '')

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762), §6.1: the defaults (beam
          size 4, length penalty 0.6, at most input length + 50 tokens).
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
        concurrent_batches=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        _check_arguments(model, beam_size, alpha, extra_length, batch_size)
        if concurrent_batches is not None:
            _check_positive_int("concurrent_batches", concurrent_batches)
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
        self.concurrent_batches = concurrent_batches
        # Strings in, strings out: Keras must not convert the inputs to backend tensors.
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        self.built = True

    def call(self, sentences, beam_size=None, alpha=None):
        translations = self.translate(sentences, beam_size=beam_size, alpha=alpha)
        if isinstance(translations, Translation):
            return translations.text
        return [translation.text for translation in translations]

    def translate(
        self, sentences, beam_size=None, alpha=None, num_hypotheses=None, return_attention=False
    ):
        """Translates sentences and returns `Translation`s (text, score, tokens, attention).

        Args:
            sentences: a `str` (or `bytes`), or a list / NumPy array of them.
            beam_size: int. Overrides `self.beam_size`; `1` runs greedy search. Defaults to `None`.
            alpha: float. Overrides `self.alpha`. Defaults to `None`.
            num_hypotheses: int, `1 <= num_hypotheses <= beam_size`. Return the n best
                hypotheses of the beam search, best first. Defaults to `None`: the best only.
            return_attention: bool. Fill `Translation.attention` with the cross-attention
                probabilities (one uncached decoder pass over each output), for plotting.
                Defaults to `False`.

        Returns:
            A `Translation` for one sentence, a `list[Translation]` for a list. With
            `num_hypotheses=n`, each is instead a list of the `n` best hypotheses, best first
            (the first is the 1-best translation). A sentence without any token has the
            single hypothesis `""`.
        """
        beam_size = self.beam_size if beam_size is None else beam_size
        alpha = self.alpha if alpha is None else alpha
        check_search_options(beam_size, alpha, num_hypotheses)
        targets = self.preprocessor._targets

        def search(source_ids, bucket, max_lengths):
            import tensorflow as tf

            ragged = tf.ragged.constant(source_ids, tf.int32, ragged_rank=1)
            rows = self.preprocessor.pad_batch(ragged, bucket).numpy()
            # The rows padding the batch (copies of its last source) stop after one token.
            limits = max_lengths + [1] * (len(rows) - len(source_ids))
            sequences, scores = self.generator(
                rows, beam_size=beam_size, alpha=alpha, max_lengths=np.array(limits, "int32")
            )
            return [
                [(trim(ids, targets.end_id, targets.pad_id), score) for ids, score in zip(*row)]
                for row in zip(sequences[: len(source_ids)], scores)
            ]

        attention = functools.partial(cross_attention, self.model, targets.start_id)
        attention = attention if return_attention else None
        return run_translation(
            self.preprocessor,
            sentences,
            search,
            self.batch_size,
            self.extra_length,
            num_hypotheses,
            attention,
            workers=self._workers(),
        )

    @property
    def generator(self):
        """The `keras_transformer.generation.Generator` running the compiled searches."""
        if self._generator is None:  # Built on first use: a loaded vocabulary comes late.
            self._generator = self.make_generator(self.jit_compile)
        return self._generator

    def make_generator(self, jit_compile):
        """A new `Generator` of this model and target tokens (`jit_compile`: bool)."""
        targets = self.preprocessor._targets
        return Generator(
            self.model,
            start_id=targets.start_id,
            end_id=targets.end_id,
            pad_id=targets.pad_id,
            extra_length=self.extra_length,
            jit_compile=jit_compile,
        )

    def _workers(self):
        """How many batches a call searches at once (`concurrent_batches`)."""
        if self.concurrent_batches is not None:
            return self.concurrent_batches
        return _backend.concurrent_searches(self.jit_compile)

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
        """Loads a `Translator` written by `translator.save(path)` (a `.keras` file, str or
        `os.PathLike`). Raises `FileNotFoundError` when there is no such file, `ValueError` when
        it is no `.keras` archive (e.g. a truncated copy) or holds no Translator."""
        return _load_keras_file(path, cls)

    def get_config(self):
        config = {"name": self.name, "trainable": self.trainable}
        for key in ("model", "tokenizer", "target_tokenizer"):
            value = getattr(self, key)
            config[key] = None if value is None else keras.saving.serialize_keras_object(value)
        for key in ("beam_size", "alpha", "max_source_length", "extra_length", "batch_size"):
            config[key] = getattr(self, key)
        config["bucket_boundaries"] = list(self.bucket_boundaries)
        config["jit_compile"] = self.jit_compile
        config["concurrent_batches"] = self.concurrent_batches
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**_checked_config(config))


def _check_arguments(model, beam_size, alpha, extra_length, batch_size):
    """The checks of `Translator.__init__` (its configuration's are `_checked_config`)."""
    check_search_options(beam_size, alpha, None)
    for name, value in (("extra_length", extra_length), ("batch_size", batch_size)):
        _check_positive_int(name, value)
    if not all(hasattr(model, attr) for attr in ("encode", "init_cache", "decode_step")):
        raise ValueError(
            f"`model` must be a `keras_transformer.Transformer`. Received: model={model!r}"
        )


def _load_keras_file(path, cls):
    """`Translator.load`: the `cls` instance of a `.keras` file.

    Args:
        path: str or `os.PathLike`. The `.keras` file.
        cls: the class the file must hold (`Translator` or a subclass).

    Raises:
        FileNotFoundError: `path` is not a file.
        ValueError: `path` is not a `.keras` archive (e.g. a truncated copy), holds something
            other than a `cls`, or a tokenizer without its vocabulary asset.
    """
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


def _checked_config(config):
    """A Translator configuration with its parts deserialized and checked.

    A configuration may come from a crafted file: each part must be what it claims to be, the
    tokenizers must fit the model's embeddings (checked again when their `vocabulary.txt`
    assets load) and the decoding state must fit in memory.
    """
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
    return config


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
    pairs = [(tokenizer, "vocabulary_size", model.vocabulary_size)]
    if target_tokenizer is not None:
        pairs.append((target_tokenizer, "target_vocabulary_size", model.target_vocabulary_size))
    elif model.target_vocabulary_size != model.vocabulary_size:
        raise ValueError(
            "A Translator without `target_tokenizer` shares one vocabulary, so the model "
            "needs `vocabulary_size == target_vocabulary_size`. Received: "
            f"vocabulary_size={model.vocabulary_size}, target_vocabulary_size={model.target_vocabulary_size}"
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
        _check_positive_int(name, value)
        sizes[name] = value
    rows = padded_batch_size(sizes["batch_size"]) * sizes["beam_size"]
    length = sizes["max_source_length"] + sizes["extra_length"]
    # Per row: self-attention and cross-attention keys and values of every decoder layer,
    # the generated ids and one step's logits, all 4 bytes wide.
    per_row = 4 * model.num_decoder_layers * model.d_model * length + length
    per_row += model.target_vocabulary_size
    needed = 4 * rows * per_row
    available = _physical_memory_bytes()
    if needed > available:
        received = ", ".join(f"{name}={value}" for name, value in sizes.items())
        raise ValueError(
            f"Decoding a batch with these settings needs about {needed} bytes, more than this "
            f"machine's {available} bytes of memory. Received: {received}"
        )
