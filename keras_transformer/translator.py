"""`Translator`: a preprocessor, a `Transformer` and beam search; strings in, strings out.

Also the checks a `.keras` file or a configuration passes before a `Translator` is built from
it, and `load_keras_translator`, the one way from a path to a `Translator` (a `.keras` file, a
directory holding one, or a preset directory).
"""

import functools
import inspect
import os
import threading
import warnings
import zipfile

import keras
import numpy as np

from keras_transformer import _backend, _checks
from keras_transformer.buckets import bucket_length, merge_buckets
from keras_transformer.decoding import check_patience
from keras_transformer.engines.names import KERAS_FILE
from keras_transformer.generation import Generator, cross_attentions, trim
from keras_transformer.models.lora import merged_translator

# Imported so that `keras.saving.load_model` finds the registered classes a Translator holds.
from keras_transformer.models.transformer import Transformer
from keras_transformer.saving import preset as preset_files
from keras_transformer.saving.checks import deserialize_part
from keras_transformer.text.preprocessor import TranslationPreprocessor
from keras_transformer.text.tokenizer import Tokenizer
from keras_transformer.translation import (
    DECODING_SIZES,
    PATIENCE,
    Capabilities,
    EngineBase,
    Translation,
    check_decoding_memory,
    check_search_options,
    run_scoring,
    run_translation,
    sampling_options,
    search_beam_size,
    warmup_requests,
)

# Up to this many sentences in all (`Translator.expect`), a Translator on TensorFlow searches
# without XLA (a plain `tf.function` graph): one short call then costs a trace, not a trace
# plus an XLA compilation. Measured on the Bible translator (`make bible`), first call of
# one process: 1 sentence 2.2 s instead of 3.7 s, 9 sentences 2.8 s instead of 4.2 s; the
# previous measurement put the two even near 32 sentences. On JAX the uncompiled search runs
# op by op and is slower (one sentence 8.9 s instead of 4.9 s): JAX keeps `jax.jit`.
FEW_SENTENCES = 16
# Guards the creation of a Translator's `Generator` (see `Translator.generator`).
_GENERATOR_LOCK = threading.Lock()
# A compiled search pads a batch up to a length at most this many times its bucket rather
# than compile one more shape (`merge_buckets`). Measured on the 1,000 Bible test verses
# (beam 4, batches of 64, a 60-minute `make bible` translator, TensorFlow, fp32 matmul
# 149-197 GFLOP/s): 5 shapes -> 2, first call 28.2 -> 20.2-22.6 s and second 12.9 ->
# 13.1-14.6 s over 8 runs, the same 1,000 translations; a ratio of 4 (one shape): first
# 20.6 s, second 16.9 s.
SHAPE_MERGE_RATIO = 2.0


@keras.saving.register_keras_serializable(package="keras_transformer")
class Translator(keras.Model, EngineBase):
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
        source_start_token: bool. Sources begin with `[START]`; `False` for models trained on
            `pieces [END]` sources (Marian / OPUS-MT, see `keras_transformer.formats.marian`).
            Defaults to `True`.
        patience: number `>= 1` or `None`. Beam search stops a sentence once `patience *
            beam_size` hypotheses have ended, as CTranslate2 does: the CTranslate2 engine
            then gives the same outputs. `None` searches until no live hypothesis can beat
            the worst ended one (exact; on the Bible test verses twice the CPU for the same
            BLEU, 6 % of the outputs different). Defaults to `2` (`translation.PATIENCE`).
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
        source_start_token=True,
        patience=PATIENCE,
        **kwargs,
    ):
        super().__init__(**kwargs)
        _check_arguments(model, beam_size, alpha, extra_length, batch_size)
        patience = check_patience(patience)
        if concurrent_batches is not None:
            _checks.check_positive_int("concurrent_batches", concurrent_batches)
        self.model = model
        self.tokenizer = tokenizer
        self.target_tokenizer = target_tokenizer
        self.preprocessor = TranslationPreprocessor(
            tokenizer, target_tokenizer, max_source_length, bucket_boundaries, source_start_token
        )
        self.source_start_token = source_start_token
        self._generator = None
        # The padded lengths searched so far (compiled shapes); a tuple: not Keras-tracked.
        self._search_lengths = ()
        self._score_shapes = ()  # Likewise, the (source length, target width) scored.
        self.beam_size = beam_size
        self.alpha = float(alpha)
        self.max_source_length = max_source_length
        self.extra_length = extra_length
        self.batch_size = batch_size
        self.bucket_boundaries = self.preprocessor.bucket_boundaries
        self.jit_compile = bool(jit_compile)
        self.concurrent_batches = concurrent_batches
        self.patience = patience
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
        self,
        sentences,
        beam_size=None,
        alpha=None,
        num_hypotheses=None,
        return_attention=False,
        target_prefix=None,
        sampling_topk=None,
        sampling_topp=None,
        sampling_temperature=None,
        seed=0,
        alignments=False,
    ):
        """Translates sentences and returns `Translation`s (text, score, tokens, attention).

        Args:
            sentences: a `str` (or `bytes`), or a list / NumPy array of them.
            beam_size: int. Overrides `self.beam_size`; `1` runs greedy search. Defaults to
                `None`: `self.beam_size`, or `1` when a sampling option is given.
            alpha: float. Overrides `self.alpha`. Defaults to `None`.
            num_hypotheses: int, `1 <= num_hypotheses <= beam_size`. Return the n best
                hypotheses of the beam search, best first. Defaults to `None`: the best only.
            return_attention: bool. Fill `Translation.attention` with the cross-attention
                probabilities (one uncached decoder pass over each output), for plotting.
                Defaults to `False`.
            target_prefix: a `str` per sentence (one for a single sentence; `None` or `""`
                for none): each translation starts with these target word pieces (forced
                inside the compiled search) and continues from them. Defaults to `None`.
            sampling_topk: int `>= 0`. Sample each token from the K most probable (`0`: the
                whole vocabulary; `1`: greedy). Any sampling option turns sampling on, with
                `beam_size` 1 unless given (a `beam_size` above 1 is refused), as the command
                line does. Defaults to `None`.
            sampling_topp: float in `(0, 1]`. Sample from the smallest set of most probable
                tokens whose probabilities reach P (nucleus). Defaults to `None` (1.0).
            sampling_temperature: float `>= 1e-6`. Divide the logits by T before sampling.
                Defaults to `None` (1.0).
            seed: int in `0 .. 2**31 - 1`. The seed of sampling: the same seed, sentences (in
                the same order) and settings, `batch_size` included, give the same samples
                (on one backend). A sentence's sample depends on the sentences batched beside
                it (each step draws for the whole batch, in its length order): translate it
                with the same neighbours, or alone, to get its sample again. Defaults to `0`.
            alignments: bool. Fill `Translation.alignments` and `word_alignments`: each
                target piece linked to the source piece with the highest cross-attention of
                the last decoder layer, averaged over its heads (`translation.align`).
                Defaults to `False`.

        Returns:
            A `Translation` for one sentence, a `list[Translation]` for a list. With
            `num_hypotheses=n`, each is instead a list of the `n` best hypotheses, best first
            (the first is the 1-best translation). A sentence without any token has the
            single hypothesis `""`.
        """
        alpha = self.alpha if alpha is None else alpha
        sampling = sampling_options(sampling_topk, sampling_topp, sampling_temperature)
        beam_size = search_beam_size(beam_size, self.beam_size, sampling)
        self.check_search_options(beam_size, alpha, num_hypotheses, sampling, seed)
        search = functools.partial(
            _search,
            self,
            beam_size=beam_size,
            alpha=alpha,
            sampling=sampling,
            seed=seed,
            patience=self.patience,
        )
        attention = functools.partial(
            cross_attentions,
            self.model,
            self.preprocessor.targets.start_id,
            batch_size=self.batch_size,
        )
        workers = self.concurrent_batches or _backend.concurrent_searches(self.jit_compile)
        return run_translation(
            self.preprocessor,
            sentences,
            search,
            self.batch_size,
            self.extra_length,
            num_hypotheses,
            attention if return_attention or alignments else None,
            workers=workers,
            target_prefix=target_prefix,
            alignments=alignments,
            plan_shapes=self._plan_shapes,
        )

    # === The `keras_transformer.translation.Engine` protocol ===
    @property
    def capabilities(self):
        """Every search; `compiles_shapes` on TensorFlow (XLA or a `tf.function` graph per
        shape) and on JAX with `jit_compile` (`jax.jit`), not PyTorch's eager search."""
        backend = keras.backend.backend()
        compiles = backend == "tensorflow" or (backend == "jax" and self.jit_compile)
        return Capabilities(compiles_shapes=compiles)

    @property
    def concurrency(self):
        """Batches searched at once: `concurrent_batches`, by default 2 for a compiled search
        on a machine of 2 cores or more (each keeps about one core busy), else 1."""
        return self.concurrent_batches or _backend.concurrent_searches(self.jit_compile)

    def check(self, options):
        """Raises a `ValueError` naming the option unless this translator can run the search
        of `options` (`SearchOptions`): `check_search_options`, the memory bound included."""
        sampling = sampling_options(
            options.sampling_topk, options.sampling_topp, options.sampling_temperature
        )
        self.check_search_options(
            options.beam_size, options.alpha, options.num_hypotheses, sampling, options.seed
        )

    def warmup_requests(self, max_batch):
        """A search of each compiled shape (source bucket × padded batch size up to
        `min(max_batch, batch_size)`), then the n-best and target-prefix searches
        (`translation.warmup_plan`); one call where nothing compiles per shape."""
        requests = warmup_requests(self.preprocessor, min(max_batch, self.batch_size))
        return requests if self.capabilities.compiles_shapes else requests[:1]

    def expect(self, count):
        """For at most `FEW_SENTENCES` sentences in all, searches without XLA on TensorFlow
        (one trace instead of a trace and an XLA compilation); otherwise changes nothing. The
        search is the same program, compiled differently: its outputs are the compiled one's
        (`tests/test_generation.py`)."""
        if count <= FEW_SENTENCES and keras.backend.backend() == "tensorflow":
            self.jit_compile = False

    @property
    def max_source_pieces(self):
        """The most source word pieces translated whole (longer sources are truncated)."""
        return self.preprocessor.max_source_pieces

    def count_tokens(self, texts):
        """The number of source word pieces of each of `texts` (a list of `str`)."""
        return self.preprocessor.count_pieces(texts)

    def _score_shape(self, length, width):
        """The padded `(source length, target width)` of a scoring batch: on a compiled
        backend, a shape already compiled whose sides are at most `SHAPE_MERGE_RATIO` times
        these (`run_scoring` sends the longest batches first), else these."""
        if not _backend.compiles_shapes(self.jit_compile):
            return length, width
        fits = [
            (rows, columns)
            for rows, columns in self._score_shapes
            if length <= rows <= SHAPE_MERGE_RATIO * length
            and width <= columns <= SHAPE_MERGE_RATIO * width
        ]
        shape = min(fits, key=lambda shape: shape[0] * shape[1]) if fits else (length, width)
        self._score_shapes = tuple(sorted({*self._score_shapes, shape}))
        return shape

    def _plan_shapes(self, buckets):
        """The padded length of each bucket's batches (`run_translation`'s `plan_shapes`).

        Each compiled shape costs seconds of tracing and compiling (XLA, `jax.jit`), so a
        compiled search merges buckets (`merge_buckets`, `SHAPE_MERGE_RATIO`), reusing the
        lengths of earlier calls first; the uncompiled searches (PyTorch, `jit_compile=False`)
        keep each bucket.
        """
        if not _backend.compiles_shapes(self.jit_compile):
            return {bucket: bucket for bucket in buckets}
        lengths = merge_buckets(buckets, SHAPE_MERGE_RATIO, self._search_lengths)
        self._search_lengths = tuple(sorted({*self._search_lengths, *lengths.values()}))
        return lengths

    def score(self, sources, translations):
        """The log probability of given translations (forced decoding, teacher forcing).

        Args:
            sources: a `str` (`bytes`), or a list of them.
            translations: the translation of each source (same count).

        Returns:
            A `keras_transformer.translation.Scoring` (`score`, `token_scores`,
            `target_tokens`, `truncated`) for one pair, a list of them for lists. `score` is
            `log p(translation [END] | source)`, the sum of the token scores: the negative of
            the model's training loss on that pair without label smoothing.
        """
        return run_scoring(
            self.preprocessor,
            sources,
            translations,
            functools.partial(_score_batch, self),
            self.batch_size,
        )

    def check_search_options(
        self, beam_size=None, alpha=None, num_hypotheses=None, sampling=None, seed=0
    ):
        """Raises a `ValueError` naming the option unless this translator can run that search:
        valid values, and a decoding state (a batch of the longest inputs with `beam_size`
        rows each) that fits in this machine's memory, the bound a loaded file's settings
        meet. Every `translate` call checks its options here before the search.

        Args:
            beam_size: int. Defaults to `None`: `self.beam_size` (`1` with `sampling`).
            alpha: float. Defaults to `None`: `self.alpha`.
            num_hypotheses: int. Defaults to `None`.
            sampling: dict of the sampling options (`translation.sampling_options`), or `None`.
            seed: int. The sampling seed. Defaults to `0`.
        """
        beam_size = search_beam_size(beam_size, self.beam_size, sampling)
        alpha = self.alpha if alpha is None else alpha
        check_search_options(beam_size, alpha, num_hypotheses, sampling, seed)
        sizes = {
            "beam_size": beam_size,
            "max_source_length": self.max_source_length,
            "extra_length": self.extra_length,
            "batch_size": self.batch_size,
        }
        _check_decoding_memory(self.model, sizes)

    @property
    def generator(self):
        """The `keras_transformer.generation.Generator` running the compiled searches."""
        # Built on first use (a loaded vocabulary comes late), once: the first batches of a
        # call ask for it from two threads at once (two generators compiled each shape twice).
        with _GENERATOR_LOCK:
            if self._generator is None:
                self._generator = self.make_generator(self.jit_compile)
        return self._generator

    def make_generator(self, jit_compile):
        """A new `Generator` of this model and target tokens (`jit_compile`: bool)."""
        targets = self.preprocessor.targets
        return Generator(
            self.model,
            start_id=targets.start_id,
            end_id=targets.end_id,
            pad_id=targets.pad_id,
            extra_length=self.extra_length,
            jit_compile=jit_compile,
        )

    def quantize(self, mode="int8", **kwargs):
        """Quantizes the model's weights to int8 (`Transformer.quantize`); the searches compiled
        so far are dropped and compile again on first use. The quantized translator saves,
        loads and exports as any other. On TensorFlow, decode it with `jit_compile=True`
        (warned otherwise): int8 products pay under XLA only.

        Args:
            mode: str. `"int8"`.
            **kwargs: `Transformer.quantize` arguments.
        """
        self.model.quantize(mode, **kwargs)
        if _backend.is_tensorflow() and not self.jit_compile:
            # benchmarks/results/int8_matmul.md: 0.29-0.38x float32's speed without XLA.
            warnings.warn(
                "This translator decodes without XLA (jit_compile=False): on TensorFlow, int8 "
                "products run about 3x slower than float32 ones without it. Set "
                "`translator.jit_compile = True` (docs/quantization.md).",
                stacklevel=2,
            )
        with _GENERATOR_LOCK:
            self._generator = None
            self._search_lengths = ()
            self._score_shapes = ()

    # === Saving ===
    def save_to_preset(self, directory):
        """Writes this translator as a preset directory (keras-hub's layout; see
        `keras_transformer.saving.preset`). Returns `directory`. A model with LoRA enabled
        is written merged (`keras_transformer.models.lora.merged_translator`)."""
        return preset_files.save_translator(merged_translator(self), directory, Translator)

    @classmethod
    def from_preset(cls, directory):
        """Loads a `Translator` from a preset directory (`save_to_preset`), under any backend;
        a directory that does not fit together raises one `ValueError` listing why."""
        return preset_files.load_translator(directory, Translator)

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
        config["source_start_token"] = self.source_start_token
        config["patience"] = self.patience
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**_checked_config(config))


def _search(
    translator,
    source_ids,
    bucket,
    max_lengths,
    prefixes,
    batch_number,
    beam_size,
    alpha,
    sampling=None,
    seed=0,
    patience=None,
):
    """The Translator's search of one batch, in `run_translation`'s terms (`search`)."""
    targets = translator.preprocessor.targets
    rows = translator.preprocessor.pad_rows(source_ids, bucket)
    # The rows padding the batch (copies of its last source) stop after one token.
    limits = max_lengths + [1] * (len(rows) - len(source_ids))
    prefix, max_new_tokens = None, None
    if prefixes is not None and any(prefixes):
        # Padded to a bucket (one compiled shape per bucket), -1 after each prefix.
        width = bucket_length(max(len(ids) for ids in prefixes), translator.bucket_boundaries)
        prefix = np.full((len(rows), width), -1, "int32")
        for row, ids in enumerate(prefixes):
            prefix[row, : len(ids)] = ids
        max_new_tokens = bucket + translator.extra_length + width
    sequences, scores = translator.generator(
        rows,
        beam_size=beam_size,
        alpha=alpha,
        max_new_tokens=max_new_tokens,
        max_lengths=np.array(limits, "int32"),
        prefix=prefix,
        sampling=sampling,
        # One stream of draws per batch of the call: [seed, batch_number << 12 + step].
        seed=(seed, batch_number << 12),
        patience=patience,
    )
    return [
        [(trim(ids, targets.end_id, targets.pad_id), score) for ids, score in zip(*row)]
        for row in zip(sequences[: len(source_ids)], scores)
    ]


def _score_batch(translator, source_ids, target_ids):
    """The Translator's scores of one batch, in `run_scoring`'s terms (`score_batch`)."""
    preprocessor, targets = translator.preprocessor, translator.preprocessor.targets
    longest = max(len(ids) for ids in target_ids) + 1
    boundaries = translator.bucket_boundaries
    # Padded to a bucket (or a multiple of the largest) to bound the compiled shapes.
    width = (
        bucket_length(longest, boundaries)
        if longest <= boundaries[-1]
        else -(-longest // boundaries[-1]) * boundaries[-1]
    )
    length, width = translator._score_shape(
        bucket_length(max(map(len, source_ids)), boundaries), width
    )
    rows = preprocessor.pad_rows(source_ids, length)
    decoder_inputs = np.zeros((len(rows), width), "int32")
    labels = np.zeros((len(rows), width), "int32")
    for row, ids in enumerate(target_ids):
        decoder_inputs[row, : len(ids) + 1] = [targets.start_id, *ids]
        labels[row, : len(ids) + 1] = [*ids, targets.end_id]
    token_scores = translator.generator.score(rows, decoder_inputs, labels)
    return [token_scores[row, : len(ids) + 1].tolist() for row, ids in enumerate(target_ids)]


def _check_arguments(model, beam_size, alpha, extra_length, batch_size):
    """The checks of `Translator.__init__` (its configuration's are `_checked_config`)."""
    check_search_options(beam_size, alpha, None)
    for name, value in (("extra_length", extra_length), ("batch_size", batch_size)):
        _checks.check_positive_int(name, value)
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
            config[key] = deserialize_part(key, config[key], expected)
    model = config.get("model")
    if model is not None:
        _expect_vocabulary_sizes(model, config.get("tokenizer"), config.get("target_tokenizer"))
        _check_decoding_memory(model, config)
    return config


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
    """Refuses batch, beam and length settings whose decoding state cannot fit in this
    machine's memory (`keras_transformer.translation.check_decoding_memory`).

    `config` holds the settings (the `Translator` defaults fill what it lacks): a loaded
    file's configuration, or a `translate` call's options (`Translator.check_search_options`).
    """
    defaults = inspect.signature(Translator).parameters
    sizes = {name: config.get(name, defaults[name].default) for name in DECODING_SIZES}
    check_decoding_memory(
        sizes, model.num_decoder_layers, model.d_model, model.target_vocabulary_size
    )


def load_keras_translator(path):
    """The `Translator` at `path`, whatever wrote it: a `.keras` file (`Translator.load`), a
    directory holding `translator.keras` (a training run's output directory, or its `best/`),
    or a preset directory (`Translator.from_preset`).

    `keras_transformer.engines.load_translator` opens the other engines' files too.

    Args:
        path: str or `os.PathLike`.

    Returns:
        A `keras_transformer.Translator`.

    Raises:
        FileNotFoundError: nothing at `path`.
        ValueError: `path` holds no Translator (the message says why).
    """
    path = os.fspath(path)
    if not os.path.isdir(path):
        return Translator.load(path)
    inside = os.path.join(path, KERAS_FILE)
    if os.path.isfile(inside):
        return Translator.load(inside)
    if not preset_files.is_preset(path):
        raise ValueError(
            f"`path` must be a Translator .keras file, a directory holding {KERAS_FILE}, or a "
            "preset directory (config.json, weights, tokenizer assets). Received: "
            f"path={path!r}, a directory with neither"
        )
    return Translator.from_preset(path)
