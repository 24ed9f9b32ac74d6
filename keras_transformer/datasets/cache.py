"""Cache directory for built-in datasets (pure Python); files are written with
`keras_transformer.files`."""

import os

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
