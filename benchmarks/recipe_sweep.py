"""The small-corpus recipe, found by measurement: short Bible trainings, one setting changed each.

Two tasks. `--task bible`: each trial trains `configs/bible.toml` (Spanish -> English, 31k verse pairs; 1,000 validation
and 1,000 test verses) for a fixed number of optimizer steps with some settings changed
(`--set` of `keras-transformer train`), in its own process, then scores its translator (beam 4)
on the run's 1,000 validation verses (`valid.src` / `valid.ref`: the sweep chooses by these)
and reads the test BLEU the run computed (reported, never used to choose). A row per trial goes
to `benchmarks/results/recipe_sweep.jsonl` (appended as each trial ends, so an interrupted
sweep keeps its rows and a second call skips the trials it has), and the table of all rows to
`recipe_sweep.md`: setting, steps, wall and CPU seconds of the training process, CPU seconds
per step, validation and test BLEU, and the machine's fp32 matmul rate (NumPy, 1024^3) and
load at the start.

Why steps and not minutes: a sweep shares the machine (test suites, other trials), and the
BLEU of a fixed number of steps does not depend on the load, while the minutes do. Settings
that change the cost of a step (the model's size, the batch, the vocabulary) are compared by
their CPU seconds per step too: `make bible` trains for 60 minutes, so a setting that costs
2x per step gets half the steps there. A trial's `steps_factor` gives such a setting a budget
of equal tokens (half the batch: twice the steps).

`--task tsv700`: issue 41's small-corpus journey. A TSV of the first 700 verse pairs of the
Bible (Genesis 1.1 to 26.7; the run holds out 35 + 35 of them and trains on 630) and a config
of nothing but `dataset = "tsv"`, `path` and the step budget, so the recipe
(`keras_transformer.training.recipe`) picks the rest; a trial changes some settings on top.
Its 35 validation verses are too few to choose by, so the sweep scores the next 500 verses of
the Bible (Genesis 26.8 on, never trained on) and still reports the run's 35-verse test BLEU.

What a short trial cannot show: regularisation (dropout, label smoothing) pays when a run
sees the corpus many times; 1,500 steps of 4,096 tokens is about 5 epochs of the Bible, a
60-minute `make bible` on a 200 GFLOP/s machine 40-60. The `--steps` of the long trials is
the caller's.

`--forecast`: "the best row for N steps" and "the row each machine class gets" (issue 56).
The rows' curves (`RecipeRow.bleu_by_steps`, validation BLEU every 500 steps of a 60-minute
`make bible`) give each row's BLEU after N steps for N from 1,500 to 20,000 (equal steps: a
step budget); `--probe` first times each candidate row's training step on this machine in
the ways a machine class trains (`training.speed.measure_step_time`, in a child process
pinned to 1 or 2 cores with `taskset`: one core in float32 with XLA stands in for a 2-core
AVX2 machine at ~150 GFLOP/s, whose wide-row step took 1.35 s against 1.10 s here), appending
rows to `benchmarks/results/recipe_step_times.jsonl`; the table then forecasts, for each
recorded machine class and budget, the steps each row gets and the row the recipe chooses,
into `recipe_forecast.md`.

Usage:

    python benchmarks/recipe_sweep.py --forecast --probe   # time the rows here, then the table
    python benchmarks/recipe_sweep.py --forecast           # the table from the recorded times
    python benchmarks/recipe_sweep.py --list
    python benchmarks/recipe_sweep.py --steps 1500                   # every trial
    python benchmarks/recipe_sweep.py --steps 1500 --trials base lr2  # some
    python benchmarks/recipe_sweep.py --table                         # rewrite the table
    python benchmarks/recipe_sweep.py --task tsv700 --steps 500 --trials base dropout3
"""

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from input_pipeline import matmul_gflops  # noqa: E402  (NumPy's fp32 1024^3 rate)
from train_throughput import cpu_model  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "benchmarks", "results")
CONFIG = os.path.join(REPO, "configs", "bible.toml")
DEFAULT_WORKDIR = os.path.join(REPO, "runs", "recipe_sweep")

# Settings every trial of `--task bible` shares: no time budget (steps decide), checkpoints every 100 steps of
# which the last 3 are averaged (bible.toml's 250 x 5 would average weights of step 500
# into a 1,500-step run), no validation BLEU during the run, no SavedModel.
# The sizes are pinned to what `configs/bible.toml` named before it became the recipe's (so the
# recipe's step-budget warm-up does not change the base between rows): the small row's model,
# vocabulary, batch and warm-up, and the 96-token length limit it had.
BIBLE_COMMON = {
    "model.preset": "",
    "model.num_layers": 2,
    "model.d_model": 128,
    "model.num_heads": 4,
    "model.ff_dim": 512,
    "model.dropout": 0.1,
    "data.vocabulary_size": 4000,
    "data.max_length": 96,
    "data.tokens_per_batch": 4096,
    "optimizer.warmup_steps": 800,
    "optimizer.learning_rate_scale": 1.0,
    "training.minutes": 0,
    "training.checkpoint_every": 100,
    "training.average_checkpoints": 3,
    "training.backup_every": 500,
    "training.tensorboard": "false",
    "evaluation.bleu_sentences": 0,
    "export.saved_model": "false",
    # float32, as every row before the recipe chose mixed bfloat16 on CPUs with bfloat16
    # instructions (2026-11-27): the rows stay comparable. A trial may set "bf16" (and
    # `training.jit_compile` false) to measure the recipe's precision.
    "training.mixed_precision": "none",
    # The paper's length penalty, untuned: the val BLEU of a trial is scored on the run's own
    # validation split, which the recipe's tuning (`evaluation.alphas`) would have chosen its
    # alpha on; and the rows before it (2026-11-28) decoded at 0.6.
    "evaluation.alpha": 0.6,
}

# name -> (settings changed from configs/bible.toml, steps_factor, what it tests).
TRIALS = {
    "base": ({}, 1, "no change (bible: bible.toml's sizes; tsv700: the recipe of the row's date)"),
    # learning rate: the peak is scale * d_model^-0.5 * warmup^-0.5 (0.0031 in bible.toml)
    "lr2": ({"optimizer.learning_rate_scale": 2.0}, 1, "peak learning rate x2 (0.0063)"),
    "lr3": ({"optimizer.learning_rate_scale": 3.0}, 1, "peak learning rate x3 (0.0094)"),
    "lrhalf": ({"optimizer.learning_rate_scale": 0.5}, 1, "peak learning rate x0.5 (0.0016)"),
    "warmup400": ({"optimizer.warmup_steps": 400}, 1, "warm-up 400 (peak x1.41)"),
    # batch: half the tokens per step, twice the steps (equal tokens seen)
    "batch2k": ({"data.tokens_per_batch": 2048}, 2, "2,048-token batches, 2x steps"),
    "batch8k": ({"data.tokens_per_batch": 8192}, 0.5, "8,192-token batches, 0.5x steps"),
    # vocabulary (Sennrich and Zhang 2019: small corpora want small vocabularies)
    "vocab500": ({"data.vocabulary_size": 500}, 1, "500 word pieces"),
    "vocab2k": ({"data.vocabulary_size": 2000}, 1, "2,000 word pieces"),
    "vocab8k": ({"data.vocabulary_size": 8000}, 1, "8,000 word pieces"),
    "sentencepiece4k": ({"data.tokenizer": "sentencepiece"}, 1, "4,000 SentencePiece pieces"),
    # regularisation (Araabi and Monz 2020: more dropout, attention dropout on small data)
    "dropout0": ({"model.dropout": 0.0}, 1, "no dropout"),
    "dropout2": ({"model.dropout": 0.2}, 1, "dropout 0.2"),
    "dropout3": ({"model.dropout": 0.3}, 1, "dropout 0.3"),
    "dropout3att": ({"model.dropout": 0.3, "model.attention_dropout": 0.1}, 1,
                    "dropout 0.3, attention dropout 0.1"),
    "attdrop1": ({"model.attention_dropout": 0.1}, 1, "attention dropout 0.1"),
    "smooth0": ({"training.label_smoothing": 0.0}, 1, "no label smoothing"),
    "smooth2": ({"training.label_smoothing": 0.2}, 1, "label smoothing 0.2"),
    # size (a 60-minute budget: bigger costs steps)
    "layers3": ({"model.num_layers": 3}, 1, "3+3 layers"),
    "d192": ({"model.d_model": 192, "model.ff_dim": 768}, 1, "d_model 192, ff_dim 768"),
    "d256": ({"model.d_model": 256, "model.ff_dim": 1024}, 1, "d_model 256, ff_dim 1024"),
    "heads2": ({"model.num_heads": 2}, 1, "2 heads"),
    "ff1024": ({"model.ff_dim": 1024}, 1, "ff_dim 1024"),
    "untied": ({"model.share_embeddings": "false"}, 1, "separate embeddings and projection"),
    # issue 41's "demo.toml's settings copied by hand" on the 700 pairs (tsv700)
    "demo_hand": ({"optimizer.warmup_steps": 400, "optimizer.learning_rate_scale": 2.0,
                   "training.checkpoint_every": 100, "training.average_checkpoints": 5}, 1,
                  "configs/demo.toml's warm-up 400, scale 2.0, checkpoints 100 x 5"),
    # demo_hand's two halves, told apart (tsv700)
    "warmup400s2": ({"optimizer.warmup_steps": 400, "optimizer.learning_rate_scale": 2.0}, 1,
                    "demo.toml's warm-up 400 at scale 2.0; the recipe's checkpoints"),
    "ckpt100x5": ({"training.checkpoint_every": 100, "training.average_checkpoints": 5}, 1,
                  "checkpoints 100 x 5 (the last 400 steps averaged); the recipe's warm-up"),
    # The warm-up's share at the tiny row's peak (0.0125 = scale / sqrt(64 * warm-up)), tsv700:
    # 1,000 steps, and 410 (a loaded machine's 3 minutes) with a warm-up planned for 900.
    "w600": ({"optimizer.warmup_steps": 600, "optimizer.learning_rate_scale": 2.449}, 1,
             "warm-up 600 at the tiny row's peak 0.0125"),
    "w200p07": ({"optimizer.warmup_steps": 200, "optimizer.learning_rate_scale": 0.99}, 1,
                "warm-up 200 at 0.7x the tiny row's peak (0.00875)"),
    "w200p05": ({"optimizer.warmup_steps": 200, "optimizer.learning_rate_scale": 0.7071}, 1,
                "warm-up 200 at 0.5x the tiny row's peak (0.00625)"),
    "w200p035": ({"optimizer.warmup_steps": 200, "optimizer.learning_rate_scale": 0.495}, 1,
                 "warm-up 200 at 0.35x the tiny row's peak (0.0044)"),
    "w200p025": ({"optimizer.warmup_steps": 200, "optimizer.learning_rate_scale": 0.3536}, 1,
                 "warm-up 200 at 0.25x the tiny row's peak (0.0031)"),
    "w400p07": ({"optimizer.warmup_steps": 400, "optimizer.learning_rate_scale": 1.4}, 1,
                "warm-up 400 at 0.7x the tiny row's peak (0.00875)"),
    "w400p035": ({"optimizer.warmup_steps": 400, "optimizer.learning_rate_scale": 0.7}, 1,
                 "warm-up 400 at 0.35x (0.0044): the recipe's tiny row since this trial"),
    "w82": ({"optimizer.warmup_steps": 82, "optimizer.learning_rate_scale": 0.9056,
             "training.checkpoint_every": 18}, 1,
            "warm-up 82 at the tiny row's peak, checkpoints 18 x 5"),
    "w360": ({"optimizer.warmup_steps": 360, "optimizer.learning_rate_scale": 1.897,
              "training.checkpoint_every": 18}, 1,
             "warm-up 360 at the tiny row's peak, checkpoints 18 x 5"),
    # A slow machine's 3 minutes (448 steps on 2 AVX2 cores, issue 56) with the warm-up
    # planned for the 900 steps of the quiet 2-core estimate, at the recipe's peak 0.0044;
    # against `base` at 448 steps (the recipe's two fifths: 179).
    "w360p035": ({"optimizer.warmup_steps": 360, "optimizer.learning_rate_scale": 0.6641,
                  "training.checkpoint_every": 8}, 1,
                 "warm-up 360 (planned for 900 steps) at the recipe's peak 0.0044"),
    # checkpoint averaging
    "avg1": ({"training.average_checkpoints": 1}, 1, "last checkpoint alone"),
    "avg5": ({"training.average_checkpoints": 5}, 1, "average of the last 5 (400 steps)"),
}


def command(*arguments):
    return [sys.executable, "-m", "keras_transformer.cli", *arguments]


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def small_corpus(workdir, pairs=700, extra=500):
    """`--task tsv700`'s files in `workdir`: the TSV of the first `pairs` verse pairs, its
    config (data and nothing else) and the next `extra` verses as validation files."""
    from keras_transformer.datasets.sword_bible import extract_verses

    paths = {name: os.path.join(workdir, name)
             for name in ("bible700.tsv", "bible700.toml", "valid.src", "valid.ref")}
    if all(os.path.exists(path) for path in paths.values()):
        return paths
    verses = [(source.strip(), target.strip())
              for _, source, target in extract_verses("spaRV1909eb", "engWEB2015eb")
              if source.strip() and target.strip() and "\t" not in source + target]
    with open(paths["bible700.tsv"], "w", encoding="utf-8") as file:
        file.writelines(f"{source}\t{target}\n" for source, target in verses[:pairs])
    for index, name in enumerate(("valid.src", "valid.ref")):
        with open(paths[name], "w", encoding="utf-8") as file:
            file.writelines(pair[index] + "\n" for pair in verses[pairs:pairs + extra])
    with open(paths["bible700.toml"], "w", encoding="utf-8") as file:
        file.write(f'[data]\ndataset = "tsv"\npath = "{paths["bible700.tsv"]}"\n')
    return paths


def run_trial(task, name, steps, workdir, backend, log):
    settings, steps_factor, about = TRIALS[name]
    trial_steps = max(1, round(steps * steps_factor))
    output_dir = os.path.join(workdir, name)
    shutil.rmtree(output_dir, ignore_errors=True)
    if task == "bible":
        config, common = CONFIG, BIBLE_COMMON
        valid = (os.path.join(output_dir, "valid.src"), os.path.join(output_dir, "valid.ref"))
    else:
        paths = small_corpus(workdir)
        # The paper's length penalty, as BIBLE_COMMON.
        config, common = paths["bible700.toml"], {"training.tensorboard": "false",
                                                  "evaluation.alpha": 0.6}
        valid = (paths["valid.src"], paths["valid.ref"])
    sets = {**common, **settings}
    arguments = ["train", config, "--output-dir", output_dir, "--train-steps", str(trial_steps),
                 "--progress", "0"]
    for key, value in sets.items():
        arguments += ["--set", f"{key}={value}"]
    environment = {**os.environ, "KERAS_BACKEND": backend}
    rate, load = matmul_gflops(), os.getloadavg()[0]
    cpu, start = children_cpu(), time.perf_counter()
    subprocess.run(command(*arguments), check=True, env=environment, stdout=log, stderr=log,
                   cwd=REPO)
    wall, cpu = time.perf_counter() - start, children_cpu() - cpu
    with open(os.path.join(output_dir, "metrics.json"), encoding="utf-8") as file:
        metrics = json.load(file)
    scores = subprocess.run(
        command("evaluate", "--model", os.path.join(output_dir, "translator.keras"),
                "--sources", valid[0], "--references", valid[1],
                "--metrics", "bleu", "chrf", "--json"),
        check=True, env=environment, capture_output=True, text=True, cwd=REPO,
    )
    scores = json.loads(scores.stdout)["scores"]  # score_corpus's {metric: {"score": ...}}
    return {
        "task": task,
        "trial": name,
        "about": about,
        "settings": settings,
        "steps": metrics["steps"],
        "train_seconds": metrics["train_seconds"],
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),
        # The whole process (data, tokenizer, test translation included): an upper bound of
        # a step's cost, comparable between trials of the same steps.
        "cpu_seconds_per_step": round(cpu / max(1, metrics["steps"]), 3),
        "val_bleu": round(scores["bleu"]["score"], 2),
        "val_chrf": round(scores["chrf"]["score"], 2),
        # Hypothesis over reference length (BLEU's brevity penalty reads it): the
        # translations' length at alpha 0.6, by trial.
        "val_length_ratio": length_ratio(scores["bleu"].get("verbose_score", "")),
        "test_bleu": round(metrics["test_bleu"], 2),
        "matmul_gflops": round(rate),
        "load": round(load, 2),
        "backend": backend,
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }


def length_ratio(verbose_score):
    """The `ratio = X` sacreBLEU writes in a BLEU score's verbose text, or `None`.

    >>> length_ratio("57.7/31.0/17.9/10.4 (BP = 0.93 ratio = 0.934 hyp_len = 9 ref_len = 10)")
    0.934
    """
    match = re.search(r"ratio = ([0-9.]+)", verbose_score)
    return float(match.group(1)) if match else None


def read_rows(path):
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as file:
        return [json.loads(line) for line in file if line.strip()]


def write_table(rows, path):
    base = {row["steps"]: row["val_bleu"] for row in rows if row["trial"] == "base"}
    lines = [
        "| trial | what | steps | CPU s | CPU s/step | val BLEU | vs base | val length ratio | "
        "test BLEU | matmul GFLOP/s | load | date |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in sorted(rows, key=lambda row: -row["val_bleu"]):
        # The base trial of the same budget (`--steps`): a trial's steps over its factor.
        reference = base.get(round(row["steps"] / TRIALS[row["trial"]][1]))
        delta = "" if reference is None or row["trial"] == "base" else (
            f"{row['val_bleu'] - reference:+.2f}")
        ratio = "" if row.get("val_length_ratio") is None else f"{row['val_length_ratio']:.3f}"
        lines.append(
            f"| {row['trial']} | {TRIALS[row['trial']][2]} | {row['steps']} | {row['cpu_seconds']:.0f} | "
            f"{row['cpu_seconds_per_step']:.3f} | {row['val_bleu']:.2f} | {delta} | {ratio} | "
            f"{row['test_bleu']:.2f} | {row['matmul_gflops']} | {row['load']} | {row['date']} |"
        )
    table = "\n".join(lines) + "\n"
    with open(path, "w", encoding="utf-8") as file:
        file.write(table)
    return table


# How a machine class trains, emulated here: (name, cores, precision settings).
CLASSES = (
    ("1 core, float32 with XLA (stands in for 2 AVX2 cores)", 1,
     {"training.mixed_precision": "none", "training.jit_compile": True}),
    ("1 core, mixed bfloat16 without XLA", 1,
     {"training.mixed_precision": "bf16", "training.jit_compile": False}),
    ("2 cores, float32 with XLA", 2,
     {"training.mixed_precision": "none", "training.jit_compile": True}),
    ("2 cores, mixed bfloat16 without XLA", 2,
     {"training.mixed_precision": "bf16", "training.jit_compile": False}),
)
# The step counts of the "best row for N steps" table.
FORECAST_STEPS = (1_500, 2_500, 4_000, 6_000, 8_000, 12_000, 20_000)
FORECAST_MINUTES = (30, 60)
PROBE_SCRIPT = """
import json, sys
from keras_transformer.training.config import TrainingConfig
from keras_transformer.training.recipe import RECIPE, _row_changes
from keras_transformer.training.speed import measure_step_time
settings = json.loads(sys.argv[1])
for row in RECIPE:
    if row.name in settings["rows"]:
        base = TrainingConfig().replace(**{"training.minutes": 60})
        config = base.replace(**_row_changes(base, row, False, None, None)[0]).replace(
            **settings["precision"])
        time = measure_step_time(config, row.vocabulary_size, steps=5)
        print(json.dumps({"row": row.name, "seconds": time.seconds,
                          "cpu_seconds": time.cpu_seconds}), flush=True)
"""


def probe_classes(path):
    """Times the candidate rows of the Bible (29,077 pairs) in each of `CLASSES` here, one
    child process per class, and appends a row per (class, row) to `path`."""
    from keras_transformer.training import recipe

    names = [row.name for row in recipe.candidates(29_077)]
    for name, cores, precision in CLASSES:
        gflops = matmul_gflops()
        command = ["taskset", "-c", ",".join(str(core) for core in range(cores)), sys.executable,
                   "-c", PROBE_SCRIPT, json.dumps({"rows": names, "precision": precision})]
        environment = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}
        output = subprocess.run(command, env=environment, capture_output=True, text=True,
                                check=True, cwd=REPO).stdout
        for line in output.splitlines():
            if line.startswith("{"):
                timed = json.loads(line)
                row = {"date": time.strftime("%Y-%m-%d %H:%M"), "class": name, "cores": cores,
                       **timed, "matmul_gflops_2_cores": round(gflops), "cpu": cpu_model()}
                print(row, flush=True)
                with open(path, "a", encoding="utf-8") as file:
                    file.write(json.dumps(row) + "\n")


def write_forecast(times_path, table_path):
    """The "best row for N steps" table and each recorded machine class's choice."""
    from keras_transformer.training import recipe
    from keras_transformer.training.config import TrainingConfig

    rows = recipe.candidates(29_077)
    last = " and ".join(f"{row.name} {row.bleu_by_steps[-1][0]:,}" for row in rows)
    lines = ["Validation BLEU (100 verses, alpha 0.6) after N steps, by the rows' curves "
             f"(`RecipeRow.bleu_by_steps`; flat after each one's last point: {last} steps, "
             "so past them a longer budget is not measured and a bigger model may do better):",
             "",
             "| steps | " + " | ".join(row.name for row in rows) + " | best at equal steps |",
             "| ---: |" + " ---: |" * len(rows) + " --- |"]
    for steps in FORECAST_STEPS:
        bleu = [row.expected_bleu(steps) for row in rows]
        best = rows[bleu.index(max(bleu))].name
        lines.append(f"| {steps:,} | " + " | ".join(f"{value:.1f}" for value in bleu)
                     + f" | {best} |")
    measured = read_rows(times_path)
    latest = {}
    for row in measured:  # the last time of each (class, row, cpu)
        latest[(row["cpu"], row["class"], row["row"])] = row
    classes = sorted({(key[0], key[1]) for key in latest})
    lines += ["", "Each machine class's forecast (step times measured by `--probe`; 80 % of "
              "the minutes train):", "",
              "| CPU | class | minutes | " + " | ".join(
                  f"{row.name}: s/step, steps, BLEU" for row in rows) + " | chosen |",
              "| --- | --- | ---: |" + " --- |" * len(rows) + " --- |"]
    for cpu, name in classes:
        for minutes in FORECAST_MINUTES:
            config = TrainingConfig().replace(**{"training.minutes": minutes})
            seconds = {row.name: latest[(cpu, name, row.name)]["seconds"] for row in rows
                       if (cpu, name, row.name) in latest}
            if len(seconds) < len(rows):
                continue
            chosen, forecasts = recipe.choose_row(
                29_077, config, lambda row, seconds=seconds: seconds[row.name])
            cells = [f"{forecast.seconds_per_step:.2f}, {forecast.steps:,}, {forecast.bleu:.1f}"
                     for forecast in forecasts]
            lines.append(f"| {cpu} | {name} | {minutes} | " + " | ".join(cells)
                         + f" | {chosen.name} |")
    table = "\n".join(lines) + "\n"
    with open(table_path, "w", encoding="utf-8") as file:
        file.write(table)
    return table


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", choices=("bible", "tsv700"), default="bible")
    parser.add_argument("--trials", nargs="+", choices=TRIALS, default=list(TRIALS))
    parser.add_argument("--steps", type=int, default=1500, help="optimizer steps of a trial")
    parser.add_argument("--backend", default="tensorflow")
    parser.add_argument("--workdir", default=DEFAULT_WORKDIR)
    parser.add_argument("--results", default="",
                        help="file name (no extension) in benchmarks/results/ (default: "
                        "recipe_sweep for bible, recipe_sweep_tsv700)")
    parser.add_argument("--again", action="store_true", help="rerun trials already recorded")
    parser.add_argument("--list", action="store_true", help="print the trials and stop")
    parser.add_argument("--table", action="store_true", help="rewrite the table and stop")
    parser.add_argument("--forecast", action="store_true",
                        help="the best row for N steps and per machine class, then stop")
    parser.add_argument("--probe", action="store_true",
                        help="with --forecast: time the rows here first (about 4 minutes)")
    arguments = parser.parse_args()
    if arguments.forecast:
        times_path = os.path.join(RESULTS, "recipe_step_times.jsonl")
        if arguments.probe:
            probe_classes(times_path)
        print(write_forecast(times_path, os.path.join(RESULTS, "recipe_forecast.md")))
        return
    if arguments.list:
        for name, (settings, factor, about) in TRIALS.items():
            print(f"{name:16} x{factor:<4} {about}  {settings}")
        return
    results = arguments.results or (
        "recipe_sweep" if arguments.task == "bible" else f"recipe_sweep_{arguments.task}")
    if arguments.workdir == DEFAULT_WORKDIR and arguments.task != "bible":
        arguments.workdir = f"{DEFAULT_WORKDIR}_{arguments.task}"
    rows_path = os.path.join(RESULTS, f"{results}.jsonl")
    table_path = os.path.join(RESULTS, f"{results}.md")
    os.makedirs(arguments.workdir, exist_ok=True)
    rows = read_rows(rows_path)
    if not arguments.table:
        done = {(row["trial"], row["steps"]) for row in rows}
        log_path = os.path.join(arguments.workdir, "sweep.log")
        for index, name in enumerate(arguments.trials):
            steps = max(1, round(arguments.steps * TRIALS[name][1]))
            if (name, steps) in done and not arguments.again:
                print(f"[{index + 1}/{len(arguments.trials)}] {name}: recorded, skipped")
                continue
            print(f"[{index + 1}/{len(arguments.trials)}] {name}: {steps} steps ...", flush=True)
            with open(log_path, "a", encoding="utf-8") as log:
                row = run_trial(arguments.task, name, arguments.steps, arguments.workdir,
                                arguments.backend, log)
            rows.append(row)
            with open(rows_path, "a", encoding="utf-8") as file:
                file.write(json.dumps(row) + "\n")
            print(f"    val BLEU {row['val_bleu']:.2f}, test {row['test_bleu']:.2f}, "
                  f"{row['cpu_seconds']:.0f} CPU s ({row['cpu_seconds_per_step']:.3f}/step), "
                  f"{row['matmul_gflops']} GFLOP/s", flush=True)
    print(write_table(rows, table_path))


if __name__ == "__main__":
    main()
