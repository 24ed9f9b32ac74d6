"""A compilation cache on disk: compiled searches that survive the process.

A Keras `Translator` on JAX or TensorFlow compiles one search per shape (source bucket × padded
batch size) the first time it meets it; a server compiles them all before it says it is ready
(`keras_transformer.serving.models.warm`). Every new process pays that again: the `make bible`
translator's 49 warm-up searches took 162 CPU-seconds on JAX (docs/benchmarks.md, "Serving
warm-up"). `use_compilation_cache(directory)` keeps XLA's compiled programs in `directory`, so
that a restarted server (a rolling restart, a second replica on the same disk) loads them
instead of compiling:

- JAX: its persistent compilation cache (`jax_compilation_cache_dir`), every program that
  compiled for `JAX_CACHE_MIN_COMPILE_SECONDS` or more (every search), at most
  `JAX_CACHE_MAX_BYTES` (least recently used entries evicted; its
  reads and writes hold a file lock, so processes may share the directory). A warm cache
  leaves the tracing (Python) only.
- TensorFlow: `--tf_xla_persistent_cache_directory` in `TF_XLA_FLAGS`. TensorFlow reads its
  XLA flags once, at its first XLA compilation: call this before the first translation. Its
  tracing (building the graphs) is most of a TensorFlow warm-up, so the cache saves less.
- PyTorch compiles nothing: the cache is not used.

A cache entry is a compiled program keyed by the program, the framework's version and the
machine: a new model, a framework upgrade or another CPU simply misses it. The directory holds
machine code that the process will run: it must be writable by the server's user only (as any
directory of code it imports).

The functions here import the framework of the running Keras backend only.
"""

import os

# `--compilation-cache` (`translate`, `serve`): its help, and the values that mean the default
# directory and no cache.
DEFAULT, NONE = "default", "none"
HELP = (
    "directory that keeps the compiled searches (JAX, TensorFlow) for the next process, "
    "writable by this user only; 'none': compile in each process (default: "
    "$XDG_CACHE_HOME/keras-transformer/compiled, ~/.cache/... without XDG_CACHE_HOME)"
)

# The variable TensorFlow reads its XLA flags from, and the flag of its persistent cache.
TF_XLA_FLAGS = "TF_XLA_FLAGS"
# JAX's cache, bounded: with a bound JAX evicts the least recently used entries and, above
# all, holds a file lock (`filelock`) while it reads or writes an entry. Without one it
# writes entries in place, unlocked: a process reading an entry another is writing (two
# replicas, or two test workers, sharing a directory) got a truncated program and aborted.
# The `make bible` translator's 49 searches take 6 MB.
JAX_CACHE_MAX_BYTES = 1 << 30
# What JAX keeps: programs that took at least this long to compile. Every search does (the
# smallest compile for ~0.5 s); the eager operations around them (a few ms each) are not
# worth an entry: a bounded cache lists and reads every entry's access time on each write,
# so thousands of them made each write slower (the JAX test stage, 4,952 entries at the
# threshold 0: 14.2 minutes; 9.2 at 0.1 s).
JAX_CACHE_MIN_COMPILE_SECONDS = 0.1
_TF_FLAG = "--tf_xla_persistent_cache_directory"


def default_directory():
    """The cache directory used when none is given: `$XDG_CACHE_HOME/keras-transformer/
    compiled` (`~/.cache/keras-transformer/compiled` without `XDG_CACHE_HOME`)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "keras-transformer", "compiled")


def use_compilation_cache(directory, backend=None):
    """Keeps the programs XLA compiles in `directory` and loads them from there.

    Args:
        directory: str, created if missing (with its parents, mode `0o700`).
        backend: str, the Keras backend. Defaults to `None`: `keras.backend.backend()`.

    Returns:
        The directory the backend's compiler now writes to (an absolute path), or `None` on a
        backend that compiles nothing (PyTorch).

    Raises:
        ValueError: `directory` is empty, exists and is not a directory, is writable by
            another user (`check_private`), or (TensorFlow) holds whitespace.
        OSError: `directory` cannot be created or written (its message names the directory).

    Example:

    >>> import tempfile
    >>> directory = use_compilation_cache(tempfile.mkdtemp(), backend="torch")
    >>> directory is None  # PyTorch compiles nothing.
    True
    """
    if not isinstance(directory, str | os.PathLike) or not str(directory):
        raise ValueError(
            "`directory` must be a path to a directory for the compiled programs. "
            f"Received: directory={directory!r}"
        )
    directory = os.path.abspath(os.fspath(directory))
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise ValueError(
            f"`directory` must be a directory; a file is there. Received: directory={directory}"
        )
    if backend is None:
        import keras

        backend = keras.backend.backend()
    if backend not in ("jax", "tensorflow"):
        return None
    os.makedirs(directory, mode=0o700, exist_ok=True)
    if not os.access(directory, os.W_OK | os.X_OK):
        raise OSError(f"The compilation cache directory is not writable: {directory}")
    check_private(directory)
    if backend == "jax":
        import jax

        for name, value in jax_cache_settings(directory).items():
            jax.config.update(name, value)
    else:
        if any(character.isspace() for character in directory):
            raise ValueError(
                "On TensorFlow, `directory` cannot hold whitespace (`TF_XLA_FLAGS` is split at "
                f"whitespace). Received: directory={directory!r}"
            )
        os.environ[TF_XLA_FLAGS] = tf_xla_flags(os.environ.get(TF_XLA_FLAGS, ""), directory)
    return directory


def jax_cache_settings(directory):
    """JAX's configuration for a persistent compilation cache in `directory`: `{name: value}`
    for `jax.config.update` (each name upper-cased is the environment variable a new JAX
    process reads).

    Example:

    >>> jax_cache_settings("/tmp/cache")["jax_compilation_cache_max_size"] == JAX_CACHE_MAX_BYTES
    True
    """
    return {
        "jax_compilation_cache_dir": directory,
        "jax_persistent_cache_min_compile_time_secs": JAX_CACHE_MIN_COMPILE_SECONDS,
        "jax_persistent_cache_min_entry_size_bytes": 0,
        "jax_compilation_cache_max_size": JAX_CACHE_MAX_BYTES,
    }


def check_private(directory):
    """Refuses a cache directory that another user could write machine code into: owned by
    another user, or writable by its group or by others (as ssh refuses a key file others can
    read). POSIX only; elsewhere nothing is checked.

    Raises:
        ValueError: naming the directory, its owner or mode, and the fix.
    """
    if not hasattr(os, "getuid"):
        return
    status = os.stat(directory)
    if status.st_uid != os.getuid():
        raise ValueError(
            "The compilation cache directory must belong to the user who runs the command (it "
            f"holds machine code this process runs); it belongs to uid {status.st_uid}. "
            f"Received: directory={directory}"
        )
    if status.st_mode & 0o022:
        raise ValueError(
            "The compilation cache directory must not be writable by its group or by others "
            f"(it holds machine code this process runs; `chmod go-w` it). Mode "
            f"{status.st_mode & 0o777:o}. Received: directory={directory}"
        )


def tf_xla_flags(flags, directory):
    """`flags` (a `TF_XLA_FLAGS` value) with TensorFlow's persistent cache set to `directory`
    (an earlier setting of that flag replaced).

    >>> tf_xla_flags("--tf_xla_auto_jit=2", "/var/cache/kt")
    '--tf_xla_auto_jit=2 --tf_xla_persistent_cache_directory=/var/cache/kt'
    """
    kept = [flag for flag in flags.split() if not flag.startswith(_TF_FLAG + "=")]
    return " ".join([*kept, f"{_TF_FLAG}={directory}"])
