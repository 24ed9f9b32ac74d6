"""`make demo`'s size, found by measurement: `configs/demo.toml` trained for a fixed number of steps.

Issue 60: on a 2-core AVX2 machine at ~150 GFLOP/s under load, the 1,200-step demo stopped at
its 4.5-minute budget after 732 steps with 98.7 % test exact match and one of its five samples
wrong. A machine's speed changes the steps a time budget gives, not what a step does, so the
demo is sized by steps: each trial trains demo.toml for `--steps` steps with some settings
changed (`--set` of `keras-transformer train`), in its own process, without a time budget or
a SavedModel (the samples are translated by the trained Translator), and one row per trial
and seed goes to `benchmarks/results/demo_sweep.jsonl` (appended as each ends; a second call
skips the rows it has): steps, wall and CPU seconds of the process, the training seconds, test
exact match and BLEU, the samples right, and the machine's fp32 matmul rate and load at the
start (`--trials demo`: the committed file as `make demo` runs it, export included).
`--table` writes `demo_sweep.md` from the rows, and the figure
`docs/images/demo_sweep.png`.

The checkpoints averaged at the end span the last ~10 % of the steps in every trial (the
recipe's spacing, `keras_transformer.training.recipe.checkpoint_spacing`), as demo.toml now
leaves them to the recipe.

Usage:

    python benchmarks/demo_sweep.py --list
    python benchmarks/demo_sweep.py --steps 600 --seeds 0 1 --trials old warm200_low
    python benchmarks/demo_sweep.py --steps 600 --seeds 0 --trials demo   # make demo itself
    python benchmarks/demo_sweep.py --table
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from input_pipeline import matmul_gflops  # noqa: E402  (NumPy's fp32 1024^3 rate)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "benchmarks", "results")
ROWS = os.path.join(RESULTS, "demo_sweep.jsonl")
CONFIG = os.path.join(REPO, "configs", "demo.toml")
WORKDIR = os.path.join(REPO, "runs", "demo_sweep")

# name -> (what, settings on top of configs/demo.toml)
TRIALS = {
    "old": ("demo.toml before issue 60: warm-up 400, scale 2.0 (peak 0.0125), 4,096-token batches",
            {"optimizer.warmup_steps": 400, "optimizer.learning_rate_scale": 2.0,
             "data.tokens_per_batch": 4096}),
    "warm200": ("warm-up 200, scale 1.41 (the same peak, 0.0125)",
                {"optimizer.warmup_steps": 200, "optimizer.learning_rate_scale": 1.41,
                 "data.tokens_per_batch": 4096}),
    "warm200_peak": ("warm-up 200, scale 2.0 (peak 0.0177)",
                     {"optimizer.warmup_steps": 200, "optimizer.learning_rate_scale": 2.0,
                      "data.tokens_per_batch": 4096}),
    "half": ("warm-up 400, scale 1.0 (half the peak: 0.00625)",
             {"optimizer.warmup_steps": 400, "optimizer.learning_rate_scale": 1.0,
              "data.tokens_per_batch": 4096}),
    "warm200_low": ("warm-up 200, scale 1.0 (peak 0.0088)",
                    {"optimizer.warmup_steps": 200, "optimizer.learning_rate_scale": 1.0,
                     "data.tokens_per_batch": 4096}),
    "batch2k": ("2,048-token batches, warm-up 200, scale 1.41 (peak 0.0125)",
                {"optimizer.warmup_steps": 200, "optimizer.learning_rate_scale": 1.41,
                 "data.tokens_per_batch": 2048}),
    # `--trials demo --steps 600`: the committed file as `make demo` runs it (`--steps` only
    # names the row; the file's budget of 4.5 minutes, its checkpoints, the SavedModel export
    # and the samples translated by it).
    "demo": ("configs/demo.toml as committed: make demo, SavedModel included", {}),
}


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def toml_value(value):
    return json.dumps(value) if isinstance(value, str) else str(value).lower() \
        if isinstance(value, bool) else str(value)


def run_trial(name, steps, seed, backend):
    what, settings = TRIALS[name]
    output = os.path.join(WORKDIR, f"{name}_{steps}_s{seed}")
    if name == "demo":  # `make demo` itself: its budget, checkpoints and SavedModel.
        settings = {"training.seed": seed}
    else:
        settings = {
            **settings,
            "training.train_steps": steps,
            "training.minutes": 0,
            "training.seed": seed,
            "training.checkpoint_every": max(1, int(steps * 0.1 / 5)),
            "training.average_checkpoints": 5,
            "export.saved_model": False,
        }
    arguments = [sys.executable, "-m", "keras_transformer.cli", "train", "--config", CONFIG,
                 "--output-dir", output, "--progress", "2"]
    for key, value in settings.items():
        arguments += ["--set", f"{key}={toml_value(value)}"]
    env = {**os.environ, "PYTHONPATH": REPO, "KERAS_BACKEND": backend}
    gflops, load = matmul_gflops(), os.getloadavg()[0]
    cpu_before, start = children_cpu(), time.monotonic()
    os.makedirs(WORKDIR, exist_ok=True)
    with open(output + ".log", "w") as log:
        subprocess.run(arguments, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)
    wall, cpu = time.monotonic() - start, children_cpu() - cpu_before
    with open(os.path.join(output, "metrics.json")) as file:
        metrics = json.load(file)
    samples = metrics.get("samples", [])
    return {
        "trial": name, "what": what, "seed": seed, "steps": metrics["steps"],
        "wall_seconds": round(wall, 1), "cpu_seconds": round(cpu, 1),
        "train_seconds": metrics["train_seconds"],
        "cpu_seconds_per_step": round(cpu / max(1, metrics["steps"]), 3),
        "test_exact_match": metrics.get("test_exact_match"), "test_bleu": metrics.get("test_bleu"),
        "samples_right": sum(bool(sample.get("right")) for sample in samples),
        "samples": len(samples), "backend": backend, "matmul_gflops": round(gflops),
        "load": round(load, 2), "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }


def read_rows():
    if not os.path.exists(ROWS):
        return []
    with open(ROWS) as file:
        return [json.loads(line) for line in file if line.strip()]


def write_table(rows):
    lines = [
        "# `make demo` sized by steps (benchmarks/demo_sweep.py)", "",
        "| trial | what | seed | steps | wall s | CPU s | CPU s/step | test exact match | "
        "test BLEU | samples right | matmul GFLOP/s | load | date |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    def number(value, digits=0):
        return "" if value is None else f"{value:.{digits}f}"

    for row in rows:
        lines.append(
            f"| {row['trial']} | {row['what']} | {row['seed']} | {row['steps']} | "
            f"{number(row['wall_seconds'])} | {number(row['cpu_seconds'])} | "
            f"{number(row['cpu_seconds_per_step'], 3)} | {100 * row['test_exact_match']:.1f} % | "
            f"{row['test_bleu']:.2f} | {row['samples_right']} of {row['samples']} | "
            f"{row['matmul_gflops'] or ''} | {row['load'] or ''} | {row['date']} |")
    with open(os.path.join(RESULTS, "demo_sweep.md"), "w") as file:
        file.write("\n".join(lines) + "\n")


FIGURE = os.path.join(REPO, "docs", "images", "demo_sweep.png")


def write_figure(rows, path=FIGURE):
    """Test exact match of each trial and seed (the goal, 99.5 %, as a line): the figure of
    docs/training.md's `make demo` section."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trials = list(dict.fromkeys(f"{row['trial']}\n{row['steps']} steps" for row in rows))
    figure, axes = plt.subplots(figsize=(max(5, 1.3 * len(trials)), 3.2))
    for row in rows:
        x = trials.index(f"{row['trial']}\n{row['steps']} steps") + 0.12 * (row["seed"] - 0.5)
        color = "tab:green" if row["samples_right"] == row["samples"] else "tab:red"
        axes.scatter(x, 100 * row["test_exact_match"], color=color, zorder=3)
        axes.annotate(f"s{row['seed']}", (x, 100 * row["test_exact_match"]), fontsize=7,
                      xytext=(4, -3), textcoords="offset points")
    axes.axhline(99.5, color="gray", linestyle="--", linewidth=1, label="goal: 99.5 %")
    axes.set_xticks(range(len(trials)), trials, fontsize=8)
    axes.set_xlim(-0.5, len(trials) - 0.5)
    axes.set_ylabel("test exact match (%)")
    axes.set_title("make demo by steps: green, all 5 samples right; red, not", fontsize=9)
    axes.legend(fontsize=8, loc="best")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[600])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--trials", nargs="+", default=list(TRIALS))
    parser.add_argument("--backend", default="tensorflow")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--table", action="store_true")
    args = parser.parse_args()
    if args.list:
        for name, (what, _) in TRIALS.items():
            print(f"{name}: {what}")
        return
    if not args.table:
        done = {(row["trial"], row["steps"], row["seed"]) for row in read_rows()}
        for steps in args.steps:
            for name in args.trials:
                for seed in args.seeds:
                    if (name, steps, seed) in done:
                        continue
                    row = run_trial(name, steps, seed, args.backend)
                    print(json.dumps(row), flush=True)
                    with open(ROWS, "a") as file:
                        file.write(json.dumps(row) + "\n")
    write_table(read_rows())
    write_figure(read_rows())


if __name__ == "__main__":
    main()
