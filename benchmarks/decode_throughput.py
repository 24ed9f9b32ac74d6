"""Decoding speed: cached vs uncached greedy search and beam search, on the current backend.

Generates exactly `--new-tokens` tokens for a batch of `--batch-size` random sources (the end
token's output embedding row is zeroed, so no search stops early) and prints a
markdown table of generated tokens per second (batch x new tokens / seconds; beam search
keeps `beam_size` hypotheses, so it does `beam_size` times the work per output token).

Run it once per backend:

```
for backend in tensorflow jax torch; do
  KERAS_BACKEND=$backend python benchmarks/decode_throughput.py
done
```

Untrained weights: speed does not depend on them. Compile time (first call, TensorFlow XLA and
`jax.jit`) is reported separately and excluded from the throughput, which is the median of
`--repeats` timed calls.
"""

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime

import keras
import numpy as np
from train_throughput import machine_description  # benchmarks/ is on sys.path when run

from keras_transformer import Transformer
from keras_transformer.generation import Generator

MODELS = {
    "tiny": dict(num_layers=2, d_model=64, num_heads=4, ff_dim=256),
    "small": dict(num_layers=3, d_model=256, num_heads=4, ff_dim=1024),
    "base": dict(num_layers=6, d_model=512, num_heads=8, ff_dim=2048),  # the paper's (a GPU's)
}
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
# (label, beam size); `None`: the uncached greedy reference, `generator.uncached_greedy`.
SEARCHES = (("greedy (cached)", 1), ("greedy (uncached)", None))


def benchmark(model_name, batch_size, source_length, new_tokens, vocabulary_size, repeats, beam_size):
    keras.utils.set_random_seed(0)
    model = Transformer(vocabulary_size=vocabulary_size, dropout=0.0, **MODELS[model_name])
    # The end token's output row is zeroed (logit 0, never the largest of thousands of random
    # logits): every search runs all `new_tokens` steps.
    embeddings = model.target_embedding.embeddings
    table = keras.ops.convert_to_numpy(embeddings)
    table[1] = 0.0
    embeddings.assign(table)
    generator = Generator(model, start_id=2, end_id=1, extra_length=new_tokens)
    rng = np.random.default_rng(0)
    inputs = rng.integers(4, vocabulary_size, size=(batch_size, source_length)).astype("int32")
    searches = SEARCHES + ((f"beam {beam_size}", beam_size),)
    rows = []
    for label, beams in searches:
        if beams is None:
            search, options = generator.uncached_greedy, dict(max_new_tokens=new_tokens)
        else:
            search, options = generator, dict(beam_size=beams, alpha=0.6, max_new_tokens=new_tokens)
        start = time.perf_counter()
        sequences, _ = search(inputs, **options)
        first = time.perf_counter() - start
        assert sequences.shape[-1] == new_tokens
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            search(inputs, **options)
            times.append(time.perf_counter() - start)
        seconds = statistics.median(times)
        rows.append((label, max(first - seconds, 0.0), seconds, batch_size * new_tokens / seconds))
    return rows


def accelerator(backend):
    """The device the backend computes on: a GPU's name, else "CPU"."""
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        return device.device_kind if device.platform == "gpu" else "CPU"
    if backend == "torch":
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    return "CPU"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--vocabulary-size", type=int, default=8000)
    parser.add_argument(
        "--dtype-policy",
        default=None,
        help="Keras dtype policy of the model (e.g. bfloat16; default: float32)",
    )
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=None,
        help="torch.set_num_threads on the torch backend (default: torch's own, one per core); "
        "a decoding step is many small operations, which OpenMP barriers slow down when "
        "another process holds a core",
    )
    parser.add_argument(
        "--output",
        default=None,
        help="markdown file for the table (default: "
        "benchmarks/results/decode_throughput_<backend>.md; '-' prints only)",
    )
    args = parser.parse_args()

    backend = keras.backend.backend()
    if args.dtype_policy:
        keras.config.set_dtype_policy(args.dtype_policy)
    threads = ""
    if backend == "torch":
        import torch

        if args.torch_threads is not None:
            if args.torch_threads < 1:
                parser.error(f"--torch-threads must be >= 1, received {args.torch_threads}")
            torch.set_num_threads(args.torch_threads)
        threads = f"; torch threads {torch.get_num_threads()}"
    command = " ".join(["python benchmarks/decode_throughput.py", *sys.argv[1:]])
    lines = [
        f"# Decoding throughput ({backend})",
        "",
        f"Recorded {datetime.now(UTC):%Y-%m-%d %H:%M} UTC by "
        f"`KERAS_BACKEND={backend} {command}`; {machine_description()}{threads}; "
        f"device {accelerator(backend)}; dtype policy {keras.config.dtype_policy().name}; "
        f"load average {os.getloadavg()[0]:.1f} at the start.",
        "",
        f"batch {args.batch_size}, source length {args.source_length}, {args.new_tokens} new "
        f"tokens, vocabulary {args.vocabulary_size}; tokens/s = batch x new tokens / median time of "
        f"{args.repeats} calls (compile time excluded); x uncached = cached tokens/s / uncached.",
        "",
        "| backend | model | search | compile (s) | time (s) | tokens/s | x uncached |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    print("\n".join(lines), flush=True)
    for model_name in args.models:
        rows = benchmark(
            model_name,
            args.batch_size,
            args.source_length,
            args.new_tokens,
            args.vocabulary_size,
            args.repeats,
            args.beam_size,
        )
        uncached = dict((label, rate) for label, _, _, rate in rows)["greedy (uncached)"]
        for label, compile_seconds, seconds, tokens_per_second in rows:
            ratio = f"{tokens_per_second / uncached:.1f}" if label.startswith("greedy") else "-"
            line = (
                f"| {backend} | {model_name} | {label} | {compile_seconds:.1f} | "
                f"{seconds:.3f} | {tokens_per_second:,.0f} | {ratio} |"
            )
            lines.append(line)
            print(line, flush=True)
    if args.output != "-":
        output = args.output or os.path.join(RESULTS, f"decode_throughput_{backend}.md")
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        with open(output, "w", encoding="utf-8") as file:
            file.write("\n".join(lines) + "\n")
        print(f"written to {output}")


if __name__ == "__main__":
    main()
