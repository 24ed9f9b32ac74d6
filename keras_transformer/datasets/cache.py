"""Cache directory and atomic file writes for built-in datasets (pure Python)."""

import os
import tempfile

CACHE_ENV = "KERAS_TRANSFORMER_CACHE"


def get_cache_dir(subdir=None):
    """Returns (and creates) `$KERAS_TRANSFORMER_CACHE`, or `~/.cache/keras_transformer`.

    Args:
        subdir: str. A subdirectory to return instead. Defaults to `None`.
    """
    root = os.environ.get(CACHE_ENV) or os.path.join(
        os.path.expanduser("~"), ".cache", "keras_transformer"
    )
    path = os.path.join(root, subdir) if subdir else root
    os.makedirs(path, exist_ok=True)
    return path


def atomic_write_text(path, text):
    """Writes `text` (UTF-8) to `path` atomically: a temporary file, then `os.replace`.

    A reader never sees a half-written file, even if the writer is killed or two processes
    write the same cache at once.
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".part")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
