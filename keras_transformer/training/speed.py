"""How fast this machine trains a recipe row's model: a few real training steps, timed.

A time budget buys steps, and a step's cost differs threefold between CPUs (issue 56: the wide
row took 0.42 s a step on a 2-core Xeon with AMX in mixed bfloat16 and 1.35 s on a 2-core
AMD EPYC with AVX2 only, in float32). So before a budgeted run chooses its row, it times each
candidate row's model here: built and compiled as the run would build it (`build_model`,
`compile_model`: the same precision, XLA or not, optimizer and loss), then trained on
synthetic batches of the row's shape for `warmup` untimed and `steps` timed steps.

A batch is `tokens_per_batch // length` rows of `length` tokens, source and target alike:
`LENGTH` is near the padded length of a `make bible` batch (the verse buckets' mean), and a
step's cost is close to linear in its tokens, so other corpora's steps are within the
bucketing's spread of it. The seconds of a step are the median of the timed ones.

The probe draws random numbers (the model's initial weights); the caller seeds Keras again
afterwards, so that a run's weights do not depend on whether it probed.
"""

import dataclasses
import math
import resource
import statistics
import time

import keras
import numpy as np

from keras_transformer.files import read_json
from keras_transformer.training.building import build_model, compile_model
from keras_transformer.training.config import RECORD_KEYS

# The tokens of a probe batch's rows (source and target): near `make bible`'s mean padded
# bucket length.
LENGTH = 48
# Untimed steps (the first compiles), then timed ones.
WARMUP_STEPS = 2
TIMED_STEPS = 3
# The key of `train_config.json` holding the recipe's line and the step times it measured.
RECORD_KEY = RECORD_KEYS[0]


@dataclasses.dataclass(frozen=True)
class StepTime:
    """A row's measured training step.

    Attributes:
        seconds: float. Wall seconds per step (median of the timed steps).
        cpu_seconds: float. The process's CPU seconds per timed step (all threads).
        steps: int. The steps timed.
        probe_seconds: float. Wall seconds the probe took, building and compiling included.
    """

    seconds: float
    cpu_seconds: float
    steps: int
    probe_seconds: float


def _cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure_step_time(config, vocabulary_size, length=LENGTH, warmup=WARMUP_STEPS,
                      steps=TIMED_STEPS):
    """Times training steps of the model `config` describes (a `TrainingConfig` with the
    row's settings applied) on synthetic batches of `config.data.tokens_per_batch` tokens.

    Args:
        config: `TrainingConfig`. Its `[model]`, `data.tokens_per_batch`, precision,
            `jit_compile` and optimizer settings are the run's.
        vocabulary_size: int. The model's vocabulary (the row's `data.vocabulary_size`).
        length: int. Tokens per batch row. Defaults to `LENGTH`.
        warmup: int. Untimed steps first. Defaults to `WARMUP_STEPS`.
        steps: int. Timed steps. Defaults to `TIMED_STEPS`.

    Returns:
        A `StepTime`.
    """
    start = time.perf_counter()
    length = max(2, min(length, config.data.max_length))
    rows = max(1, config.data.tokens_per_batch // length)
    generator = np.random.default_rng(0)
    source = generator.integers(3, vocabulary_size, (rows, length)).astype("int32")
    target = generator.integers(3, vocabulary_size, (rows, length + 1)).astype("int32")
    inputs = {"encoder_inputs": source, "decoder_inputs": target[:, :-1]}
    labels = target[:, 1:]
    model = build_model(config, vocabulary_size)
    compile_model(model, config)
    for _ in range(warmup):
        model.train_on_batch(inputs, labels)
    times, cpu_start = [], _cpu_seconds()
    for _ in range(steps):
        begin = time.perf_counter()
        model.train_on_batch(inputs, labels)
        times.append(time.perf_counter() - begin)
    cpu = (_cpu_seconds() - cpu_start) / steps
    del model
    return StepTime(
        seconds=statistics.median(times),
        cpu_seconds=cpu,
        steps=steps,
        probe_seconds=time.perf_counter() - start,
    )


def precision_text(config):
    """`mixed bfloat16 without XLA`, `float32 with XLA`, ...: how `config` trains."""
    policy = {"bf16": "mixed bfloat16", "fp16": "mixed float16"}.get(
        config.training.mixed_precision, "float32")
    return f"{policy} {'with' if config.training.jit_compile else 'without'} XLA"


class RowProbe:
    """The recipe's `step_time` (`resolve_recipe`): times each candidate row's step once
    (`measure_step_time`), or takes the time `recorded` for it, and keeps what it used.

    Args:
        recorded: dict. Row name -> the record of a time (`times`' values), from the run's
            first start (`recorded_step_times`).
        report: callable `str -> None`. Says what it times and what it measured.

    Attributes:
        times: dict. Row name -> `{"seconds", "cpu_seconds", "probe_seconds", "tokens",
            "precision"}` for each row asked about: what the run records.
        probed: bool. Whether any row was timed here (the probe drew random numbers).
    """

    def __init__(self, recorded, report):
        self.recorded = dict(recorded)
        self.report = report
        self.times = {}
        self.probed = False

    def __call__(self, row, config):
        if row.name in self.recorded:
            self.times[row.name] = self.recorded[row.name]
            return float(self.recorded[row.name]["seconds"])
        tokens = config.data.tokens_per_batch
        precision = precision_text(config)
        self.report(f"recipe: timing the {row.name} row's {tokens:,}-token training step here "
                    f"({row.model_text()}, {precision})")
        measured = measure_step_time(config, config.data.vocabulary_size)
        self.probed = True
        self.times[row.name] = {
            "seconds": round(measured.seconds, 4),
            "cpu_seconds": round(measured.cpu_seconds, 4),
            "probe_seconds": round(measured.probe_seconds, 1),
            "tokens": tokens,
            "precision": precision,
        }
        self.report(f"recipe: the {row.name} row: {measured.seconds:.3f} s per step "
                    f"({measured.cpu_seconds:.3f} CPU s), timed in {measured.probe_seconds:.0f} s")
        return measured.seconds


def recorded_step_times(path):
    """Row name -> recorded step time, from the `train_config.json` at `path` of an earlier
    start of the run; `{}` where there is none (or it cannot be read)."""
    record = read_json(path)
    recipe = record.get(RECORD_KEY) if isinstance(record, dict) else None
    times = recipe.get("step_times") if isinstance(recipe, dict) else None
    if not isinstance(times, dict):
        return {}
    return {name: time for name, time in times.items()
            if isinstance(time, dict) and _plausible_seconds(time.get("seconds"))}


def _plausible_seconds(value):
    """A step time a run could have recorded: a finite number of seconds in (0, 1 hour]."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and 0 < value <= 3600)


def reseed(seed):
    """Seeds Keras (and NumPy, Python) again after probing: the run's weights as without it."""
    keras.utils.set_random_seed(seed)
