"""The length penalty of a finished run: each alpha of the recipe's grid on its validation and
test splits, and what tuning on fewer validation pairs would have chosen.

A training run writes its held-out pairs (`valid.src` / `valid.ref`, `test.src` / `test.ref`)
and its `translator.keras`. This script translates both splits with beam 4 at each length
penalty of `keras_transformer.training.recipe.ALPHAS` and scores them with sacreBLEU. Then it
simulates the recipe's tuning (`evaluation.alphas`: increasing alphas, stopping after two in a
row below the best) on random subsets of the validation split, `--draws` per size of
`--sizes`, and reports the test BLEU the chosen alpha gets against the paper's 0.6: how many
validation pairs the tuning needs (the recipe's `MIN_TUNING_PAIRS`). The translations of the
test split only score what the validation split chose. One JSON row per run is appended to
`--output` (default `benchmarks/results/length_penalty.jsonl`), with the machine's fp32
matmul rate.

Usage:

    python benchmarks/length_penalty.py runs/bible --about "make bible, 2026-11-28"
"""

import argparse
import datetime
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from input_pipeline import matmul_gflops  # noqa: E402  (NumPy's fp32 1024^3 rate)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUTPUT = os.path.join(REPO, "benchmarks", "results", "length_penalty.jsonl")


def read_lines(path):
    with open(path, encoding="utf-8") as file:
        return file.read().splitlines()


def sentence_statistics(hypotheses, references):
    """sacreBLEU's BLEU sufficient statistics, one row per sentence (n-gram matches and
    totals, lengths), so that any subset's corpus BLEU is a sum."""
    from sacrebleu.metrics import BLEU

    return np.array(BLEU()._extract_corpus_statistics(hypotheses, [references]))


def corpus_bleu(statistics):
    from sacrebleu.metrics import BLEU

    return BLEU()._compute_score_from_stats(list(statistics.sum(axis=0))).score


def tuned_alpha(statistics, alphas, rows):
    """The alpha the recipe's tuning (`evaluation.tune_alpha`) chooses on the validation
    sentences `rows`."""
    from keras_transformer.training.evaluation import increasing_search

    return increasing_search(alphas, lambda alpha: corpus_bleu(statistics[alpha][rows]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a training run's output directory")
    parser.add_argument("--about", default="", help="what the run was, for the row")
    parser.add_argument("--sizes", type=int, nargs="+", default=[35, 100, 200, 500])
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--output", default=DEFAULT_OUTPUT)
    arguments = parser.parse_args()

    from keras_transformer.training.recipe import ALPHAS
    from keras_transformer.translator import load_keras_translator

    rate = matmul_gflops()
    translator = load_keras_translator(os.path.join(arguments.run, "translator.keras"))
    statistics, bleu, seconds = {}, {}, {}
    for split in ("valid", "test"):
        sources = read_lines(os.path.join(arguments.run, f"{split}.src"))
        references = read_lines(os.path.join(arguments.run, f"{split}.ref"))
        statistics[split], bleu[split], seconds[split] = {}, {}, {}
        for alpha in ALPHAS:
            start = time.perf_counter()
            hypotheses = translator(sources, beam_size=4, alpha=alpha)
            seconds[split][alpha] = round(time.perf_counter() - start, 1)
            statistics[split][alpha] = sentence_statistics(hypotheses, references)
            bleu[split][alpha] = round(corpus_bleu(statistics[split][alpha]), 2)
            print(f"{split} alpha {alpha:g}: BLEU {bleu[split][alpha]:.2f} "
                  f"({seconds[split][alpha]:.0f} s)", flush=True)
    rng = np.random.default_rng(0)
    count = len(statistics["valid"][ALPHAS[0]])
    simulation = []
    for size in arguments.sizes:
        picks = [tuned_alpha(statistics["valid"], ALPHAS, rng.choice(count, size, replace=False))
                 for _ in range(arguments.draws)]
        gains = np.array([bleu["test"][alpha] - bleu["test"][0.6] for alpha in picks])
        values, counts = np.unique(picks, return_counts=True)
        simulation.append({
            "validation_pairs": size,
            "mean_test_gain": round(float(gains.mean()), 2),
            "share_worse_than_0.6": round(float(np.mean(gains < 0)), 3),
            "worst_test_gain": round(float(gains.min()), 2),
            "chosen": {f"{alpha:g}": int(n) for alpha, n in zip(values, counts, strict=True)},
        })
        print(json.dumps(simulation[-1]), flush=True)
    row = {
        "date": datetime.date.today().isoformat(),
        "run": arguments.about or arguments.run,
        "beam_size": 4,
        "val_bleu": {f"{alpha:g}": value for alpha, value in bleu["valid"].items()},
        "test_bleu": {f"{alpha:g}": value for alpha, value in bleu["test"].items()},
        "valid_seconds": {f"{alpha:g}": value for alpha, value in seconds["valid"].items()},
        "chosen_on_all": f"{tuned_alpha(statistics['valid'], ALPHAS, np.arange(count)):g}",
        "simulation": simulation,
        "draws": arguments.draws,
        "matmul_gflops": round(rate),
    }
    with open(arguments.output, "a", encoding="utf-8") as file:
        file.write(json.dumps(row) + "\n")
    print(f"appended to {arguments.output}")


if __name__ == "__main__":
    main()
