"""LoRA fine-tuning of a `Transformer`: low-rank updates of its projections, the rest frozen.

LoRA (Hu et al., 2021) trains, for a frozen kernel `W` `(d_in, d_out)`, two small matrices
`A` `(d_in, rank)` and `B` `(rank, d_out)`, and computes

    y = x (W + (alpha / rank) A B) + b

`B` starts at zero, so a model with LoRA enabled computes what it did before. Keras' `Dense`
does the arithmetic (`Dense.enable_lora`); this module picks the `Dense` layers of a
`Transformer` (by default the attention's query and value projections, as keras-hub's
`Backbone.enable_lora`), freezes every other weight (embeddings, LayerNorms, biases),
writes and reads the LoRA weights alone (`save_lora_weights`, `load_lora_weights`: a file of
a few hundred kilobytes), and merges them into the kernels (`merge_lora`): a plain
`Transformer` with no LoRA variables, which serves at the cost of the original.

Weights files. Keras writes a LoRA layer's kernel merged (`W + (alpha / rank) A B`) and,
when it loads one, zeroes `A` and `B`: a `.keras` file or a preset of a LoRA model is the
merged plain model, but a training state saved that way cannot go on training (with `A` and
`B` at zero, neither gets a gradient). Training checkpoints and backups of a LoRA model
hold its factors and optimizer state, with a reference to its frozen base
(`keras_transformer.training.lora_state`): they resume bit for bit.

Example:

>>> import numpy as np
>>> from keras_transformer import Transformer
>>> model = Transformer.from_preset("tiny", vocabulary_size=100)
>>> batch = {"encoder_inputs": np.array([[5, 6, 7, 0]]),
...          "decoder_inputs": np.array([[2, 5, 6]])}
>>> before = np.asarray(model(batch))
>>> paths = enable_lora(model, rank=4)
>>> len(model.trainable_weights) == 2 * len(paths)  # A and B of each projection
True
>>> bool(np.allclose(np.asarray(model(batch)), before))  # B = 0: the same outputs
True
>>> merged = merge_lora(model)
>>> lora_layers(merged)
{}

References:
    Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models", 2021.
"""

import io
import json

import keras
import numpy as np
from keras import ops

from keras_transformer._backend import local_value
from keras_transformer._checks import check_int, check_number
from keras_transformer.files import write_bytes
from keras_transformer.hyperparameters import LORA_PROJECTIONS, LORA_TARGET_SETS, lora_targets
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.multi_head_attention import MultiHeadAttention

ATTENTION_TARGETS = LORA_PROJECTIONS[:4]
FEED_FORWARD_TARGETS = LORA_PROJECTIONS[4:]
DEFAULT_TARGETS = LORA_TARGET_SETS["qv"]
ALL_TARGETS = LORA_TARGET_SETS["all"]

_FILE_FORMAT = "keras_transformer.lora/1"


def enable_lora(model, rank, targets=DEFAULT_TARGETS, alpha=None, seed=None):
    """Enables LoRA on the `targets` projections of `model` and freezes every other weight.

    Afterwards `model.trainable_weights` are the LoRA matrices only (`A` and `B` of each
    projection; compile the model after this call, so that the optimizer sees them), and
    the model computes what it computed before (`B` starts at zero).

    Args:
        model: a built `keras_transformer.Transformer` (or any model of our attention and
            feed-forward layers).
        rank: int `>= 1`. The rank of each update.
        targets: names of the `Dense` projections to adapt, among `"query"`, `"key"`,
            `"value"`, `"attention_output"` (every attention layer: self-attention and
            cross-attention) and `"inner"`, `"output"` (the feed-forward layers); or `"qv"`
            (query and value) or `"all"` (`ALL_TARGETS`, all six). Defaults to
            `DEFAULT_TARGETS`, query and value (Hu et al.'s choice, and keras-hub's).
        alpha: number `> 0`. The update is scaled by `alpha / rank`. Defaults to `None`:
            `rank` (a scale of 1).
        seed: int. Seeds the initial `A` matrices (He uniform; the `i`-th adapted layer's
            with `seed + i`). Defaults to `None`: Keras' global random state.

    Returns:
        The list of the adapted layers' paths (`Layer.path`), in model order.

    Raises:
        ValueError: LoRA is already enabled on `model`, `targets` names an unknown
            projection, or a target is quantized (merge LoRA before quantizing).
    """
    check_int("rank", rank, minimum=1)
    check_number("alpha", alpha, minimum=0, strict=True, allow_none=True)
    check_int("seed", seed, allow_none=True)
    targets = lora_targets(targets)
    if lora_layers(model):
        raise ValueError(
            f"LoRA is already enabled on {model.name!r}: merge it first (`merge_lora`). "
            f"Received: rank={rank}"
        )
    layers = {path: dense for path, dense in _projections(model) if dense.name in targets}
    for path, dense in layers.items():
        if dense.quantization_mode is not None:
            raise ValueError(
                f"{path} is quantized ({dense.quantization_mode}): enable LoRA before "
                f"quantizing, or quantize the merged model. Received: rank={rank}"
            )
    for variable in model.weights:
        variable.trainable = False
    for index, dense in enumerate(layers.values()):
        initializer = keras.initializers.HeUniform(seed=None if seed is None else seed + index)
        # A and B are new, trainable variables; B starts at zero.
        dense.enable_lora(rank, lora_alpha=alpha, a_initializer=initializer)
    return list(layers)


def lora_layers(model):
    """The `Dense` layers of `model` with LoRA enabled, as `{path: layer}` in model order."""
    return {path: dense for path, dense in _projections(model) if dense.lora_enabled}


def lora_weights(model):
    """The LoRA variables of `model` (`A` then `B` of each adapted layer, in model order)."""
    return [
        variable
        for dense in lora_layers(model).values()
        for variable in (dense.lora_kernel_a, dense.lora_kernel_b)
    ]


def base_weights(model):
    """`model.weights` without the LoRA variables: the weights of the plain model, in the
    order of `merge_lora(model).weights` (and of a `Transformer` of the same config)."""
    lora = {id(variable) for variable in lora_weights(model)}
    return [variable for variable in model.weights if id(variable) not in lora]


def merge_lora(model):
    """A new plain model (same class and config, no LoRA variables) whose kernels are the
    LoRA model's merged ones, `W + (alpha / rank) A B`, computed in float32.

    `model` itself is left as it is. A model without LoRA is returned as it is.

    Args:
        model: a `keras_transformer.Transformer`.

    Returns:
        A `Transformer` (every weight trainable, as built).
    """
    if not lora_layers(model):
        return model
    plain = model.__class__.from_config(model.get_config())
    plain.set_weights(merged_weights(model))
    return plain


def merged_weights(model):
    """The weights of `merge_lora(model)`, as NumPy arrays in the order of its `weights`:
    `base_weights(model)` with each LoRA kernel merged (`W + (alpha / rank) A B`, computed
    in float32). Distributed variables (a `MirroredStrategy`'s, JAX arrays replicated
    across processes) are read from this process's copy."""
    merged = {id(dense._kernel): _merged_kernel(dense) for dense in lora_layers(model).values()}
    return [merged.get(id(variable), _numpy(variable)) for variable in base_weights(model)]


def merged_translator(translator):
    """`translator` with its model's LoRA merged (`merge_lora`): a new translator of the same
    settings and tokenizers, or `translator` itself when its model has no LoRA.

    Exports and `keras_transformer.training.train` call it, so that what they write is a
    plain model.
    """
    if not lora_layers(translator.model):
        return translator
    config = translator.get_config()
    config.update(
        model=merge_lora(translator.model),
        tokenizer=translator.tokenizer,
        target_tokenizer=translator.target_tokenizer,
    )
    return type(translator)(**config)


def save_lora_weights(model, path):
    """Writes the LoRA weights of `model` alone (with its rank, alpha and targets) to `path`,
    an HDF5 file, atomically.

    Args:
        model: a model with LoRA enabled (`enable_lora`).
        path: str or `os.PathLike`. Conventionally ending in `.lora.h5`.

    Returns:
        `path`.
    """
    import h5py

    layers = lora_layers(model)
    if not layers:
        raise ValueError(
            f"{model.name!r} has no LoRA layers: call `enable_lora(model, rank)` first."
        )
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as file:
        file.attrs["format"] = _FILE_FORMAT
        file.attrs["settings"] = json.dumps(_settings(layers))
        for layer_path, dense in layers.items():
            group = file.create_group(layer_path)
            group["lora_kernel_a"] = _numpy(dense.lora_kernel_a)
            group["lora_kernel_b"] = _numpy(dense.lora_kernel_b)
    write_bytes(path, buffer.getvalue())
    return path


def load_lora_weights(model, path):
    """Loads the LoRA weights of `path` (`save_lora_weights`) into `model`, enabling LoRA
    with the file's rank, alpha and targets first if `model` has none.

    Args:
        model: the model the file was saved from (same architecture, same base weights),
            with or without LoRA enabled.
        path: str or `os.PathLike`.

    Raises:
        ValueError: the file is not a LoRA weights file, or its layers, rank or shapes
            differ from `model`'s LoRA.
    """
    import h5py

    with h5py.File(path, "r") as file:
        if file.attrs.get("format") != _FILE_FORMAT:
            raise ValueError(f"{path}: not a LoRA weights file (`save_lora_weights`).")
        settings = json.loads(file.attrs["settings"])
        if not lora_layers(model):
            enable_lora(model, settings["rank"], settings["targets"], settings["alpha"])
        layers = lora_layers(model)
        found = _settings(layers)
        if found != settings or set(layers) != set(_group_paths(file)):
            raise ValueError(
                f"{path} holds LoRA weights of {settings} for {len(_group_paths(file))} "
                f"layers; {model.name!r} has LoRA {found} on {len(layers)} layers."
            )
        for layer_path, dense in layers.items():
            for name in ("lora_kernel_a", "lora_kernel_b"):
                variable = getattr(dense, name)
                value = file[layer_path][name][()]
                if value.shape != tuple(variable.shape):
                    raise ValueError(
                        f"{path}: {layer_path}/{name} has shape {value.shape}; the model's "
                        f"has {tuple(variable.shape)}."
                    )
                variable.assign(value)


def _projections(model):
    """`(path, Dense)` of every attention and feed-forward projection of `model`."""
    found = []
    for layer in model._flatten_layers(include_self=False):
        if isinstance(layer, MultiHeadAttention):
            denses = (layer.query_dense, layer.key_dense, layer.value_dense, layer.output_dense)
        elif isinstance(layer, FeedForward):
            denses = (layer.inner_dense, layer.output_dense)
        else:
            continue
        found.extend((dense.path, dense) for dense in denses)
    return found


def _settings(layers):
    """`{"rank", "alpha", "targets"}` of the LoRA `layers` (`{path: Dense}`)."""
    ranks = {dense.lora_rank for dense in layers.values()}
    alphas = {float(dense.lora_alpha) for dense in layers.values()}
    if len(ranks) != 1 or len(alphas) != 1:
        raise ValueError(
            f"The LoRA layers have several ranks or alphas. Received: ranks={sorted(ranks)}, "
            f"alphas={sorted(alphas)}"
        )
    targets = [name for name in ALL_TARGETS if any(d.name == name for d in layers.values())]
    return {"rank": ranks.pop(), "alpha": alphas.pop(), "targets": targets}


def _group_paths(file):
    """The paths of the groups of an HDF5 file that hold `lora_kernel_a`."""
    names = []
    file.visit(names.append)
    return [name.rsplit("/", 1)[0] for name in names if name.endswith("/lora_kernel_a")]


def _merged_kernel(dense):
    """`W + (alpha / rank) A B` of a LoRA `Dense`, float32, as NumPy in the kernel's dtype."""
    scale = dense.lora_alpha / dense.lora_rank
    kernel = _numpy(dense._kernel).astype("float32")
    delta = _numpy(dense.lora_kernel_a).astype("float32") @ _numpy(dense.lora_kernel_b)
    merged = kernel + np.float32(scale) * delta.astype("float32")
    return merged.astype(keras.backend.standardize_dtype(dense._kernel.dtype))


def _numpy(variable):
    return ops.convert_to_numpy(local_value(variable.value))
