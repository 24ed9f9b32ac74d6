"""CTranslate2 export and translation: our `Translator`'s weights in CTranslate2's format.

`export_ctranslate2(translator, directory)` maps the `Transformer` into CTranslate2's
`TransformerSpec` (post-LN or pre-LN as the model has, ReLU, shared or separate embeddings, the
tied output projection, the layer-norm epsilon and an explicit table of our sinusoid positions,
counted from 0 with sines and cosines interleaved, which CTranslate2's built-in table is not),
writes the vocabulary in our id order and stores our tokenizers and translator settings beside
it. `CTranslate2Translator(directory)` translates with it: our tokenizer and the `Translator`
rules for unusual inputs, CTranslate2's C++ search.

CTranslate2 has no GNMT length penalty (it divides by `length ** alpha`) and stops a beam search
once `beam_size * patience` hypotheses have finished, where ours stops once no live hypothesis
can beat the worst finished one. So beam search asks CTranslate2 for the raw log-probability
sums (`length_penalty=0`) of all `beam_size * patience` finished hypotheses (`patience=2`; 4
for n-best lists) and re-ranks them with our `((5 + length) / 6) ** alpha`, the end token
counted in `length`: the scores of an n-best list are on our scale and in our order.

`ctranslate2` is an optional dependency (`pip install keras-transformer[ctranslate2]`),
imported only when these functions run.
"""

import json
import os

import numpy as np

from keras_transformer.text.preprocessor import TranslationPreprocessor

METADATA_FILENAME = "keras_transformer.json"
QUANTIZATIONS = (
    "int8",
    "int8_float32",
    "int8_float16",
    "int8_bfloat16",
    "int16",
    "float16",
    "bfloat16",
    "float32",
)
# CTranslate2 stops once `beam_size * PATIENCE` hypotheses have finished; with 2 its beam
# outputs matched ours on every sentence we compared (with 1, about 1.4 % differed).
PATIENCE = 2
# n-best lists need the `beam_size` best by our length penalty, which may finish later: with
# patience 2 the last hypothesis of a 3-best list differed on 1 of 4 fixture sentences, with
# 3, 4 and 8 none did. Asking for more never changes the best (our beam search stops only once
# no alive hypothesis can beat its worst finished one).
N_BEST_PATIENCE = 4


def export_ctranslate2(
    translator,
    directory,
    quantization=None,
    beam_size=None,
    alpha=None,
    overwrite=None,
    version=None,
):
    """Writes `translator` as a CTranslate2 model directory.

    The directory holds CTranslate2's `model.bin`, `config.json` and vocabulary (our ids, in
    order), and `keras_transformer.json` with the tokenizers' configurations and the
    translator's settings (`beam_size`, `alpha`, `max_source_length`, `extra_length`,
    `batch_size`, `bucket_boundaries`), next to one `vocabulary.txt` per tokenizer. It is
    written to a temporary directory next to `directory` and renamed into place.

    `version=N` writes `directory/N/` instead, the layout of a model server's base path (as
    `keras_transformer.export.export_saved_model` does, with the same checks):
    `keras-transformer translate --engine ctranslate2 --model directory` then translates with
    the highest version.

    Args:
        translator: `keras_transformer.Translator`, or the path of a `.keras` file or a
            preset directory holding one.
        directory: str or `os.PathLike`. The model directory to write.
        quantization: str. CTranslate2 weight type: one of `"int8"`, `"int8_float32"`,
            `"int8_float16"`, `"int8_bfloat16"`, `"int16"`, `"float16"`, `"bfloat16"`,
            `"float32"`. Defaults to `None`: float32, as trained.
        beam_size: int. Default beam size stored for `CTranslate2Translator`. Defaults to
            `None`: the translator's.
        alpha: float. Default length penalty stored. Defaults to `None`: the translator's.
        overwrite: bool. Replace an existing model directory. Defaults to `None`: `True`
            without `version`; with `version`, `False` (a server may be using that version).
        version: int `>= 1`. Write to `directory/<version>/`. Defaults to `None`: to
            `directory`.

    Returns:
        The model directory (`directory`, or `directory/<version>`), as a str.

    Example:

    ```python
    export_ctranslate2(translator, "translator_ct2", quantization="int8")
    CTranslate2Translator("translator_ct2")(["dos mil"])
    ```
    """
    from keras_transformer.export import _check_translator, version_directory
    from keras_transformer.presets import load_saved_translator
    from keras_transformer.translator import check_search_options

    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(
            f"`quantization` must be None or one of {', '.join(QUANTIZATIONS)}. "
            f"Received: quantization={quantization!r}"
        )
    directory = version_directory(directory, version, overwrite, name="directory")
    if isinstance(translator, (str, os.PathLike)):
        translator = load_saved_translator(translator)
    _check_translator(translator)
    beam_size = translator.beam_size if beam_size is None else beam_size
    alpha = translator.alpha if alpha is None else alpha
    check_search_options(beam_size, alpha, None)
    spec = transformer_spec(translator)
    spec.validate()
    spec.optimize(quantization=quantization)

    from keras_transformer.files import atomic_directory

    # The package's one rule for temporaries (`.tmp-` names, cleared by the next run).
    with atomic_directory(directory) as temporary:
        os.makedirs(temporary)
        spec.save(temporary)
        _save_settings(translator, temporary, quantization, beam_size, float(alpha))
    return directory


def transformer_spec(translator):
    """The `ctranslate2.specs.TransformerSpec` of a `Translator`'s model (float32 weights).

    Args:
        translator: `keras_transformer.Translator`.

    Returns:
        A `ctranslate2.specs.TransformerSpec` with its weights and vocabularies set.
    """
    from ctranslate2.specs import common_spec, transformer_spec

    model = translator.model
    if model.activation != "relu":
        raise ValueError(
            "Only ReLU feed-forward layers map onto CTranslate2's Transformer here. "
            f"Received: activation={model.activation!r}"
        )
    common = dict(pre_norm=model.norm_first, activation=common_spec.Activation.RELU)
    encoder = transformer_spec.TransformerEncoderSpec(model.num_layers, model.num_heads, **common)
    decoder = transformer_spec.TransformerDecoderSpec(
        model.num_decoder_layers, model.num_heads, **common
    )
    spec = transformer_spec.TransformerSpec(encoder, decoder)

    # Positions 0 .. longest source bucket + extra_length: CTranslate2 refuses longer inputs.
    length = max(translator.bucket_boundaries) + translator.extra_length + 1
    positions = _sinusoid_table(length, model.d_model)
    source = _numpy(model.source_embedding.embeddings)
    target = _numpy(model.target_embedding.embeddings)
    encoder.embeddings[0].weight = source
    encoder.position_encodings.encodings = positions
    decoder.embeddings.weight = target
    decoder.position_encodings.encodings = positions
    decoder.projection.weight = target  # tied output projection, no bias
    if model.norm_first:
        _set_norm(encoder.layer_norm, model.encoder_norm)
        _set_norm(decoder.layer_norm, model.decoder_norm)
    for layer_spec, block in zip(encoder.layer, model.encoder_blocks, strict=True):
        _set_attention(layer_spec.self_attention, block.self_attention, block.self_attention_norm)
        _set_feed_forward(layer_spec.ffn, block)
    for layer_spec, block in zip(decoder.layer, model.decoder_blocks, strict=True):
        _set_attention(layer_spec.self_attention, block.self_attention, block.self_attention_norm)
        _set_attention(layer_spec.attention, block.cross_attention, block.cross_attention_norm)
        _set_feed_forward(layer_spec.ffn, block)

    tokenizer = translator.tokenizer
    target_tokenizer = translator.target_tokenizer or tokenizer
    spec.register_source_vocabulary(list(tokenizer.get_vocabulary()))
    spec.register_target_vocabulary(list(target_tokenizer.get_vocabulary()))
    spec.config.unk_token = tokenizer.id_to_token(tokenizer.unk_id)
    spec.config.bos_token = target_tokenizer.id_to_token(target_tokenizer.start_id)
    spec.config.eos_token = target_tokenizer.id_to_token(target_tokenizer.end_id)
    spec.config.decoder_start_token = spec.config.bos_token
    # Sources arrive as `[START] pieces [END]`, built by our own rules.
    spec.config.add_source_bos = False
    spec.config.add_source_eos = False
    spec.config.layer_norm_epsilon = float(model.layer_norm_epsilon)
    return spec


class CTranslate2Translator:
    """Translates with a model written by `export_ctranslate2`: our tokenizer, CTranslate2's
    search.

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
        intra_threads: int. Threads per translation; `0` lets CTranslate2 choose.
            Defaults to `0`.
        beam_size: int. Defaults to `None`: the exported translator's.
        alpha: float. Defaults to `None`: the exported translator's.

    Call arguments:
        sentences: a `str` (or `bytes`), or a list of them.

    Returns:
        A `str` for one sentence, a list of `str` for a list; `translate` returns
        `keras_transformer.translator.Translation`s (n-best lists with `num_hypotheses`).
    """

    def __init__(
        self,
        directory,
        device="cpu",
        compute_type="default",
        intra_threads=0,
        beam_size=None,
        alpha=None,
    ):
        import ctranslate2

        from keras_transformer.export import latest_version

        directory = latest_version(directory)
        self.directory = directory
        settings, self.tokenizer, self.target_tokenizer = _load_settings(directory)
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
        )
        self._translator = ctranslate2.Translator(
            directory, device=device, compute_type=compute_type, intra_threads=intra_threads
        )
        self._target_ids = {
            token: index for index, token in enumerate(self._target.get_vocabulary())
        }

    def __call__(self, sentences, beam_size=None, alpha=None):
        translations = self.translate(sentences, beam_size=beam_size, alpha=alpha)
        if isinstance(translations, list):
            return [translation.text for translation in translations]
        return translations.text

    def translate(self, sentences, beam_size=None, alpha=None, num_hypotheses=None):
        """Translates sentences and returns `Translation`s (text, score, tokens).

        Args:
            sentences: a `str` (or `bytes`), or a list of them.
            beam_size: int. Overrides `self.beam_size`; `1` runs greedy search.
                Defaults to `None`.
            alpha: float. Overrides `self.alpha`. Defaults to `None`.
            num_hypotheses: int, `1 <= num_hypotheses <= beam_size`. Return the n best
                hypotheses, best first. Defaults to `None`: the best only.

        Returns:
            As `keras_transformer.Translator.translate`: a `Translation` (a list of `n` with
            `num_hypotheses=n`) per sentence, a list of them for a list.
        """
        from keras_transformer.translator import check_search_options, run_translation

        beam_size = self.beam_size if beam_size is None else beam_size
        alpha = self.alpha if alpha is None else alpha
        check_search_options(beam_size, alpha, num_hypotheses)

        def search(source_ids, bucket, max_lengths):
            # CTranslate2 takes one maximum output length per call: one call per length.
            found = [None] * len(source_ids)
            for length in sorted(set(max_lengths)):
                rows = [row for row, limit in enumerate(max_lengths) if limit == length]
                sources = [_tokens(self.tokenizer, source_ids[row]) for row in rows]
                hypotheses = self._search(sources, length, beam_size, alpha, num_hypotheses or 1)
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
        )

    # === Helpers ===
    @property
    def _target(self):
        return self.target_tokenizer if self.target_tokenizer is not None else self.tokenizer

    def _search(self, sources, max_new_tokens, beam_size, alpha, count):
        """For each source, at least `count` hypotheses `(ids, score)`, best first, ids
        ending with the end token when it was generated."""
        from keras_transformer.decoding import length_penalty
        from keras_transformer.generation import trim

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
            patience = PATIENCE if count == 1 else N_BEST_PATIENCE
            options.update(patience=patience, num_hypotheses=beam_size * patience)
        results = self._translator.translate_batch(sources, beam_size=beam_size, **options)
        end_id = self._target.end_id
        outputs = []
        for result in results:
            candidates = []
            for hypothesis, score in zip(result.hypotheses, result.scores, strict=True):
                ids = [self._target_ids[token] for token in hypothesis]
                if beam_size > 1:
                    # Raw log-probability sums re-ranked with our length penalty, so the
                    # scores are on our scale; hypotheses cut at `max_new_tokens` count as
                    # that long, as in ours.
                    length = len(ids) if end_id in ids else max_new_tokens
                    score = score / float(length_penalty(length, alpha))
                # Trailing padding ids (which only an untrained model generates) are
                # dropped, as `Translator` does.
                candidates.append((trim(ids, end_id, self._target.pad_id), score))
            outputs.append(sorted(candidates, key=lambda candidate: -candidate[1]))
        return outputs


def _tokens(tokenizer, ids):
    """The vocabulary entries of `ids`."""
    return [tokenizer.id_to_token(int(index)) for index in ids]


def _sinusoid_table(length, d_model):
    from keras import ops

    from keras_transformer.layers.positional_embedding import sinusoidal_encoding

    return ops.convert_to_numpy(sinusoidal_encoding(length, d_model)).astype("float32")


def _numpy(variable):
    from keras import ops

    return np.ascontiguousarray(ops.convert_to_numpy(variable), dtype="float32")


def _set_norm(norm_spec, layer):
    norm_spec.gamma = _numpy(layer.gamma)
    norm_spec.beta = _numpy(layer.beta)


def _set_dense(linear_spec, dense_layers):
    """Keras kernels are `(in, out)`; CTranslate2 wants `(out, in)`, fused layers stacked."""
    linear_spec.weight = np.concatenate([_numpy(dense.kernel).T for dense in dense_layers])
    linear_spec.bias = np.concatenate([_numpy(dense.bias) for dense in dense_layers])


def _set_attention(attention_spec, attention, norm):
    query, key, value = attention.query_dense, attention.key_dense, attention.value_dense
    if len(attention_spec.linear) == 2:  # self-attention: q, k, v fused
        _set_dense(attention_spec.linear[0], [query, key, value])
    else:  # cross-attention: q alone, then k, v fused
        _set_dense(attention_spec.linear[0], [query])
        _set_dense(attention_spec.linear[1], [key, value])
    _set_dense(attention_spec.linear[-1], [attention.output_dense])
    _set_norm(attention_spec.layer_norm, norm)


def _set_feed_forward(ffn_spec, block):
    _set_dense(ffn_spec.linear_0, [block.feed_forward.inner_dense])
    _set_dense(ffn_spec.linear_1, [block.feed_forward.output_dense])
    _set_norm(ffn_spec.layer_norm, block.feed_forward_norm)


def _save_settings(translator, directory, quantization, beam_size, alpha):
    import keras

    tokenizers = {"tokenizer": translator.tokenizer}
    if translator.target_tokenizer is not None:
        tokenizers["target_tokenizer"] = translator.target_tokenizer
    metadata = {
        "beam_size": beam_size,
        "alpha": alpha,
        "max_source_length": translator.max_source_length,
        "extra_length": translator.extra_length,
        "batch_size": translator.batch_size,
        "bucket_boundaries": list(translator.bucket_boundaries),
        "quantization": quantization,
    }
    for name, tokenizer in tokenizers.items():
        metadata[name] = keras.saving.serialize_keras_object(tokenizer)
        os.makedirs(os.path.join(directory, name))
        tokenizer.save_assets(os.path.join(directory, name))
    with open(os.path.join(directory, METADATA_FILENAME), "w", encoding="utf-8") as file:
        json.dump(metadata, file, indent=2)


def _load_settings(directory):
    """`(settings, tokenizer, target_tokenizer or None)` stored by `export_ctranslate2`."""
    from keras_transformer.text.tokenizer import Tokenizer
    from keras_transformer.translator import _deserialize_part

    path = os.path.join(directory, METADATA_FILENAME)
    if not os.path.isfile(path):
        raise ValueError(
            f"`directory` holds no `{METADATA_FILENAME}`: it was not written by "
            f"`export_ctranslate2`. Received: directory={directory!r}"
        )
    with open(path, encoding="utf-8") as file:
        settings = json.load(file)
    tokenizers = []
    for name in ("tokenizer", "target_tokenizer"):
        if settings.get(name) is None:
            tokenizers.append(None)
            continue
        tokenizer = _deserialize_part(name, settings[name], Tokenizer)
        tokenizer.load_assets(os.path.join(directory, name))
        tokenizers.append(tokenizer)
    return settings, *tokenizers
