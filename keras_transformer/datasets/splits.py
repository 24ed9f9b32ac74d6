"""The container every built-in dataset returns, and a deterministic hash split."""

import hashlib
from typing import NamedTuple


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


def split_pairs(pairs, num_validation=1000, num_test=1000, keys=None, salt="keras_transformer"):
    """Splits pairs into train/validation/test deterministically, by a stable hash of a key.

    Keys are sorted by hash; the pairs of the first keys go to validation until it holds
    `num_validation` pairs, the next to test until it holds `num_test`, the rest to training
    (each split keeps the original order). All pairs with one key land in the same split, so a
    split can exceed its size by a few pairs when keys repeat; with unique keys the sizes are
    exact. The split depends only on the keys, not on the order of `pairs` or on random state.

    Args:
        pairs: list of `(source, target)` pairs.
        num_validation: int. Defaults to `1000`.
        num_test: int. Defaults to `1000`.
        keys: list of str, one per pair, to hash. Defaults to `None`: the source side, so
            that all translations of one source land in the same split.
        salt: str. Changes the split. Defaults to `"keras_transformer"`.

    Returns:
        `Splits(train, validation, test)`.
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
    groups = {}  # key -> indices of its pairs, so one key never straddles two splits
    for index, key in enumerate(keys):
        groups.setdefault(key, []).append(index)
    validation_index, test_index = [], []
    for key in sorted(groups, key=lambda key: (stable_hash(key, salt), key)):
        if len(validation_index) < num_validation:
            validation_index.extend(groups[key])
        elif len(test_index) < num_test:
            test_index.extend(groups[key])
        else:
            break
    validation_index.sort()
    test_index.sort()
    held_out = set(validation_index) | set(test_index)
    return Splits(
        train=[pair for index, pair in enumerate(pairs) if index not in held_out],
        validation=[pairs[index] for index in validation_index],
        test=[pairs[index] for index in test_index],
    )
