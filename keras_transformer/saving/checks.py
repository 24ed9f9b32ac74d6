"""Checks a configuration read from a file passes before Keras deserializes it."""

import keras

from keras_transformer import _keras_compat
from keras_transformer._checks import short_repr


def deserialize_part(key, config, expected):
    """Deserializes `config` only if it names a registered subclass of `expected`: a crafted
    file cannot make a `Translator` (or a preset) build some other object in its place.

    Args:
        key: str. The configuration's name, for the error message (e.g. `"model"`).
        config: the serialized object (a dict with `registered_name` or `class_name`).
        expected: the class the object must be (a subclass of it passes).

    Returns:
        The deserialized object.

    Raises:
        ValueError: `config` names no registered subclass of `expected`.
    """
    name = None
    if isinstance(config, dict):
        name = config.get("registered_name") or config.get("class_name")
    cls = keras.saving.get_registered_object(name) if isinstance(name, str) else None
    if not (isinstance(cls, type) and issubclass(cls, expected)):
        received = f"class {name!r}" if isinstance(config, dict) else type(config).__name__
        raise ValueError(
            f"`{key}` must be the configuration of a `{expected.__name__}`. "
            f"Received: {key} of {received}"
        )
    return keras.saving.deserialize_keras_object(config)


# The policies a model's `dtype` may name in a file: Keras' float policies by name, and the
# int8 policy `Transformer.quantize` writes. Nothing else is handed to Keras' deserializer,
# which would import a file's `module` (and wrap its error in a dump of the whole config).
FLOAT_POLICIES = ("float32", "float16", "bfloat16", "float64", "mixed_float16", "mixed_bfloat16")
QUANTIZED_MODES = ("int8",)
_POLICY_MODULES = ("keras", "keras.dtype_policies", "keras.src.dtype_policies.dtype_policy")
_MAX_MAP_ENTRIES = 10_000


def check_dtype_config(config):
    """Checks a model's serialized `dtype` (a dict in a file) by names only: a float
    `DTypePolicy` or a quantized model's `DTypePolicyMap` (`check_policy_map`).

    Raises:
        ValueError: one line naming the key and the value.
    """
    if isinstance(config, dict) and config.get("class_name") == "DTypePolicyMap":
        check_policy_map(config)
        return
    _check_policy_object("dtype", config, "DTypePolicy", "FloatDTypePolicy")
    _check_float_name("dtype", (config.get("config") or {}).get("name"))


def check_policy_map(config):
    """Checks a serialized `keras.dtype_policies.DTypePolicyMap` (a quantized model's `dtype`
    in its `config.json`) by names only, before Keras deserializes any of it.

    Allowed: the class `DTypePolicyMap` of Keras, a default policy among `FLOAT_POLICIES`,
    and for each layer path (a string) a `QuantizedDTypePolicy` of mode `"int8"` over a float
    policy. The paths are checked against the model once it is built (`check_policy_paths`).

    Raises:
        ValueError: one line naming the key (`dtype`, `dtype.policy_map[...]`) and the value.
    """
    _check_policy_object("dtype", config, "DTypePolicyMap")
    inner = config.get("config")
    if not isinstance(inner, dict) or set(inner) - {"default_policy", "policy_map"}:
        raise ValueError(
            "`dtype` must hold `default_policy` and `policy_map` only. "
            f"Received: dtype.config={short_repr(inner)}"
        )
    default = inner.get("default_policy")
    if isinstance(default, str):
        _check_float_name("dtype.default_policy", default)
    elif default is not None:
        _check_policy_object("dtype.default_policy", default, "DTypePolicy", "FloatDTypePolicy")
        _check_float_name("dtype.default_policy", (default.get("config") or {}).get("name"))
    policy_map = inner.get("policy_map")
    if not isinstance(policy_map, dict) or len(policy_map) > _MAX_MAP_ENTRIES:
        raise ValueError(
            f"`dtype.policy_map` must be an object of at most {_MAX_MAP_ENTRIES} layer paths. "
            f"Received: dtype.policy_map={short_repr(policy_map)}"
        )
    for path, policy in policy_map.items():
        key = f"dtype.policy_map[{short_repr(path)}]"
        _check_policy_object(key, policy, "QuantizedDTypePolicy")
        policy_config = policy.get("config")
        if not isinstance(policy_config, dict) or set(policy_config) != {"mode", "source_name"}:
            raise ValueError(
                f"`{key}` must hold `mode` and `source_name`. "
                f"Received: {key}.config={short_repr(policy_config)}"
            )
        if policy_config["mode"] not in QUANTIZED_MODES:
            raise ValueError(
                f"`{key}` must be an int8 policy. Received: mode={short_repr(policy_config['mode'])}"
            )
        _check_float_name(f"{key}.source_name", policy_config["source_name"])


def check_policy_paths(model, policy_map):
    """Raises `ValueError` unless every path of `policy_map` (a `DTypePolicyMap`) is the path
    of a layer of `model` that can be quantized: run when the model is built, before any
    weight of a file is read (a path of no layer would otherwise load as a float model, or
    fail later with a count of weights)."""
    paths = {
        layer.path
        for layer in _keras_compat.flatten_layers(model)
        if type(layer).quantize is not keras.layers.Layer.quantize  # Dense, embeddings
    }
    unknown = sorted(set(policy_map) - paths)
    if unknown:
        raise ValueError(
            f"`dtype.policy_map` names {len(unknown)} path(s) of no quantizable layer of the "
            f"model. Received: {short_repr(unknown[0])}"
        )


def _check_policy_object(key, config, *class_names):
    if not (
        isinstance(config, dict)
        and config.get("module") in _POLICY_MODULES
        and config.get("class_name") in class_names
        and config.get("registered_name") is None
    ):
        found = (
            f"module={short_repr(config.get('module'), 40)}, "
            f"class_name={short_repr(config.get('class_name'), 40)}"
            if isinstance(config, dict)
            else f"a {type(config).__name__}"
        )
        raise ValueError(f"`{key}` must be a Keras {' or '.join(class_names)}. Received: {found}")


def _check_float_name(key, name):
    if name not in FLOAT_POLICIES:
        raise ValueError(
            f"`{key}` must be one of {', '.join(FLOAT_POLICIES)}. Received: {short_repr(name)}"
        )


MAX_REFUSAL_CHARS = 300


def file_refusal(path, error, limit=MAX_REFUSAL_CHARS):
    """A `ValueError` of one line of at most `limit` characters: `path` (its tail when long),
    then `error`'s message on one line (of an error Keras wrapped in copies of the whole
    configuration, the error it wrapped), cut with `...`.

    Args:
        path: str. The refused file.
        error: the exception that refused it.
        limit: int. The longest message. Defaults to `MAX_REFUSAL_CHARS`.
    """
    path = str(path)
    text = str(error)
    if path in text and len(text) <= limit and "\n" not in text:
        return ValueError(text)  # names the file already
    if len(path) > 100:
        path = "..." + path[-97:]
    # Keras wraps an error of `from_config` in the whole config, then the error itself.
    text = text.rsplit("Exception encountered:", 1)[-1]
    reason = " ".join(text.split()) or type(error).__name__
    message = f"{path}: {reason}"
    if len(message) > limit:
        message = message[: limit - 3] + "..."
    return ValueError(message)
