"""Translated files waiting to be downloaded (`POST /translate_file`, `GET /download_file`).

Each file lies in its own folder of a temporary directory that the server creates (on the
first file) and removes when it stops, or at the process' exit. A folder is named by an
unguessable token (`secrets.token_urlsafe`, 192 random bits), the file inside by its
translated name made safe. A download names both; only a token that was handed out and the
exact name stored under it find the file: nothing of the URL is ever joined to a path, so no
`..`, absolute path or encoded separator can reach another file. Files older than `max_age`
seconds are removed on the next store or lookup, and by a thread that looks every
`SWEEP_SECONDS` (or `max_age`, when shorter) while files are kept.
"""

import atexit
import os
import re
import secrets
import shutil
import tempfile
import threading
import time

# A stored name: word characters (any script), dots, dashes, spaces; at most this long.
MAX_NAME_LENGTH = 120
# Most seconds between two looks for expired files while the store holds any.
SWEEP_SECONDS = 60.0


def safe_name(name):
    """`name` without folders, control characters or separators: word characters (any
    script), `.`, `-`, `_` and spaces, not starting with a dot, at most `MAX_NAME_LENGTH`
    characters (the extension kept). `"file"` when nothing is left."""
    base = re.split(r"[\\/]", name)[-1]
    base = re.sub(r"[^\w.\- ]", "_", base).strip(" .")
    stem, extension = os.path.splitext(base)
    extension = extension[:20]
    stem = stem[: MAX_NAME_LENGTH - len(extension)]
    return (stem + extension) if stem else "file" + extension


class FileStore:
    """Files kept for download, each under its own token, for `max_age` seconds.

    Args:
        max_age: float. Seconds a file is kept. Defaults to `1800.0`.
        clock: callable returning seconds (tests move it). Defaults to `time.monotonic`.
    """

    def __init__(self, max_age=1800.0, clock=time.monotonic):
        self.max_age = max_age
        self._clock = clock
        self._directory = None
        self._files = {}  # token -> (name, stored at)
        self._lock = threading.Lock()
        self._closed = threading.Event()

    @property
    def directory(self):
        """The temporary directory (`None` before the first file)."""
        return self._directory

    def put(self, data, name):
        """Stores `data` under a new token as `safe_name(name)`; returns `(token, name)`."""
        name = safe_name(name)
        token = secrets.token_urlsafe(24)
        with self._lock:
            self._sweep()
            if self._directory is None:
                self._directory = tempfile.mkdtemp(prefix="keras-transformer-files-")
                atexit.register(self.close)
                self._closed.clear()
                threading.Thread(target=self._sweeper, name="file sweeper", daemon=True).start()
            folder = os.path.join(self._directory, token)
            os.mkdir(folder, 0o700)
            with open(os.path.join(folder, name), "wb") as file:
                file.write(data)
            self._files[token] = (name, self._clock())
        return token, name

    def path(self, token, name):
        """The stored file's path when `token` was handed out, is not expired and holds a
        file named exactly `name`; else `None`."""
        with self._lock:
            self._sweep()
            entry = self._files.get(token)
            if entry is None or entry[0] != name:
                return None
            return os.path.join(self._directory, token, entry[0])

    def sweep(self):
        """Removes the files older than `max_age`."""
        with self._lock:
            self._sweep()

    def __len__(self):
        return len(self._files)

    def close(self):
        """Removes the directory and every file in it."""
        self._closed.set()
        with self._lock:
            if self._directory is not None:
                shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None
            self._files.clear()

    def _sweeper(self):
        while not self._closed.wait(min(SWEEP_SECONDS, self.max_age)):
            self.sweep()

    def _sweep(self):
        oldest = self._clock() - self.max_age
        for token, (_, stored) in list(self._files.items()):
            if stored <= oldest:
                del self._files[token]
                shutil.rmtree(os.path.join(self._directory, token), ignore_errors=True)
