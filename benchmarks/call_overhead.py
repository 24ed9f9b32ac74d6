"""The fixed cost of a `Translator.translate` call, side by side for two checkouts.

Loads a `make bible` translator (`--run`, TensorFlow backend) in one process per checkout,
one after the other, and measures warm calls: one verse at a time (`--single` calls; where
the per-call costs, input preparation, padding and detokenization, weigh most) and the first
`--verses` test verses in one call (beam 4). Reports CPU and wall milliseconds per call, the
split of a one-verse call between encoding, the search and decoding (cProfile cumulative
times), the outputs' equality between checkouts, and the machine's float32 matmul rate.

```
python benchmarks/call_overhead.py --run runs/bible --checkouts /tmp/before .
```

Rows are appended to `benchmarks/results/call_overhead.jsonl`.
"""

import argparse
import json
import os
import subprocess
import sys
from datetime import UTC, datetime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results", "call_overhead.jsonl")

CHILD = r"""
import cProfile, json, pstats, sys, time
import numpy as np
from keras_transformer.datasets import sword_bible
from keras_transformer.engines import load_translator

run, single, verses = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
translator = load_translator(run)
sources = [source for source, _ in sword_bible().test][:verses]
one = sources[:1]
for _ in range(3):
    translator.translate(one)
translator.translate(sources)  # Every shape of the batch compiled.


def timed(function, count):
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        outputs = function()
    return outputs, (time.perf_counter() - wall) / count, (time.process_time() - cpu) / count


_, one_wall, one_cpu = timed(lambda: translator.translate(one), single)
profile = cProfile.Profile()
profile.enable()
for _ in range(single):
    translator.translate(one)
profile.disable()
stats = pstats.Stats(profile).stats
parts = {}
for (path, _, name), (_, _, _, cumulative, _) in stats.items():
    for label, wanted in (
        ("encode", ("encode_for_search", "generate_preprocess")),
        ("search", ("_search",)),
        ("decode", ("_detokenize",)),
    ):
        if name in wanted:
            parts[label] = max(parts.get(label, 0.0), cumulative / single)
outputs, many_wall, many_cpu = timed(lambda: translator.translate(sources), 2)
size = 1024
a = np.random.rand(size, size).astype("float32")
start = time.perf_counter()
for _ in range(20):
    a @ a
gflops = 20 * 2 * size**3 / (time.perf_counter() - start) / 1e9
print(json.dumps({
    "one_verse_ms": {"wall": 1000 * one_wall, "cpu": 1000 * one_cpu},
    "one_verse_parts_ms": {key: 1000 * value for key, value in parts.items()},
    "verses_ms": {"wall": 1000 * many_wall, "cpu": 1000 * many_cpu},
    "outputs": [output.text for output in outputs],
    "matmul_gflops": gflops,
}))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", default=os.path.join(ROOT, "runs", "bible"))
    parser.add_argument("--checkouts", nargs="+", default=[ROOT])
    parser.add_argument("--single", type=int, default=30)
    parser.add_argument("--verses", type=int, default=300)
    args = parser.parse_args()
    rows, first = [], None
    for checkout in args.checkouts:
        env = dict(os.environ, PYTHONPATH=os.path.abspath(checkout), KERAS_BACKEND="tensorflow")
        command = [sys.executable, "-c", CHILD, args.run, str(args.single), str(args.verses)]
        output = subprocess.run(
            command, env=env, cwd=checkout, capture_output=True, text=True, check=True
        ).stdout
        result = json.loads(output.strip().splitlines()[-1])
        outputs = result.pop("outputs")
        first = first or outputs
        result["same_outputs"] = sum(a == b for a, b in zip(outputs, first, strict=True))
        result.update(
            checkout=os.path.abspath(checkout),
            verses=len(outputs),
            date=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        rows.append(result)
        print(json.dumps(result))
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "a", encoding="utf-8") as file:
        for row in rows:
            file.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
