"""Tests for keras_transformer.datasets.number_words."""

import pytest

pytest.importorskip("num2words")

from num2words import num2words  # noqa: E402

from keras_transformer.datasets import Splits, number_words  # noqa: E402
from keras_transformer.datasets.splits import normalized_source  # noqa: E402

# (source, target) string pairs, made without Keras: one_backend.
pytestmark = pytest.mark.one_backend

KWARGS = {"num_train": 2000, "num_validation": 200, "num_test": 200, "max_number": 20000}


@pytest.fixture(scope="module")
def splits():
    return number_words(**KWARGS)


def _words(pairs):
    return {
        word
        for pair in pairs
        for text in pair
        for word in text.replace("-", " ").replace(",", " ").split()
    }


def test_sizes_and_types(splits):
    assert isinstance(splits, Splits)
    train, validation, test = splits
    assert (len(train), len(validation), len(test)) == (2000, 200, 200)
    assert all(isinstance(s, str) and isinstance(t, str) for s, t in train + validation + test)


def test_pairs_are_num2words(splits):
    for name in ("train", "validation", "test"):
        numbers = splits.info["numbers"][name]
        for number, pair in zip(numbers[:50], getattr(splits, name)[:50], strict=True):
            assert pair == (num2words(number, lang="es"), num2words(number, lang="en"))
    small = number_words(num_train=990, num_validation=5, num_test=5, max_number=1000)
    everything = dict(small.train + small.validation + small.test)
    assert everything["trescientos cuarenta y dos"] == "three hundred and forty-two"


def test_splits_are_disjoint_and_test_numbers_never_seen_in_training(splits):
    numbers = splits.info["numbers"]
    train, validation, test = (set(numbers[name]) for name in ("train", "validation", "test"))
    assert len(train) == 2000 and not train & test and not train & validation
    assert not validation & test
    # The strings too (num2words is one-to-one).
    assert not {p[1] for p in splits.train} & {p[1] for p in splits.test}
    assert not {p[0] for p in splits.train} & {p[0] for p in splits.validation}
    assert max(train | validation | test) < KWARGS["max_number"]


def _leaked_sources(splits):
    train = {normalized_source(source) for source, _ in splits.train}
    held_out = splits.validation + splits.test
    return [source for source, _ in held_out if normalized_source(source) in train]


def test_no_held_out_source_is_trained_on(splits, monkeypatch):
    assert splits.info["num_skipped"] == 0 and not _leaked_sources(splits)
    # A language where two numbers share a name (here: every odd number above 100 is named
    # like the even one below it): the second is skipped, counted, and sizes stay exact.
    import num2words as module

    real = module.num2words

    def ambiguous(number, lang):
        return real(number - number % 2 if number > 100 and lang == "es" else number, lang=lang)

    monkeypatch.setattr(module, "num2words", ambiguous)
    shared = number_words(num_train=400, num_validation=100, num_test=100, max_number=2000)
    assert not _leaked_sources(shared)
    assert tuple(map(len, shared)) == (400, 100, 100)
    assert shared.info["num_skipped"] > 0
    numbers = [n for split in shared.info["numbers"].values() for n in split]
    assert len({n - n % 2 if n > 100 else n for n in numbers}) == len(numbers)


def test_every_test_word_occurs_in_training(splits):
    assert _words(splits.test) <= _words(splits.train)
    assert _words(splits.validation) <= _words(splits.train)
    assert set(range(101)) <= set(splits.info["numbers"]["train"])


def test_deterministic(splits):
    assert number_words(**KWARGS) == splits
    other = number_words(**{**KWARGS, "seed": 1})
    assert other.test != splits.test


def test_other_languages():
    splits = number_words(
        "fr", "de", num_train=200, num_validation=10, num_test=10, max_number=2000
    )
    assert (num2words(2, lang="fr"), num2words(2, lang="de")) in splits.train


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"source_lang": "xx"}, "source_lang='xx'"),
        ({"target_lang": "zz"}, "target_lang='zz'"),
        ({"num_train": 50}, "num_train=50"),
        ({"num_test": -1}, "num_test=-1"),
        ({"max_number": 1000}, "max_number=1000"),
    ],
)
def test_invalid_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        number_words(**kwargs)
