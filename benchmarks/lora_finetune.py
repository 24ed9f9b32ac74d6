"""Full fine-tuning against LoRA on the number-words fine-tune of docs/training.md.

The committed fixture translator (`tests/fixtures/translator_v0_1.keras`: tiny preset, one
layer, trained on Spanish -> English numbers below 5,000) is fine-tuned by `train(config)` on
400 numbers from 5,000 to 9,999 and 300 below 5,000, for the same number of steps, three
ways:

- `full`: every weight trained (the configuration of docs/training.md, learning-rate scale 0.1);
- `lora-qv`: `training.lora_rank = 8` on the attention's query and value projections;
- `lora-all`: rank 8 on all four attention projections and both feed-forward layers.

The LoRA runs use a learning-rate scale of 1.0 (their `B` starts at zero; the usual LoRA rates
are about 10x full fine-tuning's). Each run is its own process (its peak RSS is its own). Per
run: trainable parameters, ms per step and CPU seconds per step (the median over the steps
after the first 5, which compile), peak RSS, the size of the last checkpoint and of the
backup on disk, of the frozen base they refer to (LoRA runs: `lora_base.weights.h5`, written
once), of the LoRA weights alone (`save_lora_weights`), and the quality at the end:
exact match and BLEU (greedy) on 48 held-out new numbers and 64 held-out old ones.

The fp32 matmul rate of the machine at the time is printed with each run
(`train_throughput.matmul_timer`): step times are comparable only at similar rates.

Usage:

    python benchmarks/lora_finetune.py                # about 3 minutes on 2 cores
    python benchmarks/lora_finetune.py --steps 20     # smoke run
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(REPO, "tests", "fixtures", "translator_v0_1.keras")
VARIANTS = {
    "full": {"lora_rank": 0, "lora_targets": "qv", "learning_rate_scale": 0.1},
    "lora-qv": {"lora_rank": 8, "lora_targets": "qv", "learning_rate_scale": 1.0},
    "lora-all": {"lora_rank": 8, "lora_targets": "all", "learning_rate_scale": 1.0},
}


def number_pairs(numbers):
    from num2words import num2words

    return [(num2words(n, lang="es"), num2words(n, lang="en")) for n in numbers]


def journey(directory):
    """The TSV of the fine-tune and the held-out new and old pairs (docs/training.md)."""
    rng = random.Random(1)
    new = rng.sample(range(5000, 10000), 448)
    old = rng.sample(range(0, 5000), 364)
    tsv = os.path.join(directory, "new.tsv")
    with open(tsv, "w", encoding="utf-8") as file:
        file.writelines(f"{s}\t{t}\n" for s, t in number_pairs(new[:400] + old[64:]))
    return tsv, number_pairs(new[400:]), number_pairs(old[:64])


def run_config(tsv, output_dir, variant, steps):
    settings = VARIANTS[variant]
    return {
        "output_dir": output_dir,
        "data": {
            "dataset": "tsv", "path": tsv, "num_validation": 16, "num_test": 0,
            "max_length": 24, "tokens_per_batch": 768, "bucket_boundaries": [24],
        },
        "model": {"preset": "tiny", "num_layers": 1},
        "optimizer": {"warmup_steps": 20, "learning_rate_scale": settings["learning_rate_scale"]},
        "training": {
            "train_steps": steps, "steps_per_epoch": steps, "checkpoint_every": steps,
            "average_checkpoints": 1, "backup_every": steps, "tensorboard": False,
            "init_from": FIXTURE, "lora_rank": settings["lora_rank"],
            "lora_targets": settings["lora_targets"],
        },
        "evaluation": {"bleu_every": -1, "test": False, "beam_size": 1},
        "export": {"translator": False, "saved_model": False},
    }


def worker(variant, steps):
    """One fine-tune in this process; prints one JSON line."""
    import keras

    from keras_transformer.models import lora
    from keras_transformer.training import lora_state, train
    from keras_transformer.training.bleu import corpus_bleu, exact_match

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from train_throughput import matmul_timer, peak_rss_mib

    class Timer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.wall, self.cpu = [], []

        def on_train_batch_begin(self, batch, logs=None):
            self.start = time.perf_counter(), time.process_time()

        def on_train_batch_end(self, batch, logs=None):
            self.wall.append(time.perf_counter() - self.start[0])
            self.cpu.append(time.process_time() - self.start[1])

    matmul = matmul_timer(keras.backend.backend())
    gflops_before = matmul()
    directory = tempfile.mkdtemp(prefix="lora_finetune_")
    tsv, new_test, old_test = journey(directory)
    output_dir = os.path.join(directory, "run")
    timer = Timer()
    # The backup is deleted when a run ends: measure it (and the checkpoint) at the last step.
    sizes = {}

    class Sizes(keras.callbacks.Callback):
        def on_train_end(self, logs=None):
            for name in ("backup", "checkpoints"):
                folder = os.path.join(output_dir, name)
                sizes[name] = sum(
                    os.path.getsize(os.path.join(folder, entry))
                    for entry in os.listdir(folder)
                    if entry.endswith(".weights.h5")
                )

    result = train(run_config(tsv, output_dir, variant, steps), callbacks=[timer, Sizes()], verbose=0)
    model = result.model
    lora_bytes = base_bytes = None
    base = os.path.join(output_dir, lora_state.BASE_FILENAME)  # LoRA runs: written once
    if os.path.exists(base):
        base_bytes = os.path.getsize(base)
    if lora.lora_layers(model):
        path = lora.save_lora_weights(model, os.path.join(directory, "adapter.lora.h5"))
        lora_bytes = os.path.getsize(path)
    quality = {}
    for name, pairs in (("new", new_test), ("old", old_test)):
        outputs = result.translator([source for source, _ in pairs])
        references = [target for _, target in pairs]
        quality[f"{name}_exact"] = exact_match(outputs, references)
        quality[f"{name}_bleu"] = corpus_bleu(outputs, references)
    history = result.metrics["history"]
    print("RESULT " + json.dumps({
        "variant": variant,
        "backend": keras.backend.backend(),
        "steps": result.metrics["steps"],
        "trainable": sum(int(keras.ops.size(v)) for v in model.trainable_weights),
        "total": model.count_params(),
        "ms_per_step": 1000 * statistics.median(timer.wall[5:]),
        "cpu_s_per_step": statistics.median(timer.cpu[5:]),
        "cpu_s_train": sum(timer.cpu),
        "peak_rss_mib": peak_rss_mib(),
        "checkpoint_bytes": sizes["checkpoints"],
        "backup_bytes": sizes["backup"],
        "lora_bytes": lora_bytes,
        "base_bytes": base_bytes,
        "train_loss": history["loss"][-1],
        "val_loss": history.get("val_loss", [None])[-1],
        "matmul_gflops": (gflops_before + matmul()) / 2,
        **quality,
    }), flush=True)


def baseline(new_test, old_test):
    """Exact match and BLEU of the fixture before fine-tuning."""
    from keras_transformer import Translator
    from keras_transformer.training.bleu import corpus_bleu, exact_match

    translator = Translator.load(FIXTURE)
    scores = {}
    for name, pairs in (("new", new_test), ("old", old_test)):
        outputs = translator([source for source, _ in pairs])
        references = [target for _, target in pairs]
        scores[f"{name}_exact"] = exact_match(outputs, references)
        scores[f"{name}_bleu"] = corpus_bleu(outputs, references)
    return scores


def format_row(row):
    def kib(value):
        return "-" if value is None else f"{value / 1024:,.0f}"

    return (
        f"| {row['variant']} | {row['trainable']:,} of {row['total']:,} | "
        f"{row['ms_per_step']:.0f} | {row['cpu_s_per_step']:.3f} | {row['peak_rss_mib']:.0f} | "
        f"{kib(row['checkpoint_bytes'])} | {kib(row['backup_bytes'])} | "
        f"{kib(row.get('base_bytes'))} | {kib(row['lora_bytes'])} | "
        f"{row['val_loss']:.3f} | {row['new_exact']:.3f} / {row['new_bleu']:.1f} | "
        f"{row['old_exact']:.3f} / {row['old_bleu']:.1f} | {row['matmul_gflops']:.0f} |"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--results", default="lora_finetune")
    parser.add_argument("--worker", choices=list(VARIANTS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.steps)
    rows = []
    for variant in args.variants:
        process = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--worker", variant, "--steps", str(args.steps)],
            capture_output=True, text=True, check=False, cwd=REPO,
        )
        lines = [line for line in process.stdout.splitlines() if line.startswith("RESULT ")]
        if process.returncode or not lines:
            sys.exit(f"{variant} failed:\n{process.stderr[-3000:]}")
        rows.append(json.loads(lines[-1][len("RESULT "):]))
        print(format_row(rows[-1]), flush=True)
    with tempfile.TemporaryDirectory() as directory:
        before = baseline(*journey(directory)[1:])
    backend = rows[0]["backend"]
    header = [
        f"Fine-tuning the fixture translator (tiny, 1 layer) on 700 number pairs, {rows[0]['steps']} "
        f"steps, {backend} on CPU ({os.cpu_count()} cores); before fine-tuning: new numbers "
        f"{before['new_exact']:.3f} exact / BLEU {before['new_bleu']:.1f}, old "
        f"{before['old_exact']:.3f} / {before['old_bleu']:.1f}.",
        "",
        "| run | trainable parameters | ms/step | CPU s/step | peak RSS MiB | checkpoint KiB "
        "| backup KiB | base file KiB | LoRA file KiB | val loss | new: exact / BLEU "
        "| old: exact / BLEU | matmul GFLOP/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    from translate_throughput import write_table  # benchmarks/ is on sys.path when run

    for row in rows:
        row["before"] = before
    write_table(args.results, header, rows, format_row)


if __name__ == "__main__":
    main()
