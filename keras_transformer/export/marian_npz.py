"""Marian NMT `.npz` checkpoints (OPUS-MT's zip files) in the form `export.marian` imports.

An OPUS-MT release zip holds a Marian NMT checkpoint (`*.npz`, the model's settings inside as
YAML bytes under `special:model.yml`), Marian's vocabulary (`*.vocab.yml`: piece -> id, `</s>`
0, `<unk>` 1), `source.spm`, `target.spm` and `decoder.yml` (the models, vocabularies and beam
size `marian-decoder` uses). `read_marian_npz` reads such a directory and returns what
`read_marian_directory` returns for a Hugging Face `MarianMTModel` directory: a
`config.json`-like dict, a vocabulary with Marian's decoder start appended as `<pad>` (its
embedding row zeros: Marian's decoder starts from a zero embedding, `src/models/decoder.h`),
the two SentencePiece models, and the weights under Hugging Face's names (PyTorch's
`(out, in)` layout); `import_marian` maps both the same way.

Names, checked against Marian's `src/models/transformer.h` and `src/layers/generic.h` (read,
not copied): `Wemb` (`(vocabulary, d_model)`, shared by both embeddings and the output
projection), `decoder_ff_logit_out_b` (`(1, vocabulary)`), and per layer `l` (from 1)
`{encoder,decoder}_l{l}_self_{Wq,bq,Wk,bk,Wv,bv,Wo,bo}`, `..._self_Wo_ln_{scale,bias}`,
`..._ffn_{W1,b1,W2,b2}`, `..._ffn_ffn_ln_{scale,bias}`, and in the decoder
`decoder_l{l}_context_*` like `_self_*`. Matrices are stored `(in, out)`, biases and
LayerNorm parameters `(1, width)`.

What differs from the Hugging Face form: Marian's C++ computes sinusoid frequencies
`10000^(-i/(d/2 - 1))` (`sinusoid_frequencies="marian"`), where Hugging Face and
CTranslate2's converters compute the paper's `10000^(-i/(d/2))`; its LayerNorm epsilon is
`1e-6` (`layerNorm(x, prefix)` in `src/layers/generic.h`), PyTorch's `1e-5`.
"""

import os

import numpy as np

from keras_transformer.text.tokenizer import read_bounded_file

MAX_YAML_BYTES = 1 << 27
MAX_NPZ_BYTES = 1 << 36
CONFIG_ARRAY = "special:model.yml"
# Marian's decoder start (a zero embedding), added after its vocabulary.
START_PIECE = "<pad>"
ACTIVATIONS = ("swish", "relu")  # Marian's `gelu` is x * sigmoid(1.702 x): not ours.
# Marian array name suffix -> Hugging Face name suffix, per layer.
ATTENTION = {"W": "weight", "b": "bias"}
PROJECTIONS = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj"}
# The settings a model must have, and the value(s) that map (None: the setting may be absent).
REQUIRED = {
    "type": ("transformer",),
    "transformer-decoder-autoreg": ("self-attention", None),
    "transformer-preprocess": ("", None),
    "transformer-postprocess": ("dan", None),
    "transformer-postprocess-emb": ("d", "", None),
    "transformer-postprocess-top": ("", None),
    "transformer-ffn-depth": (2, None),
    "transformer-decoder-ffn-depth": (0, 2, None),
    "transformer-no-projection": (False, None),
    "transformer-train-position-embeddings": (False, None),
    "transformer-train-positions": (False, None),
    "transformer-disable-position-embeddings": (False, None),
    "transformer-tied-layers": ([], None),
    "right-left": (False, None),
    "ulr": (False, None),
    "lemma-dim-emb": (0, None),
}
WHY = {
    "transformer-preprocess": "pre-LN blocks",
    "transformer-postprocess": "only 'dan', post-LN, maps",
    "transformer-postprocess-emb": "an embedding LayerNorm",
    "transformer-postprocess-top": "a final LayerNorm",
    "transformer-tied-layers": "decoder layers sharing weights",
    "transformer-train-position-embeddings": "learned positions",
    "transformer-train-positions": "learned positions",
    "lemma-dim-emb": "factored vocabularies",
}


def is_marian_npz(source):
    """Whether `source` is a `.npz` file, or a directory holding one and no `config.json`."""
    source = os.fspath(source)
    if os.path.isfile(source):
        return source.endswith(".npz")
    return (
        os.path.isdir(source)
        and not os.path.isfile(os.path.join(source, "config.json"))
        and bool(_npz_files(source))
    )


def read_marian_npz(source):
    """Reads and checks a Marian `.npz` model directory (or the `.npz` file of one).

    Which checkpoint: `source` itself when it is a `.npz` file; else the one `decoder.yml`'s
    `models` names, else the directory's only `*.npz` (optimizer states `*.optimizer.npz`
    aside). Which vocabulary: `decoder.yml`'s `vocabs`, else the directory's only
    `*vocab.yml`, else its `*.src.vocab.yml` and `*.trg.vocab.yml`, which must be equal.
    Names read from `decoder.yml` are looked up in the directory only.

    Returns:
        `(config dict, vocabulary dict piece -> id, {"source": bytes, "target": bytes},
        weights dict name -> float32 array, settings)`, the first four as
        `read_marian_directory` returns them; `settings` holds the `Transformer` arguments
        that differ from Hugging Face's Marian (`sinusoid_frequencies`,
        `layer_norm_epsilon`).

    Raises:
        ValueError: one message naming every file, array or setting that does not map.
    """
    import yaml  # the marian extra

    source = os.fspath(source)
    directory = os.path.dirname(source) if os.path.isfile(source) else source
    decoder = {}
    if os.path.isfile(os.path.join(directory, "decoder.yml")):
        decoder = _read_yaml(yaml, os.path.join(directory, "decoder.yml"), "decoder.yml")
    if os.path.isfile(source):
        npz = source
    else:
        npz = os.path.join(source, _pick_npz(source, decoder))
    missing = [name for name in ("source.spm", "target.spm") if not _is_file(directory, name)]
    vocabularies = _vocabulary_files(directory, decoder)
    if not vocabularies:
        missing.append("a Marian vocabulary (*vocab.yml)")
    if missing:
        raise ValueError(
            f"`source` is not a Marian model directory: it lacks {', '.join(missing)}. "
            f"Received: source={source!r}"
        )
    arrays = _read_npz(npz)
    if CONFIG_ARRAY not in arrays:
        raise ValueError(
            f"{os.path.basename(npz)} holds no {CONFIG_ARRAY!r} array (the model's settings): "
            f"it is not a Marian model. Received: source={source!r}"
        )
    marian = _parse_yaml(
        yaml, arrays.pop(CONFIG_ARRAY).tobytes().rstrip(b"\0"), f"{CONFIG_ARRAY} of the .npz"
    )
    vocabulary = read_vocabulary(directory, vocabularies)
    config = _config(marian, arrays, vocabulary, decoder, source)
    weights = _weights(arrays, marian, config, source)
    protos = {
        side: read_bounded_file(
            os.path.join(directory, f"{side}.spm"), 1 << 27, True, f"{side}.spm"
        )
        for side in ("source", "target")
    }
    vocabulary[START_PIECE] = len(vocabulary)
    settings = {"sinusoid_frequencies": "marian", "layer_norm_epsilon": 1e-6}
    return config, vocabulary, protos, weights, settings


def _is_file(directory, name):
    return os.path.isfile(os.path.join(directory, name))


def _npz_files(directory):
    return sorted(
        name
        for name in os.listdir(directory)
        if name.endswith(".npz") and not name.endswith(".optimizer.npz")
    )


def _named(decoder, key, directory):
    """The plain file names `decoder.yml` lists under `key` that are in `directory`."""
    names = decoder.get(key)
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        return []
    names = [os.path.basename(name) for name in names]
    return names if all(_is_file(directory, name) for name in names) else []


def _pick_npz(directory, decoder):
    named = _named(decoder, "models", directory)
    if len(named) == 1:
        return named[0]
    found = _npz_files(directory)
    if len(found) != 1:
        raise ValueError(
            f"The directory holds {len(found)} Marian checkpoints ({', '.join(found) or 'none'}) "
            f"and no decoder.yml naming one: give the .npz file to import as `source`. "
            f"Received: source={directory!r}"
        )
    return found[0]


def _vocabulary_files(directory, decoder):
    named = _named(decoder, "vocabs", directory)
    if named:
        return named
    names = os.listdir(directory)
    shared = [
        n
        for n in names
        if n.endswith("vocab.yml") and not n.endswith(("src.vocab.yml", "trg.vocab.yml"))
    ]
    if len(shared) == 1:
        return shared
    pair = [[n for n in names if n.endswith(f".{side}.vocab.yml")] for side in ("src", "trg")]
    return [pair[0][0], pair[1][0]] if all(len(side) == 1 for side in pair) else []


def _read_yaml(yaml, path, what):
    return _parse_yaml(yaml, read_bounded_file(path, MAX_YAML_BYTES, True, what), what)


def _parse_yaml(yaml, data, what, loader=None):
    try:
        value = yaml.load(data.decode("utf-8"), Loader=loader or yaml.SafeLoader)
    except (UnicodeDecodeError, yaml.YAMLError) as error:
        message = " ".join(str(error).split())
        raise ValueError(f"{what} is not valid YAML ({message}).") from None
    if not isinstance(value, dict):
        raise ValueError(f"{what} must hold a YAML mapping. Received: {type(value).__name__}")
    return value


def _read_npz(path):
    size = os.path.getsize(path)
    if size > MAX_NPZ_BYTES:
        raise ValueError(f"The .npz file is larger than {MAX_NPZ_BYTES} bytes. Received: {size}")
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except Exception as error:  # zipfile, NumPy format and pickle refusals alike
        raise ValueError(
            f"{os.path.basename(path)} cannot be read as a NumPy .npz archive ({error}). "
            f"Received: path={path!r}"
        ) from None


def read_vocabulary(directory, files):
    """Marian's vocabulary (piece -> id) from the `files` (`*.vocab.yml`) in `directory`,
    which must be equal; read as strings (YAML's `yes`, `~` or `1` stay pieces)."""
    import yaml  # the marian extra

    vocabularies = []
    for name in dict.fromkeys(files):
        path = os.path.join(directory, name)
        raw = _parse_yaml(
            yaml, read_bounded_file(path, MAX_YAML_BYTES, True, name), name, yaml.BaseLoader
        )
        try:
            vocabulary = {str(piece): int(index) for piece, index in raw.items()}
        except (TypeError, ValueError):
            raise ValueError(
                f"{name} must map pieces to int ids. Received: path={path!r}"
            ) from None
        size = len(vocabulary)
        if sorted(vocabulary.values()) != list(range(size)):
            raise ValueError(
                f"{name} must map {size} distinct pieces to the ids 0..{size - 1}. "
                f"Received: path={path!r}"
            )
        vocabularies.append(vocabulary)
    if any(vocabulary != vocabularies[0] for vocabulary in vocabularies[1:]):
        raise ValueError(
            f"The source and target vocabularies ({', '.join(files)}) differ: only one shared "
            f"vocabulary maps (tied-embeddings-all)."
        )
    vocabulary = vocabularies[0]
    if vocabulary.get("</s>") != 0 or vocabulary.get("<unk>") != 1 or START_PIECE in vocabulary:
        raise ValueError(
            f"{files[0]} must give `</s>` id 0 and `<unk>` id 1 (Marian's), and have no "
            f"{START_PIECE!r} piece. Received: </s>={vocabulary.get('</s>')!r}, "
            f"<unk>={vocabulary.get('<unk>')!r}"
        )
    return vocabulary


def _config(marian, arrays, vocabulary, decoder, source):
    """A Hugging Face `config.json` of the model `special:model.yml` describes."""
    problems = []
    for key, allowed in REQUIRED.items():
        value = marian.get(key)
        if value not in allowed:
            why = f" ({WHY[key]})" if key in WHY else ""
            problems.append(f"{key}={value!r}{why}")
    activation = marian.get("transformer-ffn-activation")
    if activation not in ACTIVATIONS:
        problems.append(f"transformer-ffn-activation={activation!r} (swish and relu map)")
    tied = marian.get("tied-embeddings-all") or (
        marian.get("tied-embeddings-src") and marian.get("tied-embeddings")
    )
    separate = [name for name in ("encoder_Wemb", "decoder_Wemb") if name in arrays]
    if not tied or separate:
        problems.append(
            "tied-embeddings-all=false (separate source, target or output embeddings: only "
            "one shared matrix maps)"
        )
    sizes = read_sizes(
        marian,
        (
            ("d_model", "dim-emb"),
            ("encoder_layers", "enc-depth"),
            ("decoder_layers", "dec-depth"),
            ("heads", "transformer-heads"),
            ("ffn_dim", "transformer-dim-ffn"),
        ),
        problems,
    )
    decoder_ffn = marian.get("transformer-decoder-dim-ffn", 0)
    if decoder_ffn not in (0, sizes["ffn_dim"]):
        problems.append(
            f"transformer-decoder-dim-ffn={decoder_ffn!r} differs from transformer-dim-ffn"
        )
    dims = marian.get("dim-vocabs")
    if dims is not None and dims != [len(vocabulary)] * 2:
        problems.append(f"dim-vocabs={dims!r} (the vocabulary has {len(vocabulary)} pieces)")
    if problems:
        raise ValueError(
            f"The Marian model's settings ({CONFIG_ARRAY}) do not map onto keras-transformer's "
            f"Transformer: {'; '.join(problems)}. Received: source={source!r}"
        )
    beam_size = decoder.get("beam-size")
    start = len(vocabulary)  # the id of START_PIECE
    return {
        "model_type": "marian",
        "vocab_size": start + 1,
        "d_model": sizes["d_model"],
        "encoder_layers": sizes["encoder_layers"],
        "decoder_layers": sizes["decoder_layers"],
        "encoder_attention_heads": sizes["heads"],
        "decoder_attention_heads": sizes["heads"],
        "encoder_ffn_dim": sizes["ffn_dim"],
        "decoder_ffn_dim": sizes["ffn_dim"],
        "activation_function": activation,
        "dropout": float(marian.get("transformer-dropout") or 0.0),
        "attention_dropout": float(marian.get("transformer-dropout-attention") or 0.0),
        "max_position_embeddings": 512,
        "pad_token_id": start,
        "decoder_start_token_id": start,
        "eos_token_id": vocabulary["</s>"],
        "num_beams": beam_size if isinstance(beam_size, int) and beam_size > 0 else 4,
    }


def _layer_names(stack, layer):
    """`(Marian name, Hugging Face name, Marian shape)` of one layer; widths `"d"`, `"ff"`."""
    marian, ours = f"{stack}_l{layer}_", f"{stack}.layers.{layer - 1}."
    parts = [("self", "self_attn")] + ([("context", "encoder_attn")] if stack == "decoder" else [])
    for part, name in parts:
        for short, projection in PROJECTIONS.items():
            yield f"{marian}{part}_W{short}", f"{ours}{name}.{projection}.weight", ("d", "d")
            yield f"{marian}{part}_b{short}", f"{ours}{name}.{projection}.bias", (1, "d")
        for short, long in (("scale", "weight"), ("bias", "bias")):
            yield f"{marian}{part}_Wo_ln_{short}", f"{ours}{name}_layer_norm.{long}", (1, "d")
    for index, (inputs, outputs) in ((1, ("d", "ff")), (2, ("ff", "d"))):
        yield f"{marian}ffn_W{index}", f"{ours}fc{index}.weight", (inputs, outputs)
        yield f"{marian}ffn_b{index}", f"{ours}fc{index}.bias", (1, outputs)
    for short, long in (("scale", "weight"), ("bias", "bias")):
        yield f"{marian}ffn_ffn_ln_{short}", f"{ours}final_layer_norm.{long}", (1, "d")


def _weights(arrays, marian, config, source):
    """The arrays under Hugging Face's names; every missing, misshapen or extra one named."""
    vocabulary_size, d_model = config["vocab_size"] - 1, config["d_model"]
    widths = {"d": d_model, "ff": config["encoder_ffn_dim"], "V": vocabulary_size, 1: 1}
    expected = [("Wemb", "shared.weight", ("V", "d"))]
    if not marian.get("output-omit-bias"):
        expected.append(("decoder_ff_logit_out_b", "final_logits_bias", (1, "V")))
    for stack in ("encoder", "decoder"):
        for layer in range(1, config[f"{stack}_layers"] + 1):
            expected.extend(_layer_names(stack, layer))
    weights, missing, misshapen = {}, [], []
    for name, ours, shape in expected:
        if name not in arrays:
            missing.append(name)
            continue
        value = arrays[name]
        shape = tuple(widths[width] for width in shape)
        if value.shape != shape and not (shape[0] == 1 and value.shape == shape[1:]):
            misshapen.append(f"{name} {value.shape} (expected {shape})")
            continue
        value = np.asarray(value, dtype="float32")
        if ours != "shared.weight":  # Marian's matrices are (in, out), PyTorch's (out, in)
            value = value.reshape(-1) if shape[0] == 1 else value.T
        weights[ours] = value
    extra = sorted(set(arrays) - {name for name, _, _ in expected})
    problems = [
        f"{label}: {', '.join(names[:8])}{' ...' if len(names) > 8 else ''}"
        for label, names in (
            ("missing", missing),
            ("of the wrong shape", misshapen),
            ("with no place in the model", extra),
        )
        if names
    ]
    if problems:
        raise ValueError(
            f"The .npz arrays do not fit the model its {CONFIG_ARRAY} describes (d_model "
            f"{d_model}, {vocabulary_size} pieces): {'; '.join(problems)}. "
            f"Received: source={source!r}"
        )
    # Marian's decoder starts from a zero embedding: the row of START_PIECE, appended.
    zeros = np.zeros((1, d_model), "float32")
    weights["shared.weight"] = np.concatenate([weights["shared.weight"], zeros])
    bias = weights.pop("final_logits_bias", np.zeros(vocabulary_size, "float32"))
    weights["final_logits_bias"] = np.concatenate([bias, [0.0]]).astype("float32")[None]
    return weights


def read_sizes(settings, names, problems):
    """`{ours: settings[theirs]}` for the `(ours, theirs)` pairs of `names`; each value that is
    not a positive int is added to the list `problems`, named as `settings` spells it."""
    sizes = {}
    for ours, theirs in names:
        value = settings.get(theirs)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(f"{theirs}={value!r} (expected a positive int)")
        sizes[ours] = value
    return sizes
