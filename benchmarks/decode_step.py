"""Cost of one cached decoder step: cached against uncached greedy search, side by side.

For each model, the cached greedy search (`Transformer.decode_step`, one token per step) and
the uncached reference (`model.decode` over the whole prefix at every step) run in alternation,
`--rounds` times each, on the same random sources. Every search generates exactly
`--new-tokens` tokens: the output embedding row of the end token is zeroed, so its logit is
0 while the largest of the other (random) logits is positive, and no sequence ends early.
The table gives ms per step (one step = one new token for the whole batch), tokens/s and the
median over rounds of the paired ratio cached / uncached tokens/s, which is robust to a
machine whose load changes between rounds. The fp32 matmul rate (GFLOP/s, `(1024, 1024)`
products) is measured before and after, as a gauge of how busy the machine was.

```
for backend in tensorflow jax torch; do
  KERAS_BACKEND=$backend python benchmarks/decode_step.py
done
KERAS_BACKEND=torch python benchmarks/decode_step.py --profile   # where the Python time goes
```

Untrained weights (speed does not depend on them). The first call of each search (compile
time on TensorFlow and JAX) is reported separately and excluded.
"""

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from datetime import UTC, datetime

import keras
import numpy as np
from train_throughput import machine_description, matmul_timer  # benchmarks/ is on sys.path

from keras_transformer import Transformer
from keras_transformer.generation import Generator

# The tiny preset (d_model 64, 2+2 layers, 4 heads, ff 256) with the vocabulary of the number
# words demo (`make demo`, about 1,000 word pieces) and with a larger one.
MODELS = {
    "demo": dict(preset="tiny", vocabulary_size=1000),
    "tiny": dict(preset="tiny", vocabulary_size=8000),
}
END_ID = 1
SEARCHES = ("cached", "uncached")


def build(model_name):
    keras.utils.set_random_seed(0)
    spec = MODELS[model_name]
    model = Transformer.from_preset(spec["preset"], vocabulary_size=spec["vocabulary_size"], dropout=0.0)
    embeddings = model.target_embedding.embeddings
    table = keras.ops.convert_to_numpy(embeddings)
    table[END_ID] = 0.0  # logit 0 for the end token: never the largest
    embeddings.assign(table)
    return model, spec["vocabulary_size"]


def run_model(model_name, args):
    model, vocabulary_size = build(model_name)
    generator = Generator(model, start_id=2, end_id=END_ID, extra_length=args.new_tokens)
    rng = np.random.default_rng(0)
    inputs = rng.integers(4, vocabulary_size, size=(args.batch_size, args.source_length))
    inputs = inputs.astype("int32")
    options = dict(max_new_tokens=args.new_tokens)
    searches = {
        "cached": lambda: generator(inputs, beam_size=1, **options),
        "uncached": lambda: generator.uncached_greedy(inputs, **options),
    }
    first, times = {}, {label: [] for label in SEARCHES}
    outputs = {}
    for label in SEARCHES:
        start = time.perf_counter()
        outputs[label], _ = searches[label]()
        first[label] = time.perf_counter() - start
        assert (outputs[label] != END_ID).all(), "a search stopped early"
    np.testing.assert_array_equal(outputs["cached"], outputs["uncached"])
    for _ in range(args.rounds):
        for label in SEARCHES:
            start = time.perf_counter()
            searches[label]()
            times[label].append(time.perf_counter() - start)
    ratios = [u / c for c, u in zip(times["cached"], times["uncached"])]
    rows = []
    for label in SEARCHES:
        seconds = statistics.median(times[label])
        rows.append(
            dict(
                label=label,
                compile=max(first[label] - seconds, 0.0),
                ms_per_step=1000 * seconds / args.new_tokens,
                tokens_per_second=args.batch_size * args.new_tokens / seconds,
            )
        )
    profile = None
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        searches["cached"]()
        profiler.disable()
        stream = io.StringIO()
        pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(25)
        profile = stream.getvalue()
    return rows, statistics.median(ratios), (min(ratios), max(ratios)), profile


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--torch-threads", type=int, default=None, help="default: torch's own")
    parser.add_argument("--profile", action="store_true", help="cProfile one cached search")
    parser.add_argument("--output", default=None, help="markdown file for the table")
    args = parser.parse_args()

    backend = keras.backend.backend()
    threads = ""
    if backend == "torch":
        import torch

        if args.torch_threads is not None:
            torch.set_num_threads(args.torch_threads)
        threads = f"; torch threads {torch.get_num_threads()}"
    matmul = matmul_timer(backend)
    rate_before = matmul()
    command = " ".join(["python benchmarks/decode_step.py", *sys.argv[1:]])
    lines = [
        f"# Decoding step ({backend})",
        "",
        f"Recorded {datetime.now(UTC):%Y-%m-%d %H:%M} UTC by "
        f"`KERAS_BACKEND={backend} {command}`; {machine_description()}{threads}; "
        f"load average {os.getloadavg()[0]:.1f} at the start.",
        "",
        f"batch {args.batch_size}, source length {args.source_length}, {args.new_tokens} steps "
        f"(new tokens) per search, median of {args.rounds} alternating rounds.",
        "",
        "| backend | model | search | compile (s) | ms/step | tokens/s | cached × uncached "
        "(min-max) |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    print("\n".join(lines), flush=True)
    profiles = []
    for model_name in args.models:
        rows, ratio, (low, high), profile = run_model(model_name, args)
        for row in rows:
            cell = f"**{ratio:.1f}** ({low:.1f}-{high:.1f})" if row["label"] == "cached" else ""
            line = (
                f"| {backend} | {model_name} | {row['label']} | {row['compile']:.1f} | "
                f"{row['ms_per_step']:.2f} | {row['tokens_per_second']:,.0f} | {cell} |"
            )
            lines.append(line)
            print(line, flush=True)
        if profile:
            profiles.append(f"{model_name}:\n{profile}")
    rate_after = matmul()
    lines += ["", f"fp32 matmul: {rate_before:.0f} GFLOP/s before, {rate_after:.0f} after."]
    print(lines[-1])
    for profile in profiles:
        print(profile)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as file:
            file.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
