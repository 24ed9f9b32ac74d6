"""Corpus scores of translations through sacreBLEU: BLEU, chrF and TER with their signatures,
and sacreBLEU's paired bootstrap resampling between two systems.

`keras-transformer evaluate` and the test-split evaluation of `train` score with these
functions, with sacreBLEU's default settings: the figures and signatures are those of
sacreBLEU's own command line (`sacrebleu REF -i HYP -m bleu chrf ter`, and `--paired-bs`
for `paired_bootstrap`) on the same lines.

Pure Python: sacreBLEU (the `train` extra) is imported when scoring.
"""

import json

from keras_transformer._checks import check_int

# The metrics, in sacreBLEU's names (`-m`), and the key of each in a result.
METRICS = ("bleu", "chrf", "ter")
# Decimals of the scores (0-100) in results, as sacreBLEU's JSON gives them with `-w 6`: its
# floats carry rounding noise (a perfect BLEU of four words is 100.00000000000004), which would
# otherwise land in metrics.json.
SCORE_DECIMALS = 6


def score_corpus(hypotheses, references, metrics=METRICS):
    """Corpus scores of `hypotheses` against one or more references per sentence.

    Args:
        hypotheses: list of str.
        references: list of str (one reference per hypothesis), or a list of such lists
            (several references per hypothesis, one list per reference set).
        metrics: sequence of `"bleu"`, `"chrf"`, `"ter"`. Defaults to all three.

    Returns:
        dict `{metric: {"name", "score", "signature", "verbose_score"}}`: the score on a
        0-100 scale with 6 decimals (BLEU, chrF: higher is better; TER: lower is better),
        sacreBLEU's signature (e.g. `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.4.0`)
        and its detail line (BLEU's n-gram precisions and brevity penalty); BLEU's also has
        `length_ratio`, the translations' length over the references' (`None` without
        reference words).

    Example:

    >>> scores = score_corpus(["the cat sat on the mat"], ["the cat sat on the mat"])
    >>> scores["bleu"]["score"], scores["chrf"]["score"], scores["ter"]["score"]
    (100.0, 100.0, 0.0)
    """
    hypotheses, reference_sets = _check(hypotheses, references, metrics)
    results = {}
    for name in metrics:
        metric = _metric(name)
        score = metric.corpus_score(hypotheses, reference_sets)
        results[name] = _result(score, metric.get_signature())
    return results


def paired_bootstrap(hypotheses, baseline, references, metrics=METRICS, num_samples=1000):
    """sacreBLEU's paired bootstrap resampling test of `hypotheses` against a `baseline`.

    sacreBLEU draws `num_samples` resamples of the sentences (with its fixed seed, 12345, or
    the `SACREBLEU_SEED` environment variable) and scores both systems on each; the p-value
    is the chance of a difference at least this large if the systems were equally good.

    Args:
        hypotheses: list of str. The system under test.
        baseline: list of str. The baseline system's translations of the same sentences.
        references: as in `score_corpus`.
        metrics: as in `score_corpus`.
        num_samples: int. Bootstrap resamples. Defaults to `1000` (sacreBLEU's).

    Returns:
        dict `{metric: {"name", "signature", "baseline": {"score", "mean", "ci"},
        "system": {"score", "mean", "ci", "p_value"}}}`: `mean` and `ci` are the bootstrap
        mean and the half-width of its 95 % confidence interval.

    Example:

    >>> result = paired_bootstrap(["a b c d"] * 5, ["a b c e"] * 5, ["a b c d"] * 5,
    ...                           metrics=["bleu"], num_samples=100)
    >>> result["bleu"]["system"]["score"], result["bleu"]["baseline"]["score"] < 100
    (100.0, True)
    """
    check_int("num_samples", num_samples, minimum=1)
    hypotheses, reference_sets = _check(hypotheses, references, metrics)
    baseline = list(baseline)
    if len(baseline) != len(hypotheses):
        raise ValueError(
            "`baseline` must have one translation per hypothesis. Received: "
            f"{len(baseline)} baseline translations and {len(hypotheses)} hypotheses"
        )
    from sacrebleu.significance import PairedTest  # The `train` extra.

    # As sacreBLEU's command line: the metrics hold the references (their statistics cached).
    test = PairedTest(
        [("baseline", baseline), ("system", hypotheses)],
        {name: _metric(name, reference_sets) for name in metrics},
        references=None,
        test_type="bs",
        n_samples=num_samples,
    )
    signatures, table = test()
    results = {}
    # The columns after "System" are the metrics, in order, by their scores' names ("chrF2").
    for name, key in zip(list(table)[1:], metrics, strict=True):
        base, system = table[name]
        results[key] = {
            "name": name,
            "signature": signatures[name].format(),
            "baseline": {
                "score": _score(base.score),
                "mean": _score(base.mean),
                "ci": _score(base.ci),
            },
            "system": {
                "score": _score(system.score),
                "mean": _score(system.mean),
                "ci": _score(system.ci),
                "p_value": _float(system.p_value),
            },
        }
    return results


def _check(hypotheses, references, metrics):
    hypotheses = list(hypotheses)
    references = list(references)
    if references and not isinstance(references[0], str):
        reference_sets = [list(reference_set) for reference_set in references]
    else:
        reference_sets = [references]
    for reference_set in reference_sets:
        if len(reference_set) != len(hypotheses):
            raise ValueError(
                "`references` must have one reference per hypothesis in each reference set. "
                f"Received: {len(hypotheses)} hypotheses and {len(reference_set)} references"
            )
    unknown = [name for name in metrics if name not in METRICS]
    if unknown or not metrics:
        raise ValueError(
            f"`metrics` must name some of {', '.join(METRICS)}. Received: metrics={metrics!r}"
        )
    return hypotheses, reference_sets


def _metric(name, references=None):
    from sacrebleu.metrics import BLEU, CHRF, TER  # The `train` extra.

    return {"bleu": BLEU, "chrf": CHRF, "ter": TER}[name](references=references)


def _result(score, signature):
    signature = signature.format()
    # sacreBLEU's JSON line carries the detail (BLEU: n-gram precisions, brevity penalty).
    detail = json.loads(score.format(signature=signature, is_json=True))
    result = {
        "name": score.name,
        "score": _score(score.score),
        "signature": signature,
        "verbose_score": detail.get("verbose_score", ""),
    }
    if score.name == "BLEU":  # The translations' length over the references' (hyp / ref).
        result["length_ratio"] = round(score.sys_len / score.ref_len, 4) if score.ref_len else None
    return result


def _float(value):
    return None if value is None else float(value)


def _score(value):
    """A score (0-100) as results hold it: `SCORE_DECIMALS` decimals, `None` kept."""
    return None if value is None else round(float(value), SCORE_DECIMALS)
