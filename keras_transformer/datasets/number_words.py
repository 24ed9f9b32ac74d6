"""Numbers written out in two languages ("trescientos cuarenta y dos" -> "three hundred and
forty-two"): the small, embedded dataset of `make demo`. Pure Python (`num2words`)."""

import logging
import random

from keras_transformer.datasets.splits import Splits, normalized_source

logger = logging.getLogger("keras_transformer")


def number_words(
    source_lang="es",
    target_lang="en",
    num_train=20000,
    num_validation=1000,
    num_test=1000,
    max_number=100000,
    seed=0,
):
    """Pairs of number names, e.g. `("trescientos cuarenta y dos", "three hundred and forty-two")`.

    Generated with the `num2words` package, deterministically from `seed`. Each number occurs in
    one split only, and so does each source sentence (compared by `normalized_source`; a number
    whose name a number drawn before it has, in a language with such names, is skipped and
    counted in `info["num_skipped"]`), so the validation and test sets measure generalization
    to numbers never seen in training. The training set always contains 0-100, the hundreds up
    to 1000 and the thousands up to 10,000 (those below `max_number`), so every word of the
    test set is seen in training; the other numbers are drawn at random.

    Args:
        source_lang: str. `num2words` language code of the source. Defaults to `"es"`.
        target_lang: str. `num2words` language code of the target. Defaults to `"en"`.
        num_train: int. Training pairs. Defaults to `20000`.
        num_validation: int. Validation pairs. Defaults to `1000`.
        num_test: int. Test pairs. Defaults to `1000`.
        max_number: int. Numbers are drawn from `0 .. max_number - 1`. Defaults to `100000`.
        seed: int. Defaults to `0`.

    Returns:
        `Splits(train, validation, test)` of `(source, target)` string pairs; `info["numbers"]`
        holds the numbers of each split (`{"train": [...], "validation": [...], "test": [...]}`)
        and `info["num_skipped"]` the numbers skipped for a repeated source (0 for the
        languages we measured: es, en, fr, de below 100,000).

    Example:

    >>> splits = number_words(num_train=200, num_validation=10, num_test=10, max_number=1000)
    >>> dict(splits.train)["trescientos cuarenta y dos"]  # doctest: +SKIP
    'three hundred and forty-two'
    """
    from num2words import num2words

    for name, lang in (("source_lang", source_lang), ("target_lang", target_lang)):
        try:
            num2words(342, lang=lang)
        except NotImplementedError:
            raise ValueError(
                f"`{name}` is not a language num2words supports. Received: {name}={lang!r}"
            ) from None
    for name, value in (
        ("num_train", num_train),
        ("num_validation", num_validation),
        ("num_test", num_test),
        ("max_number", max_number),
    ):
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"`{name}` must be an int >= 0. Received: {name}={value}")
    core = sorted(
        {n for n in range(101)} | {100 * k for k in range(1, 11)} | {1000 * k for k in range(1, 11)}
    )
    core = [n for n in core if n < max_number]
    if num_train < len(core):
        raise ValueError(
            f"`num_train` must be at least {len(core)}, to hold the numbers every other "
            f"number is made of. Received: num_train={num_train}"
        )
    if num_train + num_validation + num_test > max_number:
        raise ValueError(
            f"num_train + num_validation + num_test = {num_train + num_validation + num_test} "
            f"is more than the {max_number} numbers below max_number. Received: "
            f"max_number={max_number}"
        )
    rng = random.Random(seed)
    core_set = set(core)
    rest = [n for n in range(max_number) if n not in core_set]
    rng.shuffle(rest)
    drawn = {}  # number -> its pair
    sources = set()  # their normalized sources
    skipped = []  # numbers whose source a number drawn before has

    def draw(candidates, count):
        """The next `count` numbers of `candidates` with a source no number drawn before has."""
        numbers = []
        if count == 0:
            return numbers
        for n in candidates:
            source = num2words(n, lang=source_lang)
            if normalized_source(source) in sources:
                skipped.append(n)
                continue
            sources.add(normalized_source(source))
            drawn[n] = (source, num2words(n, lang=target_lang))
            numbers.append(n)
            if len(numbers) == count:
                break
        return numbers

    train = draw(core, len(core))
    candidates = iter(rest)
    validation = draw(candidates, num_validation)
    test = draw(candidates, num_test)
    train += draw(candidates, num_train - len(train))
    if (len(train), len(validation), len(test)) != (num_train, num_validation, num_test):
        raise ValueError(
            f"Only {len(sources)} numbers below max_number={max_number} have distinct "
            f"{source_lang!r} names; fewer than num_train + num_validation + num_test = "
            f"{num_train + num_validation + num_test}. Received: max_number={max_number}"
        )
    if skipped:
        logger.info(
            "number_words: skipped %d numbers whose %r name another number has.",
            len(skipped),
            source_lang,
        )
    rng.shuffle(train)
    return Splits(
        train=[drawn[n] for n in train],
        validation=[drawn[n] for n in validation],
        test=[drawn[n] for n in test],
        info={
            "source_lang": source_lang,
            "target_lang": target_lang,
            "numbers": {"train": train, "validation": validation, "test": test},
            "num_skipped": len(skipped),
        },
    )
