"""`SavedModelTranslator`: translates with a SavedModel written by
`keras_transformer.export.export_saved_model` (TensorFlow and tensorflow-text only)."""

import os

from keras_transformer.formats.saved_model.layout import (
    INPUT_NAME,
    MAX_REQUEST_SIZE,
    N_BEST_SIGNATURE_NAME,
    PREFIX_INPUT_NAME,
    PREFIX_SIGNATURE_NAME,
    SIGNATURE_NAME,
    WARMUP_PATH,
    read_metadata,
    read_warmup_requests,
)
from keras_transformer.translation import (
    Capabilities,
    EngineBase,
    SearchOptions,
    Translation,
    WarmupRequest,
)


class SavedModelTranslator(EngineBase):
    """Translates with a SavedModel written by `keras_transformer.export.export_saved_model`,
    through its `serving_default` signature (and `translate_n_best` for n-best lists).

    Needs TensorFlow and tensorflow-text only (no Keras model is built). Its search is fixed at
    export: `beam_size` must be the exported one, and `num_hypotheses` at most the columns of
    `translate_n_best`. `Translation.tokens`, `source_tokens` and `target_tokens` are `None`:
    a SavedModel returns strings.

    Args:
        path: str or `os.PathLike`. The SavedModel directory.
        max_request_size: int. Most sentences sent to the SavedModel at once: a longer list is
            translated in requests of at most this many. Defaults to `None`: the export's
            `max_request_size` (`MAX_REQUEST_SIZE` for an export that does not record one).

    Call arguments:
        sentences: a `str` (or `bytes`), or a list of them.

    Returns:
        A `str` for one sentence, a list of `str` for a list.
    """

    def __init__(self, path, max_request_size=None):
        import tensorflow as tf
        import tensorflow_text  # noqa: F401 (registers the tokenizer ops)

        self._tf = tf
        self.directory = os.fspath(path)
        self._loaded = tf.saved_model.load(self.directory)
        self._signature = self._loaded.signatures[SIGNATURE_NAME]
        self._n_best_signature = self._loaded.signatures.get(N_BEST_SIGNATURE_NAME)
        self._prefix_signature = self._loaded.signatures.get(PREFIX_SIGNATURE_NAME)
        metadata = read_metadata(self.directory)
        self.beam_size = metadata.get("beam_size")
        self.alpha = metadata.get("alpha")
        self.max_source_length = metadata.get("max_source_length")
        self.max_request_size = max_request_size or metadata.get(
            "max_request_size", MAX_REQUEST_SIZE
        )
        self.num_hypotheses = None
        if self._n_best_signature is not None:
            # (batch, num_hypotheses): static in the signature; the metadata says it too.
            columns = self._n_best_signature.structured_outputs["translations"].shape[-1]
            self.num_hypotheses = columns if columns is not None else metadata.get("num_hypotheses")

    def __call__(self, sentences):
        translations = self.translate(sentences)
        if isinstance(translations, Translation):
            return translations.text
        return [translation.text for translation in translations]

    def check_search_options(
        self,
        beam_size=None,
        num_hypotheses=None,
        target_prefix=False,
        sampling=False,
        alignments=False,
    ):
        """Raises a `ValueError` unless this SavedModel can run that search (`target_prefix`,
        `sampling`, `alignments`: bools, whether they are asked for)."""
        if sampling or alignments:
            raise ValueError(
                "A SavedModel runs the search it was exported with and returns strings: it "
                "cannot sample or align; translate with a .keras Translator or `--engine "
                f"ctranslate2`. Received: sampling={bool(sampling)}, alignments={bool(alignments)}"
            )
        if target_prefix and self._prefix_signature is None:
            raise ValueError(
                f"This SavedModel has no `{PREFIX_SIGNATURE_NAME}` signature (exported before "
                "target prefixes were): export it again for `--target-prefix`. "
                "Received: target_prefix given"
            )
        if target_prefix and num_hypotheses is not None and num_hypotheses > 1:
            raise ValueError(
                f"The `{PREFIX_SIGNATURE_NAME}` signature returns the best translation only. "
                f"Received: n_best={num_hypotheses} with a target prefix"
            )
        if beam_size is not None and beam_size != self.beam_size:
            raise ValueError(
                "A SavedModel searches with the beam size it was exported with "
                f"({self.beam_size}): export another one for another `--beam-size`, or "
                "translate with a .keras Translator or `--engine ctranslate2`. "
                f"Received: beam_size={beam_size}"
            )
        if num_hypotheses is None:
            return
        if self._n_best_signature is None:
            raise ValueError(
                f"This SavedModel has no `{N_BEST_SIGNATURE_NAME}` signature (exported before "
                "n-best lists were): export it again for `--n-best`. "
                f"Received: n_best={num_hypotheses}"
            )
        if self.num_hypotheses is not None and num_hypotheses > self.num_hypotheses:
            raise ValueError(
                f"This SavedModel's `{N_BEST_SIGNATURE_NAME}` signature returns "
                f"{self.num_hypotheses} hypotheses per sentence: `--n-best` must be at most "
                f"{self.num_hypotheses} (export with a larger `--num-hypotheses` and "
                f"`--beam-size` for more). Received: n_best={num_hypotheses}"
            )

    # === The `keras_transformer.translation.Engine` protocol ===
    @property
    def capabilities(self):
        """The search fixed at export: its beam size, its n-best columns (1 without the
        `translate_n_best` signature), prefixes with `translate_with_prefix`; no sampling,
        alignments or scoring (a SavedModel returns strings). Its searches are compiled per
        shape (replayed from its warm-up records)."""
        return Capabilities(
            fixed_beam_size=self.beam_size,
            max_hypotheses=self.num_hypotheses if self._n_best_signature is not None else 1,
            sampling=False,
            prefixes=self._prefix_signature is not None,
            alignments=False,
            scoring=False,
            compiles_shapes=True,
        )

    @property
    def max_source_pieces(self):
        return None  # The tokenizer is inside the graph: `Translation.truncated` tells.

    def check(self, options):
        """`check_search_options` of `options` (`SearchOptions`), and its length penalty,
        which must be the exported one."""
        self.check_search_options(
            options.beam_size,
            options.num_hypotheses,
            options.prefixed,
            options.sampling,
            options.alignments,
        )
        if options.alpha is not None and options.alpha != self.alpha:
            raise ValueError(
                f"A SavedModel searches with the length penalty it was exported with "
                f"({self.alpha}). Received: alpha={options.alpha}"
            )

    def run(self, sentences, options=None, prefixes=None):
        options = options or SearchOptions()
        self.check(options)
        return self.translate(
            sentences, options.beam_size, options.num_hypotheses, target_prefix=prefixes
        )

    def warmup_requests(self, max_batch):
        """The warm-up requests exported with the SavedModel (`assets.extra/
        tf_serving_warmup_requests`: every compiled shape, the n-best signature, the prefix
        searches), whatever `max_batch`; `[]` for an export without them."""
        del max_batch
        if not os.path.exists(os.path.join(self.directory, WARMUP_PATH)):
            return []
        requests = []
        for name, inputs in read_warmup_requests(self.directory):
            prefixes = inputs.get(PREFIX_INPUT_NAME)
            n_best = name == N_BEST_SIGNATURE_NAME
            requests.append(
                WarmupRequest(
                    list(inputs[INPUT_NAME]),
                    SearchOptions(num_hypotheses=1 if n_best else None),
                    None if prefixes is None else list(prefixes),
                )
            )
        return requests

    def translate(self, sentences, beam_size=None, num_hypotheses=None, target_prefix=None):
        """Translates sentences and returns `Translation`s (text, score, truncated).

        Args:
            sentences: a `str` (or `bytes`), or a list of them.
            beam_size: int. Must be the exported beam size. Defaults to `None`.
            num_hypotheses: int. Return the n best hypotheses, best first (the
                `translate_n_best` signature). Defaults to `None`: the best only.
            target_prefix: as in `Translator.translate` (the `translate_with_prefix`
                signature; best translation only). Defaults to `None`.

        Returns:
            As `keras_transformer.Translator.translate`.
        """
        if num_hypotheses == 1 and target_prefix is not None:
            num_hypotheses = None  # `translate_with_prefix` returns the best; same results.
            single_list = True
        else:
            single_list = False
        self.check_search_options(beam_size, num_hypotheses, target_prefix is not None)
        single = isinstance(sentences, (str, bytes))
        batch = [sentences] if single else list(sentences)
        if target_prefix is not None:
            prefixes = [target_prefix] if single else list(target_prefix)
            if len(prefixes) != len(batch):
                raise ValueError(
                    "`target_prefix` must hold one prefix per sentence (None or '' for none). "
                    f"Received: {len(batch)} sentences and {len(prefixes)} prefixes"
                )
            prefixes = [b"" if prefix is None else prefix for prefix in prefixes]
        texts, scores, truncated = [], [], []
        size = self.max_request_size
        for start in range(0, len(batch), size):  # Requests the export accepts.
            inputs = {INPUT_NAME: self._tf.constant(batch[start : start + size], self._tf.string)}
            if target_prefix is not None:
                chunk = prefixes[start : start + size]
                inputs[PREFIX_INPUT_NAME] = self._tf.constant(chunk, self._tf.string)
                outputs = self._prefix_signature(**inputs)
            elif num_hypotheses is None:
                outputs = self._signature(**inputs)
            else:
                outputs = self._n_best_signature(**inputs)
            if target_prefix is not None or num_hypotheses is None:
                texts += [[text] for text in outputs["translations"].numpy()]
                scores += [[score] for score in outputs["scores"].numpy().tolist()]
            else:
                texts += outputs["translations"].numpy().tolist()  # (batch, columns), best first
                scores += outputs["scores"].numpy().tolist()
            truncated += outputs["truncated"].numpy().tolist()
        results = []
        for row_texts, row_scores, flag in zip(texts, scores, truncated, strict=True):
            if num_hypotheses is not None and not any(row_texts) and not any(row_scores):
                # An input without a token fills every column with "" and 0.0; as with the
                # other engines, it has one hypothesis. (Distinct hypotheses of a search
                # cannot all have the log probability 0.)
                row_texts, row_scores = row_texts[:1], row_scores[:1]
            options = zip(row_texts[: num_hypotheses or 1], row_scores, strict=False)
            hypotheses = [
                Translation(
                    text=text.decode("utf-8", errors="replace"),
                    score=float(score),
                    tokens=None,
                    truncated=bool(flag),
                    source_tokens=None,
                    target_tokens=None,
                )
                for text, score in options
            ]
            results.append(hypotheses if num_hypotheses is not None else hypotheses[0])
        if single_list:
            results = [[result] for result in results]
        return results[0] if single else results
