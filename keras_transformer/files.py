"""Atomic file and directory writes: a killed writer never leaves a half-written file behind.

Every write goes to a temporary name in the destination's directory (`.tmp-...`), is flushed
to disk, and is then renamed over the destination with `os.replace`, which POSIX makes atomic:
a reader sees the old file or the new one, never a mix. Temporary names never match the
names that loaders look for, and `remove_temporaries` clears the ones a killed writer left
(after putting back a directory that a killed swap left aside, see `atomic_directory`). A
temporary's name carries its writer's process ID (`.tmp-TOKEN.PID-NAME`): the next writer of
`NAME` removes those of writers that are gone (`remove_stale_temporaries`).

Every step that makes something durable (a file written, a rename) passes through one
fault-injection point: with the environment variable `KERAS_TRANSFORMER_KILL_AFTER=N`, the
process ends with `os._exit(137)` (what a `kill -9` leaves) right after the N-th such step. The
reliability tests run each writer with N = 1, 2, ... until it finishes, so a kill lands after
each of its writes and renames in turn (docs/reliability.md).
"""

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import platform
import re
import shutil
import stat
import sys
import uuid

TEMPORARY_PREFIX = ".tmp-"
# `atomic_directory`'s name for the old directory while it is swapped without an exchange:
# `.tmp-old-TOKEN.PID-NAME` (0.2.0, and this package before it named the PID, wrote
# `.tmp-old-TOKEN-NAME`).
_OLD_PATTERN = re.compile(r"^\.tmp-old-[0-9a-f]{8}(?:\.[0-9]+)?-(.+)$")
# Any temporary of `atomic_path` or `atomic_directory` that names its writer's process ID.
_WRITER_PATTERN = re.compile(r"^\.tmp-(?:old-)?[0-9a-f]{8}\.([0-9]+)-(.+)$")
KILL_AFTER_VARIABLE = "KERAS_TRANSFORMER_KILL_AFTER"
# Use Linux's atomic exchange of two directories where the system has it; `False` swaps with
# two renames (and recovery on the next start), as on other systems.
USE_EXCHANGE = True
LOCK_FILENAME = ".lock"
_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100
_RENAMEAT2_SYSCALLS = {"x86_64": 316, "aarch64": 276}
_durable_steps = 0
_locks = {}  # Directory -> the open lock file of this process.


class DirectoryLockedError(OSError):
    """Another process holds the lock of a directory (`lock_directory`)."""


def durable_step():
    """Marks that a write or a rename is done: the fault-injection point (module docstring)."""
    global _durable_steps
    limit = os.environ.get(KILL_AFTER_VARIABLE)
    if not limit:
        return
    _durable_steps += 1
    if _durable_steps == int(limit):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(137)


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
    remove_stale_temporaries(path)
    temporary = os.path.join(directory, _temporary_name(name))
    try:
        yield temporary
        _fsync_file(temporary)
        durable_step()
        os.replace(temporary, path)
        _fsync_directory(directory)
        durable_step()
    finally:
        if os.path.lexists(temporary):
            _remove(temporary)


@contextlib.contextmanager
def atomic_directory(path):
    """Yields a temporary directory to fill; on success it replaces the directory `path`.

    At every instant `path` is the old complete directory or the new complete one (or absent,
    when there was no old one). On Linux the two are swapped in one step
    (`renameat2(RENAME_EXCHANGE)`) and the old one, now under the temporary name, is deleted.
    Where the system has no exchange, the old directory is renamed aside (`.tmp-old-...`),
    the new one renamed into place, and the old one deleted; a kill between the two renames
    leaves no `path`, and the next writer (`recover_directory`, `remove_temporaries`) puts
    the old one back before it deletes any temporary. On an exception the temporary
    directory is removed and the old one stays (or is put back). A kill after the swap
    leaves the old directory under its temporary name: the next writer of `path` removes
    it (`remove_stale_temporaries`).

    Args:
        path: str or `os.PathLike`. The destination directory.

    Yields:
        str, the temporary directory (it does not exist yet; the writer creates it).
    """
    path = os.path.abspath(os.fspath(path))
    parent, name = os.path.split(path)
    os.makedirs(parent, exist_ok=True)
    recover_directory(path)
    remove_stale_temporaries(path)
    temporary = os.path.join(parent, _temporary_name(name))
    old = os.path.join(parent, _temporary_name(name, "old-"))
    try:
        yield temporary
        for root, _, files in os.walk(temporary):
            for file in files:
                _fsync_file(os.path.join(root, file))
            _fsync_directory(root)
        durable_step()
        if not os.path.lexists(path):
            os.replace(temporary, path)
        elif exchange(temporary, path):
            durable_step()  # `temporary` holds the old directory now.
        else:
            os.replace(path, old)
            _fsync_directory(parent)
            durable_step()
            try:
                os.replace(temporary, path)
            except BaseException:
                if os.path.lexists(old) and not os.path.lexists(path):
                    os.replace(old, path)
                raise
        _fsync_directory(parent)
        durable_step()
    finally:
        for leftover in (temporary, old):
            if os.path.lexists(leftover):
                _remove(leftover)


def _temporary_name(name, kind=""):
    """`.tmp-[old-]TOKEN.PID-NAME`: a fresh temporary name for `name`, naming this process."""
    return f"{TEMPORARY_PREFIX}{kind}{uuid.uuid4().hex[:8]}.{os.getpid()}-{name}"


def remove_stale_temporaries(path):
    """Removes the temporaries of `path` (`.tmp-TOKEN.PID-NAME`, `.tmp-old-TOKEN.PID-NAME`
    beside it) whose writer is gone: a writer killed while it wrote, or right after its
    swap (the old directory, under its temporary name). A temporary whose writer still runs
    (its PID names a live process) is kept, and so is one whose name carries no PID (an
    older version's, whose writer cannot be told). `atomic_path` and `atomic_directory`
    call it before they write `path` (after `recover_directory`).

    Returns:
        int, the number of entries removed.
    """
    parent, name = os.path.split(os.path.abspath(os.fspath(path)))
    try:
        entries = os.listdir(parent)
    except OSError:
        return 0
    removed = 0
    for entry in entries:
        match = _WRITER_PATTERN.match(entry)
        if match and match.group(2) == name and not _process_alive(int(match.group(1))):
            _remove(os.path.join(parent, entry))
            removed += 1
    return removed


def _process_alive(pid):
    """Whether `pid` may name a running process (when in doubt, it may)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):  # Another user's process; no such number.
        return True
    return True


def exchange(first, second):
    """Swaps the paths `first` and `second` in one atomic step (Linux `renameat2` with
    `RENAME_EXCHANGE`).

    Returns:
        bool, `False` (and nothing changed) where the system or file system has no exchange
        (or `USE_EXCHANGE` is `False`).
    """
    function = _renameat2() if USE_EXCHANGE else None
    if function is None:
        return False
    result = function(
        _AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE
    )
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EPERM):
        return False  # No such call, or a file system without the exchange.
    raise OSError(code, os.strerror(code), os.fspath(second))


def _renameat2():
    """A callable `(olddirfd, oldpath, newdirfd, newpath, flags) -> int`, or `None`."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    function = getattr(libc, "renameat2", None)
    if function is not None:
        function.argtypes = [
            ctypes.c_int,
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.c_char_p,
            ctypes.c_uint,
        ]
        return function
    number = _RENAMEAT2_SYSCALLS.get(platform.machine())
    if number is None or not hasattr(libc, "syscall"):
        return None
    syscall = libc.syscall
    return lambda *args: syscall(
        ctypes.c_long(number),
        ctypes.c_int(args[0]),
        ctypes.c_char_p(args[1]),
        ctypes.c_int(args[2]),
        ctypes.c_char_p(args[3]),
        ctypes.c_uint(args[4]),
    )


def recover_directory(path):
    """Puts back the directory `path` that a killed swap left aside as `.tmp-old-*-NAME`
    (by this version without an exchange, or by 0.2.0), when `path` itself is missing.

    Returns:
        bool, whether a directory was put back.
    """
    path = os.path.abspath(os.fspath(path))
    parent, name = os.path.split(path)
    if os.path.lexists(path) or not os.path.isdir(parent):
        return False
    candidates = [
        os.path.join(parent, entry)
        for entry in os.listdir(parent)
        if (match := _OLD_PATTERN.match(entry)) and match.group(1) == name
    ]
    if not candidates:
        return False
    os.replace(max(candidates, key=os.path.getmtime), path)
    _fsync_directory(parent)
    # The other temporaries of that swap (the new directory, never renamed into place).
    for entry in os.listdir(parent):
        if entry.startswith(TEMPORARY_PREFIX) and entry.endswith(f"-{name}"):
            _remove(os.path.join(parent, entry))
    return True


def write_json(path, value):
    """Writes `value` as JSON to `path` atomically."""
    write_text(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def write_text(path, text):
    """Writes `text` (UTF-8, `\\n` line ends) to `path` atomically."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path, data):
    """Writes the bytes `data` to `path` atomically.

    A failed write (a full disk, a file size limit) raises `OSError`; `path` keeps its old
    content and no temporary is left.
    """
    with atomic_path(path) as temporary:
        with open(temporary, "wb") as file:
            file.write(data)


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
    `atomic_directory`, the SavedModel export), so this one rule clears them all. First, a
    directory that a killed swap left aside (`.tmp-old-*-NAME` without `NAME`) is put back.

    Only call it when no other process writes to `directory`.

    Returns:
        int, the number of entries removed.
    """
    if not os.path.isdir(directory):
        return 0
    for name in os.listdir(directory):
        match = _OLD_PATTERN.match(name)
        if match:
            recover_directory(os.path.join(directory, match.group(1)))
    removed = 0
    for name in os.listdir(directory):
        if name.startswith(TEMPORARY_PREFIX):
            _remove(os.path.join(directory, name))
            removed += 1
    return removed


def lock_directory(directory):
    """Takes the exclusive lock of `directory` for this process (`fcntl.flock` on its
    `.lock` file, which records the process ID); the system releases it when the process ends,
    however it ends. Taking it again in the same process is a no-op.

    The `.lock` file is opened without following a link, and must be a regular file with one
    name: a link or a hard link planted there would otherwise have the PID written over its
    target.

    Raises:
        DirectoryLockedError: another process holds it (the message names the directory and
            that process).
        OSError: `.lock` is a link, a hard link or not a regular file (one line naming it).
    """
    directory = os.path.abspath(os.fspath(directory))
    if directory in _locks:
        return
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, LOCK_FILENAME)
    refusal = (
        f"the lock file {path} is a link (symbolic or hard) or not a regular file: a run "
        "writes its process ID there and never through a link; remove it"
    )
    try:
        # A planted link must not turn the PID written below into a write to its target;
        # `O_NONBLOCK` keeps a planted FIFO from blocking the open.
        handle = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise OSError(refusal) from None
        raise
    status = os.fstat(handle)
    if not stat.S_ISREG(status.st_mode) or status.st_nlink != 1:  # a FIFO, a hard link
        os.close(handle)
        raise OSError(refusal)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        owner = os.pread(handle, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(handle)
        if error.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            raise
        raise DirectoryLockedError(
            f"another run (PID {owner}) is using the output directory {directory}: wait for it "
            "to end, or choose another output directory",
        ) from None
    os.ftruncate(handle, 0)
    os.pwrite(handle, f"{os.getpid()}\n".encode(), 0)
    _locks[directory] = handle


def unlock_directory(directory):
    """Releases the lock `lock_directory` took (if this process holds it)."""
    handle = _locks.pop(os.path.abspath(os.fspath(directory)), None)
    if handle is not None:
        os.close(handle)


def link_roots(directory):
    """The directories a link in `directory` (a preset, a model to import) may lead into:
    `directory` itself, and for a Hugging Face cache snapshot (`<repo>/snapshots/<revision>/`,
    whose files are links to `<repo>/blobs/<hash>`) that repository's `blobs/`. The snapshot
    is located from its real path, and `blobs` counts only as a real directory: a `blobs`
    that is itself a link would make whatever it points to a legal target."""
    real = os.path.realpath(os.fspath(directory))
    snapshots = os.path.dirname(real)
    blobs = os.path.join(os.path.dirname(snapshots), "blobs")
    if (
        os.path.basename(snapshots) == "snapshots"
        and os.path.isdir(blobs)
        and not os.path.islink(blobs)
    ):
        return [real, blobs]
    return [real]


def link_outside(path, directory, what):
    """The one rule for links in a directory read from elsewhere (a preset, a model to
    import): a one-line problem naming `path` when it is (or passes through) a symbolic link
    leading outside `link_roots(directory)`, or one leading nowhere; else `None` (a missing
    `path` included: reported where it is read). Nothing is opened.

    Args:
        path: str or `os.PathLike`. A path inside `directory`.
        directory: str or `os.PathLike`. The directory read.
        what: str. What `directory` is, for the problem (`"the preset"`).
    """
    directory = os.path.abspath(os.fspath(directory))
    path = os.path.abspath(os.fspath(path))
    if not os.path.lexists(path):
        return None
    target = os.path.realpath(path)
    if any(target == root or target.startswith(root + os.sep) for root in link_roots(directory)):
        return None
    link = directory
    for part in os.path.relpath(path, directory).split(os.sep):
        link = os.path.join(link, part)
        if os.path.islink(link):
            break  # The first link on the way names the problem.
    return (
        f"{os.path.relpath(link, directory)}: a symbolic link leading outside {what} (to "
        f"{target!r}); its files may link only to files inside it (or, in a Hugging Face "
        "cache snapshot, to its repository's blobs/, itself no link)"
    )


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
