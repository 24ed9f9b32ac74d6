"""What every subcommand of `keras-transformer` shares: running a handler with user errors as
one line and the exit status 2, the quiet TensorFlow start-up, `--debug` / `--verbose`, and the
messages on standard error. Pure Python at import: `--help` loads no framework.
"""

import argparse
import contextlib
import importlib.util
import logging
import os
import select
import sys

from keras_transformer.datasets.tsv import TsvFormatError
from keras_transformer.engines import compilation
from keras_transformer.training.config import ConfigError

PROGRAM = "keras-transformer"
# The status when standard output's reader has gone: 128 + SIGPIPE, what a shell reports for a
# command that a closed pipe ended (`yes | head`).
CLOSED_PIPE_STATUS = 141


def run_handler(handler, args, debug=False, verbose=False):
    """Runs a subcommand's `handler(args)`; a user error becomes one line and the status 2.

    Args:
        handler: callable, `args -> exit status`.
        args: the parsed `argparse.Namespace`.
        debug: bool. Let user errors raise (with their traceback). Defaults to `False`.
        verbose: bool. Keep TensorFlow's start-up logs. Defaults to `False`.

    Returns:
        int, the exit status.
    """
    if not verbose:
        # A subcommand may say that this run loads no framework (`evaluate --hypotheses`).
        loads_framework = getattr(args, "loads_framework", None)
        if loads_framework is None or loads_framework(args):
            quiet_framework_logs()
        else:
            os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        status = handler(args)
        sys.stdout.flush()  # A reader that has gone (`| head`) shows here, not at exit.
        return status
    except user_errors() as failure:
        if isinstance(failure, BrokenPipeError) and standard_output_gone():
            return CLOSED_PIPE_STATUS
        if debug:
            raise
        print_error(" ".join(str(failure).split()) or type(failure).__name__)
        return 2


def standard_output_gone():
    """Whether standard output is a pipe whose reader has gone (`keras-transformer ... | head`).

    If so, points standard output at `/dev/null`, so that what is still buffered has somewhere
    to go when Python flushes it at exit (instead of "Exception ignored ... BrokenPipeError").
    """
    try:
        sys.stdout.flush()
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        gone = any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except BrokenPipeError:
        gone = True
    except (AttributeError, OSError, ValueError):  # No poll (Windows) or no file descriptor.
        return False
    if gone:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return gone


def user_errors():
    """The exception types that are the user's to fix: printed as one line, without traceback.

    `ConfigError` (settings and config files), `TsvFormatError` (a malformed data file) and
    `OSError` (a missing or unreadable file; its message names the file).
    """
    return (ConfigError, TsvFormatError, OSError)


def quiet_framework_logs():
    """Silences TensorFlow's start-up logs (CUDA probes, CPU feature banners, absl notices).

    Sets `TF_CPP_MIN_LOG_LEVEL=3` unless it is set, and imports TensorFlow (when installed and
    not yet imported) with the process's standard error pointing at `/dev/null`, since some
    of its libraries log while loading, before any log level applies: a level the user set
    (`TF_CPP_MIN_LOG_LEVEL=3` hides INFO and WARNING) does not hide these lines either. Every
    subcommand imports TensorFlow anyway (the tokenizers are tensorflow-text's). A user who
    sets `TF_CPP_MIN_LOG_LEVEL=0` (show everything) sees them, as with `--verbose`.
    """
    if os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3").strip() == "0":
        return
    if "tensorflow" in sys.modules or importlib.util.find_spec("tensorflow") is None:
        return
    with _stderr_to_devnull():
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            return  # Reported when a subcommand needs it, with the standard error back.
    # absl (TensorFlow's logging library) logs through the standard `absl` logger.
    logging.getLogger("absl").setLevel(logging.ERROR)


@contextlib.contextmanager
def _stderr_to_devnull():
    """Points file descriptor 2 (what C++ libraries write to) at `/dev/null` for a while."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def add_common_arguments(parser, verbose=True, default=False):
    """Adds `--debug` (and `--verbose`) to `parser`.

    Args:
        parser: `argparse.ArgumentParser`.
        verbose: bool. Also add `--verbose` (TensorFlow's start-up logs). Defaults to `True`.
        default: the options' default; `argparse.SUPPRESS` on a subcommand's parser, so that
            `--debug` works before and after the subcommand. Defaults to `False`.
    """
    parser.add_argument(
        "--debug", action="store_true", default=default, help="show the traceback of a user error"
    )
    if verbose:
        parser.add_argument(
            "--verbose",
            action="store_true",
            dest="framework_logs",
            default=default,
            help="keep TensorFlow's start-up logs (CUDA probes, CPU feature banners)",
        )


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive int, got {text!r}")
    return value


def non_negative_int(text):
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an int >= 0, got {text!r}")
    return value


def non_negative_float(text):
    """A finite number `>= 0` (`argparse` type)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}")
    return value


def positive_float(text):
    """A finite number `> 0` (`argparse` type)."""
    value = non_negative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def cli_spelling(message, options):
    """`message` with Python argument names in the command's spellings.

    Args:
        message: str. An error message naming arguments as Python does (`` `beam_size` ``,
            `beam_size=5`, `` `overwrite=True` ``).
        options: dict `{python name: command-line option}`, e.g.
            `{"num_hypotheses": "--n-best"}`.

    Example:

    >>> cli_spelling("`num_hypotheses` must be <= 4. Received: num_hypotheses=5",
    ...              {"num_hypotheses": "--n-best"})
    '--n-best must be <= 4. Received: --n-best 5'
    """
    message = " ".join(message.split())
    for name, option in options.items():
        message = message.replace(f"`{name}=True`", option).replace(f"`{name}=False`", f"no {option}")
        message = message.replace(f"`{name}`", option).replace(f"{name}=", f"{option} ")
    return message


def print_note(message):
    print(f"{PROGRAM}: note: {message}", file=sys.stderr)


def print_error(message):
    print(f"{PROGRAM}: error: {message}", file=sys.stderr)


def add_compilation_cache_argument(parser, **option):
    """`--compilation-cache DIR|none` (`engines.compilation`); `option` overrides the
    default and help (`serve` takes them from its settings table)."""
    option = {"default": compilation.DEFAULT, "help": compilation.HELP, **option}
    parser.add_argument("--compilation-cache", metavar="DIR", **option)


def open_compilation_cache(value):
    """Turns `--compilation-cache` on before the first compilation: returns `True`, or prints
    why an explicit directory cannot be used and returns `False`. The default directory that
    cannot be created (a read-only home) is noted, and the command goes on without a cache."""
    if value == compilation.NONE:
        return True
    directory = compilation.default_directory() if value == compilation.DEFAULT else value
    try:
        compilation.use_compilation_cache(directory)
    except (OSError, ValueError) as error:
        if value == compilation.DEFAULT:
            print_note(f"no compilation cache ({error}); every search compiles in this process")
            return True
        print_error(f"--compilation-cache: {error}")
        return False
    return True
