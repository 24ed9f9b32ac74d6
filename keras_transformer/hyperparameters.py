"""The Transformer's hyper-parameters: the presets and the checks of their values.

Pure Python (imports no framework): `Transformer`, `EncoderBlock` and `DecoderBlock` run these
checks in their constructors, and the training config runs the same ones on a config file's
`[model]` section before anything is built.
"""

import inspect

from keras_transformer._checks import is_int, is_number

# Paper Table 3 (base and big); "tiny" is ours, for tests, demos and notebooks.
# How `PositionalEmbedding` lays out its sinusoids: the paper's sin/cos pairs, or all sines
# then all cosines (Hugging Face's Marian).
SINUSOID_LAYOUTS = ("interleaved", "halves")
# Its sinusoid frequencies: the paper's `10000^(-2i/d_model)`, or Marian C++'s
# `10000^(-i/(d_model/2 - 1))` (what a Marian `.npz` model was trained with).
SINUSOID_FREQUENCIES = ("paper", "marian")
# The pre-softmax product's dtype (`None`: the layer's compute dtype).
PROJECTION_DTYPES = (None, "float32", "bfloat16", "float16")

PRESETS = {
    "tiny": dict(num_layers=2, d_model=64, num_heads=4, ff_dim=256, dropout=0.1),
    "base": dict(num_layers=6, d_model=512, num_heads=8, ff_dim=2048, dropout=0.1),
    "big": dict(num_layers=6, d_model=1024, num_heads=16, ff_dim=4096, dropout=0.3),
}


def validate_block_args(
    num_heads=None,
    ff_dim=None,
    dropout=None,
    attention_dropout=None,
    layer_norm_epsilon=None,
    prefix="",
):
    """Argument checks of `EncoderBlock` and `DecoderBlock`; `None` is not checked.

    Args:
        num_heads, ff_dim, dropout, attention_dropout, layer_norm_epsilon: the block's
            arguments.
        prefix: str. Put before the argument names in messages (e.g. `"model."`). Defaults
            to `""`.

    Raises:
        ValueError: naming the first invalid argument and its value.
    """
    for name, value in (("num_heads", num_heads), ("ff_dim", ff_dim)):
        _check_int(prefix + name, value, minimum=1)
    for name, rate in (("dropout", dropout), ("attention_dropout", attention_dropout)):
        if rate is not None and (not is_number(rate) or not 0.0 <= rate < 1.0):
            _fail(prefix + name, rate, "a number in [0, 1)")
    if layer_norm_epsilon is not None and (
        not is_number(layer_norm_epsilon) or layer_norm_epsilon <= 0
    ):
        _fail(prefix + "layer_norm_epsilon", layer_norm_epsilon, "a number > 0")


def validate_transformer_args(
    vocabulary_size=None,
    target_vocabulary_size=None,
    num_layers=None,
    num_decoder_layers=None,
    d_model=None,
    num_heads=None,
    ff_dim=None,
    dropout=None,
    attention_dropout=None,
    activation=None,
    norm_first=None,
    share_embeddings=None,
    layer_norm_epsilon=None,
    sinusoid_layout=None,
    output_bias=None,
    sinusoid_frequencies=None,
    projection_dtype=None,
    prefix="",
):
    """Argument checks of `Transformer` (its blocks' included); `None` is not checked.

    Whether Keras knows an activation's name is left to Keras (`keras.activations.get`),
    which needs the framework; here it must be a non-empty string or a callable.

    Args:
        vocabulary_size, ..., projection_dtype: the `Transformer` arguments of that
            name.
        prefix: str. Put before the argument names in messages (e.g. `"model."`). Defaults
            to `""`.

    Raises:
        ValueError: naming the first invalid argument and its value.

    Example:

    >>> validate_transformer_args(d_model=64, num_heads=4)
    >>> validate_transformer_args(d_model=64, num_heads=3)
    Traceback (most recent call last):
    ...
    ValueError: `d_model` must be divisible by `num_heads`. Received: d_model=64, num_heads=3
    """
    for name, value in (
        ("vocabulary_size", vocabulary_size),
        ("target_vocabulary_size", target_vocabulary_size),
        ("num_layers", num_layers),
        ("num_decoder_layers", num_decoder_layers),
    ):
        _check_int(prefix + name, value, minimum=1)
    validate_block_args(
        num_heads, ff_dim, dropout, attention_dropout, layer_norm_epsilon, prefix=prefix
    )
    if d_model is not None and (not is_int(d_model) or d_model < 2 or d_model % 2):
        _fail(prefix + "d_model", d_model, "a positive even int (sin/cos pairs)")
    if d_model is not None and num_heads is not None and d_model % num_heads:
        raise ValueError(
            f"`{prefix}d_model` must be divisible by `{prefix}num_heads`. Received: "
            f"{prefix}d_model={d_model}, {prefix}num_heads={num_heads}"
        )
    if activation is not None and not (
        callable(activation) or (isinstance(activation, str) and activation)
    ):
        _fail(prefix + "activation", activation, "an activation name or a callable")
    for name, value in (
        ("norm_first", norm_first),
        ("share_embeddings", share_embeddings),
        ("output_bias", output_bias),
    ):
        if value is not None and not isinstance(value, bool):
            _fail(prefix + name, value, "true or false")
    if sinusoid_layout is not None and sinusoid_layout not in SINUSOID_LAYOUTS:
        _fail(prefix + "sinusoid_layout", sinusoid_layout, f"one of {SINUSOID_LAYOUTS}")
    if sinusoid_frequencies is not None and sinusoid_frequencies not in SINUSOID_FREQUENCIES:
        _fail(
            prefix + "sinusoid_frequencies", sinusoid_frequencies, f"one of {SINUSOID_FREQUENCIES}"
        )
    if projection_dtype is not None and projection_dtype not in PROJECTION_DTYPES:
        _fail(prefix + "projection_dtype", projection_dtype, f"one of {PROJECTION_DTYPES}")
    if (
        share_embeddings
        and vocabulary_size is not None
        and target_vocabulary_size is not None
        and target_vocabulary_size != vocabulary_size
    ):
        raise ValueError(
            f"`{prefix}share_embeddings=True` needs one shared vocabulary. Received: "
            f"{prefix}vocabulary_size={vocabulary_size}, {prefix}target_vocabulary_size={target_vocabulary_size}"
        )


# The `Transformer` constructor arguments these checks cover, in its order: all but `seed` and
# `**kwargs`. The training config's `[model]` section takes its keys from here, so a new
# constructor argument (added here too, which tests/training/test_config.py enforces) is a
# new `[model]` key.
TRANSFORMER_ARGUMENTS = tuple(inspect.signature(validate_transformer_args).parameters)[:-1]

# The `Dense` projections LoRA can adapt (`keras_transformer.models.lora`): the attention's
# (every attention layer: self- and cross-attention), then the feed-forward layers'; and the
# two named sets (the training config's `lora_targets`): Hu et al.'s query and value, or all.
LORA_PROJECTIONS = ("query", "key", "value", "attention_output", "inner", "output")
LORA_TARGET_SETS = {"qv": ("query", "value"), "all": LORA_PROJECTIONS}


def lora_targets(targets, name="targets"):
    """The projections `targets` names, as a tuple in `LORA_PROJECTIONS` order: `"qv"`,
    `"all"` (`LORA_TARGET_SETS`), one projection's name, or a non-empty list of them.

    Raises:
        ValueError: anything else, naming `name` and the value.
    """
    if isinstance(targets, str):
        names = LORA_TARGET_SETS.get(targets, (targets,))
    elif isinstance(targets, (list, tuple)) and all(isinstance(item, str) for item in targets):
        names = tuple(targets)
    else:
        names = ()
    if not names or any(item not in LORA_PROJECTIONS for item in names):
        _fail(
            name,
            list(targets) if isinstance(targets, tuple) else targets,
            f"{' or '.join(map(repr, LORA_TARGET_SETS))} or a list of projections among "
            f"{list(LORA_PROJECTIONS)}",
        )
    return tuple(item for item in LORA_PROJECTIONS if item in names)


def _check_int(name, value, minimum):
    if value is not None and (not is_int(value) or value < minimum):
        _fail(name, value, f"an int >= {minimum}")


def _fail(name, value, expected):
    raise ValueError(f"`{name}` must be {expected}. Received: {name}={value!r}")
