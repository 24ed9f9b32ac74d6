"""The container every built-in dataset returns, a deterministic hash split, and the held-out
pairs as text files."""

import hashlib
import re
from typing import NamedTuple

import numpy as np

# The files a training run writes its held-out pairs to, in its output directory: one
# sentence per line, UTF-8 (what `keras-transformer evaluate` and sacreBLEU read). The names
# of WMT and fairseq (`valid`, `test`); `.src` / `.ref` say which side is which whatever the
# languages.
HELD_OUT_FILES = {"validation": ("valid.src", "valid.ref"), "test": ("test.src", "test.ref")}
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class _SplitsTuple(NamedTuple):
    train: list
    validation: list
    test: list


class Splits(_SplitsTuple):
    """Train, validation and test splits, each a list of `(source, target)` pairs.

    A named tuple (`train, validation, test = splits` works) with one extra attribute, `info`:
    a dict of statistics about how the splits were made (for example `num_dropped`, the number
    of pairs a dataset filtered out). `num_dropped` is a shortcut for `info.get("num_dropped", 0)`.

    Args:
        train: list of pairs.
        validation: list of pairs.
        test: list of pairs.
        info: dict. Statistics. Defaults to `None` (an empty dict).

    Example:

    >>> splits = Splits([("a", "b")], [], [], info={"num_dropped": 1})
    >>> train, validation, test = splits
    >>> splits.num_dropped
    1
    """

    def __new__(cls, train, validation, test, info=None):
        self = super().__new__(cls, train, validation, test)
        self.info = dict(info or {})
        return self

    @property
    def num_dropped(self):
        return self.info.get("num_dropped", 0)

    def __repr__(self):
        scalars = {
            key: value
            for key, value in self.info.items()
            if isinstance(value, (int, float, str, type(None)))
        }
        return (
            f"Splits(train={len(self.train)} pairs, validation={len(self.validation)} pairs, "
            f"test={len(self.test)} pairs, info={scalars})"
        )


def stable_hash(key, salt="keras_transformer"):
    """A 64-bit hash of a string that is the same in every process and on every machine.

    (Python's `hash` is salted per process, so it cannot choose a reproducible split.)
    """
    digest = hashlib.blake2b(f"{salt}:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def normalized_source(source):
    """The form of a source sentence under which two sources count as the same sentence.

    `keras_transformer.text.normalize_text` with lower-casing and accent stripping: the
    coarsest normalization a `Tokenizer` can apply, so sources that differ only in case,
    accents, Unicode composition or whitespace are one sentence whatever the tokenizer's
    options. Sources that are not text (e.g. id arrays) are compared by their values.
    """
    if isinstance(source, (str, bytes)):
        # Imported here: `keras_transformer.text` loads Keras, and config checks import the
        # datasets to read their signatures without loading any framework.
        from keras_transformer.text.normalization import normalize_text

        return normalize_text(source, lowercase=True, strip_accents=True)
    return tuple(np.asarray(source).ravel().tolist())


def split_pairs(pairs, num_validation=1000, num_test=1000, keys=None, salt="keras_transformer"):
    """Splits pairs into train/validation/test deterministically, by a stable hash of a key.

    Pairs are grouped so that no held-out source is ever trained on: two pairs are in one
    group when they have the same key, or the same `normalized_source` (the same sentence up to
    case, accents and whitespace), and every group lands whole in one split. Groups are ordered
    by the stable hash of their smallest key; in that order each group goes to validation if it
    fits in what validation still misses, else to test if it fits there, else to training (each
    split keeps the original order of `pairs`). Sizes are therefore exact whenever the groups
    allow it; a split that no remaining group fits (only possible with groups larger than a
    few pairs) takes the smallest remaining group if that brings it closer to its size, so it
    ends within half a group of it. No pair is ever dropped. The split depends only on the
    keys and sources, not on the order of `pairs` or on random state.

    Args:
        pairs: list of `(source, target)` pairs.
        num_validation: int. Defaults to `1000`.
        num_test: int. Defaults to `1000`.
        keys: list of str, one per pair, to hash (e.g. a verse reference). Defaults to `None`:
            the source side.
        salt: str. Changes the split. Defaults to `"keras_transformer"`.

    Returns:
        `Splits(train, validation, test)`. `info` holds `indices` (each split's indices into
        `pairs`), `num_groups`, and `num_shared_sources`: the pairs in a group of more than one
        key, i.e. whose normalized source a pair under another key shares (the pairs that
        grouping by key alone could have split apart).

    Example:

    >>> pairs = [("Hola.", "Hi."), ("hola. ", "Hello."), ("Adiós.", "Bye.")]
    >>> splits = split_pairs(pairs, num_validation=1, num_test=0, keys=["a", "b", "c"])
    >>> splits.info["num_shared_sources"]  # "Hola." and "hola. " are one sentence
    2
    """
    pairs = list(pairs)
    for name, value in (("num_validation", num_validation), ("num_test", num_test)):
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"`{name}` must be an int >= 0. Received: {name}={value}")
    if num_validation + num_test > len(pairs):
        raise ValueError(
            f"num_validation + num_test = {num_validation + num_test} is more than the "
            f"{len(pairs)} pairs. Received: num_validation={num_validation}, num_test={num_test}"
        )
    if keys is None:
        keys = [str(pair[0]) for pair in pairs]
    elif len(keys) != len(pairs):
        raise ValueError(
            f"`keys` must have one key per pair ({len(pairs)}). Received: {len(keys)} keys"
        )
    groups = _group(keys, [normalized_source(pair[0]) for pair in pairs])
    num_shared_sources = sum(
        len(group) for group in groups if len({keys[index] for index in group}) > 1
    )
    groups.sort(key=lambda group: _group_order(group, keys, salt))
    sizes = {"validation": num_validation, "test": num_test}
    held_out = {"validation": [], "test": []}
    left = []  # groups that went to training
    for group in groups:
        for name, indices in held_out.items():
            if len(indices) + len(group) <= sizes[name]:
                indices.extend(group)
                break
        else:
            left.append(group)
    for name, indices in held_out.items():
        missing = sizes[name] - len(indices)
        if missing > 0 and left:
            smallest = min(left, key=len)  # the first of the smallest, in hash order
            if len(smallest) - missing < missing:
                indices.extend(smallest)
                left.remove(smallest)
    train_index = sorted(index for group in left for index in group)
    indices = {"train": train_index, **{name: sorted(held) for name, held in held_out.items()}}
    return Splits(
        *[[pairs[index] for index in indices[name]] for name in Splits._fields],
        info={
            "indices": indices,
            "num_groups": len(groups),
            "num_shared_sources": num_shared_sources,
        },
    )


def held_out_lines(pairs):
    """The sources and the references of `pairs` as the text of two files, one sentence per
    line (`HELD_OUT_FILES`).

    A line break inside a sentence (`\\n`, `\\r`, `\\r\\n`: where a text file's reader splits
    lines) would make it two lines and shift every line after it: it becomes one space, and the
    sentences changed so are counted.

    Args:
        pairs: list of `(source, reference)` strings.

    Returns:
        `(sources, references, num_joined)`: two str, each with one `\\n`-ended line per pair,
        and the number of sentences whose line breaks were replaced.

    Example:

    >>> held_out_lines([("uno", "one"), ("dos\\ny tres", "two")])
    ('uno\\ndos y tres\\n', 'one\\ntwo\\n', 1)
    """
    joined = 0
    columns = ([], [])
    for pair in pairs:
        for column, sentence in zip(columns, pair, strict=True):
            line, count = _LINE_BREAK.subn(" ", sentence)
            joined += count > 0
            column.append(line + "\n")
    return "".join(columns[0]), "".join(columns[1]), joined


def _group(*columns):
    """Groups of indices that share a value in any column (union-find); each group sorted."""
    parent = list(range(len(columns[0])))

    def root(index):
        while parent[index] != index:
            parent[index] = parent[parent[index]]
            index = parent[index]
        return index

    for column in columns:
        first = {}  # value -> first index that has it
        for index, value in enumerate(column):
            other = first.setdefault(value, index)
            parent[root(index)] = root(other)
    groups = {}
    for index in range(len(parent)):
        groups.setdefault(root(index), []).append(index)
    return list(groups.values())


def _group_order(group, keys, salt):
    """The hash of a group's smallest key: every group, large or small, is equally likely to
    be held out (the smallest hash of its keys would favour groups with many keys)."""
    key = min(keys[index] for index in group)
    return stable_hash(key, salt), key
