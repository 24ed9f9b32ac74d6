"""Progress of long loops on standard error: a tqdm bar on a terminal, plain lines elsewhere.

A log file or a pipe gets a few complete lines (no carriage returns, no escape codes) instead
of a bar redrawn in place.
"""

import sys
import time


def progress(iterable, total, description, unit="item", file=None, lines=4):
    """Yields the items of `iterable`, showing how far it has got.

    Args:
        iterable: the items.
        total: int. How many there are (the item counts `count(item)` add up to it).
        description: str. What is done, e.g. `"translating"`.
        unit: str. The unit of `total`. Defaults to `"item"`.
        file: a text stream. Defaults to `None`: `sys.stderr`.
        lines: int. Off a terminal, about how many lines to print (plus the last).
            Defaults to `4`.

    Example:

    >>> import io
    >>> stream = io.StringIO()
    >>> list(progress([1, 2], total=2, description="counting", file=stream))
    [1, 2]
    >>> print(stream.getvalue().splitlines()[-1].split(" (")[0])
    counting: 2/2 items
    """
    file = sys.stderr if file is None else file
    if _is_terminal(file):
        from tqdm.auto import tqdm  # An optional dependency (the `train` extra).

        yield from tqdm(iterable, total=total, desc=description, unit=unit, file=file)
        return
    start, done, step = time.monotonic(), 0, max(1, total // max(1, lines))
    next_report = step
    for item in iterable:
        yield item
        done += 1
        if done >= next_report or done == total:
            next_report = done + step
            print(
                f"{description}: {done}/{total} {unit}s ({time.monotonic() - start:.0f} s)",
                file=file,
                flush=True,
            )


def _is_terminal(file):
    try:
        return file.isatty()
    except (AttributeError, ValueError):
        return False
