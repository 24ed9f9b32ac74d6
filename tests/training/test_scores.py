"""`keras_transformer.training.scores`: the figures that `train` writes to metrics.json and
`evaluate --json` prints."""

import pytest

from keras_transformer.training import corpus_bleu
from keras_transformer.training.evaluation import evaluate_translations
from keras_transformer.training.scores import paired_bootstrap

pytestmark = pytest.mark.one_backend  # sacreBLEU only.


def test_scores_carry_six_decimals_not_float_noise():
    """Issue 39: metrics.json stored `test_bleu: 100.00000000000004` (sacreBLEU's float for a
    perfect BLEU of four words)."""
    pairs = [("uno dos tres cuatro", "one two three four"), ("cinco seis", "five six seven")]
    table = {"uno dos tres cuatro": "one two three four", "cinco seis": "five six"}
    evaluated = evaluate_translations(
        lambda batch: [table[source] for source in batch], pairs[:1], verbose=False
    )
    assert (evaluated["test_bleu"], evaluated["test_chrf"]) == (100.0, 100.0)
    assert corpus_bleu(["one two three four"], ["one two three four"]) == 100.0
    evaluated = evaluate_translations(
        lambda batch: [table[source] for source in batch], pairs, verbose=False
    )
    for name in ("test_bleu", "test_chrf"):
        assert evaluated[name] == round(evaluated[name], 6) and 0 < evaluated[name] < 100
    result = paired_bootstrap(
        ["a b c d"] * 5, ["a b c e"] * 5, ["a b c d"] * 5, metrics=["bleu"], num_samples=10
    )
    assert result["bleu"]["system"]["score"] == 100.0
    baseline = result["bleu"]["baseline"]
    assert all(baseline[key] == round(baseline[key], 6) for key in ("score", "mean", "ci"))


def test_the_length_penalty_with_the_best_validation_bleu_is_chosen():
    """`tune_alpha` (`evaluation.alphas`): the candidates in increasing order, the best BLEU
    kept, the search stopped after two in a row below it."""
    from keras_transformer.training.evaluation import tune_alpha

    references = ["one two three four five six", "seven eight nine ten"]
    pairs = [(f"source {index}", reference) for index, reference in enumerate(references)]
    calls = []

    def translator(sources, alpha):
        # A length penalty of 1.0 gives whole references; smaller ones cut them, larger ones
        # add words: BLEU peaks at 1.0.
        calls.append(alpha)
        keep = {0.5: 3, 1.0: 6}.get(alpha, 6)
        extra = " and so on" * round(max(alpha - 1.0, 0) * 4)
        return [" ".join(references[int(source.split()[1])].split()[:keep]) + extra
                for source in sources]

    alpha, trials = tune_alpha(translator, pairs, [3.0, 1.0, 0.5, 1.5, 2.0, 1.0],
                               verbose=False)
    assert alpha == 1.0
    # Increasing, each once; 2.0 and 3.0 never tried (1.5 and 2.0 would be the two below).
    assert [trial["alpha"] for trial in trials] == calls == [0.5, 1.0, 1.5, 2.0]
    assert trials[1]["bleu"] == 100.0 and trials[1]["length_ratio"] == 1.0
    assert trials[0]["bleu"] < 100.0 and trials[0]["length_ratio"] < 1.0
    assert all(trial["bleu"] < 100.0 and trial["length_ratio"] > 1.0 for trial in trials[2:])
    # Equal scores: the smallest.
    alpha, trials = tune_alpha(lambda sources, alpha: ["x"] * len(sources), pairs, [0.6, 1.0],
                               verbose=False)
    assert alpha == 0.6 and len(trials) == 2
