"""The evaluation of translations: a test split or a file translated, then scored against its
references with sacreBLEU (`keras_transformer.training.scores`).

`train`'s test-split evaluation and `keras-transformer evaluate` run the same code.
"""

import time

from keras_transformer.training.bleu import exact_match
from keras_transformer.training.progress import progress
from keras_transformer.training.scores import score_corpus


def translate_sentences(
    translator, sources, chunk_size=256, verbose=True, description="translating"
):
    """Translates `sources` chunk by chunk, showing progress.

    Args:
        translator: callable, list of str -> list of str (any engine of
            `keras_transformer.engines`).
        sources: list of str.
        chunk_size: int. Sentences per call (progress advances per chunk). Defaults to `256`.
        verbose: bool. Show progress on standard error (a bar on a terminal, a few lines
            elsewhere). Defaults to `True`.
        description: str. The progress label. Defaults to `"translating"`.

    Returns:
        list of str, one translation per source.
    """
    sources = list(sources)
    chunks = [sources[index : index + chunk_size] for index in range(0, len(sources), chunk_size)]
    if verbose and chunks:
        chunks = progress(chunks, total=len(chunks), description=description, unit="chunk")
    hypotheses = []
    for chunk in chunks:
        hypotheses.extend(translator(chunk))
    return hypotheses


def evaluate_translations(translator, pairs, chunk_size=256, verbose=True):
    """Translates the sources of `pairs` and scores them against the targets.

    Args:
        translator: callable, list of str -> list of str (e.g. a `Translator`).
        pairs: list of `(source, reference)`.
        chunk_size: int. Sentences per call (the progress bar advances per chunk).
            Defaults to `256`.
        verbose: bool. Show progress. Defaults to `True`.

    Returns:
        dict: `test_bleu` and `test_chrf` (sacreBLEU corpus BLEU and chrF, with default
        settings), `test_signatures` (sacreBLEU's signature of each), `test_exact_match`
        (fraction), `test_sentences` (the pairs scored), `test_seconds`, and `test_examples`
        (the first 10 `(source, reference, hypothesis)`).
    """
    start = time.monotonic()
    sources = [source for source, _ in pairs]
    references = [reference for _, reference in pairs]
    hypotheses = translate_sentences(
        translator, sources, chunk_size, verbose, description="translating the test split"
    )
    scores = score_corpus(hypotheses, references, metrics=("bleu", "chrf"))
    return {
        "test_bleu": scores["bleu"]["score"],
        "test_chrf": scores["chrf"]["score"],
        "test_signatures": {name: score["signature"] for name, score in scores.items()},
        "test_exact_match": exact_match(hypotheses, references),
        "test_sentences": len(pairs),
        "test_seconds": round(time.monotonic() - start, 1),
        "test_examples": [
            {"source": s, "reference": r, "hypothesis": h}
            for s, r, h in list(zip(sources, references, hypotheses, strict=True))[:10]
        ],
    }


def tune_alpha(translator, pairs, alphas, verbose=True, patience=2):
    """The length penalty with the highest BLEU on `pairs`, among `alphas`.

    The paper chose its beam size and length penalty "after experimentation on the
    development set"; this tries each candidate on the validation split. Candidates are tried
    in increasing order and the search stops after `patience` in a row score below the best:
    past the best, a larger penalty only lengthens translations (and their search).

    Args:
        translator: a `Translator` (called as `translator(sentences, alpha=alpha)`).
        pairs: list of `(source, reference)`: the validation split.
        alphas: list of float, the candidates (`evaluation.alphas`).
        verbose: bool. Show progress. Defaults to `True`.
        patience: int. Candidates in a row below the best that end the search. Defaults to `2`.

    Returns:
        `(alpha, trials)`: the best candidate (the smallest of equals) and, for each one
        tried, a dict of `alpha`, `bleu` (sacreBLEU corpus BLEU) and `length_ratio` (the
        translations' length over the references', as `score_corpus` gives it).
    """
    sources = [source for source, _ in pairs]
    references = [reference for _, reference in pairs]
    trials = []

    def validation_bleu(alpha):
        hypotheses = translate_sentences(
            lambda chunk: translator(chunk, alpha=alpha),
            sources,
            verbose=verbose,
            description=f"length penalty {alpha:g} on the validation split",
        )
        bleu = score_corpus(hypotheses, references, metrics=("bleu",))["bleu"]
        trials.append({
            "alpha": alpha,
            "bleu": bleu["score"],
            "length_ratio": bleu["length_ratio"],
        })
        return bleu["score"]

    return increasing_search(alphas, validation_bleu, patience), trials


def increasing_search(alphas, score, patience=2):
    """The alpha of the highest `score(alpha)` (the smallest of equals), trying `alphas` in
    increasing order (each once) and stopping after `patience` in a row below the best: the
    search of `tune_alpha`, on any score (`benchmarks/length_penalty.py` runs it on subsets).

    Example:

    >>> scores = {0.5: 30.0, 1.0: 31.0, 1.5: 29.0, 2.0: 28.0, 2.5: 35.0}
    >>> increasing_search([2.5, 2.0, 0.5, 1.0, 1.5], scores.get)  # 2.5: never tried
    1.0
    """
    best, best_score, below = None, None, 0
    for alpha in sorted({float(alpha) for alpha in alphas}):
        value = score(alpha)
        if best is None or value > best_score:
            best, best_score, below = alpha, value, 0
        else:
            below += 1
            if below >= patience:
                break
    return best


def sample_pairs(evaluation, splits):
    """The samples the run translates at the end and the reference of each (`None` where
    unknown): `evaluation.samples`, each with its reference in `evaluation.sample_references`
    or else in the splits; without samples, the first `evaluation.num_samples` test pairs.

    Example:

    >>> from keras_transformer.training.config import EvaluationConfig
    >>> from keras_transformer.datasets.splits import Splits
    >>> splits = Splits([("uno", "one")], [], [("dos", "two"), ("tres", "three")])
    >>> sample_pairs(EvaluationConfig(num_samples=1), splits)
    (['dos'], ['two'])
    >>> sample_pairs(EvaluationConfig(samples=["uno", "cinco", "seis"],
    ...                               sample_references={"cinco": "five"}), splits)
    (['uno', 'cinco', 'seis'], ['one', 'five', None])
    """
    if not evaluation.samples:
        pairs = list(splits.test[: evaluation.num_samples])
        return [source for source, _ in pairs], [target for _, target in pairs]
    known = {}
    for split in (splits.test, splits.validation, splits.train):
        for source, target in split:
            known.setdefault(source, target)
    known.update(evaluation.sample_references)
    samples = list(evaluation.samples)
    return samples, [known.get(sample) for sample in samples]


def checked_samples(samples, translations, references):
    """One dict per sample: `source`, `translation`, and where its reference is known,
    `reference` and `right` (equal but for whitespace, as the test's exact match).

    Example:

    >>> checked_samples(["dos", "tres"], ["two", "four"], ["two", None])
    [{'source': 'dos', 'translation': 'two', 'reference': 'two', 'right': True}, \
{'source': 'tres', 'translation': 'four'}]
    """
    checked = []
    for source, translation, reference in zip(samples, translations, references, strict=True):
        sample = {"source": source, "translation": translation}
        if reference is not None:
            sample["reference"] = reference
            sample["right"] = exact_match([translation], [reference]) == 1.0
        checked.append(sample)
    return checked


def samples_summary(samples):
    """The line saying how many of the checked samples are right (`None` if none is checked).

    Example:

    >>> samples_summary([{"right": True}, {"right": False}, {"source": "x"}])
    'samples: 1 of 2 right (1 without a reference)'
    """
    checked = [sample["right"] for sample in samples if "right" in sample]
    if not checked:
        return None
    unchecked = len(samples) - len(checked)
    return (f"samples: {sum(checked)} of {len(checked)} right"
            + (f" ({unchecked} without a reference)" if unchecked else ""))
