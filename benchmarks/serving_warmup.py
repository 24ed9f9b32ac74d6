"""First-request latency of an exported SavedModel, with and without the warm-up replay.

Exports a Translator with `export_saved_model(..., version=1)` and starts two fresh processes
on the SavedModel (TensorFlow and tensorflow-text only, as a model server has): one replays
`assets.extra/tf_serving_warmup_requests` first (as TensorFlow Serving does when it loads a
version), the other does not. Each then sends, for every source bucket, its first user request
(1 sentence, then `--batch-size` sentences, then 1 sentence to the `translate_n_best`
signature) and prints how long each took; the second call of the same request is the warm
reference. Without the replay a first request of a new shape pays the XLA compile.

```
KERAS_BACKEND=tensorflow python benchmarks/serving_warmup.py
KERAS_BACKEND=tensorflow python benchmarks/serving_warmup.py --translator translator.keras
```

Without `--translator` it trains the tiny number-words Translator of the tests (~20 s; 2
source buckets, beam 4). User sentences are number words (joined to fill the longer buckets).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import UTC, datetime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")

# Runs in a fresh process: load, maybe replay, then time the first request of each kind.
CHILD = r"""
import json, sys, time
start = time.perf_counter()
import tensorflow as tf
import tensorflow_text  # noqa: F401 (registers the tokenizer ops)
from keras_transformer.export import read_warmup_requests
path, replay, requests = sys.argv[1], sys.argv[2] == "replay", json.loads(sys.stdin.read())
loaded = tf.saved_model.load(path)
result = {"load": time.perf_counter() - start, "replay": None, "requests": []}
if replay:
    start = time.perf_counter()
    records = read_warmup_requests(path)
    for name, inputs in records:
        loaded.signatures[name](**{key: tf.constant(value) for key, value in inputs.items()})
    result["replay"] = time.perf_counter() - start
    result["records"] = len(records)
for label, signature, strings in requests:
    times = []
    for _ in range(2):  # The first request of this shape, then the same request again.
        start = time.perf_counter()
        outputs = loaded.signatures[signature](inputs=tf.constant(strings, tf.string))
        outputs["translations"].numpy()
        times.append(time.perf_counter() - start)
    result["requests"].append([label] + times)
print(json.dumps(result))
"""


def user_requests(translator, batch_size):
    """`[(label, signature, sentences)]`: per source bucket, number-word sentences in it."""
    from keras_transformer.datasets import number_words
    from keras_transformer.export import N_BEST_SIGNATURE_NAME, SIGNATURE_NAME

    preprocessor = translator.preprocessor
    # Test sentences, and runs of them joined by " y ", until every bucket has enough.
    pool = [
        source
        for source, _ in number_words(
            num_train=200, num_validation=0, num_test=200, max_number=5000, seed=7
        ).test
    ]
    sentences = pool + [" y ".join(pool[i : i + k]) for k in range(2, 12) for i in range(0, 180, k)]
    encoded, _ = preprocessor.encode_source(sentences)
    lengths = encoded.row_lengths().numpy()
    by_bucket = {bucket: [] for bucket in preprocessor.bucket_boundaries}
    for sentence, length in zip(sentences, lengths):
        index = int(preprocessor.bucket_index(length))
        by_bucket[preprocessor.bucket_boundaries[index]].append(sentence)
    requests = []
    for bucket, candidates in by_bucket.items():
        if len(candidates) < batch_size + 2:
            print(f"skipping bucket {bucket}: too few sentences in it", file=sys.stderr)
            continue
        requests += [
            (f"{bucket} | 1 | serving_default", SIGNATURE_NAME, candidates[:1]),
            (f"{bucket} | {batch_size} | serving_default", SIGNATURE_NAME,
             candidates[1 : batch_size + 1]),
            (f"{bucket} | 1 | translate_n_best", N_BEST_SIGNATURE_NAME,
             candidates[batch_size + 1 : batch_size + 2]),
        ]  # fmt: skip
    return requests


def run_child(path, replay, requests):
    result = subprocess.run(
        [sys.executable, "-c", CHILD, path, "replay" if replay else "cold"],
        input=json.dumps(requests),
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": ROOT},
    )
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--translator", default=None, help="a Translator .keras file")
    parser.add_argument("--batch-size", type=int, default=8, help="rows of the batch request")
    parser.add_argument(
        "--warmup-batch-size",
        type=int,
        default=None,
        help="export option (default: the translator's batch size)",
    )
    parser.add_argument("--output", default=os.path.join(RESULTS, "serving_warmup.md"))
    args = parser.parse_args()

    import keras

    from keras_transformer.export import export_saved_model
    from keras_transformer.translator import Translator

    if keras.backend.backend() != "tensorflow":
        parser.error("run with KERAS_BACKEND=tensorflow (the export traces TensorFlow)")
    if args.translator:
        translator = Translator.load(args.translator)
    else:
        sys.path.insert(0, ROOT)
        from tests.export_helpers import train_number_translator

        translator = train_number_translator()
    requests = user_requests(translator, args.batch_size)
    load_average = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as directory:
        path = export_saved_model(
            translator, directory, version=1, warmup_batch_size=args.warmup_batch_size
        )
        results = {
            "replayed": run_child(path, True, requests),
            "not replayed": run_child(path, False, requests),
        }
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from train_throughput import machine_description

    replayed = results["replayed"]
    command = " ".join(["python benchmarks/serving_warmup.py", *sys.argv[1:]])
    lines = [
        "# First-request latency of the SavedModel, with and without the warm-up replay",
        "",
        f"Recorded {datetime.now(UTC):%Y-%m-%d %H:%M} UTC by "
        f"`KERAS_BACKEND=tensorflow {command}`; {machine_description()}; load average "
        f"{load_average:.1f} at the start, {os.getloadavg()[0]:.1f} at the end.",
        "",
        f"Source buckets {list(translator.bucket_boundaries)}, beam {translator.beam_size}; "
        f"replaying the {replayed['records']} warm-up records took {replayed['replay']:.1f} s "
        f"(loading: {replayed['load']:.1f} s with the imports). Milliseconds: first request, "
        "then the same request again.",
        "",
        "| bucket | rows | signature | first, replayed | again | first, not replayed | again |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    cold = {row[0]: row[1:] for row in results["not replayed"]["requests"]}
    for label, first, again in replayed["requests"]:
        cold_first, cold_again = cold[label]
        lines.append(
            f"| {label} | {first * 1000:,.0f} | {again * 1000:,.0f} | "
            f"{cold_first * 1000:,.0f} | {cold_again * 1000:,.0f} |"
        )
    print("\n".join(lines))
    if args.output != "-":
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output, "w", encoding="utf-8") as file:
            file.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
