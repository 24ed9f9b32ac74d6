"""Users' own parallel corpora as they come: aligned source and target files, TSV files, `.gz`
compressed or not, several of them with sampling weights; the usual filters, each counted; and
a held-out split by a stable hash of the source, in one bounded-memory pass (pure Python).

`scan_corpora` reads every line once. Each pair goes through the filters (in this order: an
empty or whitespace-only side, the length ratio, exact duplicates); a kept pair gets a *key*,
`source_key(source)`: the stable hash of its `normalized_source`, so two pairs with the same
source sentence (up to case, accents and whitespace) always have the same key. The pairs of the
smallest keys are held out, as few keys as hold `num_validation + num_test` pairs (validation,
then test, in key order; a split can get a few more pairs than asked when its last source has
variants), and every other kept pair is trained on: a held-out source, and every duplicate or
variant of it, is never trained on. Memory stays bounded whatever the corpus size: the held-out
candidates, a reservoir sample of training pairs for the tokenizer, and (for the duplicate
filter) 8 bytes per distinct pair.

The in-memory path keeps the training pairs in a list; the streaming path
(`keras_transformer.data.make_streaming_dataset`) writes each line's key to a `.keys` file (one
little-endian int64 per line, `-1` for a removed line) and streams the files through `tf.data`.
"""

import dataclasses
import gzip
import heapq
import itertools
import logging
import os
import random
import zlib

import numpy as np

from keras_transformer.datasets.splits import Splits, normalized_source, stable_hash
from keras_transformer.datasets.tsv import TsvFormatError

logger = logging.getLogger("keras_transformer")

REMOVED = -1  # the key of a line no split uses (a filter removed it, or it is blank)
FILTERS = ("empty", "length_ratio", "duplicate")
DEFAULT_MAX_LENGTH_RATIO = 3.0
# The longest line `open_lines` accepts: a sentence (or a pair) is far shorter; a file without
# line breaks is refused after this much, not read whole.
MAX_LINE_BYTES = 1 << 20
UTF8_BOM = b"\xef\xbb\xbf"


class CorpusFormatError(TsvFormatError):
    """A malformed corpus (aligned files of different lengths, a bad TSV line); the message is
    one line naming the files. A `TsvFormatError`, so the command line prints it as one line."""


@dataclasses.dataclass(frozen=True)
class Corpus:
    """One parallel corpus: two aligned plain-text files, or one TSV file.

    Args:
        source: str. The source file, one sentence per line (`.gz` is decompressed).
        target: str. The target file, aligned line by line with `source`.
        path: str. A TSV file (`source<TAB>target` per line) instead of `source`/`target`.
        weight: float. Sampling weight when several corpora are mixed. Defaults to `1.0`.
    """

    source: str = ""
    target: str = ""
    path: str = ""
    weight: float = 1.0

    def __post_init__(self):
        if bool(self.path) == bool(self.source or self.target) or (
            not self.path and not (self.source and self.target)
        ):
            raise ValueError(
                "A corpus is `path` (a TSV file) or both `source` and `target` (aligned "
                f"files). Received: path={self.path!r}, source={self.source!r}, "
                f"target={self.target!r}"
            )
        if (
            isinstance(self.weight, bool)
            or not isinstance(self.weight, (int, float))
            or not self.weight > 0
        ):
            raise ValueError(f"`weight` must be a number > 0. Received: weight={self.weight!r}")

    @property
    def files(self):
        """The corpus's files: `(path,)` or `(source, target)`."""
        return (self.path,) if self.path else (self.source, self.target)

    @property
    def name(self):
        return self.path or f"{self.source} + {self.target}"


@dataclasses.dataclass
class CorpusScan:
    """What `scan_corpora` found.

    Attributes:
        splits: `Splits(train, validation, test)`; `train` is the list of training pairs, or
            `None` when `keep_train=False` (streaming).
        threshold: int. The largest held-out key (`-1` when nothing is held out): a line
            trains when its key is above it.
        num_lines: list of int. Lines read per corpus.
        num_train: list of int. Training pairs per corpus.
        removed: dict. Pairs each filter removed (`"empty"`, `"length_ratio"`,
            `"duplicate"`), over all corpora.
        tokenizer_sample: list of training pairs: all of them when there are at most
            `sample_size`, else a uniform sample of `sample_size` (seeded reservoir).
        keys_paths: list of str. The `.keys` file of each corpus (when `keys_dir` was given).
    """

    splits: Splits
    threshold: int
    num_lines: list
    num_train: list
    removed: dict
    tokenizer_sample: list
    keys_paths: list

    def summary_lines(self, max_length_ratio=DEFAULT_MAX_LENGTH_RATIO):
        """One line per filter: how many pairs it removed."""
        return filter_summary(self.removed, self.splits.info["num_lines"], max_length_ratio)


def filter_pairs(pairs, max_length_ratio=DEFAULT_MAX_LENGTH_RATIO, remove_duplicates=True):
    """The pairs the filters keep (in order), and how many each filter removed.

    Args:
        pairs: iterable of `(source, target)` str pairs.
        max_length_ratio: float. As in `scan_corpora`. Defaults to `3.0`.
        remove_duplicates: bool. As in `scan_corpora`. Defaults to `True`.

    Returns:
        `(kept, removed)`: a list of pairs and a dict `{filter name: count}`.
    """
    removed = dict.fromkeys(FILTERS, 0)
    seen = set()
    kept = []
    for source, target in pairs:
        reason = _filter_reason(source, target, max_length_ratio)
        if reason is None and remove_duplicates:
            if (source, target) in seen:
                reason = "duplicate"
            seen.add((source, target))
        if reason:
            removed[reason] += 1
        else:
            kept.append((source, target))
    return kept, removed


def filter_summary(removed, total, max_length_ratio=DEFAULT_MAX_LENGTH_RATIO):
    """One line per filter: how many of `total` pairs it removed."""
    described = {
        "empty": "an empty or whitespace-only side",
        "length_ratio": (
            f"one side more than {max_length_ratio:g} times as many words as the other"
            if max_length_ratio
            else "off"
        ),
        "duplicate": "exact duplicate of an earlier pair",
    }
    return [
        f"filter {name}: removed {removed[name]:,} of {total:,} pairs ({described[name]})"
        for name in FILTERS
    ]


def source_key(source):
    """The split key of a source sentence: a stable 63-bit hash of its `normalized_source`."""
    return stable_hash(normalized_source(source)) >> 1


def open_lines(path, max_line_bytes=MAX_LINE_BYTES):
    """The lines of a file as bytes, `\\n` and a trailing `\\r` removed; `.gz` decompressed
    (line for line what `tf.data.TextLineDataset` reads).

    A line is read `max_line_bytes` at most at a time, so a file without line breaks costs
    no more memory than that before it is refused.

    Args:
        path: str or `os.PathLike`.
        max_line_bytes: int. The longest line accepted (without its line break). Defaults to
            `MAX_LINE_BYTES`.

    Raises:
        CorpusFormatError: a line longer than `max_line_bytes`, or a truncated or damaged
            `.gz` file (one line naming the file).
    """
    path = os.fspath(path)
    opener = gzip.open if path.endswith(".gz") else open
    number = 0
    try:
        with opener(path, "rb") as file:
            while raw := file.readline(max_line_bytes + 1):
                number += 1
                if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                    raise CorpusFormatError(
                        f"{path}, line {number}: longer than {max_line_bytes} bytes; a line "
                        "holds one sentence (or one pair): split the text into sentences"
                    )
                if raw.endswith(b"\n"):
                    raw = raw[:-1]
                if raw.endswith(b"\r"):
                    raw = raw[:-1]
                yield raw
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise CorpusFormatError(
            f"{path}: a truncated or damaged .gz file after {number} lines ({error}): "
            "download or compress it again"
        ) from None


def text_lines(path):
    """The lines of a UTF-8 text file as str (`open_lines`: `.gz` decompressed, lines
    bounded), a leading byte order mark removed.

    Raises:
        CorpusFormatError: invalid UTF-8, a line too long, a damaged `.gz` file (one line
            naming the file and the line).
    """
    for number, raw in enumerate(open_lines(path), start=1):
        if number == 1 and raw.startswith(UTF8_BOM):
            raw = raw[len(UTF8_BOM) :]
        yield _decode(raw, path, number)


def read_pairs(corpus):
    """`(line_number, source, target)` for each line of a corpus; `source` is `None` for a
    line that holds no pair (a blank TSV line).

    Raises:
        CorpusFormatError: aligned files of different line counts (naming both files and
            counts), a TSV line without exactly 2 tab-separated columns, or invalid UTF-8.
    """
    if corpus.path:
        for number, raw in enumerate(open_lines(corpus.path), start=1):
            line = _decode(raw, corpus.path, number)
            if not line.strip():
                yield number, None, None
                continue
            fields = line.split("\t")
            if len(fields) != 2:
                raise CorpusFormatError(
                    f"{corpus.path}, line {number}: expected 2 tab-separated columns, found "
                    f"{len(fields)}."
                )
            yield number, fields[0], fields[1]
        return
    number = 0
    lines = itertools.zip_longest(open_lines(corpus.source), open_lines(corpus.target))
    for number, (source, target) in enumerate(lines, start=1):
        if source is None or target is None:
            extra = 1 + sum(1 for _ in lines)
            counts = (
                (number - 1 + extra, number - 1)
                if target is None
                else (number - 1, number - 1 + extra)
            )
            raise CorpusFormatError(
                f"Aligned files differ in length: {corpus.source} has {counts[0]:,} lines, "
                f"{corpus.target} has {counts[1]:,}."
            )
        yield (
            number,
            _decode(source, corpus.source, number),
            _decode(target, corpus.target, number),
        )


def scan_corpora(
    corpora,
    num_validation,
    num_test,
    max_length_ratio=DEFAULT_MAX_LENGTH_RATIO,
    remove_duplicates=True,
    sample_size=200_000,
    seed=0,
    keep_train=True,
    keys_dir=None,
    progress=None,
):
    """Reads corpora once: filters, held-out split by source key, tokenizer sample.

    Args:
        corpora: list of `Corpus`.
        num_validation: int. Held-out validation pairs (more when a held-out source has
            variants: they are held out with it).
        num_test: int. Held-out test pairs (likewise).
        max_length_ratio: float. Remove a pair whose one side has more than this many times
            the whitespace-separated words of the other; `0` is off. Defaults to `3.0`.
        remove_duplicates: bool. Remove exact duplicates of an earlier pair (of any corpus).
            Defaults to `True`.
        sample_size: int. Training pairs kept for the tokenizer, at most. Defaults to `200000`.
        seed: int. Seed of the reservoir sample. Defaults to `0`.
        keep_train: bool. Keep the training pairs in memory (`splits.train`). Defaults to
            `True`.
        keys_dir: str. Write each corpus's line keys to `keys_dir/corpus-I.keys`. Defaults to
            `None` (no files).
        progress: callable, str -> None. Called with a line every million lines. Defaults to
            `None`.

    Returns:
        A `CorpusScan`.

    Example:

    >>> corpus = Corpus(source="train.es.gz", target="train.en.gz")  # doctest: +SKIP
    >>> scan = scan_corpora([corpus], num_validation=1000, num_test=1000)  # doctest: +SKIP
    >>> print("\\n".join(scan.summary_lines()))  # doctest: +SKIP
    filter empty: removed 12 of 1,000,000 pairs (an empty or whitespace-only side)
    ...
    """
    num_held_out = num_validation + num_test
    removed = dict.fromkeys(FILTERS, 0)
    seen = _HashSet() if remove_duplicates else None
    held = {}  # key -> [(order, pair)]: the fewest smallest keys holding num_held_out pairs
    num_held = 0
    largest = []  # max-heap (negated) of the keys in `held`
    sample, sample_keys = [], []
    rng = random.Random(seed)
    num_seen = 0  # kept pairs offered to the reservoir
    train, num_lines, keys_paths = [], [], []
    order = 0
    for index, corpus in enumerate(corpora):
        keys = _KeyWriter(os.path.join(keys_dir, f"corpus-{index}.keys") if keys_dir else None)
        count = 0
        for count, source, target in read_pairs(corpus):
            if progress and count % 1_000_000 == 0:
                progress(f"{corpus.name}: {count:,} lines read")
            key = REMOVED
            if source is not None:
                reason = _filter_reason(source, target, max_length_ratio)
                if reason is None and seen is not None and not seen.add(hash((source, target))):
                    reason = "duplicate"
                if reason:
                    removed[reason] += 1
                else:
                    key = source_key(source)
            keys.append(key)
            if key == REMOVED:
                continue
            order += 1
            pair = (source, target)
            if key in held or (num_held_out and (num_held < num_held_out or key < -largest[0])):
                if key not in held:
                    held[key] = []
                    heapq.heappush(largest, -key)
                held[key].append((order, pair))
                num_held += 1
                # Keep the fewest smallest keys that hold `num_held_out` pairs.
                while num_held - len(held[-largest[0]]) >= num_held_out:
                    num_held -= len(held.pop(-heapq.heappop(largest)))  # back to training
            # Reservoir sampling over every kept pair; held-out ones are dropped at the end.
            num_seen += 1
            if len(sample) < sample_size:
                sample.append(pair)
                sample_keys.append(key)
            else:
                slot = rng.randrange(num_seen)
                if slot < sample_size:
                    sample[slot] = pair
                    sample_keys[slot] = key
            if keep_train:
                train.append((key, pair))
        num_lines.append(count)
        if keys_dir:
            keys_paths.append(keys.close())
    threshold = max(held) if held else REMOVED
    num_pairs_read = order + sum(removed.values())
    validation, test = [], []
    for key in sorted(held):
        pairs = [pair for _, pair in sorted(held[key])]
        (validation if len(validation) < num_validation else test).extend(pairs)
    num_train = _count_train(keys_paths, threshold) if keys_paths else None
    train_pairs = None
    if keep_train:
        train_pairs = [pair for key, pair in train if key > threshold]
    if num_train is None:
        num_train = [len(train_pairs)]
    tokenizer_sample = [pair for pair, key in zip(sample, sample_keys) if key > threshold]  # noqa: B905
    return CorpusScan(
        splits=Splits(
            train_pairs,
            validation,
            test,
            info={
                "num_lines": num_pairs_read,
                "num_pairs": order,
                "num_removed": sum(removed.values()),
                **removed,
            },
        ),
        threshold=threshold,
        num_lines=num_lines,
        num_train=num_train,
        removed=removed,
        tokenizer_sample=tokenizer_sample,
        keys_paths=keys_paths,
    )


def _decode(raw, path, number):
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CorpusFormatError(
            f"{path}, line {number}: invalid UTF-8 ({error.reason} at byte {error.start})."
        ) from None


def _filter_reason(source, target, max_length_ratio):
    """The filter that removes a pair (`"empty"`, `"length_ratio"`), or `None`."""
    source_words, target_words = len(source.split()), len(target.split())
    if not source_words or not target_words:
        return "empty"
    if max_length_ratio and max(source_words, target_words) > max_length_ratio * min(
        source_words, target_words
    ):
        return "length_ratio"
    return None


class _HashSet:
    """A set of 64-bit ints in 8 bytes each: a sorted array plus a small pending set."""

    def __init__(self, pending_size=1 << 16):
        self.sorted = np.zeros(0, np.int64)
        self.pending = set()
        self.pending_size = pending_size

    def add(self, value):
        """Adds `value`; returns whether it was new."""
        if value in self.pending:
            return False
        position = np.searchsorted(self.sorted, value)
        if position < len(self.sorted) and self.sorted[position] == value:
            return False
        self.pending.add(value)
        if len(self.pending) >= self.pending_size:
            merged = np.concatenate([self.sorted, np.fromiter(self.pending, np.int64)])
            merged.sort()
            self.sorted = merged
            self.pending = set()
        return True


class _KeyWriter:
    """Collects a corpus's line keys, and writes them (int64 little-endian) in chunks."""

    def __init__(self, path, chunk_size=1 << 16):
        self.path = path
        self.chunk = []
        self.chunk_size = chunk_size
        # Written under a name of its own, then renamed: processes scanning the same corpus
        # into one directory write the same bytes, and none reads a half-written file.
        self.temporary = f"{path}.tmp-{os.getpid()}" if path else None
        self.file = open(self.temporary, "wb") if path else None  # noqa: SIM115

    def append(self, key):
        if self.file is None:
            return
        self.chunk.append(key)
        if len(self.chunk) >= self.chunk_size:
            self.file.write(np.asarray(self.chunk, "<i8").tobytes())
            self.chunk = []

    def close(self):
        self.file.write(np.asarray(self.chunk, "<i8").tobytes())
        self.file.close()
        os.replace(self.temporary, self.path)
        return self.path


def _count_train(keys_paths, threshold, chunk_size=1 << 20):
    """Lines per keys file whose key is above `threshold` (read in chunks)."""
    counts = []
    for path in keys_paths:
        count = 0
        with open(path, "rb") as file:
            while chunk := file.read(8 * chunk_size):
                count += int((np.frombuffer(chunk, "<i8") > threshold).sum())
        counts.append(count)
    return counts
