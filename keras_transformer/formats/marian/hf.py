"""Marian / OPUS-MT models in and out: Hugging Face `MarianMTModel` directories, and Marian
NMT `.npz` checkpoints in.

`import_marian(source, output)` reads a Hugging Face `MarianMTModel` directory (`config.json`,
`model.safetensors` or `pytorch_model.bin`, `source.spm`, `target.spm`, `vocab.json`: what
every Helsinki-NLP OPUS-MT model on the Hugging Face Hub holds), or an unzipped OPUS-MT
release (a Marian `.npz` checkpoint, `*.vocab.yml`, `source.spm`, `target.spm`,
`decoder.yml`; read by `formats.marian.npz` into the same form), and writes one of our preset
directories, whose `Translator` computes the same logits. `export_marian(translator, output)`
writes a Hugging Face directory back from a `Translator` whose architecture Marian can express.

How a Marian model maps onto our `Transformer` (each checked against transformers'
`modeling_marian.py`):

- Post-LN blocks, biases on every projection, token embeddings scaled by sqrt(d_model)
  (`scale_embedding`), one matrix for both embeddings and the output projection
  (`share_encoder_decoder_embeddings`), activation from `activation_function` (OPUS-MT:
  `swish`, i.e. SiLU): the `Transformer` arguments of those names.
- Positions: counted from 0, all sines before all cosines (`sinusoid_layout="halves"`), with
  the paper's frequencies `10000^(-i/(d/2))` as transformers computes them. Marian NMT's C++,
  which trained every `.npz` model, computes `10000^(-i/(d/2 - 1))`
  (`SinusoidalPositionEmbeddings`, `src/tensors/cpu/tensor_operators.cpp`): a `.npz` import
  uses those (`sinusoid_frequencies="marian"`) unless told otherwise; CTranslate2's Marian
  converter, like transformers' `convert_marian_to_pytorch.py`, uses the paper's.
- LayerNorm epsilon: `1e-5` (PyTorch's) for a Hugging Face directory, `1e-6` (Marian C++'s)
  for a `.npz` checkpoint.
- `final_logits_bias`: the `Transformer`'s `output_bias`.
- Ids: Marian's `</s>` is id 0 and its padding is also its decoder start token (a `.npz`
  model's vocabulary has no padding: its decoder starts from a zero embedding, which the
  import adds as `<pad>`, a zero row), while our
  models pad with id 0 and start from `[START]`. The import adds one padding row (zeros) at id
  0 and reorders the vocabulary as `[PAD] <unk> <pad> </s>` then the rest in Marian's order,
  so that Marian's `<pad>` is our `[START]` and `</s>` our `[END]`: the embedding rows and the
  bias are permuted the same way, nothing else changes. The output bias of both padding ids is
  set to `-1e4` (`BANNED_LOGIT`): transformers bans Marian's pad from the output
  (`bad_words_ids` in every OPUS-MT configuration); ours bans it in the weights, so every engine
  (SavedModel, CTranslate2) does too.
- Sources: `pieces </s>`, no start token (`Translator(source_start_token=False)`).
- Text: two SentencePiece models (source and target) and one shared `vocab.json` mapping their
  pieces to ids. Each becomes a `SentencePieceTokenizer` whose model lists the pieces of
  `vocab.json` in our id order: its own pieces keep their scores, the other side's pieces can
  never be chosen when encoding (score `-1e6`) but detokenize as written, and language tokens
  (`>>fra<<`) are user-defined pieces, kept whole.

Reading `model.safetensors` needs the `safetensors` package (the `marian` extra), not
PyTorch; `pytorch_model.bin` needs PyTorch.
"""

import json
import logging
import os
import re
import time
import zipfile

import numpy as np
from keras import ops

from keras_transformer._checks import check_positive_int, is_int, short_repr
from keras_transformer.files import atomic_directory
from keras_transformer.formats.marian.layout import BANNED_LOGIT, FILES, PAD_PIECE, block_names
from keras_transformer.formats.marian.npz import (
    check_layer_count,
    count_layers,
    is_marian_npz,
    read_marian_npz,
    read_rates,
    read_sizes,
    source_file,
)
from keras_transformer.hyperparameters import SINUSOID_FREQUENCIES
from keras_transformer.layers.positional_embedding import sinusoidal_encoding
from keras_transformer.models.transformer import Transformer
from keras_transformer.text.sentencepiece import SentencePieceTokenizer
from keras_transformer.text.tokenizer import MAX_VOCABULARY_SIZE, read_bounded_file
from keras_transformer.translator import Translator, load_keras_translator

logger = logging.getLogger("keras_transformer")

MAX_CONFIG_BYTES = 1 << 20
# vocab.json is parsed whole only under a bound of `VOCABULARY_ENTRY_BYTES` per piece of
# config.json's `vocab_size` (one `"piece": id,` entry each: SentencePiece pieces are a few
# characters, 6 bytes per character escaped; OPUS-MT's are ~25 bytes), at most this.
MAX_VOCABULARY_BYTES = 1 << 27
VOCABULARY_ENTRY_BYTES = 256
# pytorch_model.bin: PyTorch's zip format (`torch.save` since 1.6), members stored
# uncompressed: `<top>/data.pkl`, `<top>/data/<n>` (one per tensor), a few records.
MAX_TORCH_MEMBERS = 1 << 15
MAX_TORCH_PICKLE_BYTES = 1 << 26
_TORCH_MEMBER = re.compile(
    r"^(?:data\.pkl|data/\d+|version|\.data/version|byteorder|\.data/serialization_id"
    r"|\.format_version|\.storage_alignment)$"
)
MAX_WEIGHTS_BYTES = 1 << 36
# The score of a piece of `vocab.json` the tokenizer's own SentencePiece model lacks: below
# any unknown-character path, so encoding never picks it (transformers maps such text to <unk>).
ABSENT_PIECE_SCORE = -1e6
LANGUAGE_TOKEN = re.compile(r"^>>.+<<$")
ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu", "gelu": "gelu"}


def import_marian(
    source, output=None, max_source_length=None, overwrite=False, sinusoid_frequencies=None
):
    """Imports an OPUS-MT / Marian model as a `Translator`: a Hugging Face `MarianMTModel`
    directory, or a Marian NMT `.npz` checkpoint with its vocabulary.

    Args:
        source: str or `os.PathLike`. A Hugging Face directory (`config.json`,
            `model.safetensors` or `pytorch_model.bin`, which needs PyTorch, `source.spm`,
            `target.spm`, `vocab.json`); or a Marian directory, an unzipped OPUS-MT release
            (a `*.npz` checkpoint, `*.vocab.yml`, `source.spm`, `target.spm`, optionally
            `decoder.yml`), or the `.npz` file of one (to choose among several checkpoints);
            see `keras_transformer.formats.marian.npz`.
        output: str or `os.PathLike`. The preset directory to write (`Translator.from_preset`
            and `keras-transformer translate --model` read it). Defaults to `None`: write
            nothing.
        max_source_length: int. The translator's longest source (ids, `</s>` included),
            at most the model's `max_position_embeddings`. Defaults to `None`: 256, or
            `max_position_embeddings` when smaller.
        overwrite: bool. Replace an existing `output` preset. Defaults to `False`.
        sinusoid_frequencies: str. The position encodings' frequencies, `"paper"` or
            `"marian"` (see `keras_transformer.layers.sinusoidal_encoding`). Defaults to
            `None`: what the source's own toolkit computes, `"paper"` for a Hugging Face
            directory, `"marian"` (Marian NMT's C++) for a `.npz` checkpoint. `"paper"` on a
            `.npz` model computes what CTranslate2's and transformers' converters make of it.

    Returns:
        A `keras_transformer.Translator` (beam size from the model's `num_beams` or
        `decoder.yml`'s `beam-size`, length
        penalty `alpha=1.0`; see the "Use an OPUS-MT model" page for how it compares with
        transformers' `length_penalty`).

    Raises:
        ValueError: one message naming every file or setting that does not fit; a file that
            is a link leading outside `source` (or, in a Hugging Face cache snapshot, outside
            its repository's `blobs/`) is refused before it is read.
    """

    started = time.perf_counter()
    source = os.fspath(source)
    if is_marian_npz(source):
        config, vocabulary, protos, weights, settings = read_marian_npz(source)
        beam_setting = "decoder.yml's beam-size"
    else:
        config, vocabulary, protos, weights = read_marian_directory(source)
        settings = {"sinusoid_frequencies": "paper", "layer_norm_epsilon": 1e-5}
        beam_setting = "config.json's num_beams"
    if sinusoid_frequencies is not None:
        if sinusoid_frequencies not in SINUSOID_FREQUENCIES:
            raise ValueError(
                f"`sinusoid_frequencies` must be one of {SINUSOID_FREQUENCIES}. "
                f"Received: sinusoid_frequencies={sinusoid_frequencies!r}"
            )
        settings["sinusoid_frequencies"] = sinusoid_frequencies
    # Every size is checked against the files (vocab.json, the weights present) before
    # anything of that size is built.
    sizes = _architecture(config, weights, source)
    order = _our_order(vocabulary, config)
    positions = config.get("max_position_embeddings", 512)
    if max_source_length is None:
        max_source_length = min(256, positions)
    if not is_int(max_source_length) or not 3 <= max_source_length <= positions:
        raise ValueError(
            f"`max_source_length` must be an int in [3, {positions}] (the model's "
            f"max_position_embeddings). Received: max_source_length={short_repr(max_source_length)}"
        )
    beam_size = config.get("num_beams")
    beam_size = 4 if beam_size is None else beam_size
    try:
        check_positive_int("beam_size", beam_size)
    except ValueError:
        raise ValueError(
            f"{beam_setting} must be a positive int. Received: {short_repr(beam_size)}"
        ) from None
    weights = _strip_prefix(weights)
    embedding = _checked_weights(weights, sizes, order, source)
    tokenizers = [
        SentencePieceTokenizer(proto=_tokenizer_proto(protos[side], order, side == "source"))
        for side in ("source", "target")
    ]
    model = _build_model(sizes, weights, embedding, **settings)
    translator = Translator(
        model,
        tokenizers[0],
        target_tokenizer=tokenizers[1],
        beam_size=beam_size,
        alpha=1.0,
        max_source_length=max_source_length,
        source_start_token=False,
    )
    try:  # What loading the preset checks: a decoding state that fits in memory.
        translator.check_search_options()
    except ValueError as error:
        raise ValueError(f"{beam_setting}={beam_size} is too large: {error}") from None
    if output is not None:
        output = os.fspath(output)
        if os.path.exists(output) and not overwrite:
            raise ValueError(
                f"`output` exists; pass `overwrite=True` to replace it. Received: output={output!r}"
            )
        translator.save_to_preset(output)
    logger.info("Imported %s in %.1f s", source, time.perf_counter() - started)
    return translator


def read_marian_directory(source):
    """Reads and checks the files of a Marian directory.

    Returns:
        `(config dict, vocabulary dict piece -> id, {"source": bytes, "target": bytes},
        weights dict name -> float32 NumPy array)`.
    """
    if not os.path.isdir(source):
        raise ValueError(
            f"`source` must be a Hugging Face MarianMTModel directory, or a Marian directory "
            f"holding a .npz checkpoint (or its .npz file). Received: source={source!r}"
        )
    missing = [name for name in FILES if not os.path.isfile(os.path.join(source, name))]
    weights_files = [
        name
        for name in ("model.safetensors", "pytorch_model.bin")
        if os.path.isfile(os.path.join(source, name))
    ]
    if not weights_files:
        missing.append("model.safetensors (or pytorch_model.bin)")
    if missing:
        raise ValueError(
            f"`source` is not a Hugging Face MarianMTModel directory: it lacks {', '.join(missing)}. "
            f"Received: source={source!r}"
        )
    config = _read_json(source_file(source, "config.json"), MAX_CONFIG_BYTES, "config.json")
    vocabulary = _read_json(
        source_file(source, "vocab.json"), _vocabulary_bytes(config), "vocab.json"
    )
    protos = {
        side: read_bounded_file(source_file(source, f"{side}.spm"), 1 << 27, True, f"{side}.spm")
        for side in ("source", "target")
    }
    weights = _read_weights(source_file(source, weights_files[0]))
    return config, vocabulary, protos, weights


def _vocabulary_bytes(config):
    """The bound of `vocab.json`'s size: `VOCABULARY_ENTRY_BYTES` per piece of config.json's
    `vocab_size` (a missing or invalid one is refused later, naming it)."""
    size = config.get("vocab_size")
    if not is_int(size) or not 0 < size <= MAX_VOCABULARY_SIZE:
        return MAX_VOCABULARY_BYTES
    return min(MAX_VOCABULARY_BYTES, VOCABULARY_ENTRY_BYTES * (size + 16))


def _read_json(path, limit, what):
    data = read_bounded_file(path, limit, True, what)
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{what} is not valid JSON ({error}). Received: path={path!r}") from None
    except RecursionError:
        raise ValueError(f"{what} is nested too deeply. Received: path={path!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{what} must hold a JSON object. Received: path={path!r}")
    return value


def _read_weights(path):
    """`{name: float32 array}` from `model.safetensors` (no PyTorch) or `pytorch_model.bin`."""
    if path.endswith(".safetensors"):
        try:
            from safetensors.numpy import load_file
        except ImportError:
            raise ValueError(
                "Reading model.safetensors needs the `safetensors` package: "
                "pip install keras-transformer[marian]"
            ) from None
        try:
            tensors = load_file(path)
        except Exception as error:  # safetensors raises its own error types.
            raise ValueError(
                f"model.safetensors cannot be read ({error}). Received: path={path!r}"
            ) from None
    else:
        try:
            import torch
        except ImportError:
            raise ValueError(
                "This directory holds pytorch_model.bin, which needs PyTorch to read "
                "(pip install torch); a model.safetensors file needs only `safetensors`. "
                f"Received: path={path!r}"
            ) from None
        check_torch_zip(path)
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # pickle, zip and torch errors alike.
            raise ValueError(
                f"pytorch_model.bin cannot be read ({error}). Received: path={path!r}"
            ) from None
        tensors = {name: value.float().numpy() for name, value in state.items()}
    return {name: np.asarray(value, dtype="float32") for name, value in tensors.items()}


def check_torch_zip(path):
    """Checks `pytorch_model.bin` as a zip file before `torch.load` reads any of it (as the
    `.npz` path is checked): PyTorch's zip format, at most `MAX_TORCH_MEMBERS` members under
    one top folder, each a name PyTorch writes, stored uncompressed (what the zip directory
    states is what is read: no zip bomb), a `data.pkl` of at most `MAX_TORCH_PICKLE_BYTES`.

    Raises:
        ValueError: one line naming the file and the member.
    """

    def refuse(reason):
        return ValueError(f"pytorch_model.bin {reason}; it is not read. Received: path={path!r}")

    size = os.path.getsize(path)
    if size > MAX_WEIGHTS_BYTES:
        raise refuse(f"is larger than {MAX_WEIGHTS_BYTES} bytes ({size})")
    if not zipfile.is_zipfile(path):
        raise refuse("is not a zip file (PyTorch's format since 1.6; resave it with torch.save)")
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as error:
        raise refuse(f"is a damaged zip file ({short_repr(str(error))})") from None
    if not members or len(members) > MAX_TORCH_MEMBERS:
        raise refuse(f"holds {len(members)} members, not 1 to {MAX_TORCH_MEMBERS}")
    top = members[0].filename.split("/", 1)[0]
    pickles = 0
    for member in members:
        inner = member.filename[len(top) + 1 :] if member.filename.startswith(top + "/") else ""
        if not _TORCH_MEMBER.match(inner):
            raise refuse(
                f"holds the member {short_repr(member.filename)}, which PyTorch does not write"
            )
        if member.compress_type != zipfile.ZIP_STORED or member.file_size != member.compress_size:
            raise refuse(
                f"member {short_repr(member.filename)} is compressed (PyTorch stores them)"
            )
        if inner == "data.pkl":
            pickles += 1
            if member.file_size > MAX_TORCH_PICKLE_BYTES:
                raise refuse(
                    f"data.pkl holds {member.file_size} bytes, more than {MAX_TORCH_PICKLE_BYTES}"
                )
    if pickles != 1:
        raise refuse(f"holds {pickles} data.pkl members, not one")
    if sum(member.file_size for member in members) > size:
        raise refuse("states more bytes in its members than the file holds")


def _architecture(config, weights, source):
    """Our `Transformer` arguments for a Marian `config.json`; refuses what does not map, and
    layer counts other than the weights' (`weights`: their names)."""
    problems = []
    if config.get("model_type") != "marian":
        problems.append(f"model_type={short_repr(config.get('model_type'))} (expected 'marian')")
    activation = config.get("activation_function", "gelu")
    activation = ACTIVATIONS.get(activation) if isinstance(activation, str) else None
    if activation is None:
        problems.append(f"activation_function={short_repr(config.get('activation_function'))}")
    for key, expected in (
        ("scale_embedding", True),
        ("normalize_before", False),
        ("share_encoder_decoder_embeddings", True),
        ("tie_word_embeddings", True),
    ):
        if config.get(key, expected) != expected:
            problems.append(f"{key}={short_repr(config.get(key))} (only {expected} maps)")
    for key in ("encoder_attention_heads", "encoder_ffn_dim"):
        twin = key.replace("encoder", "decoder")
        if config.get(key) != config.get(twin):
            problems.append(
                f"{key}={short_repr(config.get(key))} but {twin}={short_repr(config.get(twin))}"
            )
    if config.get("decoder_start_token_id", config.get("pad_token_id")) != config.get(
        "pad_token_id"
    ):
        problems.append("decoder_start_token_id differs from pad_token_id")
    sizes = read_sizes(
        config,
        (
            ("vocabulary_size", "vocab_size"),
            ("num_layers", "encoder_layers"),
            ("num_decoder_layers", "decoder_layers"),
            ("d_model", "d_model"),
            ("num_heads", "encoder_attention_heads"),
            ("ff_dim", "encoder_ffn_dim"),
        ),
        problems,
    )
    names = _strip_prefix(weights)
    for stack, key in (("encoder", "encoder_layers"), ("decoder", "decoder_layers")):
        check_layer_count(
            config, key, count_layers(names, f"{stack}.layers."), "the weights", problems
        )
    rates = read_rates(
        config,
        (("dropout", "dropout", 0.1), ("attention_dropout", "attention_dropout", 0.0)),
        problems,
    )
    positions = config.get("max_position_embeddings", 512)
    if not is_int(positions) or positions < 3:
        problems.append(f"max_position_embeddings={short_repr(positions)} (expected an int >= 3)")
    if problems:
        raise ValueError(
            f"config.json describes a model that does not map onto keras-transformer's "
            f"Transformer: {'; '.join(problems)}. Received: source={source!r}"
        )
    sizes["vocabulary_size"] += 1  # our padding id
    sizes.update(activation=activation, **rates)
    return sizes


def _our_order(vocabulary, config):
    """`[PAD]` then Marian's pieces in our id order: `<unk>`, Marian's pad (our `[START]`),
    `</s>` (our `[END]`), then the others in Marian's order."""
    size = config.get("vocab_size")
    ids = (
        sorted(vocabulary.values())
        if len(vocabulary) == size and all(is_int(v) for v in vocabulary.values())
        else None
    )
    if (
        ids is None
        or ids != list(range(size))
        or not all(isinstance(piece, str) and piece for piece in vocabulary)
    ):
        raise ValueError(
            f"vocab.json must map {size} distinct non-empty pieces to the ids 0..{size - 1} "
            f"(config.json's vocab_size). Received: {len(vocabulary)} entries"
        )
    pieces = sorted(vocabulary, key=vocabulary.get)
    special = {}
    for name, key in (("pad", "pad_token_id"), ("end", "eos_token_id")):
        index = config.get(key)
        if not isinstance(index, int) or not 0 <= index < size:
            raise ValueError(
                f"config.json's {key} must be an id of vocab.json. "
                f"Received: {key}={short_repr(index)}"
            )
        special[name] = index
    if "<unk>" not in vocabulary:
        raise ValueError("vocab.json has no `<unk>` piece. Received: vocab.json without <unk>")
    special["unk"] = vocabulary["<unk>"]
    reserved = [special["unk"], special["pad"], special["end"]]
    if len(set(reserved)) != 3 or PAD_PIECE in vocabulary:
        raise ValueError(
            f"vocab.json's <unk>, pad and </s> ids must differ, and it must not use {PAD_PIECE!r}. "
            f"Received: ids {reserved}"
        )
    rest = [index for index in range(size) if index not in reserved]
    return [PAD_PIECE] + [pieces[index] for index in reserved + rest], [None] + reserved + rest


def _tokenizer_proto(data, order, is_source):
    """A SentencePiece model of `data`'s text rules whose pieces are `order` (our ids)."""
    from sentencepiece import sentencepiece_model_pb2

    pieces, _ = order
    model = sentencepiece_model_pb2.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception:  # protobuf raises DecodeError or RuntimeError
        raise ValueError("source.spm / target.spm must be SentencePiece models.") from None
    if not len(model.pieces):
        raise ValueError("source.spm / target.spm must be SentencePiece models with pieces.")
    scores = {piece.piece: piece.score for piece in model.pieces}
    normal, unknown, control, user = 1, 2, 3, 4
    unigram = model.trainer_spec.model_type == 1
    missing = [
        piece.piece
        for piece in model.pieces
        if piece.piece not in pieces[1:] and piece.type == normal
    ]
    if missing:
        logger.warning(
            "%d pieces of the %s SentencePiece model are not in vocab.json; the tokenizer never "
            "produces them (transformers maps them to <unk>), e.g. %s",
            len(missing),
            "source" if is_source else "target",
            missing[:5],
        )
    new_pieces = []
    for index, piece in enumerate(pieces):
        entry = sentencepiece_model_pb2.ModelProto.SentencePiece(piece=piece, score=0.0)
        if index in (0, 2, 3):
            entry.type = control
        elif index == 1:
            entry.type = unknown
        elif is_source and LANGUAGE_TOKEN.match(piece):
            entry.type = user
        elif piece in scores:
            entry.score = scores[piece]
        elif unigram:
            entry.score = ABSENT_PIECE_SCORE
        else:
            entry.type = control
        new_pieces.append(entry)
    del model.pieces[:]
    model.pieces.extend(new_pieces)
    spec = model.trainer_spec
    spec.pad_id, spec.unk_id, spec.bos_id, spec.eos_id = 0, 1, 2, 3
    spec.pad_piece, spec.unk_piece, spec.bos_piece, spec.eos_piece = pieces[:4]
    spec.vocab_size = len(pieces)
    return model.SerializeToString(deterministic=True)


# === Weights ===
def _build_model(sizes, names, embedding, sinusoid_frequencies, layer_norm_epsilon):
    """The `Transformer` of `sizes` holding the weights `names` (checked by `_checked_weights`,
    which returned `embedding`: our embedding table and output bias)."""
    model = Transformer(
        **sizes,
        share_embeddings=True,
        layer_norm_epsilon=layer_norm_epsilon,
        sinusoid_layout="halves",
        sinusoid_frequencies=sinusoid_frequencies,
        output_bias=True,
    )
    model(
        {
            "encoder_inputs": np.ones((1, 2), "int32"),
            "decoder_inputs": np.ones((1, 2), "int32"),
        }
    )
    model.target_embedding.embeddings.assign(embedding[0])
    model.target_embedding.logits_bias.assign(embedding[1])
    for kind, name, layer, _ in _block_layers(model):
        if kind == "dense":
            layer.kernel.assign(names[f"{name}.weight"].T)  # torch: (out, in)
            layer.bias.assign(names[f"{name}.bias"])
        else:
            layer.gamma.assign(names[f"{name}.weight"])
            layer.beta.assign(names[f"{name}.bias"])
    return model


def _checked_weights(names, sizes, order, source):
    """Checks every tensor of `names` (Marian names without `model.`) against the model of
    `sizes` before it is built: each present with the shape config.json implies, none left
    over. Returns our embedding table and output bias (`(vocabulary + 1, d_model)`, with our
    padding row, in our id order)."""
    used = set()

    def take(name, shape):
        if name not in names:
            raise ValueError(
                f"The weights lack {name!r}: this is not a MarianMTModel checkpoint of "
                f"config.json's architecture. Received: source={source!r}"
            )
        used.add(name)
        value = names[name]
        if value.shape != tuple(shape):
            raise ValueError(
                f"The weight {name!r} has shape {short_repr(value.shape)}; config.json implies "
                f"{tuple(shape)}. Received: source={source!r}"
            )
        return value

    vocabulary_size, d_model = sizes["vocabulary_size"] - 1, sizes["d_model"]
    embedding_names = [
        name
        for name in (
            "shared.weight",
            "encoder.embed_tokens.weight",
            "decoder.embed_tokens.weight",
            "lm_head.weight",
        )
        if name in names
    ]
    if not embedding_names:
        raise ValueError(
            f"The weights hold no token embedding (shared.weight). Received: source={source!r}"
        )
    embedding = take(embedding_names[0], (vocabulary_size, d_model))
    for name in embedding_names[1:]:
        if not np.array_equal(take(name, embedding.shape), embedding):
            raise ValueError(
                f"The weights' {name!r} differs from {embedding_names[0]!r}: only shared "
                f"embeddings map. Received: source={source!r}"
            )
    bias = np.zeros(vocabulary_size)
    if "final_logits_bias" in names:
        bias = names["final_logits_bias"].reshape(-1)
        used.add("final_logits_bias")
    if bias.shape != (vocabulary_size,):
        raise ValueError(f"final_logits_bias has shape {bias.shape}. Received: source={source!r}")
    _check_positions(names, used, sizes, source)
    widths = {"d": d_model, "h": d_model, "ff": sizes["ff_dim"]}
    for kind, name, _, (inputs, outputs) in block_names(
        sizes["num_layers"], sizes["num_decoder_layers"]
    ):
        take(f"{name}.weight", (widths[outputs], widths[inputs]) if kind == "dense" else (d_model,))
        take(f"{name}.bias", (widths[outputs],))
    unused = sorted(set(names) - used)
    if unused:
        raise ValueError(
            f"The weights hold tensors with no place in a Marian model of config.json's sizes: "
            f"{', '.join(map(short_repr, unused[:8]))}{' ...' if len(unused) > 8 else ''}. "
            f"Received: source={source!r}"
        )
    rows = np.array(order[1][1:])
    table = np.concatenate([np.zeros((1, d_model), "float32"), embedding[rows]])
    logits_bias = np.concatenate([[0.0], bias[rows]]).astype("float32")
    logits_bias[[0, 2]] = BANNED_LOGIT
    return table, logits_bias


def _block_layers(model):
    """`block_names` of `model`, each with its layer: `(kind, name, layer, widths)`."""
    for kind, name, path, widths in block_names(model.num_layers, model.num_decoder_layers):
        layer = model
        for step in path:
            layer = layer[step] if isinstance(step, int) else getattr(layer, step)
        yield kind, name, layer, widths


def _strip_prefix(weights):
    """Weight names without `model.` (MarianMTModel's prefix; MarianModel has none)."""
    return {name.removeprefix("model."): value for name, value in weights.items()}


def _check_positions(names, used, sizes, source):
    """Position tables saved with the weights (older checkpoints) must be our `halves` table."""
    for name in ("encoder.embed_positions.weight", "decoder.embed_positions.weight"):
        if name not in names:
            continue
        used.add(name)
        table = names[name]
        ours = ops.convert_to_numpy(
            sinusoidal_encoding(table.shape[0], sizes["d_model"], layout="halves")
        )
        if table.shape[1] != sizes["d_model"] or np.max(np.abs(table - ours)) > 1e-3:
            raise ValueError(
                f"The weights' {name!r} is not Hugging Face Marian's sinusoid table (sines "
                f"then cosines, the paper's frequencies): it does not map. Received: source={source!r}"
            )


# === Export ===
def export_marian(translator, output, overwrite=False):
    """Writes a `Translator` as a Hugging Face `MarianMTModel` directory.

    `config.json`, `model.safetensors`, `generation_config.json`, `source.spm`, `target.spm`,
    `vocab.json` and `tokenizer_config.json`: `transformers.MarianMTModel.from_pretrained` and
    `MarianTokenizer.from_pretrained` read it. Our ids map to Marian's as the import's in
    reverse: `[PAD]` (id 0) is dropped, `[UNK]`, `[START]` and `[END]` are written as `<unk>`,
    `<pad>` (Marian's padding and decoder start) and `</s>`. A model with interleaved
    sinusoids is written with its model dimensions permuted (sines first, as Marian computes
    them), which leaves every output unchanged.

    Refused, naming what does not map: pre-LN models (`norm_first`), separate embeddings, a
    source or target tokenizer that is not a `SentencePieceTokenizer`, sources that begin
    with `[START]` (`source_start_token=True`: `MarianTokenizer` adds `</s>` only), an
    activation other than ReLU, SiLU or GELU. Marian's LayerNorm epsilon is fixed at `1e-5`:
    another epsilon is written as `1e-5` with a warning (the outputs move by about the ratio
    of epsilon to the activations' variance).

    Args:
        translator: `keras_transformer.Translator`, or the path of a `.keras` file or a
            preset directory holding one.
        output: str or `os.PathLike`. The directory to write.
        overwrite: bool. Replace an existing directory. Defaults to `False`.

    Returns:
        `output`, as a str.
    """
    from safetensors.numpy import save_file

    if isinstance(translator, (str, os.PathLike)):
        translator = load_keras_translator(translator)
    model = translator.model
    problems = []
    if model.norm_first:
        problems.append("norm_first=True (Marian's blocks are post-LN)")
    if not model.share_embeddings:
        problems.append("share_embeddings=False (only shared embeddings are written)")
    if model.sinusoid_frequencies != "paper":
        problems.append(
            f"sinusoid_frequencies={model.sinusoid_frequencies!r} (MarianMTModel computes "
            "the paper's)"
        )
    if model.activation not in ACTIVATIONS:
        problems.append(f"activation={model.activation!r}")
    if translator.source_start_token:
        problems.append(
            "source_start_token=True (sources begin with [START]; MarianTokenizer adds </s> only)"
        )
    tokenizers = [translator.tokenizer, translator.target_tokenizer or translator.tokenizer]
    if not all(isinstance(tokenizer, SentencePieceTokenizer) for tokenizer in tokenizers):
        problems.append("a tokenizer that is not a SentencePieceTokenizer (Marian reads .spm)")
    elif tokenizers[0].get_vocabulary() != tokenizers[1].get_vocabulary():
        problems.append("source and target tokenizers with different vocabularies")
    if problems:
        raise ValueError(
            "This translator does not map onto a Hugging Face MarianMTModel: "
            f"{'; '.join(problems)}."
        )
    if abs(model.layer_norm_epsilon - 1e-5) > 1e-12:
        logger.warning(
            "Marian's LayerNorm epsilon is 1e-5; this model's %g is written as 1e-5.",
            model.layer_norm_epsilon,
        )
    output = os.fspath(output)
    if os.path.exists(output) and not overwrite:
        raise ValueError(
            f"`output` exists; pass `overwrite=True` to replace it. Received: output={output!r}"
        )
    d_model = model.d_model
    # Our residual dimensions in Marian's order: sines (our even dimensions) first.
    dims = (
        np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])
        if model.sinusoid_layout == "interleaved"
        else np.arange(d_model)
    )
    embedding = ops.convert_to_numpy(model.target_embedding.embeddings)[1:, dims]
    tensors = {"model.shared.weight": embedding}
    if model.output_bias:
        bias = ops.convert_to_numpy(model.target_embedding.logits_bias)[1:]
    else:
        bias = np.zeros(embedding.shape[0], "float32")
    tensors["final_logits_bias"] = bias[None]
    for kind, name, layer, (inputs, outputs) in _block_layers(model):
        if kind == "dense":  # The residual stream's dimensions are permuted, not the heads'.
            input_dims = dims if inputs == "d" else None
            output_dims = dims if outputs == "d" else None
            _write_dense(tensors, f"model.{name}", layer, input_dims, output_dims)
        else:
            _write_norm(tensors, f"model.{name}", layer, dims)
    vocabulary = list(tokenizers[0].get_vocabulary())[1:]
    vocabulary[:3] = ["<unk>", "<pad>", "</s>"]
    config = {
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "vocab_size": len(vocabulary),
        "decoder_vocab_size": len(vocabulary),
        "d_model": d_model,
        "encoder_layers": model.num_layers,
        "decoder_layers": model.num_decoder_layers,
        "encoder_attention_heads": model.num_heads,
        "decoder_attention_heads": model.num_heads,
        "encoder_ffn_dim": model.ff_dim,
        "decoder_ffn_dim": model.ff_dim,
        "activation_function": "swish"
        if model.activation in ("swish", "silu")
        else model.activation,
        "dropout": model.dropout,
        "attention_dropout": model.attention_dropout,
        "activation_dropout": 0.0,
        "max_position_embeddings": max(512, translator.max_source_length),
        "scale_embedding": True,
        "share_encoder_decoder_embeddings": True,
        "tie_word_embeddings": True,
        "pad_token_id": 1,
        "decoder_start_token_id": 1,
        "eos_token_id": 2,
        "forced_eos_token_id": 2,
        "bad_words_ids": [[1]],
        "num_beams": translator.beam_size,
        "is_encoder_decoder": True,
    }
    generation = {
        key: config[key]
        for key in (
            "pad_token_id",
            "decoder_start_token_id",
            "eos_token_id",
            "forced_eos_token_id",
            "bad_words_ids",
            "num_beams",
        )
    }
    # The length limit as `max_new_tokens` (the decoder start and the new tokens fill the
    # positions): a `max_length` here (OPUS-MT's 512) makes transformers warn on every
    # `generate(max_new_tokens=N)`, and none at all stops `generate()` at 20 tokens.
    generation["max_new_tokens"] = config["max_position_embeddings"] - 1
    with atomic_directory(output) as temporary:
        os.makedirs(temporary)
        save_file(
            {name: np.ascontiguousarray(value, "float32") for name, value in tensors.items()},
            os.path.join(temporary, "model.safetensors"),
            metadata={"format": "pt"},
        )
        for name, value in (
            ("config.json", config),
            ("generation_config.json", generation),
            ("vocab.json", {piece: index for index, piece in enumerate(vocabulary)}),
            (
                "tokenizer_config.json",
                {"tokenizer_class": "MarianTokenizer", "model_max_length": 512},
            ),
        ):
            with open(os.path.join(temporary, name), "w", encoding="utf-8") as file:
                json.dump(value, file, ensure_ascii=False, indent=1)
        for side, tokenizer in zip(("source", "target"), tokenizers, strict=True):
            with open(os.path.join(temporary, f"{side}.spm"), "wb") as file:
                file.write(tokenizer.proto)
    return output


def _write_dense(tensors, name, dense, input_dims, output_dims):
    kernel = ops.convert_to_numpy(dense.kernel)  # (in, out)
    bias = ops.convert_to_numpy(dense.bias)
    if input_dims is not None:
        kernel = kernel[input_dims]
    if output_dims is not None:
        kernel, bias = kernel[:, output_dims], bias[output_dims]
    tensors[f"{name}.weight"] = kernel.T  # torch: (out, in)
    tensors[f"{name}.bias"] = bias


def _write_norm(tensors, name, norm, dims):
    tensors[f"{name}.weight"] = ops.convert_to_numpy(norm.gamma)[dims]
    tensors[f"{name}.bias"] = ops.convert_to_numpy(norm.beta)[dims]
