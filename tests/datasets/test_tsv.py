"""Tests for keras_transformer.datasets.read_tsv and split_pairs."""

import logging

import pytest

from keras_transformer.datasets import (
    Splits,
    TsvFormatError,
    read_tsv,
    split_pairs,
    stable_hash,
)
from keras_transformer.datasets.splits import normalized_source

# (source, target) string pairs, made without Keras: one_backend.
pytestmark = pytest.mark.one_backend


def _write(path, data):
    path.write_bytes(data)
    return str(path)


def test_reads_pairs(tmp_path):
    path = _write(
        tmp_path / "corpus.tsv",
        "¿Dónde está?\tWhere is it?\r\nHola\tHello\n\n  \nAdiós\tGoodbye".encode(),
    )
    pairs = read_tsv(path)
    assert pairs == [("¿Dónde está?", "Where is it?"), ("Hola", "Hello"), ("Adiós", "Goodbye")]
    assert pairs.num_skipped == 0 and pairs.path == path


def test_wrong_number_of_columns_names_file_and_line(tmp_path):
    path = _write(tmp_path / "bad.tsv", b"a\tb\nc\td\te\nf\tg\n")
    with pytest.raises(TsvFormatError, match=r"bad\.tsv, line 2: expected 2 .* found 3"):
        read_tsv(path)
    path = _write(tmp_path / "one.tsv", b"a\tb\nno tab here\n")
    with pytest.raises(ValueError, match=r"one\.tsv, line 2: .*found 1"):
        read_tsv(path)


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = _write(tmp_path / "latin1.tsv", "a\tb\nc\td\nse\xf1or\tsir\n".encode("latin-1"))
    with pytest.raises(TsvFormatError, match=r"latin1\.tsv, line 3: invalid UTF-8"):
        read_tsv(path)


def test_lenient_mode_skips_and_counts(tmp_path, caplog):
    path = _write(
        tmp_path / "mixed.tsv",
        b"a\tb\nbroken\nc\td\te\n\xff\xfe\tx\nf\tg\n",
    )
    with caplog.at_level(logging.WARNING, logger="keras_transformer"):
        pairs = read_tsv(path, lenient=True)
    assert pairs == [("a", "b"), ("f", "g")]
    assert pairs.num_skipped == 3
    assert [line for line, _ in pairs.skipped_lines] == [2, 3, 4]
    assert "skipped 3 malformed lines" in caplog.text


def test_columns(tmp_path):
    path = _write(tmp_path / "anki.tsv", b"Go.\tVe.\tCC-BY 2.0 (France)\n")
    assert read_tsv(path, num_columns=3) == [("Go.", "Ve.")]
    assert read_tsv(path, source_column=1, target_column=0, num_columns=3) == [("Ve.", "Go.")]
    with pytest.raises(ValueError, match="target_column=3"):
        read_tsv(path, target_column=3, num_columns=3)
    with pytest.raises(ValueError, match="num_columns=1"):
        read_tsv(path, num_columns=1)


def test_split_pairs_is_deterministic_and_disjoint():
    pairs = [(f"source {i}", f"target {i}") for i in range(500)]
    splits = split_pairs(pairs, num_validation=50, num_test=30)
    assert isinstance(splits, Splits)
    assert (len(splits.train), len(splits.validation), len(splits.test)) == (420, 50, 30)
    sets = [set(split) for split in splits]
    assert not sets[0] & sets[1] and not sets[0] & sets[2] and not sets[1] & sets[2]
    assert set().union(*sets) == set(pairs)
    # Independent of the order of the input.
    reversed_splits = split_pairs(pairs[::-1], num_validation=50, num_test=30)
    assert set(reversed_splits.test) == sets[2]
    assert splits.train == [p for p in pairs if p in sets[0]]  # original order kept


def test_split_pairs_keeps_a_source_in_one_split():
    pairs = [(f"source {i % 100}", f"target {i}") for i in range(400)]
    splits = split_pairs(pairs, num_validation=20, num_test=20)
    sources = [{source for source, _ in split} for split in splits]
    assert not sources[0] & sources[1] and not sources[0] & sources[2]
    assert len(splits.validation) >= 20 and len(splits.test) >= 20


def _spellings(i):
    """Four spellings of sentence `i` that normalize to one: case, accents, NFD, whitespace."""
    return [
        f"Está bien, número {i}.",
        f"ESTÁ BIEN, NÚMERO {i}.",
        f"  esta\u00a0bien,  numero {i}.",
        f"Esta\u0301 bien, nu\u0301mero {i}.",
    ]


def test_split_pairs_never_trains_on_a_held_out_source_under_another_key():
    # Every sentence four times, each time under its own key (like identical Bible verses
    # under different references): grouping by key alone would straddle the splits.
    pairs, keys = [], []
    for i in range(150):
        for j, source in enumerate(_spellings(i)):
            pairs.append((source, f"target {i} {j}"))
            keys.append(f"ref {i}.{j}")
    pairs += [(f"Única {i}.", f"unique {i}") for i in range(400)]
    keys += [f"unique {i}" for i in range(400)]
    by_raw_source = split_pairs(pairs, num_validation=100, num_test=100)  # keys=None
    splits = split_pairs(pairs, num_validation=100, num_test=100, keys=keys)
    for split in (by_raw_source, splits):
        train_sources = {normalized_source(source) for source, _ in split.train}
        for held_out in (split.validation, split.test):
            assert not {normalized_source(source) for source, _ in held_out} & train_sources
    assert not {normalized_source(s) for s, _ in splits.validation} & {
        normalized_source(s) for s, _ in splits.test
    }
    # Sizes stay exact (groups of 4 and 1 can fill them); nothing is dropped.
    assert (len(splits.train), len(splits.validation), len(splits.test)) == (800, 100, 100)
    assert sorted(splits.train + splits.validation + splits.test) == sorted(pairs)
    assert splits.info["num_shared_sources"] == 600 and splits.info["num_groups"] == 550
    assert [pairs[i] for i in splits.info["indices"]["test"]] == splits.test
    # Deterministic: independent of the order of the input.
    reversed_splits = split_pairs(pairs[::-1], num_validation=100, num_test=100, keys=keys[::-1])
    assert set(reversed_splits.test) == set(splits.test)


def test_split_pairs_keeps_a_key_in_one_split_and_merges_both_groupings():
    # Pairs 0-1 share a key, pairs 1-2 a normalized source: all three form one group.
    pairs = [("a", "x"), ("b", "y"), ("B ", "z")] + [(f"s{i}", f"t{i}") for i in range(40)]
    keys = ["k", "k", "m"] + [f"k{i}" for i in range(40)]
    for salt in ("one", "two", "three", "four", "five"):
        splits = split_pairs(pairs, num_validation=10, num_test=10, keys=keys, salt=salt)
        homes = [name for name, split in zip(Splits._fields, splits) for p in pairs[:3] if p in split]
        assert len(homes) == 3 and len(set(homes)) == 1


def test_split_pairs_sizes_with_groups_larger_than_a_split():
    # Sources repeated 5 times: 4 held-out pairs cannot be exact; the split takes the
    # group that brings it closest (5, one over) rather than none.
    pairs = [(f"source {i % 20}", f"target {i}") for i in range(100)]
    splits = split_pairs(pairs, num_validation=4, num_test=12)
    assert (len(splits.validation), len(splits.test), len(splits.train)) == (5, 10, 85)
    # A group twice the missing size would overshoot more than it fills: left out.
    splits = split_pairs(pairs, num_validation=2, num_test=0)
    assert (len(splits.validation), len(splits.train)) == (0, 100)
    # Groups that fit fill a split exactly, whatever sizes come first in hash order.
    pairs += [(f"single {i}", f"t {i}") for i in range(10)]
    splits = split_pairs(pairs, num_validation=4, num_test=12)
    assert (len(splits.validation), len(splits.test), len(splits.train)) == (4, 12, 94)


def test_split_pairs_errors():
    with pytest.raises(ValueError, match="num_test=-1"):
        split_pairs([("a", "b")], num_validation=0, num_test=-1)
    with pytest.raises(ValueError, match="more than the 1 pairs"):
        split_pairs([("a", "b")], num_validation=1, num_test=1)
    with pytest.raises(ValueError, match="keys"):
        split_pairs([("a", "b")], 0, 0, keys=["x", "y"])


def test_stable_hash_is_stable():
    # Fixed value: the split must not change between Python processes or versions.
    assert stable_hash("Gen.1.1") == stable_hash("Gen.1.1") != stable_hash("Gen.1.2")
    assert stable_hash("Gen.1.1") == 0x0 + int.from_bytes(
        __import__("hashlib").blake2b(b"keras_transformer:Gen.1.1", digest_size=8).digest(),
        "big",
    )


def test_splits_named_tuple_with_info():
    splits = Splits([("a", "b")], [], [], info={"num_dropped": 2, "note": "x"})
    train, validation, test = splits
    assert train == [("a", "b")] and splits.num_dropped == 2
    assert splits.train is train and "num_dropped" in repr(splits)
    assert Splits(train=[], validation=[], test=[]).num_dropped == 0
