"""Reading users' own parallel corpora from tab-separated files (pure Python)."""

import logging
import os

logger = logging.getLogger("keras_transformer")


class TsvFormatError(ValueError):
    """A malformed line in a TSV file; the message names the file and the line number."""


class TsvPairs(list):
    """The list of `(source, target)` pairs `read_tsv` returns, with what it skipped.

    Attributes:
        path: str. The file read.
        num_skipped: int. Malformed lines skipped (lenient mode only; else 0).
        skipped_lines: list of `(line_number, reason)` for the skipped lines.
    """

    def __init__(self, pairs=(), path=None, skipped_lines=()):
        super().__init__(pairs)
        self.path = path
        self.skipped_lines = list(skipped_lines)

    @property
    def num_skipped(self):
        return len(self.skipped_lines)


def read_tsv(path, source_column=0, target_column=1, num_columns=2, lenient=False):
    """Reads `(source, target)` pairs from a UTF-8 file with one tab-separated pair per line.

    Line endings (`\\n`, `\\r\\n`) are stripped and blank lines are ignored. A malformed line
    (not exactly `num_columns` tab-separated columns, or invalid UTF-8) raises
    `TsvFormatError` naming the file and the line number; with `lenient=True` it is skipped
    instead, counted in the result's `num_skipped` and logged with a warning.

    Args:
        path: str or `os.PathLike`. The file.
        source_column: int. Column of the source text. Defaults to `0`.
        target_column: int. Column of the target text. Defaults to `1`.
        num_columns: int. Columns every line must have (e.g. `3` for Tatoeba/Anki exports
            with an attribution column). Defaults to `2`.
        lenient: bool. Skip and count malformed lines instead of raising. Defaults to `False`.

    Returns:
        `TsvPairs`: a list of `(source, target)` str tuples with `num_skipped` and
        `skipped_lines` attributes. Split it with `keras_transformer.datasets.split_pairs`.

    Example:

    >>> pairs = read_tsv("corpus.tsv")  # doctest: +SKIP
    >>> splits = split_pairs(pairs, num_validation=500, num_test=500)  # doctest: +SKIP
    """
    path = os.fspath(path)
    if not isinstance(num_columns, int) or num_columns < 2:
        raise ValueError(f"`num_columns` must be an int >= 2. Received: num_columns={num_columns}")
    for name, column in (("source_column", source_column), ("target_column", target_column)):
        if not isinstance(column, int) or not 0 <= column < num_columns:
            raise ValueError(
                f"`{name}` must be an int in [0, num_columns={num_columns}). "
                f"Received: {name}={column}"
            )
    pairs = []
    skipped = []
    with open(path, "rb") as file:
        for line_number, raw in enumerate(file, start=1):
            raw = raw.rstrip(b"\n").rstrip(b"\r")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                reason = f"invalid UTF-8 ({error.reason} at byte {error.start})"
            else:
                if not line.strip():
                    continue
                fields = line.split("\t")
                if len(fields) == num_columns:
                    pairs.append((fields[source_column], fields[target_column]))
                    continue
                reason = f"expected {num_columns} tab-separated columns, found {len(fields)}"
            if not lenient:
                raise TsvFormatError(
                    f"{path}, line {line_number}: {reason}. Fix the line, or skip and count "
                    "malformed lines: lenient=True in Python, --set "
                    "'data.options={lenient=true}' on the command line."
                )
            skipped.append((line_number, reason))
    if skipped:
        logger.warning(
            "read_tsv: skipped %d malformed lines of %s (first: line %d, %s).",
            len(skipped),
            path,
            *skipped[0],
        )
    return TsvPairs(pairs, path=path, skipped_lines=skipped)
