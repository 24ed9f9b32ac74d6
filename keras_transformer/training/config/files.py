"""Config files: TOML, YAML or JSON, read into a validated `TrainingConfig`."""

import json
import os
import tomllib

from keras_transformer.training.config.fields import ConfigError, set_dotted
from keras_transformer.training.config.training_config import TrainingConfig


def load_config(path, overrides=None):
    """Reads a TOML (`.toml`) or YAML (`.yaml`, `.yml`) training config.

    Args:
        path: str or `os.PathLike`. The file.
        overrides: dict of `"section.field": value` applied after reading. Defaults to
            `None`.

    Returns:
        A validated `TrainingConfig`.

    Example:

    >>> config = load_config("configs/demo.toml")  # doctest: +SKIP
    >>> config.model.preset  # doctest: +SKIP
    'tiny'
    """
    path = os.fspath(path)
    try:
        values = _read_config_file(path)
        for key, value in (overrides or {}).items():
            set_dotted(values, key, value)
        return TrainingConfig.from_dict(values)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None


def _read_config_file(path):
    """The nested dicts of a config file; `ConfigError` (one line) when it cannot be read."""
    extension = os.path.splitext(path)[1].lower()
    if extension not in (".toml", ".yaml", ".yml", ".json"):
        raise ConfigError(f"`path` must end in .toml, .yaml, .yml or .json. Received: path={path!r}")
    if extension in (".yaml", ".yml"):
        try:
            import yaml  # An optional dependency: needed for YAML files only.
        except ImportError:
            raise ImportError("YAML configs need PyYAML: pip install pyyaml") from None
        syntax_errors = (yaml.YAMLError,)
    else:
        syntax_errors = (tomllib.TOMLDecodeError, json.JSONDecodeError)
    try:
        with open(path, "rb") as file:
            if extension == ".toml":
                return tomllib.load(file)
            text = file.read().decode("utf-8")
            if extension == ".json":
                return json.loads(text)
            return yaml.safe_load(text) or {}
    except OSError as error:
        raise ConfigError(f"cannot read the config file: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"invalid UTF-8 at byte {error.start}") from None
    except syntax_errors as error:
        raise ConfigError(f"invalid {extension[1:].upper()}: {' '.join(str(error).split())}") from None
