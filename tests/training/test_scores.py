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
