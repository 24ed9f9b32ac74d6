"""Translation throughput on real text: one trained translator through every engine we ship.

Translates the Bible test verses (`keras_transformer.datasets.sword_bible().test`, 1,000 verses)
with the `translator.keras` of a `make bible` run through

- `Translator` on TensorFlow, JAX and PyTorch (`keras-tensorflow`, `keras-jax`, `keras-torch`),
- the string SavedModel the run exported (`saved_model`, TensorFlow only),
- CTranslate2 float32 and int8 (`ct2-float32`, `ct2-int8`; exported here from the same weights;
  two workers of `--threads / 2` threads, the engine's layout, or `ct2-float32-one-worker`:
  one worker of `--threads`, its layout before 0.4),
- the same Keras `Translator`s quantized to int8 when loaded (`keras-tensorflow-int8`,
  `keras-jax-int8`, `keras-torch-int8`: `Translator.quantize("int8")`),
- the Keras `Translator` searching as before issue 55's changes (`keras-tensorflow-exact`,
  `keras-jax-exact`: `patience=None`, the exact stop, and a batch that never shrinks),
- the Keras `Translator` with a self-attention cache of `max_new_tokens` positions from the
  first step (`keras-tensorflow-whole-cache`, `keras-jax-whole-cache`: `Generator`'s
  `grow_cache_from=None`, the search before the cache grew),
- the Keras `Translator` taking each beam step's best logits with one `top_k` of the whole
  vocabulary (`keras-tensorflow-one-top-k`, `keras-jax-one-top-k`: the search before
  `decoding.top_k_by_blocks`),

each through four tasks (`--tasks`):

- `translate`: beam 4 and the translator's length penalty;
- `prefix`: the same search continuing the first word of each reference, forced as a target
  prefix (interactive translation);
- `sampling`: top-10 sampling (temperature 1, seed 0; back-translation's recipe), one sample
  per verse;
- `score`: the log probability of each reference given its source (forced decoding).

The SavedModel has no sampling or scoring signature: those rows say so; it gets requests of
64 verses of similar length, as a server batching its requests would send. Every engine runs in
its own process, one after the other (two engines sharing the two cores would measure each
other), and reports for each task the wall time of its first call (compilation included) and
of a second, warm call, the process CPU time of the warm call, verses and target tokens per
second of the warm call, the peak resident memory of the process, and the BLEU (sacrebleu) of
its output against the references. Target tokens are the target tokenizer's word pieces of
each output (of each reference for `score`), counted the same way for every engine. For
`score`, "Same" counts the verses whose log probability is within 1e-3 of the first engine's,
and the BLEU column gives the largest difference instead.

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
import functools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime

ENGINES = (
    "keras-tensorflow", "keras-jax", "keras-torch", "saved_model", "ct2-float32", "ct2-int8",
    "keras-tensorflow-int8", "keras-jax-int8", "keras-torch-int8",
    "keras-tensorflow-exact", "keras-jax-exact", "ct2-float32-one-worker",
    "keras-tensorflow-whole-cache", "keras-jax-whole-cache",
    "keras-tensorflow-one-top-k", "keras-jax-one-top-k",
)  # fmt: skip
TASKS = ("translate", "prefix", "sampling", "score")
SAMPLING = dict(sampling_topk=10, sampling_temperature=1.0, seed=0)
# What the SavedModel's signatures cannot do.
UNSUPPORTED = {("saved_model", "sampling"), ("saved_model", "score")}
SAVED_MODEL_BATCH = 64  # the SavedModel's requests (sorted by length)
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def test_pairs(limit, test_set="bible"):
    """The held-out pairs: the Bible test verses, or (`number_words`) the number-words test
    numbers (`keras_transformer.datasets.number_words`, as the tests' translator learns)."""
    if test_set == "number_words":
        from keras_transformer.datasets import number_words

        pairs = list(number_words().test)
    else:
        from keras_transformer.datasets import sword_bible

        pairs = list(sword_bible().test)
    return pairs[:limit] if limit else pairs


def first_words(references):
    """The target prefix of each verse: the first word of its reference."""
    return [reference.split()[0] if reference.split() else "" for reference in references]


def run_engine(engine, run_dir, sources, references, tasks, beam_size, threads, workdir,
               concurrent_batches=None, jit_compile=None):  # fmt: skip
    """Runs in the child process: `{task: (first_s, second_s, second_cpu_s, outputs)}`."""
    if engine.startswith("keras-"):
        from keras_transformer.translator import Translator

        translator = Translator.load(os.path.join(run_dir, "translator.keras"))
        translator.concurrent_batches = concurrent_batches
        if jit_compile is not None:
            translator.jit_compile = bool(jit_compile)
        if engine.endswith("-int8"):
            translator.quantize("int8")
        if engine.endswith("-one-top-k"):
            from keras_transformer import decoding

            decoding.TOP_K_BY_BLOCKS_FROM = sys.maxsize  # The search before the blocks.
        if engine.endswith(("-exact", "-whole-cache")):
            from keras_transformer.generation import Generator

            # The search before the growing cache; "exact": before the stop and shrinking too.
            exact = engine.endswith("-exact")
            targets = translator.preprocessor.targets
            if exact:
                translator.patience = None
            translator._generator = Generator(
                translator.model,
                targets.start_id,
                targets.end_id,
                targets.pad_id,
                translator.extra_length,
                translator.jit_compile,
                shrink_by=None if exact else 16,
                grow_cache_from=None,
            )
    elif engine == "saved_model":
        from keras_transformer.engines import SavedModelTranslator

        translator = SavedModelTranslator(os.path.join(run_dir, "saved_model"))
    else:
        quantization = engine.split("-")[1]
        one_worker = engine.endswith("-one-worker")
        translator = _ct2_translator(quantization, run_dir, threads, workdir, one_worker)
    translate = translator.translate
    if engine == "saved_model":
        translate = functools.partial(_requests, translator)
    calls = {
        "translate": lambda: translate(sources, beam_size=beam_size),
        "prefix": lambda: translate(
            sources, beam_size=beam_size, target_prefix=first_words(references)
        ),
        "sampling": lambda: translator.translate(sources, beam_size=1, **SAMPLING),
        "score": lambda: translator.score(sources, references),
    }
    results = {}
    for task in tasks:
        if (engine, task) in UNSUPPORTED:
            continue
        first, second, cpu, outputs = _timed_twice(calls[task])
        if task == "score":
            outputs = [scoring.score for scoring in outputs]
        else:
            outputs = [translation.text for translation in outputs]
        results[task] = (first, second, cpu, outputs)
    return results


def _requests(translator, sources, target_prefix=None, **options):
    """A server's way to a SavedModel: requests of `SAVED_MODEL_BATCH` verses of similar
    length (sorted), in the order of `sources` again."""
    order = sorted(range(len(sources)), key=lambda row: len(sources[row]))
    found = [None] * len(sources)
    for start in range(0, len(order), SAVED_MODEL_BATCH):
        rows = order[start : start + SAVED_MODEL_BATCH]
        prefixes = None if target_prefix is None else [target_prefix[row] for row in rows]
        batch = [sources[row] for row in rows]
        for row, result in zip(
            rows, translator.translate(batch, target_prefix=prefixes, **options)
        ):
            found[row] = result
    return found


def _timed_twice(translate):
    start = time.perf_counter()
    translate()
    first = time.perf_counter() - start
    start, cpu = time.perf_counter(), time.process_time()
    outputs = translate()
    return first, time.perf_counter() - start, time.process_time() - cpu, outputs


def _ct2_translator(quantization, run_dir, threads, workdir, one_worker=False):
    """The engine's own layout for `threads` (two workers of `threads // 2`, as
    `CTranslate2Translator` lays out the cores), or one worker of `threads` (`one_worker`,
    its layout before 0.4)."""
    from keras_transformer.engines import CTranslate2Translator
    from keras_transformer.export import export_ctranslate2

    directory = os.path.join(workdir, f"ct2_{quantization}")
    if not os.path.isdir(directory):
        export_ctranslate2(
            os.path.join(run_dir, "translator.keras"), directory, quantization=quantization
        )
    if one_worker or threads < 2:
        return CTranslate2Translator(directory, intra_threads=threads, inter_threads=1)
    return CTranslate2Translator(directory, intra_threads=threads // 2, inter_threads=2)


def child(args):
    if args.engine == "keras-torch":
        import torch

        torch.set_num_threads(args.threads)
    with open(args.sources, encoding="utf-8") as file:
        sources, references = json.load(file)
    results = run_engine(
        args.engine,
        args.run,
        sources,
        references,
        args.tasks,
        args.beam_size,
        args.threads,
        args.workdir,
        args.concurrent_batches,
        args.jit_compile,
    )
    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    found = {
        task: {"first_s": first, "second_s": second, "second_cpu_s": cpu, "outputs": outputs}
        for task, (first, second, cpu, outputs) in results.items()
    }
    with open(args.output, "w", encoding="utf-8") as file:
        json.dump({"peak_rss_mib": peak_rss_mib, "tasks": found}, file)


def parent(args):
    import sacrebleu

    from keras_transformer.translator import Translator

    pairs = test_pairs(args.limit, args.test_set)
    sources = [source for source, _ in pairs]
    references = [target for _, target in pairs]
    # The target tokenizer counts output word pieces identically for every engine.
    translator = Translator.load(os.path.join(args.run, "translator.keras"))
    target_tokenizer = translator.target_tokenizer or translator.tokenizer
    from train_throughput import matmul_timer  # benchmarks/ is on sys.path when run

    matmul = matmul_timer("tensorflow")
    args.matmul_gflops = [matmul()]
    rows, firsts = [], {}  # firsts: task -> the first engine's outputs
    with tempfile.TemporaryDirectory() as workdir:
        sources_path = os.path.join(workdir, "sources.json")
        with open(sources_path, "w", encoding="utf-8") as file:
            json.dump([sources, references], file)
        for engine in args.engines:
            output = os.path.join(workdir, f"{engine}.json")
            backend = engine.split("-")[1] if engine.startswith("keras-") else "tensorflow"
            env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
            # CTranslate2's OpenMP threads spin while they wait, unless told not to: on a
            # busy 2-core machine that took 8-18x the wall time.
            env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            command = [
                sys.executable, os.path.abspath(__file__), "--child", "--engine", engine,
                "--run", args.run, "--sources", sources_path, "--output", output,
                "--beam-size", str(args.beam_size), "--threads", str(args.threads),
                "--workdir", workdir, "--tasks", *args.tasks,
            ]  # fmt: skip
            if args.concurrent_batches:
                command += ["--concurrent-batches", str(args.concurrent_batches)]
            if args.jit_compile is not None:
                command += ["--jit-compile", str(int(args.jit_compile))]
            print(f"{engine}: {len(sources)} verses, tasks {' '.join(args.tasks)} ...", flush=True)
            subprocess.run(command, env=env, check=True)
            with open(output, encoding="utf-8") as file:
                result = json.load(file)
            for task in args.tasks:
                found = result["tasks"].get(task)
                row = {"engine": engine, "task": task, "peak_rss_mib": result["peak_rss_mib"]}
                if found is None:
                    rows.append(row)
                    print(format_row(row), flush=True)
                    continue
                outputs = found.pop("outputs")
                first = firsts.setdefault(task, outputs)
                row.update(found)
                if task == "score":
                    texts = references
                    differences = [abs(a - b) for a, b in zip(outputs, first, strict=True)]
                    row.update(
                        score_difference=max(differences),
                        same_as_first=sum(difference <= 1e-3 for difference in differences),
                        mean_log_prob=sum(outputs) / len(outputs),
                    )
                else:
                    texts = outputs
                    row.update(
                        bleu=sacrebleu.corpus_bleu(texts, [references]).score,
                        same_as_first=sum(a == b for a, b in zip(texts, first, strict=True)),
                    )
                tokens = int(target_tokenizer.tokenize(texts).flat_values.shape[0])
                row.update(
                    sentences_per_s=len(texts) / row["second_s"],
                    target_tokens_per_s=tokens / row["second_s"],
                )
                rows.append(row)
                print(format_row(row), flush=True)
    args.matmul_gflops.append(matmul())
    write_results(args, rows, len(sources))


def format_row(row):
    if "second_s" not in row:
        return f"| {row['engine']} | {row['task']} | not offered by this engine | | | | | | | |"
    quality = (
        f"{row['score_difference']:.1e} (mean {row['mean_log_prob']:.2f})"
        if row["task"] == "score"
        else f"{row['bleu']:.2f}"
    )
    return (
        f"| {row['engine']} | {row['task']} | {row['first_s']:.1f} | {row['second_s']:.1f} | "
        f"{row['second_cpu_s']:.1f} | {row['sentences_per_s']:.1f} | "
        f"{row['target_tokens_per_s']:.0f} | {row['peak_rss_mib']:.0f} | {quality} | "
        f"{row['same_as_first']} |"
    )


def write_results(args, rows, num_sentences):
    from train_throughput import machine_description  # benchmarks/ is on sys.path when run

    header = [
        f"Translation throughput, {num_sentences} {args.test_set} test pairs, beam {args.beam_size}, "
        f"{args.threads} threads, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. "
        f"{machine_description()}. fp32 matmul (TensorFlow, 1024x1024) "
        f"{args.matmul_gflops[0]:.0f} GFLOP/s before, {args.matmul_gflops[1]:.0f} after. "
        f"Keras engines: concurrent_batches={args.concurrent_batches or 'default'}, "
        f"jit_compile={'saved' if args.jit_compile is None else bool(args.jit_compile)}. "
        f"Same: outputs identical to the first engine's ({rows[0]['engine']}); for score, "
        "log probabilities within 1e-3 of its, and the BLEU column gives the largest "
        "difference (and the mean log probability). Peak RSS: of the engine's process, all "
        "tasks.",
        "",
        "| Engine | Task | First call (s) | Second call (s) | Second call, process CPU (s) "
        "| Verses/s | Target tokens/s | Peak RSS (MiB) | BLEU | Same |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    write_table(args.results, header, rows, format_row)


def write_table(name, header, rows, format_row):
    """Prints the table (`header` lines, then a formatted line per row) and writes it to
    `results/NAME.md`, and the rows to `results/NAME.json`."""
    table = "\n".join(header + [format_row(row) for row in rows]) + "\n"
    print(table)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, f"{name}.md"), "w", encoding="utf-8") as file:
        file.write(table)
    with open(os.path.join(RESULTS, f"{name}.json"), "w", encoding="utf-8") as file:
        json.dump(rows, file, indent=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", default="runs/bible", help="a `make bible` run directory")
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
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
    parser.add_argument(
        "--jit-compile",
        type=int,
        choices=(0, 1),
        default=None,
        help="set the Keras engines' Translator.jit_compile (default: the saved translator's)",
    )
    parser.add_argument(
        "--test-set",
        choices=("bible", "number_words"),
        default="bible",
        help="the held-out pairs translated (default: the Bible test verses)",
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
        parser.error(
            f"--run must name a training run with a translator.keras. Received: --run={args.run}"
        )
    if args.child:
        child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
