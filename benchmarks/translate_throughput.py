"""Translation throughput on real text: one trained translator through every engine we ship.

Translates the Bible test verses (`keras_transformer.datasets.sword_bible().test`, 1,000 verses)
with the `translator.keras` of a `make bible` run through

- `Translator` on TensorFlow, JAX and PyTorch (`keras-tensorflow`, `keras-jax`, `keras-torch`),
- the string SavedModel the run exported (`saved_model`, TensorFlow only),
- CTranslate2 float32 and int8 (`ct2-float32`, `ct2-int8`; exported here from the same weights),

all with beam 4 and the translator's length penalty. Every engine runs in its own process, one
after the other (two engines sharing the two cores would measure each other), and reports the
wall time of its first call (compilation included) and of a second, warm call, sentences and
target tokens per second of the warm call, its peak resident memory, and the BLEU (sacrebleu)
of its output against the references. Target tokens are the target tokenizer's word pieces of
each output, counted the same way for every engine.

```
make bible                                   # writes runs/bible/translator.keras
python benchmarks/translate_throughput.py --run runs/bible
```

The table is printed and written to `benchmarks/results/translate_throughput.md` (and `.json`;
`--results NAME` for another name). `--concurrent-batches N` sets the Keras engines'
`Translator.concurrent_batches` (default: the Translator's own, 2 on a 2-core machine). The
"Same" column counts the outputs identical to the first engine's.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime

ENGINES = ("keras-tensorflow", "keras-jax", "keras-torch", "saved_model", "ct2-float32", "ct2-int8")
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
SAVED_MODEL_BATCH = 64


def test_pairs(limit):
    from keras_transformer.datasets import sword_bible

    pairs = list(sword_bible().test)
    return pairs[:limit] if limit else pairs


def run_engine(engine, run_dir, sources, beam_size, threads, workdir, concurrent_batches=None):
    """Runs in the child process: returns the engine's timings and translations."""
    if engine.startswith("keras-"):
        return _keras_engine(run_dir, sources, beam_size, concurrent_batches)
    if engine == "saved_model":
        return _saved_model_engine(run_dir, sources)
    return _ct2_engine(engine.split("-", 1)[1], run_dir, sources, beam_size, threads, workdir)


def _timed_twice(translate):
    start = time.perf_counter()
    translate()
    first = time.perf_counter() - start
    start, cpu = time.perf_counter(), time.process_time()
    texts = translate()
    return first, time.perf_counter() - start, time.process_time() - cpu, texts


def _keras_engine(run_dir, sources, beam_size, concurrent_batches):
    from keras_transformer.translator import Translator

    translator = Translator.load(os.path.join(run_dir, "translator.keras"))
    translator.concurrent_batches = concurrent_batches
    return _timed_twice(
        lambda: [t.text for t in translator.translate(sources, beam_size=beam_size)]
    )


def _saved_model_engine(run_dir, sources):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops the SavedModel uses)

    model = tf.saved_model.load(os.path.join(run_dir, "saved_model"))
    serve = model.signatures["serving_default"]
    # A server batches requests of similar length: sorted batches of SAVED_MODEL_BATCH.
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))

    def translate():
        texts = [None] * len(sources)
        for start in range(0, len(order), SAVED_MODEL_BATCH):
            rows = order[start : start + SAVED_MODEL_BATCH]
            outputs = serve(inputs=tf.constant([sources[i] for i in rows]))
            for i, text in zip(rows, outputs["translations"].numpy()):
                texts[i] = text.decode("utf-8")
        return texts

    return _timed_twice(translate)


def _ct2_engine(quantization, run_dir, sources, beam_size, threads, workdir):
    from keras_transformer.engines import CTranslate2Translator
    from keras_transformer.export import export_ctranslate2

    directory = os.path.join(workdir, f"ct2_{quantization}")
    export_ctranslate2(os.path.join(run_dir, "translator.keras"), directory, quantization=quantization)
    translator = CTranslate2Translator(directory, intra_threads=threads)
    return _timed_twice(
        lambda: [t.text for t in translator.translate(sources, beam_size=beam_size)]
    )


def child(args):
    if args.engine == "keras-torch":
        import torch

        torch.set_num_threads(args.threads)
    with open(args.sources, encoding="utf-8") as file:
        sources = json.load(file)
    first, second, second_cpu, texts = run_engine(
        args.engine,
        args.run,
        sources,
        args.beam_size,
        args.threads,
        args.workdir,
        args.concurrent_batches,
    )
    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = {"first_s": first, "second_s": second, "second_cpu_s": second_cpu}
    with open(args.output, "w", encoding="utf-8") as file:
        json.dump({**result, "peak_rss_mib": peak_rss_mib, "texts": texts}, file)


def parent(args):
    import sacrebleu

    from keras_transformer.translator import Translator

    pairs = test_pairs(args.limit)
    sources = [source for source, _ in pairs]
    references = [target for _, target in pairs]
    # The target tokenizer counts output word pieces identically for every engine.
    translator = Translator.load(os.path.join(args.run, "translator.keras"))
    target_tokenizer = translator.target_tokenizer or translator.tokenizer
    from train_throughput import matmul_timer  # benchmarks/ is on sys.path when run

    matmul = matmul_timer("tensorflow")
    args.matmul_gflops = [matmul()]
    rows, first_texts = [], None
    with tempfile.TemporaryDirectory() as workdir:
        sources_path = os.path.join(workdir, "sources.json")
        with open(sources_path, "w", encoding="utf-8") as file:
            json.dump(sources, file)
        for engine in args.engines:
            output = os.path.join(workdir, f"{engine}.json")
            backend = engine.split("-", 1)[1] if engine.startswith("keras-") else "tensorflow"
            env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
            command = [
                sys.executable, os.path.abspath(__file__), "--child", "--engine", engine,
                "--run", args.run, "--sources", sources_path, "--output", output,
                "--beam-size", str(args.beam_size), "--threads", str(args.threads),
                "--workdir", workdir,
            ]  # fmt: skip
            if args.concurrent_batches:
                command += ["--concurrent-batches", str(args.concurrent_batches)]
            print(f"{engine}: translating {len(sources)} sentences ...", flush=True)
            subprocess.run(command, env=env, check=True)
            with open(output, encoding="utf-8") as file:
                result = json.load(file)
            texts = result.pop("texts")
            first_texts = first_texts or texts  # the first engine's outputs
            tokens = int(target_tokenizer.tokenize(texts).flat_values.shape[0])
            result.update(
                engine=engine,
                sentences_per_s=len(texts) / result["second_s"],
                target_tokens_per_s=tokens / result["second_s"],
                bleu=sacrebleu.corpus_bleu(texts, [references]).score,
                same_as_first=sum(a == b for a, b in zip(texts, first_texts, strict=True)),
            )
            rows.append(result)
            print(format_row(result), flush=True)
    args.matmul_gflops.append(matmul())
    write_results(args, rows, len(sources))


def format_row(row):
    return (
        f"| {row['engine']} | {row['first_s']:.1f} | {row['second_s']:.1f} | "
        f"{row['second_cpu_s']:.1f} | {row['sentences_per_s']:.1f} | "
        f"{row['target_tokens_per_s']:.0f} | {row['peak_rss_mib']:.0f} | {row['bleu']:.2f} | "
        f"{row['same_as_first']} |"
    )


def write_results(args, rows, num_sentences):
    from train_throughput import machine_description  # benchmarks/ is on sys.path when run

    header = [
        f"Translation throughput, {num_sentences} Bible test verses, beam {args.beam_size}, "
        f"{args.threads} threads, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. "
        f"{machine_description()}. fp32 matmul (TensorFlow, 1024x1024) "
        f"{args.matmul_gflops[0]:.0f} GFLOP/s before, {args.matmul_gflops[1]:.0f} after. "
        f"Keras engines: concurrent_batches={args.concurrent_batches or 'default'}. "
        f"Same: outputs identical to the first engine's ({rows[0]['engine']}).",
        "",
        "| Engine | First call (s) | Second call (s) | Second call, process CPU (s) "
        "| Sentences/s | Target tokens/s | Peak RSS (MiB) | BLEU | Same |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    table = "\n".join(header + [format_row(row) for row in rows]) + "\n"
    print(table)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, f"{args.results}.md"), "w", encoding="utf-8") as file:
        file.write(table)
    with open(os.path.join(RESULTS, f"{args.results}.json"), "w", encoding="utf-8") as file:
        json.dump(rows, file, indent=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", default="runs/bible", help="a `make bible` run directory")
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--limit", type=int, default=0, help="first N test verses (0: all)")
    parser.add_argument(
        "--concurrent-batches",
        type=int,
        default=0,
        help="the Keras engines' Translator.concurrent_batches (0: the Translator's default)",
    )
    parser.add_argument(
        "--results",
        default="translate_throughput",
        help="file name (no extension) of the table written to benchmarks/results/",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--engine", help=argparse.SUPPRESS)
    parser.add_argument("--sources", help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.beam_size < 1:
        parser.error(f"--beam-size must be >= 1. Received: --beam-size={args.beam_size}")
    if args.concurrent_batches < 0:
        parser.error(
            f"--concurrent-batches must be >= 0. Received: --concurrent-batches={args.concurrent_batches}"
        )
    args.concurrent_batches = args.concurrent_batches or None
    if args.threads < 1:
        parser.error(f"--threads must be >= 1. Received: --threads={args.threads}")
    if not os.path.isfile(os.path.join(args.run, "translator.keras")):
        parser.error(f"--run must name a training run with a translator.keras. Received: --run={args.run}")
    if args.child:
        child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
