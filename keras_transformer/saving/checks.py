"""Checks a configuration read from a file passes before Keras deserializes it."""

import keras


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
