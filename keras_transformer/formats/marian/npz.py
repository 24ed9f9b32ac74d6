"""Marian NMT `.npz` checkpoints (OPUS-MT's zip files) in the form `formats.marian.hf` imports.

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

import math
import os
import re
import zipfile

import numpy as np

from keras_transformer._checks import is_int, is_number, short_repr
from keras_transformer.files import link_outside
from keras_transformer.formats.marian.layout import CONFIG_ARRAY, PROJECTIONS, START_PIECE
from keras_transformer.text.tokenizer import MAX_VOCABULARY_SIZE, read_bounded_file

MAX_YAML_BYTES = 1 << 27
MAX_NPZ_BYTES = 1 << 36
# `special:model.yml` and `decoder.yml`: a few dozen settings, a few levels deep.
MAX_SETTINGS_BYTES = 1 << 20
MAX_SETTINGS_NODES = 1 << 16
# A vocabulary: one key and one value per piece, at most the tokenizers' largest vocabulary.
MAX_VOCABULARY_NODES = 2 * MAX_VOCABULARY_SIZE + 1
MAX_YAML_DEPTH = 32
# A Marian model holds ~26 arrays per layer; a model of 1,000 layers has fewer than this.
MAX_NPZ_MEMBERS = 1 << 15
# Marian (cnpy) and `np.savez` store arrays uncompressed, and trained float weights hardly
# compress: more than this many uncompressed bytes per byte of the file is a zip bomb.
MAX_NPZ_EXPANSION = 8
ACTIVATIONS = ("swish", "relu")  # Marian's `gelu` is x * sigmoid(1.702 x): not ours.
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
    Names read from `decoder.yml` are looked up in the directory only, and every file is
    read through `source_file` (no link out of the directory).

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
    directory = (os.path.dirname(source) or ".") if os.path.isfile(source) else source
    decoder = {}
    if os.path.isfile(os.path.join(directory, "decoder.yml")):
        decoder = _read_yaml(yaml, source_file(directory, "decoder.yml"), "decoder.yml")
    if os.path.isfile(source):
        npz = source_file(directory, os.path.basename(source))
    else:
        npz = source_file(source, _pick_npz(source, decoder))
    missing = [name for name in ("source.spm", "target.spm") if not _is_file(directory, name)]
    vocabularies = _vocabulary_files(directory, decoder)
    if not vocabularies:
        missing.append("a Marian vocabulary (*vocab.yml)")
    if missing:
        raise ValueError(
            f"`source` is not a Marian model directory: it lacks {', '.join(missing)}. "
            f"Received: source={source!r}"
        )
    with _open_npz(npz) as archive:
        # Names, shapes and sizes of every array, from the zip directory and the .npy headers:
        # no array is read before all of them fit the model its settings describe.
        arrays = _npz_headers(archive, npz)
        if CONFIG_ARRAY not in arrays:
            raise ValueError(
                f"{os.path.basename(npz)} holds no {CONFIG_ARRAY!r} array (the model's "
                f"settings): it is not a Marian model. Received: source={source!r}"
            )
        shape, dtype = arrays.pop(CONFIG_ARRAY)
        if math.prod(shape) * dtype.itemsize > MAX_SETTINGS_BYTES:
            raise ValueError(
                f"{CONFIG_ARRAY} of the .npz is larger than {MAX_SETTINGS_BYTES} bytes. "
                f"Received: shape={shape}, dtype={dtype}"
            )
        marian = _parse_yaml(
            yaml,
            _npz_array(archive, npz, CONFIG_ARRAY).tobytes().rstrip(b"\0"),
            f"{CONFIG_ARRAY} of the .npz",
        )
        vocabulary = read_vocabulary(directory, vocabularies)
        config = _config(marian, arrays, vocabulary, decoder, source)
        weights = _weights(archive, npz, arrays, marian, config, source)
    protos = {
        side: read_bounded_file(source_file(directory, f"{side}.spm"), 1 << 27, True, f"{side}.spm")
        for side in ("source", "target")
    }
    vocabulary[START_PIECE] = len(vocabulary)
    settings = {"sinusoid_frequencies": "marian", "layer_norm_epsilon": 1e-6}
    return config, vocabulary, protos, weights, settings


def source_file(directory, name):
    """The path of the file `name` of the model directory `directory`, refused (one line
    naming it) when it is a link leading outside the directory: the preset loader's rule
    (`keras_transformer.files.link_outside`, the Hugging Face cache's `blobs/` included), so
    no file from elsewhere ends up in the preset an import writes."""
    path = os.path.join(directory, name)
    problem = link_outside(path, directory, "the source directory")
    if problem is not None:
        raise ValueError(f"{problem}. Received: source={directory!r}")
    return path


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
    data = read_bounded_file(path, MAX_SETTINGS_BYTES, True, what)
    return _parse_yaml(yaml, data, what)


def _parse_yaml(yaml, data, what, strings=False, max_nodes=MAX_SETTINGS_NODES):
    """The mapping a YAML document holds, read as `yaml.safe_load` reads it (or as strings
    only, `strings=True`), within bounds: no alias (`*name`: each would share its anchor's
    value, and a few lines of them make billions of items), at most `max_nodes` values and
    `MAX_YAML_DEPTH` levels, checked on the parser's events before any value is built."""
    c_loaders = getattr(yaml, "__with_libyaml__", False)
    if strings:
        loader = yaml.CBaseLoader if c_loaders else yaml.BaseLoader
    else:
        loader = yaml.CSafeLoader if c_loaders else yaml.SafeLoader
    try:
        text = data.decode("utf-8")
        nodes = depth = 0
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.AliasEvent):
                raise ValueError(f"{what} uses an alias ({short_repr(event.anchor)}): refused")
            if isinstance(event, (yaml.ScalarEvent, yaml.CollectionStartEvent)):
                nodes += 1
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
            if nodes > max_nodes or depth > MAX_YAML_DEPTH:
                raise ValueError(
                    f"{what} holds more than {max_nodes} values or {MAX_YAML_DEPTH} levels: refused"
                )
        value = yaml.load(text, Loader=loader)
    except (UnicodeDecodeError, yaml.YAMLError) as error:
        message = " ".join(str(error).split())
        raise ValueError(f"{what} is not valid YAML ({message}).") from None
    if not isinstance(value, dict):
        raise ValueError(f"{what} must hold a YAML mapping. Received: {type(value).__name__}")
    return value


def _open_npz(path):
    size = os.path.getsize(path)
    if size > MAX_NPZ_BYTES:
        raise ValueError(f"The .npz file is larger than {MAX_NPZ_BYTES} bytes. Received: {size}")
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as error:
        raise _npz_error(path, error) from None


def _npz_error(path, reason):
    """The error of an `.npz` that cannot be read, `reason` (an error's message: a NumPy
    header error quotes the header, up to 10,000 bytes) cut to 300 characters."""
    reason = " ".join(str(reason).split())
    reason = reason if len(reason) <= 300 else reason[:297] + "..."
    return ValueError(
        f"{os.path.basename(path)} cannot be read as a NumPy .npz archive ({reason}). "
        f"Received: path={path!r}"
    )


def _npz_headers(archive, path):
    """`{array name: (shape, dtype)}` of an open `.npz` archive, from its zip directory and
    the header of each `.npy` member (a few hundred bytes each: no array data is read).

    Refused before any data is read: more than `MAX_NPZ_MEMBERS` members, a member that is
    not `NAME.npy` (or repeats a name), an object array (pickles), a member whose size
    (uncompressed, as the zip directory states it) is not its header plus the array its header
    declares, and arrays that add up to more than `MAX_NPZ_EXPANSION` times the file's size."""
    members = archive.infolist()
    if len(members) > MAX_NPZ_MEMBERS:
        raise _npz_error(path, f"{len(members)} members, more than {MAX_NPZ_MEMBERS}")
    total = sum(member.file_size for member in members)
    if total > MAX_NPZ_EXPANSION * os.path.getsize(path):
        raise _npz_error(
            path,
            f"its arrays would take {total} bytes, more than {MAX_NPZ_EXPANSION} times the "
            f"file's {os.path.getsize(path)}: a compressed archive that expands without bound",
        )
    headers = {}
    for member in members:
        name = member.filename.removesuffix(".npy")
        if name == member.filename or name in headers:
            raise _npz_error(path, f"member {short_repr(member.filename)} is not one NAME.npy")
        try:
            with archive.open(member) as stream:
                version = np.lib.format.read_magic(stream)
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
                elif version == (2, 0):
                    shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
                else:
                    raise ValueError(f"format version {version}")
                size = stream.tell() + math.prod(shape) * dtype.itemsize
        except (zipfile.BadZipFile, ValueError, EOFError, OSError, NotImplementedError) as error:
            raise _npz_error(path, f"{short_repr(member.filename)}: {error}") from None
        if dtype.hasobject or member.file_size != size:
            raise _npz_error(
                path,
                f"member {short_repr(member.filename)} holds {member.file_size} bytes, its "
                f"header declares {size} of {dtype}",
            )
        headers[name] = (shape, dtype)
    return headers


def _npz_array(archive, path, name):
    """One array of an open `.npz` archive (its header checked by `_npz_headers`)."""
    try:
        with archive.open(f"{name}.npy") as stream:
            return np.lib.format.read_array(stream, allow_pickle=False)
    except (zipfile.BadZipFile, ValueError, EOFError, OSError) as error:
        raise _npz_error(path, f"{short_repr(name)}: {error}") from None


def read_vocabulary(directory, files):
    """Marian's vocabulary (piece -> id) from the `files` (`*.vocab.yml`) in `directory`,
    which must be equal; read as strings (YAML's `yes`, `~` or `1` stay pieces)."""
    import yaml  # the marian extra

    vocabularies = []
    for name in dict.fromkeys(files):
        path = source_file(directory, name)
        data = read_bounded_file(path, MAX_YAML_BYTES, True, name)
        raw = _parse_yaml(yaml, data, name, strings=True, max_nodes=MAX_VOCABULARY_NODES)
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
            problems.append(f"{key}={short_repr(value)}{why}")
    activation = marian.get("transformer-ffn-activation")
    if activation not in ACTIVATIONS:
        problems.append(f"transformer-ffn-activation={short_repr(activation)} (swish and relu map)")
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
    # The arrays present, not the settings, bound how many layers are named and built.
    for stack, setting in (("encoder", "enc-depth"), ("decoder", "dec-depth")):
        check_layer_count(
            marian, setting, count_layers(arrays, f"{stack}_l"), "the .npz arrays", problems
        )
    rates = read_rates(
        marian,
        (
            ("dropout", "transformer-dropout", 0.0),
            ("attention_dropout", "transformer-dropout-attention", 0.0),
        ),
        problems,
    )
    decoder_ffn = marian.get("transformer-decoder-dim-ffn", 0)
    if decoder_ffn not in (0, sizes["ffn_dim"]):
        problems.append(
            f"transformer-decoder-dim-ffn={short_repr(decoder_ffn)} differs from "
            "transformer-dim-ffn"
        )
    dims = marian.get("dim-vocabs")
    if dims is not None and dims != [len(vocabulary)] * 2:
        problems.append(
            f"dim-vocabs={short_repr(dims)} (the vocabulary has {len(vocabulary)} pieces)"
        )
    if problems:
        raise ValueError(
            f"The Marian model's settings ({CONFIG_ARRAY}) do not map onto keras-transformer's "
            f"Transformer: {'; '.join(problems)}. Received: source={source!r}"
        )
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
        **rates,
        "max_position_embeddings": 512,
        "pad_token_id": start,
        "decoder_start_token_id": start,
        "eos_token_id": vocabulary["</s>"],
        "num_beams": decoder.get("beam-size"),  # checked by `import_marian`
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


def _weights(archive, path, arrays, marian, config, source):
    """The arrays under Hugging Face's names, read from the open `archive` once every
    missing, misshapen or extra one (`arrays`: name -> `(shape, dtype)`) is refused."""
    vocabulary_size, d_model = config["vocab_size"] - 1, config["d_model"]
    widths = {"d": d_model, "ff": config["encoder_ffn_dim"], "V": vocabulary_size, 1: 1}
    expected = [("Wemb", "shared.weight", ("V", "d"))]
    if not marian.get("output-omit-bias"):
        expected.append(("decoder_ff_logit_out_b", "final_logits_bias", (1, "V")))
    for stack in ("encoder", "decoder"):
        for layer in range(1, config[f"{stack}_layers"] + 1):
            expected.extend(_layer_names(stack, layer))
    shapes, missing, misshapen = {}, [], []
    for name, _, shape in expected:
        if name not in arrays:
            missing.append(name)
            continue
        (found, dtype), shape = arrays[name], tuple(widths[width] for width in shape)
        if found != shape and not (shape[0] == 1 and found == shape[1:]):
            misshapen.append(f"{name} {short_repr(found)} (expected {shape})")
        elif dtype.kind != "f":
            misshapen.append(f"{name} of {dtype} (expected floats)")
        else:
            shapes[name] = shape
    extra = sorted(set(arrays) - {name for name, _, _ in expected})
    problems = [
        f"{label}: {', '.join(names[:8])}{' ...' if len(names) > 8 else ''}"
        for label, names in (
            ("missing", missing),
            ("of the wrong shape", misshapen),
            ("with no place in the model", [short_repr(name) for name in extra[:9]]),
        )
        if names
    ]
    if problems:
        raise ValueError(
            f"The .npz arrays do not fit the model its {CONFIG_ARRAY} describes (d_model "
            f"{d_model}, {vocabulary_size} pieces): {'; '.join(problems)}. "
            f"Received: source={source!r}"
        )
    weights = {}
    for name, ours, _ in expected:
        value = np.asarray(_npz_array(archive, path, name), dtype="float32")
        if ours != "shared.weight":  # Marian's matrices are (in, out), PyTorch's (out, in)
            value = value.reshape(-1) if shapes[name][0] == 1 else value.T
        weights[ours] = value
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
        if not is_int(value) or value < 1:
            problems.append(f"{theirs}={short_repr(value)} (expected a positive int)")
        sizes[ours] = value
    return sizes


def read_rates(settings, names, problems):
    """`{ours: float(settings[theirs])}` for the `(ours, theirs, default)` triples of `names`
    (`default` where the setting is absent or null); each value that is not a number in
    `[0, 1)` is added to the list `problems`, named as `settings` spells it."""
    rates = {}
    for ours, theirs, default in names:
        value = settings.get(theirs)
        value = default if value is None else value
        if not is_number(value) or not 0.0 <= value < 1.0:
            problems.append(f"{theirs}={short_repr(value)} (expected a number in [0, 1))")
        else:
            rates[ours] = float(value)
    return rates


def count_layers(names, prefix):
    """How many distinct layer numbers follow `prefix` in `names` (`"encoder_l"` counts
    `encoder_l1_...`, `encoder_l2_...`)."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)\D")
    return len({match[1] for name in names if (match := pattern.match(name))})


def check_layer_count(settings, key, present, where, problems):
    """Adds to `problems` a layer count `settings[key]` that is not the `present` count (the
    layers whose tensors `where` holds); a value that is no int is `read_sizes`' to name."""
    value = settings.get(key)
    if is_int(value) and value != present:
        layers = "layer" if present == 1 else "layers"
        problems.append(f"{key}={value} but {where} hold tensors of {present} {layers}")
