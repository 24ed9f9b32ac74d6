"""`locate(path, engine)`: what a path names, resolved once: a hub handle to its local copy,
a model server's base path to its highest version, and the engine its files are for."""

import dataclasses
import os

from keras_transformer.engines.names import (
    CTRANSLATE2_SETTINGS_FILE,
    ENGINES,
    KERAS_FILE,
    SAVED_MODEL_FILE,
)
from keras_transformer.formats.versions import latest_version
from keras_transformer.saving.preset import HUB_SCHEMES, hub_directory, is_preset


@dataclasses.dataclass(frozen=True)
class Location:
    """A resolved model path.

    Attributes:
        path: str. The file or directory to open (a hub handle's local copy, a base path's
            highest version).
        engine: str. One of `ENGINES`.
        version: int or `None`. The version number, for a base path of numbered versions.
    """

    path: str
    engine: str
    version: int = None


def locate(path, engine=None, fetch=True):
    """Resolves `path` once: see `Location`.

    Args:
        path: str or `os.PathLike`. A `.keras` file, a run directory, a preset, SavedModel or
            CTranslate2 directory, a base path of numbered versions of one, or a hub handle
            (`hf://`, `kaggle://`: a preset, Keras engine only).
        engine: str. One of `ENGINES`. Defaults to `None`: the engine the files are for
            (`detect_engine`).
        fetch: bool. Fetch a hub handle's files (its hub client's cache). Defaults to `True`;
            `False` returns the handle itself as `path`.

    Raises:
        FileNotFoundError: nothing at `path`.
        ValueError: `engine` is unknown, or `path` holds nothing that engine opens.
    """
    if engine is not None and engine not in ENGINES:
        raise ValueError(
            f"`engine` must be None or one of {', '.join(ENGINES)}. Received: engine={engine!r}"
        )
    path = os.fspath(path)
    if path.startswith(HUB_SCHEMES):  # A preset on a hub: data only, the Keras engine.
        if engine not in (None, "keras"):
            raise ValueError(
                f"A hub handle names a preset, opened with the Keras engine only. Received: "
                f"path={path!r}, engine={engine!r}"
            )
        return Location(hub_directory(path) if fetch else path, "keras")
    version = None
    if os.path.isdir(path) and not _holds_model(path):
        directory = latest_version(path)  # The one look at the versions.
        if directory != path:
            path, version = directory, int(os.path.basename(directory))
    if engine is None:
        engine = detect_engine(path)
    return Location(path, engine, version)


def detect_engine(path):
    """The engine whose files `path` holds: `"keras"`, `"saved_model"` or `"ctranslate2"`.

    The files of `path` itself decide, and only a directory holding no model files of its own
    is taken for a model server's base path (its highest numbered version decides). A file is
    taken for a `.keras` file; a directory holding `translator.keras` or a preset's files is
    `"keras"`, then `saved_model.pb` is `"saved_model"`, then CTranslate2's
    `keras_transformer.json` is `"ctranslate2"`.

    A SavedModel is a program: loading one runs its graph. So a directory holding a preset
    (or `translator.keras`) and a SavedModel too (`saved_model.pb` beside them, or in a
    numbered version directory) is refused: a preset downloaded from a hub never runs a graph
    it carries. Name the engine (`load_translator(path, engine=...)`, `--engine`) to open such
    a directory anyway.

    Raises:
        FileNotFoundError: nothing at `path`.
        ValueError: a directory holding none of these files, or a preset and a SavedModel.
    """
    path = os.fspath(path)
    if os.path.isfile(path):
        return "keras"
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"no SavedModel directory, preset directory or .keras file at {path!r}"
        )
    if not _holds_model(path):
        version = latest_version(path)
        if version != path:
            return detect_engine(version)
    if os.path.isfile(os.path.join(path, KERAS_FILE)) or is_preset(path):
        graphs = _saved_models(path)
        if graphs:
            raise ValueError(
                "`path` holds a Keras translator or preset and a SavedModel "
                f"({', '.join(graphs)}); a SavedModel is a program, never run from a preset "
                "directory: remove it, or name the engine (--engine keras or --engine "
                f"saved_model) if both are yours. Received: path={path!r}"
            )
        return "keras"
    if os.path.isfile(os.path.join(path, SAVED_MODEL_FILE)):
        return "saved_model"
    if os.path.isfile(os.path.join(path, CTRANSLATE2_SETTINGS_FILE)):
        return "ctranslate2"
    raise ValueError(
        f"`path` is a directory holding no translator: no {KERAS_FILE}, {SAVED_MODEL_FILE} "
        f"(SavedModel), {CTRANSLATE2_SETTINGS_FILE} (CTranslate2) or preset files. Received: "
        f"path={path!r}"
    )


def _holds_model(path):
    """Whether the directory `path` holds a model's files of its own (not only versions)."""
    names = (KERAS_FILE, SAVED_MODEL_FILE, CTRANSLATE2_SETTINGS_FILE)
    return is_preset(path) or any(os.path.lexists(os.path.join(path, name)) for name in names)


def _saved_models(path):
    """The `saved_model.pb` files in `path` and in its numbered version directories."""
    found = [SAVED_MODEL_FILE] if os.path.lexists(os.path.join(path, SAVED_MODEL_FILE)) else []
    for entry in sorted(os.listdir(path)):
        if entry.isascii() and entry.isdigit():
            if os.path.lexists(os.path.join(path, entry, SAVED_MODEL_FILE)):
                found.append(f"{entry}/{SAVED_MODEL_FILE}")
    return found
