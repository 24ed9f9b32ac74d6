"""Version directories, the layout a model server watches (`base/1/`, `base/2/`, ...): written
by the SavedModel and CTranslate2 exporters, read by the engines and the HTTP service.
Framework-free."""

import os

from keras_transformer._checks import check_int


def version_directory(path, version=None, overwrite=None, name="path"):
    """The directory an export writes: `path`, or `path/<version>` in a model server's layout.

    Shared by `export_saved_model` and `export_ctranslate2`: both take the same `version` and
    `overwrite` and refuse the same way. `latest_version` finds the version to serve.

    Args:
        path: str or `os.PathLike`. The export's directory, or with `version` its base path.
        version: int `>= 1`. Defaults to `None`: `path` itself.
        overwrite: bool. Whether an existing directory may be replaced. Defaults to `None`:
            `True` without `version`; with `version`, `False` (a model server may be serving
            that version).
        name: str. The name of `path` in the caller's signature, for error messages.
            Defaults to `"path"`.

    Returns:
        str, the directory to write.
    """
    path = os.fspath(path)
    check_int("version", version, minimum=1, allow_none=True)
    if version is not None:
        path = os.path.join(path, str(version))
    if os.path.exists(path) and not (overwrite if overwrite is not None else version is None):
        if version is None:
            raise ValueError(
                f"`{name}` already exists and `overwrite=False`. Received: {name}={path!r}"
            )
        raise ValueError(
            f"Version {version} already exists in {os.path.dirname(path)!r}: export a new "
            "`version` (a model server may be serving this one) or pass `overwrite=True`. "
            f"Received: version={version}"
        )
    return path


def latest_version(path):
    """The directory a model server serves from the base path `path`: its highest version.

    A base path holds one directory per version, named by its number (as `version_directory`
    writes them); TensorFlow Serving serves the highest. Any other path is returned as is.

    Args:
        path: str or `os.PathLike`. A base path, or a model directory or file.

    Returns:
        str, `path/<highest version>` when `path` is a directory with version directories,
        else `path`.

    Example:

    >>> import tempfile
    >>> base = tempfile.mkdtemp()
    >>> for version in ("2", "10", ".tmp-1234-3"):
    ...     os.makedirs(os.path.join(base, version))
    >>> os.path.basename(latest_version(base))
    '10'
    """
    path = os.fspath(path)
    try:
        entries = os.listdir(path)
    except OSError:  # A file, or nothing: the caller reports it.
        return path
    versions = [
        int(entry)
        for entry in entries
        if entry.isascii() and entry.isdigit() and os.path.isdir(os.path.join(path, entry))
    ]
    return os.path.join(path, str(max(versions))) if versions else path
