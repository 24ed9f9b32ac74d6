"""CTranslate2 export: our `Translator`'s weights in CTranslate2's format.

`export_ctranslate2(translator, directory)` maps the `Transformer` into CTranslate2's
`TransformerSpec` (post-LN or pre-LN as the model has, ReLU, SiLU or GELU, shared or separate
embeddings, the tied output projection and its bias, the layer-norm epsilon and an explicit
table of our sinusoid positions, counted from 0 with sines and cosines interleaved or in halves
as the model has them, which CTranslate2's built-in table is not),
writes the vocabulary in our id order and stores our tokenizers and translator settings beside
it (`write_settings`, read back by `read_settings`).
`keras_transformer.engines.CTranslate2Translator(directory)` translates with it.

`ctranslate2` is an optional dependency (`pip install keras-transformer[ctranslate2]`),
imported only when these functions run.
"""

import json
import os

import keras
import numpy as np
from keras import ops

from keras_transformer.files import atomic_directory
from keras_transformer.formats.checks import check_translator
from keras_transformer.formats.ctranslate2.layout import METADATA_FILENAME, QUANTIZATIONS
from keras_transformer.formats.ctranslate2.reader import read_settings  # noqa: F401 (0.3.0 API)
from keras_transformer.formats.versions import version_directory
from keras_transformer.layers.positional_embedding import sinusoidal_encoding
from keras_transformer.translation import check_search_options
from keras_transformer.translator import load_keras_translator


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
    `keras-transformer translate --model directory` then translates with the highest version.

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
    keras_transformer.engines.CTranslate2Translator("translator_ct2")(["dos mil"])
    ```
    """
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(
            f"`quantization` must be None or one of {', '.join(QUANTIZATIONS)}. "
            f"Received: quantization={quantization!r}"
        )
    directory = version_directory(directory, version, overwrite, name="directory")
    if isinstance(translator, (str, os.PathLike)):
        translator = load_keras_translator(translator)
    check_translator(translator)
    beam_size = translator.beam_size if beam_size is None else beam_size
    alpha = translator.alpha if alpha is None else alpha
    check_search_options(beam_size, alpha, None)
    spec = transformer_spec(translator)
    spec.validate()
    spec.optimize(quantization=quantization)

    # The package's one rule for temporaries (`.tmp-` names, cleared by the next run).
    with atomic_directory(directory) as temporary:
        os.makedirs(temporary)
        spec.save(temporary)
        write_settings(translator, temporary, quantization, beam_size, float(alpha))
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
    activations = {
        "relu": common_spec.Activation.RELU,
        "swish": common_spec.Activation.SWISH,
        "silu": common_spec.Activation.SWISH,
        "gelu": common_spec.Activation.GELU,
    }
    if model.activation not in activations:
        raise ValueError(
            f"Only {', '.join(activations)} feed-forward layers map onto CTranslate2's "
            f"Transformer here. Received: activation={model.activation!r}"
        )
    common = dict(pre_norm=model.norm_first, activation=activations[model.activation])
    encoder = transformer_spec.TransformerEncoderSpec(model.num_layers, model.num_heads, **common)
    # `return_attention` gives the last layer's cross-attention averaged over all its heads,
    # as `keras_transformer.translation.align` reads ours (CTranslate2's default: head 0 only).
    decoder = transformer_spec.TransformerDecoderSpec(
        model.num_decoder_layers,
        model.num_heads,
        alignment_layer=-1,
        alignment_heads=model.num_heads,
        **common,
    )
    spec = transformer_spec.TransformerSpec(encoder, decoder)

    # CTranslate2 refuses positions beyond its table: the longest translation is the longest
    # source bucket + extra_length + a target prefix of at most the longest bucket.
    length = position_count(translator)
    positions = _sinusoid_table(
        length, model.d_model, model.sinusoid_layout, model.sinusoid_frequencies
    )
    source = _numpy(model.source_embedding.embeddings)
    target = _numpy(model.target_embedding.embeddings)
    encoder.embeddings[0].weight = source
    encoder.position_encodings.encodings = positions
    decoder.embeddings.weight = target
    decoder.position_encodings.encodings = positions
    decoder.projection.weight = target  # tied output projection
    if model.output_bias:
        decoder.projection.bias = _numpy(model.target_embedding.logits_bias)
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


def position_count(translator):
    """The positions an export of `translator` encodes: `[START]`, then the longest source
    bucket + `extra_length` + a target prefix as long as the longest bucket."""
    return 2 * max(translator.bucket_boundaries) + translator.extra_length + 1


def _sinusoid_table(length, d_model, layout, frequencies):
    table = sinusoidal_encoding(length, d_model, layout=layout, frequencies=frequencies)
    return ops.convert_to_numpy(table).astype("float32")


def _numpy(variable):
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


def write_settings(translator, directory, quantization, beam_size, alpha):
    """Writes `keras_transformer.json` (the translator's settings and tokenizer
    configurations) and each tokenizer's assets into a CTranslate2 model `directory`."""
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
        "source_start_token": translator.source_start_token,
        # The decoder's size: the memory bound of a search (`CTranslate2Translator`).
        "decoder_layers": translator.model.num_decoder_layers,
        "d_model": translator.model.d_model,
        # The positions model.bin encodes (`position_count`; 0.3.0: without the prefix's).
        "positions": position_count(translator),
    }
    for name, tokenizer in tokenizers.items():
        metadata[name] = keras.saving.serialize_keras_object(tokenizer)
        os.makedirs(os.path.join(directory, name))
        tokenizer.save_assets(os.path.join(directory, name))
    with open(os.path.join(directory, METADATA_FILENAME), "w", encoding="utf-8") as file:
        json.dump(metadata, file, indent=2)
