"""Atomic file and directory writes: a killed writer never leaves a half-written file behind.

Every write goes to a temporary name in the destination's directory (`.tmp-...`), is flushed
to disk, and is then renamed over the destination with `os.replace`, which POSIX makes atomic:
a reader sees the old file or the new one, never a mix. Temporary names never match the
names that loaders look for, and `remove_temporaries` clears the ones a killed writer left.
"""

import contextlib
import json
import os
import shutil
import uuid

TEMPORARY_PREFIX = ".tmp-"


@contextlib.contextmanager
def atomic_path(path):
    """Yields a temporary path to write; on success it replaces `path` atomically.

    The temporary file is in the same directory and ends with the same name (so suffix
    checks such as Keras' `.weights.h5` pass). On an exception it is removed and `path` is
    left untouched.

    Args:
        path: str or `os.PathLike`. The destination file.

    Yields:
        str, the temporary path.

    Example:

    >>> import tempfile
    >>> directory = tempfile.mkdtemp()
    >>> with atomic_path(os.path.join(directory, "a.txt")) as temporary:
    ...     _ = open(temporary, "w").write("done")
    >>> open(os.path.join(directory, "a.txt")).read()
    'done'
    """
    path = os.path.abspath(os.fspath(path))
    directory, name = os.path.split(path)
    os.makedirs(directory, exist_ok=True)
    temporary = os.path.join(directory, f"{TEMPORARY_PREFIX}{uuid.uuid4().hex[:8]}-{name}")
    try:
        yield temporary
        _fsync_file(temporary)
        os.replace(temporary, path)
        _fsync_directory(directory)
    finally:
        if os.path.lexists(temporary):
            _remove(temporary)


@contextlib.contextmanager
def atomic_directory(path):
    """Yields a temporary directory to fill; on success it replaces the directory `path`.

    Directories cannot be swapped in one atomic step, so the old one (if any) is first
    renamed aside, the new one renamed into place, and the old one deleted: `path` is at every
    moment absent, the old complete directory, or the new complete one; never partial. On an
    exception the temporary directory is removed and the old one stays (or is put back).
    Both temporary names start with `.tmp-`, so `remove_temporaries` clears what a killed
    writer leaves.

    Args:
        path: str or `os.PathLike`. The destination directory.

    Yields:
        str, the temporary directory (it does not exist yet; the writer creates it).
    """
    path = os.path.abspath(os.fspath(path))
    parent, name = os.path.split(path)
    os.makedirs(parent, exist_ok=True)
    token = uuid.uuid4().hex[:8]
    temporary = os.path.join(parent, f"{TEMPORARY_PREFIX}{token}-{name}")
    old = os.path.join(parent, f"{TEMPORARY_PREFIX}old-{token}-{name}")
    try:
        yield temporary
        for root, _, files in os.walk(temporary):
            for file in files:
                _fsync_file(os.path.join(root, file))
        if os.path.lexists(path):
            os.replace(path, old)
        try:
            os.replace(temporary, path)
        except BaseException:
            if os.path.lexists(old) and not os.path.lexists(path):
                os.replace(old, path)
            raise
        _fsync_directory(parent)
    finally:
        for leftover in (temporary, old):
            if os.path.lexists(leftover):
                _remove(leftover)


def write_json(path, value):
    """Writes `value` as JSON to `path` atomically."""
    write_text(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def write_text(path, text):
    """Writes `text` (UTF-8, `\\n` line ends) to `path` atomically."""
    with atomic_path(path) as temporary:
        with open(temporary, "w", encoding="utf-8", newline="\n") as file:
            file.write(text)


def read_json(path):
    """Reads a JSON file; returns `None` if it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except (OSError, ValueError):
        return None


def remove_temporaries(directory):
    """Removes the `.tmp-*` files and directories a killed writer left in `directory`.

    Every temporary name of the package starts with `TEMPORARY_PREFIX` (`atomic_path`,
    `atomic_directory`, the SavedModel export), so this one rule clears them all.

    Only call it when no other process writes to `directory`.

    Returns:
        int, the number of entries removed.
    """
    if not os.path.isdir(directory):
        return 0
    removed = 0
    for name in os.listdir(directory):
        if name.startswith(TEMPORARY_PREFIX):
            _remove(os.path.join(directory, name))
            removed += 1
    return removed


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def _fsync_file(path):
    if not os.path.isfile(path):
        return
    with open(path, "rb") as file:
        os.fsync(file.fileno())


def _fsync_directory(directory):
    with contextlib.suppress(OSError):
        handle = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)
