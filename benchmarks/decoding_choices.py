"""What a finished run's translations gain from decoding choices, scored on its validation split.

A training run writes its held-out pairs (`valid.src` / `valid.ref`, `test.src` / `test.ref`)
and keeps its last checkpoints. This script loads the run's `translator.keras` (the average of
those checkpoints, paper §6.1) and translates the validation sources with each
`--grid` pair of beam size and length penalty alpha, then with the weights of the newest
checkpoint alone (beam 4, alpha 0.6: what averaging adds). It scores with sacreBLEU (BLEU,
chrF) against `valid.ref`, never against the test split, so that a choice made by these rows
is not tuned on the figure it is reported with. One JSON row per setting is printed and
appended to `--output` (default `benchmarks/results/decoding_choices.jsonl`), with the wall
and CPU seconds of the translation and the machine's fp32 matmul rate.

Runs under any backend (`KERAS_BACKEND`); the rows in docs were made with TensorFlow.

Usage:

    python benchmarks/decoding_choices.py runs/bible
    python benchmarks/decoding_choices.py runs/bible --grid 4:0.6 4:1.0 6:0.6
"""

import argparse
import datetime
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from input_pipeline import matmul_gflops  # noqa: E402  (NumPy's fp32 1024^3 rate)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUTPUT = os.path.join(REPO, "benchmarks", "results", "decoding_choices.jsonl")
DEFAULT_GRID = ("4:0.6", "4:1.0", "4:0.2", "6:0.6", "1:0.6")


def fail(message):
    """A user's error: one line on stderr and exit status 2."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


def read_lines(path):
    with open(path, encoding="utf-8") as file:
        return file.read().splitlines()


def parse_grid(values):
    grid = []
    for value in values:
        beam, separator, alpha = value.partition(":")
        try:
            grid.append((int(beam), float(alpha)))
        except ValueError:
            separator = ""
        if not separator:
            fail(f"--grid takes BEAM:ALPHA pairs such as 4:0.6. Received: {value!r}")
    return grid


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", help="a finished training run's output directory")
    parser.add_argument("--grid", nargs="+", default=list(DEFAULT_GRID),
                        help="BEAM:ALPHA pairs to score (default: %(default)s)")
    parser.add_argument("--output", default=DEFAULT_OUTPUT, help="JSON lines file to append to")
    args = parser.parse_args()
    grid = parse_grid(args.grid)
    from keras_transformer.datasets.splits import HELD_OUT_FILES

    source_file, reference_file = HELD_OUT_FILES["validation"]
    for name in ("translator.keras", source_file, reference_file):
        if not os.path.exists(os.path.join(args.run, name)):
            fail(f"{args.run} is no finished run: it has no {name}")

    import sacrebleu

    from keras_transformer import Translator
    from keras_transformer.training.checkpoints import list_checkpoints

    sources = read_lines(os.path.join(args.run, source_file))
    references = read_lines(os.path.join(args.run, reference_file))
    rate = round(matmul_gflops())
    translator = Translator.load(os.path.join(args.run, "translator.keras"))
    translator.translate(sources[:8])  # traces the search once, outside the timings

    def score(weights, beam_size, alpha):
        start, cpu = time.time(), time.process_time()
        hypotheses = [t.text for t in translator.translate(sources, beam_size=beam_size, alpha=alpha)]
        row = {
            "date": datetime.date.today().isoformat(),
            "run": os.path.abspath(args.run),
            "backend": os.environ.get("KERAS_BACKEND", "tensorflow"),
            "weights": weights,
            "beam_size": beam_size,
            "alpha": alpha,
            "sentences": len(sources),
            "val_bleu": round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2),
            "val_chrf": round(sacrebleu.corpus_chrf(hypotheses, [references]).score, 2),
            "seconds": round(time.time() - start, 1),
            "cpu_seconds": round(time.process_time() - cpu, 1),
            "matmul_gflops": rate,
        }
        print(json.dumps(row), flush=True)
        with open(args.output, "a", encoding="utf-8") as file:
            file.write(json.dumps(row) + "\n")

    for beam_size, alpha in grid:
        score("translator.keras (the averaged checkpoints)", beam_size, alpha)
    checkpoints = list_checkpoints(os.path.join(args.run, "checkpoints"))
    if checkpoints:
        _, newest = checkpoints[-1]
        translator.model.load_weights(newest)
        score(f"the newest checkpoint alone ({os.path.basename(newest)})", 4, 0.6)


if __name__ == "__main__":
    main()
