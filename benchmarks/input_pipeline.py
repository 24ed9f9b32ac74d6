"""Peak memory and throughput of the streaming input pipeline as the corpus grows.

Writes synthetic parallel corpora of `--sizes` pairs (two aligned gzipped files each: Zipf
word ids spelled as words, 4-40 words a side, the target within a word ratio of 2 of the
source, a few duplicates and empty lines), then for each size, in a fresh process (so that its
peak RSS is its own), does what `keras-transformer train` does with `dataset = "corpus"` and
`streaming = true` before the first step:

1. `scan_corpora`: filters, held-out split by hash, keys file, tokenizer sample (timed: pairs/s);
2. a WordPiece tokenizer trained on the sample (`data.tokenizer_sample`, 200,000 pairs);
3. `make_streaming_dataset` with `configs/bible.toml`'s batches (4,096 tokens per batch, max
   length 96), iterated for `--batches` batches after 20 warm-up batches: real (non-pad)
   source + target tokens per second and padded positions per second.

Peak RSS is the process's `ru_maxrss`. The fp32 matmul rate (1024³ products, NumPy) is
measured in the parent before and after the runs, to say how loaded the machine was.

```
python benchmarks/input_pipeline.py                          # 0.1M, 1M and 10M pairs
python benchmarks/input_pipeline.py --sizes 100000 1000000   # the quick part
```

Writes `benchmarks/results/input_pipeline.md` and `.json`. The corpora go to `--workdir`
(default: a temporary directory, removed at the end; about 0.9 GB of gzip for 10M pairs).
"""

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
# The `make bible` training rate on this machine (benchmarks/results/history.md, 2026-11-22):
# 0.34 s per step of 4,096 padded positions per side, alone on the 2-core CPU.
BIBLE_STEP_SECONDS = 0.34
BIBLE_TOKENS_PER_BATCH = 4096

CHILD = r"""
import json, resource, sys, time
settings = json.loads(sys.argv[1])
import tensorflow as tf
from keras_transformer.data import make_streaming_dataset
from keras_transformer.datasets import Corpus, scan_corpora
from keras_transformer.text import train_tokenizer

def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

result = {"rss_after_imports": rss()}
corpus = Corpus(source=settings["source"], target=settings["target"])
start = time.perf_counter()
def progress(line):  # every million lines: the rate and peak RSS so far
    seconds = time.perf_counter() - start
    print(f"PROGRESS {line}: {seconds:.0f} s, peak RSS {rss():,.0f} MiB", flush=True)

scan = scan_corpora([corpus], 1000, 1000, keep_train=False, keys_dir=settings["workdir"],
                    sample_size=settings["sample"], progress=progress)
result["scan_seconds"] = time.perf_counter() - start
result["lines"] = scan.num_lines[0]
result["train_pairs"] = sum(scan.num_train)
result["removed"] = scan.removed
result["rss_after_scan"] = rss()
start = time.perf_counter()
tokenizer = train_tokenizer([t for pair in scan.tokenizer_sample for t in pair],
                            vocabulary_size=4000)
result["tokenizer_seconds"] = time.perf_counter() - start
result["tokenizer_pairs"] = len(scan.tokenizer_sample)
pipeline = make_streaming_dataset(
    [corpus], scan.keys_paths, scan.threshold, tokenizer, tokens_per_batch=4096, max_length=96,
    num_examples=sum(scan.num_train), sample=scan.tokenizer_sample[:20000])
iterator = iter(pipeline.dataset)
for _ in range(20):
    next(iterator)

def stream(batches):
    real = padded = 0
    start = time.perf_counter()
    for _ in range(batches):
        inputs, targets = next(iterator)
        real += int(tf.math.count_nonzero(inputs["encoder_inputs"]))
        real += int(tf.math.count_nonzero(targets))
        padded += 2 * int(tf.size(targets))
    return real, padded, time.perf_counter() - start

if not settings["train"]:
    real, padded, seconds = stream(settings["batches"])
    result.update(stream_seconds=seconds, real_tokens_per_s=real / seconds,
                  padded_tokens_per_s=padded / seconds)
else:
    # The `make bible` model (configs/bible.toml) trained on batches of this stream, timed in
    # rounds alternating with the stream, so both see the same machine load.
    import keras
    import keras_transformer as kt
    model = kt.Transformer(vocabulary_size=tokenizer.vocabulary_size(), num_layers=2,
                           d_model=128, num_heads=4, ff_dim=512, dropout=0.1)
    model.compile(optimizer=kt.transformer_adam(128, warmup_steps=800),
                  loss=kt.LabelSmoothedCrossentropy(label_smoothing=0.1))
    batches = [next(iterator) for _ in range(8)]
    for inputs, targets in batches:  # compiles every shape
        model.train_on_batch(inputs, targets)
    rounds = []
    for _ in range(settings["rounds"]):
        real, padded, seconds = stream(settings["batches"] // settings["rounds"])
        start = time.perf_counter()
        for inputs, targets in batches:
            model.train_on_batch(inputs, targets)
        train_seconds = time.perf_counter() - start
        train_padded = sum(2 * int(tf.size(targets)) for _, targets in batches)
        rounds.append((real / seconds, padded / seconds, train_padded / train_seconds))
    rounds.sort(key=lambda row: row[1] / row[2])
    middle = rounds[len(rounds) // 2]
    result.update(real_tokens_per_s=middle[0], padded_tokens_per_s=middle[1],
                  train_padded_tokens_per_s=middle[2],
                  ratios=[row[1] / row[2] for row in rounds])
result.update(batches=settings["batches"], peak_rss=rss())
print("RESULT " + json.dumps(result), flush=True)
"""


def write_corpus(directory, size, seed=0):
    """Two aligned gzipped files of `size` pairs; returns their paths."""
    rng = np.random.default_rng(seed)
    words = [f"w{index}" for index in range(20000)]
    source_path = os.path.join(directory, f"{size}.src.gz")
    target_path = os.path.join(directory, f"{size}.tgt.gz")
    with (
        gzip.open(source_path, "wt", compresslevel=1) as sources,
        gzip.open(target_path, "wt", compresslevel=1) as targets,
    ):
        for start in range(0, size, 100_000):
            rows = min(100_000, size - start)
            source_lengths = rng.integers(4, 41, rows)
            target_lengths = np.clip(
                (source_lengths * rng.uniform(0.6, 1.6, rows)).astype(int), 2, 60
            )
            ids = (
                np.minimum(rng.zipf(1.3, int(source_lengths.sum() + target_lengths.sum())), 20000)
                - 1
            )
            position = 0
            source_lines, target_lines = [], []
            for source_length, target_length in zip(source_lengths, target_lengths, strict=True):
                source = " ".join(words[i] for i in ids[position : position + source_length])
                position += source_length
                target = " ".join(
                    words[i].upper() for i in ids[position : position + target_length]
                )
                position += target_length
                source_lines.append(source)
                target_lines.append(target)
            # A few duplicates and empty sides, for the filters to find.
            source_lines[1] = source_lines[0]
            target_lines[1] = target_lines[0]
            source_lines[2] = ""
            sources.write("\n".join(source_lines) + "\n")
            targets.write("\n".join(target_lines) + "\n")
    return source_path, target_path


def matmul_gflops(seconds=1.0):
    """fp32 1024³ matmul rate of NumPy here, GFLOP/s (median of the calls in `seconds`)."""
    a = np.random.default_rng(0).standard_normal((1024, 1024), dtype=np.float32)
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        a @ a
        times.append(time.perf_counter() - start)
    return 2 * 1024**3 / float(np.median(times)) / 1e9


def run_size(source, target, workdir, args, train=False):
    settings = dict(
        source=source,
        target=target,
        workdir=workdir,
        batches=args.batches,
        sample=args.sample,
        train=train,
        rounds=args.rounds,
    )
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, json.dumps(settings)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    for line in child.stdout:
        if line.startswith("PROGRESS "):
            print(line.strip(), flush=True)
        if line.startswith("RESULT "):
            child.wait()
            return json.loads(line[len("RESULT ") :])
    raise RuntimeError(f"the child failed (exit {child.wait()})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--sample", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=6, help="rounds of stream vs training")
    parser.add_argument(
        "--no-compare-training",
        dest="compare_training",
        action="store_false",
        help="skip the training-rate comparison (made on the first size)",
    )
    parser.add_argument("--workdir")
    parser.add_argument("--output", default=os.path.join(RESULTS, "input_pipeline"))
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="input_pipeline_")
    os.makedirs(workdir, exist_ok=True)
    started = datetime.now(UTC)
    load_before = os.getloadavg()
    gflops_before = matmul_gflops()
    rows = []
    for size in args.sizes:
        start = time.perf_counter()
        source = os.path.join(workdir, f"{size}.src.gz")
        target = os.path.join(workdir, f"{size}.tgt.gz")
        if not (args.workdir and os.path.exists(source) and os.path.exists(target)):
            source, target = write_corpus(workdir, size)  # else: reused from --workdir
        print(f"{size:,} pairs written in {time.perf_counter() - start:.0f} s", flush=True)
        keys_dir = os.path.join(workdir, f"keys-{size}")
        os.makedirs(keys_dir, exist_ok=True)
        compare = args.compare_training and size == args.sizes[0]
        result = run_size(source, target, keys_dir, args, train=compare)
        result.update(size=size, bytes=os.path.getsize(source) + os.path.getsize(target))
        rows.append(result)
        print(json.dumps(result), flush=True)
        if not args.workdir:
            for path in (source, target):
                os.remove(path)
    gflops_after = matmul_gflops()
    load_after = os.getloadavg()
    write_results(rows, args, started, (load_before, load_after), (gflops_before, gflops_after))


def write_results(rows, args, started, loads, gflops):
    """Writes `args.output` `.md` and `.json` and prints the table."""
    (load_before, load_after), (gflops_before, gflops_after) = loads, gflops
    recorded = 2 * BIBLE_TOKENS_PER_BATCH / BIBLE_STEP_SECONDS
    bible = rows[0].get("train_padded_tokens_per_s", recorded)
    ratios = ", ".join(f"{ratio:.1f}" for ratio in rows[0].get("ratios", ()))
    lines = [
        "# Streaming input pipeline: peak RSS and tokens/s as the corpus grows",
        "",
        f"Recorded {started:%Y-%m-%d %H:%M} UTC by `python benchmarks/input_pipeline.py "
        f"--sizes {' '.join(str(size) for size in args.sizes)}`.",
        "",
        f"- Machine: {platform.platform()}, {os.cpu_count()} cores; load average "
        f"{', '.join(f'{x:.1f}' for x in load_before)} at the start, "
        f"{', '.join(f'{x:.1f}' for x in load_after)} at the end (other jobs share the machine).",
        f"- fp32 matmul rate (NumPy, 1024³): {gflops_before:.0f} GFLOP/s before the runs, "
        f"{gflops_after:.0f} GFLOP/s after.",
        "- Corpus: two aligned gzipped files (level 1), Zipf words, 4-40 words a side; "
        "1,000 validation + 1,000 test pairs held out by hash; tokenizer: WordPiece, "
        f"4,000 pieces (as `make bible`), learned from a sample of at most {args.sample:,} pairs.",
        f"- Stream: `make_streaming_dataset`, 4,096 tokens per batch, max length 96 (the "
        f"`make bible` batches), shuffle buffer 100,000; {args.batches} batches timed after 20.",
        f"- Training the `make bible` model (2 + 2 layers, d_model 128, `train_on_batch` on "
        f"batches of this stream, TensorFlow) consumed {bible:,.0f} padded positions/s "
        f"(source + target) in this run, measured in {args.rounds} rounds alternating with "
        f"the stream on {args.sizes[0]:,} pairs (stream ÷ training per round: {ratios}; the "
        "median round is reported); 10x that is "
        f"{10 * bible:,.0f}. On a quiet machine `make bible` trains 0.34 s per step of 4,096 "
        f"positions a side: {recorded:,.0f} positions/s (benchmarks/results/history.md).",
        "",
        "| pairs | gzip MB | scan s | scan pairs/s | tokenizer s | RSS after scan MiB | "
        "peak RSS MiB | real tokens/s | padded positions/s | × bible training |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['size']:,} | {row['bytes'] / 1e6:,.0f} | {row['scan_seconds']:,.0f} | "
            f"{row['lines'] / row['scan_seconds']:,.0f} | {row['tokenizer_seconds']:,.0f} | "
            f"{row['rss_after_scan']:,.0f} | {row['peak_rss']:,.0f}"
            f"{' (with the model)' if 'ratios' in row else ''} | "
            f"{row['real_tokens_per_s']:,.0f} | {row['padded_tokens_per_s']:,.0f} | "
            f"{row['padded_tokens_per_s'] / bible:.1f} |"
        )
    if len(rows) > 1:
        first, last = rows[-2], rows[-1]
        growth = last["rss_after_scan"] / first["rss_after_scan"] - 1
        lines += [
            "",
            f"RSS after the scan from {first['size']:,} to {last['size']:,} pairs: {growth:+.1%}"
            + (
                f"; peak RSS {last['peak_rss'] / first['peak_rss'] - 1:+.1%}."
                if "ratios" not in first
                else " (the first size's peak includes the model of the training comparison)."
            ),
        ]
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output + ".md", "w") as file:
        file.write("\n".join(lines) + "\n")
    with open(args.output + ".json", "w") as file:
        json.dump(
            {
                "started": started.isoformat(),
                "load_before": load_before,
                "load_after": load_after,
                "matmul_gflops": [gflops_before, gflops_after],
                "bible_padded_tokens_per_s": bible,
                "rows": rows,
            },
            file,
            indent=1,
        )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
