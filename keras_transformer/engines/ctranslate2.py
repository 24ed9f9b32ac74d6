"""`CTranslate2Translator`: our tokenizer and translation contract, CTranslate2's search.

CTranslate2 has no GNMT length penalty (it divides by `length ** alpha`). It stops a beam search
once `beam_size * patience` hypotheses have finished, as the Keras `Translator` does by default
(`translation.PATIENCE`). So `CTranslate2Translator` asks CTranslate2 for the raw
log-probability sums (`length_penalty=0`) of all `beam_size * patience` finished hypotheses
(`patience=2`) and re-ranks them with our `((5 + length) / 6) ** alpha`,
the end token counted in `length`: the scores of an n-best list are on our scale and in our
order.
"""

import functools
import os

from keras_transformer.decoding import length_penalty
from keras_transformer.formats.ctranslate2.reader import read_settings
from keras_transformer.formats.versions import latest_version
from keras_transformer.generation import trim
from keras_transformer.text.preprocessor import TranslationPreprocessor
from keras_transformer.translation import (
    N_BEST_PATIENCE,  # noqa: F401 (re-exported by keras_transformer.engines)
    PATIENCE,
    Capabilities,
    EngineBase,
    check_decoding_memory,
    check_search_options,
    run_scoring,
    run_translation,
    sampling_options,
    search_beam_size,
    warmup_requests,
)


def thread_layout(device, inter_threads=None, intra_threads=0):
    """`(inter_threads, intra_threads)` of a `CTranslate2Translator`: the given ones, else on a
    CPU with 2 cores or more two workers sharing the cores (`intra_threads` 0: the cores
    this process may use divided among the workers), one worker elsewhere (intra 0:
    CTranslate2's choice)."""
    for name, value, least in (
        ("inter_threads", inter_threads, 1),
        ("intra_threads", intra_threads, 0),
    ):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < least
        ):
            raise ValueError(f"`{name}` must be an int >= {least}. Received: {name}={value!r}")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if inter_threads is None:
        inter_threads = 2 if device == "cpu" and (cores or 1) >= 2 else 1
    if intra_threads == 0 and inter_threads > 1 and device == "cpu":
        intra_threads = max(1, (cores or 1) // inter_threads)
    return inter_threads, intra_threads


@functools.lru_cache(maxsize=4096)
def _length_penalty(length, alpha):
    """`decoding.length_penalty` as a Python float, computed once per length and alpha (a
    backend call per hypothesis cost 5 s of 17 on the 1,000 Bible test verses)."""
    return float(length_penalty(length, alpha))


class CTranslate2Translator(EngineBase):
    """Translates with a model written by `keras_transformer.export.export_ctranslate2`: our
    tokenizer, CTranslate2's search.

    Returns the same results as `keras_transformer.Translator` and follows its rules for
    unusual inputs: sources longer than `max_source_length - 2` word pieces keep their first
    ones (`Translation.truncated`), a sentence without any token translates to `""` (score
    `0.0`) without running the model, invalid UTF-8 becomes U+FFFD and unknown characters
    `[UNK]`. The maximum output length is the source's bucket length + `extra_length`, as in
    `Translator`. Beam scores are log probabilities divided by the GNMT length penalty
    (CTranslate2's own hypotheses re-ranked, see the module docstring); greedy scores are
    sums of log probabilities.

    Args:
        directory: str or `os.PathLike`. Written by `export_ctranslate2`, or a base directory
            of numbered versions (`export_ctranslate2(..., version=N)`): its highest version
            is loaded (`keras_transformer.export.latest_version`); `self.directory` says which.
        device: str. CTranslate2 device, `"cpu"` or `"cuda"`. Defaults to `"cpu"`.
        compute_type: str. CTranslate2 compute type. Defaults to `"default"`: the type the
            model was saved with.
        intra_threads: int. Threads per batch. Defaults to `0`: the machine's cores
            shared out among the `inter_threads` (on 2 cores, one each), or CTranslate2's
            choice with one worker.
        inter_threads: int. Batches searched at once, each by its own CTranslate2 worker
            (and the calls a server runs at once: `concurrency`). Defaults to `None`: 2 on a
            CPU with 2 cores or more, else 1. On a 2-core AMD EPYC, 1,000 Bible verses took
            8.4 s (11.2 CPU-s) with one worker of 2 threads under `OMP_WAIT_POLICY=PASSIVE`
            (4.3 s, 8.6 CPU-s with OpenMP's spinning wait) and 4.3-4.7 s (8.3-9.0 CPU-s) with
            two workers of one thread, whatever the wait policy (docs/benchmarks.md).
        beam_size: int. Defaults to `None`: the exported translator's.
        alpha: float. Defaults to `None`: the exported translator's.

    Call arguments:
        sentences: a `str` (or `bytes`), or a list of them.

    Returns:
        A `str` for one sentence, a list of `str` for a list; `translate` returns
        `keras_transformer.translation.Translation`s (n-best lists with `num_hypotheses`).
    """

    def __init__(
        self,
        directory,
        device="cpu",
        compute_type="default",
        intra_threads=0,
        beam_size=None,
        alpha=None,
        inter_threads=None,
    ):
        import ctranslate2

        directory = latest_version(directory)
        self.directory = directory
        settings, self.tokenizer, self.target_tokenizer = read_settings(directory)
        self.beam_size = settings["beam_size"] if beam_size is None else beam_size
        self.alpha = float(settings["alpha"] if alpha is None else alpha)
        self.max_source_length = settings["max_source_length"]
        self.extra_length = settings["extra_length"]
        self.batch_size = settings["batch_size"]
        self.bucket_boundaries = tuple(settings["bucket_boundaries"])
        # The translation contract (start/end tokens, truncation, empty input, detokenization)
        # is the package's one preprocessor, as in `Translator` and the SavedModel.
        self.preprocessor = TranslationPreprocessor(
            self.tokenizer,
            self.target_tokenizer,
            max_source_length=self.max_source_length,
            bucket_boundaries=self.bucket_boundaries,
            source_start_token=settings.get("source_start_token", True),
        )
        self.inter_threads, intra_threads = thread_layout(device, inter_threads, intra_threads)
        self._options = dict(device=device, compute_type=compute_type, intra_threads=intra_threads)
        self._translator = ctranslate2.Translator(
            directory, inter_threads=self.inter_threads, **self._options
        )
        self._target_ids = {
            token: index for index, token in enumerate(self._target.get_vocabulary())
        }
        # The decoder's size, for the memory bound of a search (exports of 0.3.0 and earlier
        # lack it: the bound then counts the ids and logits only).
        self._decoder_size = (settings.get("decoder_layers", 0), settings.get("d_model", 0))
        # The positions model.bin encodes: 0.3.0 exports lack room for a target prefix.
        self._positions = settings.get(
            "positions", max(self.bucket_boundaries) + self.extra_length + 1
        )

    def __call__(self, sentences, beam_size=None, alpha=None):
        translations = self.translate(sentences, beam_size=beam_size, alpha=alpha)
        if isinstance(translations, list):
            return [translation.text for translation in translations]
        return translations.text

    def translate(
        self,
        sentences,
        beam_size=None,
        alpha=None,
        num_hypotheses=None,
        target_prefix=None,
        sampling_topk=None,
        sampling_topp=None,
        sampling_temperature=None,
        seed=0,
        alignments=False,
    ):
        """Translates sentences and returns `Translation`s (text, score, tokens).

        Args:
            sentences: a `str` (or `bytes`), or a list of them.
            beam_size: int. Overrides `self.beam_size`; `1` runs greedy search.
                Defaults to `None`: `self.beam_size`, or `1` when a sampling option is given.
            alpha: float. Overrides `self.alpha`. Defaults to `None`.
            num_hypotheses: int, `1 <= num_hypotheses <= beam_size`. Return the n best
                hypotheses, best first. Defaults to `None`: the best only.
            target_prefix: as in `Translator.translate` (CTranslate2's `target_prefix`).
            sampling_topk: int. As in `Translator.translate` (CTranslate2's option of the
                same name).
            sampling_topp: float. As in `Translator.translate` (likewise).
            sampling_temperature: float. As in `Translator.translate` (likewise).
            seed: int. Sampling runs on a CTranslate2 translator loaded for this call, with
                one worker thread whose generator `ctranslate2.set_random_seed(seed)` seeds
                (CTranslate2 seeds each thread's generator once, when it first draws): the
                same call gives the same samples, which are not the Keras engine's for that
                seed (another generator). As on the Keras engine, a sentence's sample
                depends on the sentences translated beside it. Loading costs a model load
                per call.
            alignments: bool. As in `Translator.translate`, from CTranslate2's
                `return_attention` (the last layer's cross-attention averaged over its heads,
                as exported). Defaults to `False`.

        Returns:
            As `keras_transformer.Translator.translate`: a `Translation` (a list of `n` with
            `num_hypotheses=n`) per sentence, a list of them for a list.
        """
        alpha = self.alpha if alpha is None else alpha
        sampling = sampling_options(sampling_topk, sampling_topp, sampling_temperature)
        beam_size = search_beam_size(beam_size, self.beam_size, sampling)
        check_search_options(beam_size, alpha, num_hypotheses, sampling, seed)
        self.check_decoding_memory(beam_size)
        sampler = None if sampling is None else self._sampler(seed)

        def search(source_ids, bucket, max_lengths, prefixes, batch_number):
            # CTranslate2 takes one maximum output length per call: one call per length.
            found = [None] * len(source_ids)
            if max(max_lengths) >= self._positions:
                raise ValueError(
                    f"This CTranslate2 export encodes {self._positions} positions (written "
                    "before target prefixes counted in them): a translation of these sources "
                    f"and prefixes may need {max(max_lengths) + 1}. Export the model again, "
                    f"or shorten the prefixes. Received: target_prefix with up to "
                    f"{max(map(len, prefixes or [[]]))} word pieces"
                )
            for length in sorted(set(max_lengths)):
                rows = [row for row, limit in enumerate(max_lengths) if limit == length]
                sources = [_tokens(self.tokenizer, source_ids[row]) for row in rows]
                options = dict(attention=alignments)
                if prefixes is not None:
                    options["prefixes"] = [_tokens(self._target, prefixes[row]) for row in rows]
                    options["offsets"] = self._prefix_log_probs(sources, options["prefixes"])
                if sampling is not None:
                    options.update(sampling=sampling, translator=sampler)
                hypotheses = self._search(
                    sources, length, beam_size, alpha, num_hypotheses or 1, **options
                )
                for row, options in zip(rows, hypotheses, strict=True):
                    found[row] = options
            return found

        return run_translation(
            self.preprocessor,
            sentences,
            search,
            self.batch_size,
            self.extra_length,
            num_hypotheses,
            # Sampling runs on one worker seeded once: its batches one at a time, in order.
            workers=self.inter_threads if sampler is None else 1,
            target_prefix=target_prefix,
            alignments=alignments,
        )

    # === The `keras_transformer.translation.Engine` protocol ===
    capabilities = Capabilities()  # Every search; nothing compiled per shape.

    @property
    def concurrency(self):
        """Calls worth running at once: one per CTranslate2 worker (`inter_threads`)."""
        return self.inter_threads

    @property
    def max_source_pieces(self):
        """The most source word pieces translated whole (longer sources are truncated)."""
        return self.preprocessor.max_source_pieces

    def check(self, options):
        """The options' values (`SearchOptions`) and the memory bound of their search."""
        super().check(options)
        default = 1 if options.sampling else self.beam_size
        self.check_decoding_memory(default if options.beam_size is None else options.beam_size)

    def warmup_requests(self, max_batch):
        """One sentence: CTranslate2 compiles nothing, but loads lazily what a first call
        uses."""
        return warmup_requests(self.preprocessor, min(max_batch, self.batch_size))[:1]

    def count_tokens(self, texts):
        """The number of source word pieces of each of `texts` (a list of `str`)."""
        return self.preprocessor.count_pieces(texts)

    def score(self, sources, translations):
        """The log probability of given translations, with CTranslate2's `score_batch`.

        Arguments and results as `keras_transformer.Translator.score`.
        """

        def score_batch(source_ids, target_ids):
            results = self._translator.score_batch(
                [_tokens(self.tokenizer, ids) for ids in source_ids],
                [_tokens(self._target, ids) for ids in target_ids],
                max_batch_size=self.batch_size,
                max_input_length=0,
            )
            return [list(result.log_probs) for result in results]

        return run_scoring(self.preprocessor, sources, translations, score_batch, self.batch_size)

    def check_decoding_memory(self, beam_size=None):
        """Raises a `ValueError` naming the settings unless a batch of the longest inputs
        searched with `beam_size` (default: `self.beam_size`) fits in this machine's memory:
        the bound of `keras_transformer.Translator` (`translation.check_decoding_memory`),
        applied before CTranslate2 allocates anything."""
        sizes = {
            "beam_size": self.beam_size if beam_size is None else beam_size,
            "max_source_length": self.max_source_length,
            "extra_length": self.extra_length,
            "batch_size": self.batch_size,
        }
        check_decoding_memory(sizes, *self._decoder_size, self._target.vocabulary_size())

    # === Helpers ===
    @property
    def _target(self):
        return self.target_tokenizer if self.target_tokenizer is not None else self.tokenizer

    def _sampler(self, seed):
        """A new `ctranslate2.Translator` of this model (one worker) seeded with `seed`."""
        import ctranslate2

        ctranslate2.set_random_seed(seed)
        return ctranslate2.Translator(self.directory, inter_threads=1, **self._options)

    def _prefix_log_probs(self, sources, prefixes):
        """The log probability of each prefix (0 for none): CTranslate2's scores of a
        search with `target_prefix` leave it out, ours count it."""
        rows = [row for row, prefix in enumerate(prefixes) if prefix]
        offsets = [0.0] * len(prefixes)
        if rows:
            results = self._translator.score_batch(
                [sources[row] for row in rows], [prefixes[row] for row in rows], max_input_length=0
            )
            for row, result in zip(rows, results, strict=True):
                offsets[row] = float(sum(result.log_probs[:-1]))  # without the end token
        return offsets

    def _search(
        self,
        sources,
        max_new_tokens,
        beam_size,
        alpha,
        count,
        prefixes=None,
        sampling=None,
        translator=None,
        attention=False,
        offsets=None,
    ):
        """For each source, at least `count` hypotheses `(ids, score[, attention])`, best
        first, ids ending with the end token when it was generated (`offsets`: a log
        probability added to each source's raw scores, its prefix's; `translator`: the
        `ctranslate2.Translator` to run, by default this engine's)."""
        options = dict(
            max_batch_size=self.batch_size,
            max_decoding_length=max_new_tokens,
            min_decoding_length=0,
            max_input_length=0,
            return_scores=True,
            return_end_token=True,
            length_penalty=0.0,
        )
        if beam_size > 1:
            # All `beam_size * patience` finished hypotheses, re-ranked below.
            # As `Translator`'s (n-best lists too).
            options.update(patience=PATIENCE, num_hypotheses=beam_size * PATIENCE)
        if prefixes is not None:
            options["target_prefix"] = [prefix or None for prefix in prefixes]
        if sampling is not None:
            options.update(
                sampling_topk=sampling.top_k,  # 0: the whole vocabulary, as ours
                sampling_topp=sampling.top_p,
                sampling_temperature=sampling.temperature,
            )
        translator = translator or self._translator
        results = translator.translate_batch(sources, beam_size=beam_size, **options)
        end_id = self._target.end_id
        outputs = []
        for number, result in enumerate(results):
            candidates = []
            offset = offsets[number] if offsets else 0.0
            for hypothesis, score in zip(result.hypotheses, result.scores, strict=True):
                ids = [self._target_ids[token] for token in hypothesis]
                score = score + offset
                if beam_size > 1:
                    # Raw log-probability sums re-ranked with our length penalty, so the
                    # scores are on our scale; hypotheses cut at `max_new_tokens` count as
                    # that long, as in ours.
                    length = len(ids) if end_id in ids else max_new_tokens
                    score = score / _length_penalty(length, alpha)
                # Trailing padding ids (which only an untrained model generates) are
                # dropped, as `Translator` does.
                candidates.append((trim(ids, end_id, self._target.pad_id), score))
            outputs.append(sorted(candidates, key=lambda candidate: -candidate[1])[:count])
        if attention:
            outputs = self._with_attention(sources, outputs)
        return outputs

    def _with_attention(self, sources, outputs):
        """`outputs` with each hypothesis' attention, `(tokens, source tokens)`.

        One forced greedy pass over all hypotheses (`target_prefix` = the hypothesis, its end
        token left out): the attention with which each of its tokens was produced. Asked of a
        beam search directly, CTranslate2's `return_attention` did not always belong to the
        hypothesis returned (on the number-words model, 0.5 off on some sentences; the forced
        pass equals our cross-attention to 1e-6)."""
        end_id = self._target.end_id
        rows, prefixes = [], []
        for row, hypotheses in enumerate(outputs):
            for tokens, _ in hypotheses:
                rows.append(row)
                kept = tokens[:-1] if tokens and tokens[-1] == end_id else tokens
                prefixes.append(_tokens(self._target, kept) or None)
        results = self._translator.translate_batch(
            [sources[row] for row in rows],
            target_prefix=prefixes,
            beam_size=1,
            max_batch_size=self.batch_size,
            max_input_length=0,
            max_decoding_length=max(len(prefix or []) for prefix in prefixes) + 1,
            return_attention=True,
            return_end_token=True,
        )
        matrices = iter(result.attention[0] for result in results)
        return [
            [(tokens, score, next(matrices)) for tokens, score in hypotheses]
            for hypotheses in outputs
        ]


def _tokens(tokenizer, ids):
    """The vocabulary entries of `ids`."""
    return [tokenizer.id_to_token(int(index)) for index in ids]
