"""Argument checks shared by the package: one wording for every "must be an int >= n" error.

Python's `bool` is an `int`; every check here refuses it, so `beam_size=True` is an error and
not a beam of one. NumPy integers count as ints (they come out of arrays and configs).
"""

import numbers
import os


def is_int(value):
    """Whether `value` is an integer (Python or NumPy), and not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value):
    """Whether `value` is a real number (int or float, Python or NumPy), and not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_int(name, value, minimum=None, allow_none=False):
    """Returns `value` as a Python `int`, or raises a `ValueError` naming `name` and `value`.

    Args:
        name: str. The argument's name, as the user spelled it.
        value: the value received.
        minimum: int. Smallest allowed value. Defaults to `None` (no bound).
        allow_none: bool. Whether `None` passes (and is returned). Defaults to `False`.
    """
    if value is None and allow_none:
        return None
    if not is_int(value) or (minimum is not None and value < minimum):
        expected = "an int" if minimum is None else f"an int >= {minimum}"
        raise ValueError(f"`{name}` must be {expected}. Received: {name}={value!r}")
    return int(value)


def check_number(name, value, minimum=None, strict=False, allow_none=False):
    """Returns `value` as a Python `float`, or raises a `ValueError` naming `name` and `value`.

    Args:
        name: str. The argument's name, as the user spelled it.
        value: the value received.
        minimum: float. Lower bound. Defaults to `None` (no bound).
        strict: bool. Whether `value` must exceed `minimum` rather than reach it. Defaults to
            `False`.
        allow_none: bool. Whether `None` passes (and is returned). Defaults to `False`.
    """
    if value is None and allow_none:
        return None
    if not is_number(value) or (
        minimum is not None and (value <= minimum if strict else value < minimum)
    ):
        bound = "" if minimum is None else f" {'>' if strict else '>='} {minimum}"
        raise ValueError(f"`{name}` must be a number{bound}. Received: {name}={value!r}")
    return float(value)


def check_positive_int(name, value):
    """Returns `value` as a Python `int >= 1`, or raises a `ValueError` naming `name`."""
    return check_int(name, value, minimum=1)


def check_alpha(alpha):
    """Checks a length penalty strength (a number >= 0)."""
    return check_number("alpha", alpha, minimum=0)


def short_repr(value, limit=60):
    """`repr(value)`, cut to `limit` characters (for error messages about file contents)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def physical_memory_bytes():
    """This machine's physical memory in bytes (1 TiB where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not POSIX
        return 1 << 40


# The x86 instructions that multiply int8 vectors into int32 sums in one step (the kernels that
# make int8 matrix products faster than float32 ones), as Linux names them in /proc/cpuinfo.
INT8_DOT_FLAGS = ("amx_int8", "avx512_vnni", "avx_vnni")


def int8_dot_instructions(cpuinfo="/proc/cpuinfo"):
    """The int8 dot-product instructions of this CPU (`INT8_DOT_FLAGS` it has, a tuple, maybe
    empty), or `None` where the system does not say (not Linux, not x86, unreadable).

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix="cpuinfo", delete=False) as file:
    ...     _ = file.write("processor : 0\nflags : fpu sse2 avx2 fma avx512_vnni\n")
    >>> int8_dot_instructions(file.name)
    ('avx512_vnni',)
    """
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as file:
            for line in file:
                name, _, value = line.partition(":")
                if name.strip() == "flags":
                    flags = set(value.split())
                    return tuple(flag for flag in INT8_DOT_FLAGS if flag in flags)
    except OSError:
        return None
    return None
