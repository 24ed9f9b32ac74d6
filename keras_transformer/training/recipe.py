"""The recipe: model, vocabulary, batch, warm-up and dropout from the corpus size and the budget.

The defaults of `TrainingConfig` are the paper's, made for 4.5 M sentence pairs on 8 GPUs: on a
700-pair corpus and 3 CPU minutes they give 25,000-token batches (the whole corpus in one
step), a 37,000-token vocabulary and a 4,000-step warm-up the run never ends (issue 41: test
BLEU 0.04). So a config that gives a budget (`training.minutes` or `training.train_steps`) and
leaves any of these settings (and the checkpoint spacing) unset gets them from the row of
`RECIPE` that fits its training pairs and its budget (`recipe_row`), once the run has counted
them (`resolve_recipe`, called by `prepare_run`), and the run prints one line saying what it
chose and why. A setting the config names wins (see
`TrainingConfig.is_set`); so does a fine-tune (`training.init_from`: the translator's model and
vocabulary), and a config with no budget keeps the defaults.

The rows are `RECIPE`, as data: docs/training.md's table of them ("Small corpus") is tested
against it (tests/training/test_recipe_docs.py).

**The row fits the machine** (issue 56). Where several rows fit the corpus (the small and the
wide rows, 5,000-100,000 pairs), each has a curve (`RecipeRow.bleu_by_steps`: its validation
BLEU every 500 steps of a `make bible` run) and the budget decides between them in steps:
a time budget's steps at the step time the trainer measured here for each row's model
(`step_time`, `training.speed`), a step budget's as they are (`choose_row`). A step costs
threefold more on one CPU than another (the wide row: 0.42 s on 2 cores with AMX in mixed
bfloat16, 1.35 s on 2 AVX2 cores in float32: 2,520 steps and 30.75 test BLEU in an hour, where
the old rule, a fixed 0.42 s, had forecast 6,857), so the minutes alone cannot choose.

Vocabulary by corpus size follows Sennrich and Zhang (2019), "Revisiting Low-Resource Neural
Machine Translation": small corpora want small subword vocabularies.

**Warm-up.** At most the row's, and at most `WARMUP_SHARE` (two fifths) of the steps the
budget gives: `training.train_steps`, or with a time budget an estimate of the steps it allows
(`estimated_steps`: 80 % of the minutes, at the step time measured here where the rows were
timed, else the row's `seconds_per_step`, measured on this project's 2-core CPU when quiet). Measured on the 700 Bible pairs
(docs/training.md, "The sweep"): at 1,000 steps a warm-up of 400 beat one of 200 at the same
peak by +0.6 BLEU on 500 held-out verses; a loaded machine makes fewer steps than estimated,
so its warm-up is a larger share of them.
The schedule's peak is `learning_rate_scale · d_model^-0.5 · warmup_steps^-0.5`, so a shorter
warm-up peaks higher: with the recipe's model, `optimizer.learning_rate_scale` (unless set) is
chosen so that the peak is the row's (measured: a 72-step warm-up at demo.toml's scale 2.0,
a peak of 0.029, stopped the tiny model learning). The rows' peaks are measured: on 630
Bible pairs the tiny row's 0.0044 beat demo.toml's 0.0125 by +1.7 BLEU at 1,000 steps, and on
29,077 the small row's 0.0031 beat half of it by +2.6 and twice it by +0.7 at 1,200 steps.

**Precision.** On TensorFlow on a CPU with bfloat16 instructions and no GPU (the trainer asks
`building.bfloat16_trains_faster`), the rows whose model was measured to train faster in mixed
bfloat16 without XLA (`RecipeRow.cpu_bfloat16`: small, wide and base) get
`training.mixed_precision = "bf16"` and `training.jit_compile = false`, unless the config names
either or its own model (the measurement was of the row's model: `configs/demo.toml`'s tiny one
at 20,000 pairs falls in the small row, and d_model 64 does not train faster in bf16): on the Bible, 60 minutes on one core gave 5,258 steps and 32.03 test BLEU against
float32's 4,538 and 31.37, with the same validation loss at equal steps.

**Length penalty.** Unless `evaluation.alpha` or `evaluation.alphas` is set, the run tries
the length penalties of `ALPHAS` on the validation split once trained and keeps the best
(`evaluation.alphas`), as the paper chose its alpha on the development set; with fewer than
`MIN_TUNING_PAIRS` validation pairs (too few to rank them), it keeps `evaluation.alpha`.
Measured on the Bible (the wide row, 60 minutes): at the paper's 0.6 the translations were
7-8 % shorter than the references; from a fresh clone, `make bible` chose alpha 1.6 (36.54
validation BLEU against 35.84 at 0.6) and scored 36.46 test BLEU against 35.87.

**Checkpoints.** Unless `training.checkpoint_every` or `training.average_checkpoints` is set,
checkpoints are spaced so that the averaged ones span the last `AVERAGED_SHARE` of the steps
(measured: averaging the epoch-end checkpoints of steps 200-510 of a 510-step run gave 0.78
test BLEU, the weights of step 510 alone 2.32). A time budget's steps are an estimate, so the
run spaces them again at each epoch's start from the step time it measures
(`time_limit.CheckpointPlan`; a faster machine makes more steps than estimated).

Pure Python: importing this module imports neither Keras nor TensorFlow.
"""

import dataclasses
import math

from keras_transformer.hyperparameters import PRESETS

# The `[model]` settings that choose the architecture: naming any of them leaves the
# recipe's model (and its learning rate) out.
ARCHITECTURE = ("preset", "num_layers", "num_decoder_layers", "d_model", "num_heads", "ff_dim")
# The share of a time budget the recipe counts on for training steps (the rest: data,
# tokenizer, compilation, validation).
TRAINING_SHARE = 0.8
# The largest share of the budget's steps a warm-up takes (measured on the 700 pairs: 0.4 of
# 1,000 steps beat 0.2 by +0.6 BLEU).
WARMUP_SHARE = 0.4
# The share of the budget's steps the averaged checkpoints span (the paper's base: the last 5
# of checkpoints written every 10 minutes of 12 hours, ~7 %).
AVERAGED_SHARE = 0.1
# The length penalties the run tries on the validation split once trained (`evaluation.alphas`):
# at the paper's 0.6 the wide row's Bible translations were 7-8 % shorter than the references
# (BLEU's brevity penalty); the alpha best on the validation split (1.5 and 1.6 on two runs)
# gave +0.72 and +0.59 test BLEU: `make bible` from a fresh clone, 35.87 -> 36.46.
ALPHAS = [0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0]
# The fewest validation pairs the recipe tunes the length penalty on. Simulated on the 1,000
# Bible validation verses of a `make bible` run (tuning on 1,000 random subsets of each size,
# scored on the 1,000 test verses): 35 pairs gained +0.23 test BLEU on average but lost up to
# 3.3 in 3 % of the draws (alpha 1.8 chosen); 200 pairs gained +0.53 and never lost.
MIN_TUNING_PAIRS = 200
# Why a run on a CPU with bfloat16 instructions trains in mixed bfloat16 (docs/training.md).
BFLOAT16_WHY = ("this CPU multiplies bfloat16 at about twice float32's rate: a Bible step "
                "took ~0.8x float32's, with the same validation loss at equal steps")


@dataclasses.dataclass(frozen=True)
class RecipeRow:
    """One row of `RECIPE`: the settings for corpora of up to `max_pairs` training pairs.

    Args:
        name: str. The model's name in the run's line.
        max_pairs: int. The largest corpus of the row (training pairs); `None` is no bound.
        model: dict. The `[model]` settings (`preset` and `Transformer` arguments, dropout
            included).
        vocabulary_size: int. `data.vocabulary_size`.
        tokens_per_batch: int. `data.tokens_per_batch`.
        warmup_steps: int. The most warm-up steps (`optimizer.warmup_steps`).
        learning_rate_scale: float. `optimizer.learning_rate_scale` at `warmup_steps`: the
            two set the row's peak learning rate (`peak_learning_rate`).
        seconds_per_step: float. The step time on a quiet 2-core CPU, for the steps a time
            budget allows.
        source: str. Where the row's values come from.
        cpu_bfloat16: bool. On a CPU with bfloat16 instructions (`resolve_recipe`'s
            `bfloat16_cpu`), train in mixed bfloat16 without XLA: measured faster for the
            row's model. Defaults to `False`.
        bleu_by_steps: tuple of `(steps, BLEU)`. The sweep's curve: the row's validation
            BLEU after so many steps, measured; a row with a curve competes with the other
            rows with curves for the corpus, by the BLEU of the steps the budget buys each
            (`recipe_row`). Defaults to `()`: no curve.
    """

    name: str
    max_pairs: int | None
    model: dict
    vocabulary_size: int
    tokens_per_batch: int
    warmup_steps: int
    learning_rate_scale: float
    seconds_per_step: float
    source: str
    cpu_bfloat16: bool = False
    bleu_by_steps: tuple = ()

    @property
    def peak_learning_rate(self):
        """The peak of the row's schedule: `scale · d_model^-0.5 · warmup^-0.5`."""
        return self.learning_rate_scale / math.sqrt(self.sizes["d_model"] * self.warmup_steps)

    def model_text(self, dropout=None):
        """The row's model in words: `2 layers, d_model 64, 4 heads, ff_dim 256, dropout 0.1`
        (the dropout `dropout` when given: a config's own)."""
        sizes = self.sizes
        dropout = sizes["dropout"] if dropout is None else dropout
        return (f"{sizes['num_layers']} layers, d_model {sizes['d_model']}, {sizes['num_heads']} "
                f"heads, ff_dim {sizes['ff_dim']}, dropout {dropout:g}")

    def expected_bleu(self, steps):
        """The sweep's validation BLEU after `steps` steps: its curve made non-decreasing
        (the best so far: what checkpoint averaging and `keep_best` keep), linear between
        its points and from 0 at step 0, flat after its last point; `None` without a curve.

        Example:

        >>> row = dataclasses.replace(RECIPE[1], bleu_by_steps=((500, 10.0), (1000, 8.0),
        ...                                                     (1500, 20.0)))
        >>> [row.expected_bleu(steps) for steps in (250, 1000, 1250, 9000)]
        [5.0, 10.0, 15.0, 20.0]
        """
        if not self.bleu_by_steps:
            return None
        points, best = [(0, 0.0)], 0.0
        for point_steps, bleu in self.bleu_by_steps:
            best = max(best, bleu)
            points.append((point_steps, best))
        for (left, low), (right, high) in zip(points, points[1:]):
            if steps <= right:
                return low + (high - low) * (steps - left) / (right - left)
        return points[-1][1]

    @property
    def sizes(self):
        """The model's `Transformer` arguments (the preset's, then the row's own)."""
        return {**PRESETS.get(self.model.get("preset") or "base", {}), **self.model}


def _every_500_steps(*bleu, last):
    """A curve of validations every 500 steps (the first at step 500), then the run's `last`
    `(steps, BLEU)`."""
    return (*((500 * (index + 1), value) for index, value in enumerate(bleu)), last)


RECIPE = (
    # configs/demo.toml's sizes: the tiny preset, 1,000 word pieces, 4,096-token batches,
    # warm-up 400. Its peak learning rate (scale 2.0: 0.0125, made for 20,000 number names)
    # is too high for 630 Bible pairs: at 1,000 steps, 0.0125 -> 1.83 BLEU on 500 held-out
    # verses, 0.0088 -> 2.97, 0.0063 -> 3.35, 0.0044 -> 3.55 (benchmarks/results/
    # recipe_sweep_tsv700.md); scale 0.7 gives 0.0044.
    RecipeRow(
        name="tiny",
        max_pairs=5_000,
        model={"preset": "tiny", "dropout": 0.1},
        vocabulary_size=1_000,
        tokens_per_batch=4_096,
        warmup_steps=400,
        learning_rate_scale=0.7,
        # The 700-pair journey alone on 2 cores (185 GFLOP/s): 1,001 steps in 3 minutes,
        # 0.15-0.17 s per step.
        seconds_per_step=0.16,
        source="configs/demo.toml's sizes, the peak learning rate measured on 630 Bible pairs",
        # Mixed bfloat16 without XLA does not pay at d_model 64: a 4,096-token step of 1,000
        # pieces took 141-160 ms against float32's 151-155 (2 cores, AVX-512 BF16).
        cpu_bfloat16=False,
    ),
    # The sizes configs/bible.toml named (29,077 training pairs): 33.49 test BLEU after 60
    # minutes; bible.toml now names none and gets these. The vocabulary is 8,000 pieces, not
    # bible.toml's 4,000: 60 minutes on one core each, side by side, 31.37 test BLEU against
    # 28.61 (1,200 steps: +2.19 validation BLEU; benchmarks/results/recipe_sweep.md).
    # Carried to 5,000-100,000 pairs, not measured at other sizes.
    RecipeRow(
        name="small",
        max_pairs=100_000,
        model={"preset": "", "num_layers": 2, "d_model": 128, "num_heads": 4, "ff_dim": 512,
               "dropout": 0.1},
        vocabulary_size=8_000,
        tokens_per_batch=4_096,
        warmup_steps=800,
        learning_rate_scale=1.0,
        # `make bible` alone on 2 cores: 17,274 steps in 60 minutes at 241 GFLOP/s (0.2 s),
        # ~0.3 s at 175-185 GFLOP/s (0.19 s per 2,048-token step), with 4,000 pieces; 8,000
        # cost ~1.15x per step (0.99 against 0.85 CPU s on one core).
        seconds_per_step=0.29,
        source="the sizes configs/bible.toml named, 8,000 pieces measured on the Bible",
        # Mixed bfloat16 without XLA on a CPU with AVX-512 BF16: 60 minutes on one core, 5,258
        # steps and 32.03 test BLEU against float32's 4,538 and 31.37; the same validation
        # loss at equal steps (2.749 at step 4,500 both).
        cpu_bfloat16=True,
        # Validation BLEU (100 verses, beam 4, alpha 0.6) every 500 steps of `make bible` from
        # a fresh clone, 2026-11-27 23:00 (benchmarks/results/recipe_60min.jsonl).
        bleu_by_steps=_every_500_steps(
            2.72, 16.15, 24.39, 27.8, 30.72, 31.52, 35.97, 35.95, 35.53, 38.02, 38.16, 39.05,
            39.19, 39.09, 39.72, 39.76, last=(8_255, 39.63)),
    ),
    # The small row's model 1.5x wider: ahead of it at every step count (its curve), but a
    # step costs 1.4-1.7x: it wins where the budget buys enough steps (`recipe_row`).
    # `make bible` (60 minutes, 2 cores, an Intel Xeon with AMX at 303 GFLOP/s) made 8,198
    # steps at 0.40-0.49 s and 35.67 test BLEU, where the small row's d_model 128 had made
    # 12,883 and 34.54 on a faster day (353 GFLOP/s); 30 minutes, 4,759 steps: 34.03. On one
    # core of an AMD EPYC, 30 minutes (1,807 steps) scored 1.2 below the small row's 2,685.
    RecipeRow(
        name="wide",
        max_pairs=100_000,
        model={"preset": "", "num_layers": 2, "d_model": 192, "num_heads": 4, "ff_dim": 768,
               "dropout": 0.1},
        vocabulary_size=8_000,
        tokens_per_batch=4_096,
        warmup_steps=800,
        # The small row's peak learning rate, 0.0031: scale x sqrt(192 / 128).
        learning_rate_scale=1.2247,
        # 0.37-0.49 s per step (validation included) on 2 cores with AMX in bf16.
        seconds_per_step=0.42,
        source="the small row 1.5x wider, measured on the Bible in 60 minutes",
        # Measured in bf16 only: its width lies between d_model 128 and 512, both faster in
        # bf16 without XLA (the small and base rows' notes); float32 not timed at 192.
        cpu_bfloat16=True,
        # Validation BLEU (100 verses, beam 4, alpha 0.6) every 500 steps of `make bible` from
        # a fresh clone, 2026-11-28 11:49 (benchmarks/results/recipe_60min.jsonl).
        bleu_by_steps=_every_500_steps(
            6.47, 17.65, 25.79, 30.93, 34.22, 33.27, 38.98, 39.58, 40.51, 39.84, 39.75, 41.71,
            42.0, 42.6, 41.79, 42.1, 42.31, last=(8_671, 41.44)),
    ),
    # The paper's base model and recipe (Vaswani et al., 2017), for 4.5 M pairs: carried.
    RecipeRow(
        name="base",
        max_pairs=None,
        model={"preset": "base", "dropout": 0.1},
        vocabulary_size=37_000,
        tokens_per_batch=25_000,
        warmup_steps=4_000,
        learning_rate_scale=1.0,
        # Not measured here: the small row's time scaled by parameters x tokens per batch.
        seconds_per_step=0.25 * 44 * 25_000 / 4_096,
        source="the paper's base",
        # A 2 + 2-layer model of the base's width (d_model 512, ff_dim 2,048, 8,000 pieces):
        # 2.14 s per 4,224-token step in bf16 without XLA against 3.49 s in float32 (2 cores).
        cpu_bfloat16=True,
    ),
)


@dataclasses.dataclass(frozen=True)
class Forecast:
    """What one candidate row's budget buys (`choose_row`).

    Attributes:
        row: `RecipeRow`.
        seconds_per_step: float. The step time the steps come from.
        measured: bool. Whether that step time was measured on this machine (else the row's
            `seconds_per_step`, a quiet 2-core CPU's).
        steps: int. The steps of the budget (`estimated_steps`).
        bleu: float or `None`. The sweep's validation BLEU after that many steps
            (`RecipeRow.expected_bleu`).
    """

    row: RecipeRow
    seconds_per_step: float
    measured: bool
    steps: int
    bleu: float | None

    def text(self):
        """`small ~9,931 steps at 0.29 s (a quiet 2-core CPU's), validation BLEU 39.8`."""
        how = "measured here" if self.measured else "a quiet 2-core CPU's"
        bleu = "" if self.bleu is None else f", validation BLEU {self.bleu:.1f}"
        return f"{self.row.name} ~{self.steps:,} steps at {self.seconds_per_step:.2f} s ({how}){bleu}"


def candidates(num_pairs):
    """The rows of `RECIPE` a corpus of `num_pairs` training pairs may take: of the rows with
    the smallest `max_pairs` that fits, those with a curve (`bleu_by_steps`), or else the first.

    Example:

    >>> [[row.name for row in candidates(pairs)] for pairs in (700, 31_000, 4_500_000)]
    [['tiny'], ['small', 'wide'], ['base']]
    """
    fitting = [row for row in RECIPE if row.max_pairs is None or num_pairs <= row.max_pairs]
    band = [row for row in fitting if row.max_pairs == fitting[0].max_pairs]
    return [row for row in band if row.bleu_by_steps] or band[:1]


def choose_row(num_pairs, config=None, step_time=None):
    """The row for a corpus of `num_pairs` training pairs and the budget of `config`, and the
    `Forecast` of each candidate row (`candidates`).

    Where several rows fit, each is forecast the steps the budget buys it (a time budget:
    `TRAINING_SHARE` of the minutes at its step time, `step_time(row)` when given: measured
    on this machine by the trainer, `training.speed`) and the row whose curve
    (`RecipeRow.expected_bleu`) is highest at its steps wins; ties go to the cheaper row (the
    first). Without a budget, the first candidate.

    Args:
        num_pairs: int. The training pairs.
        config: `TrainingConfig` or `None`. The budget. Defaults to `None`.
        step_time: callable `row -> seconds per step` or `None`. Asked only for a time budget
            with several candidates. Defaults to `None`: the rows' `seconds_per_step`.

    Returns:
        `(row, forecasts)`: forecasts empty where there was nothing to choose.

    Example:

    >>> from keras_transformer.training.config import TrainingConfig
    >>> hour = TrainingConfig().replace(**{"training.minutes": 60})
    >>> one_core_float32 = {"small": 0.65, "wide": 1.10}  # measured, seconds per step
    >>> row, forecasts = choose_row(31_000, hour, lambda row: one_core_float32[row.name])
    >>> row.name, [forecast.text() for forecast in forecasts]
    ('small', ['small ~4,430 steps at 0.65 s (measured here), validation BLEU 36.0', \
'wide ~2,618 steps at 1.10 s (measured here), validation BLEU 34.2'])
    """
    rows = candidates(num_pairs)
    if len(rows) == 1 or config is None or not has_budget(config):
        return rows[0], []
    forecasts = []
    for row in rows:
        seconds = step_time(row) if step_time is not None and config.training.minutes else None
        steps, _ = estimated_steps(config, row, seconds)
        forecasts.append(Forecast(
            row=row,
            seconds_per_step=seconds or row.seconds_per_step,
            measured=seconds is not None,
            steps=steps,
            bleu=row.expected_bleu(steps),
        ))
    best = max(forecasts, key=lambda forecast: forecast.bleu)  # the first of equals
    return best.row, forecasts


def recipe_row(num_pairs, config=None):
    """The row of `RECIPE` for a corpus of `num_pairs` training pairs and the budget of
    `config` (`choose_row`'s row).

    Args:
        num_pairs: int. The training pairs.
        config: `TrainingConfig` or `None`. The budget; `None`: the first candidate.

    Example:

    >>> from keras_transformer.training.config import TrainingConfig
    >>> hour = TrainingConfig().replace(**{"training.minutes": 60})
    >>> recipe_row(700).name, recipe_row(31_000).name, recipe_row(4_500_000).name
    ('tiny', 'small', 'base')
    >>> recipe_row(31_000, hour).name
    'wide'
    """
    return choose_row(num_pairs, config)[0]


def checkpoint_spacing(steps, keep, share=AVERAGED_SHARE):
    """Steps between checkpoints for the `keep` newest of a `steps`-step run to span its last
    `share`: at least 1.

    Example:

    >>> checkpoint_spacing(9_931, 5), checkpoint_spacing(4, 5)
    (198, 1)
    """
    return max(1, int(steps * share / keep))


def has_budget(config):
    """Whether `config` names a budget: `training.minutes` or `training.train_steps`."""
    return bool(config.training.minutes) or config.is_set("training.train_steps")


def estimated_steps(config, row, seconds_per_step=None):
    """The steps the run's budget gives, and whether that is an estimate (a time budget).

    A time budget's steps are an estimate: `TRAINING_SHARE` of the minutes at
    `seconds_per_step` (by default the row's: a quiet 2-core CPU's), at most
    `training.train_steps`.

    Example:

    >>> from keras_transformer.training.config import TrainingConfig
    >>> estimated_steps(TrainingConfig().replace(**{"training.minutes": 3}), RECIPE[0])
    (900, True)
    """
    train_steps, minutes = config.training.train_steps, config.training.minutes
    if not minutes:
        return train_steps, False
    steps = int(minutes * 60 * TRAINING_SHARE / (seconds_per_step or row.seconds_per_step))
    return (train_steps, False) if train_steps <= steps else (max(1, steps), True)


def alphas_tried(alphas, patience=2):
    """How the run tries `alphas` (`evaluation.tune_alpha`): in increasing order, until
    `patience` in a row score below the best.

    Example:

    >>> alphas_tried([0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0])
    'alpha 0.6, 0.8, 1, ... 2 in turn, until 2 in a row do worse than the best'
    >>> alphas_tried([1.0, 0.6])
    'alpha 0.6, 1'
    """
    alphas = sorted({float(alpha) for alpha in alphas})
    if len(alphas) <= patience + 1:
        return "alpha " + ", ".join(f"{alpha:g}" for alpha in alphas)
    return (f"alpha {', '.join(f'{alpha:g}' for alpha in alphas[:patience + 1])}, ... "
            f"{alphas[-1]:g} in turn, until {patience} in a row do worse than the best")


def resolve_recipe(config, num_pairs, bfloat16_cpu=False, num_validation=None, step_time=None):
    """The config with every recipe setting it leaves unset taken from `RECIPE`, and the one
    line saying what was chosen and why (`None` when nothing was).

    Args:
        config: `TrainingConfig`.
        num_pairs: int. The training pairs of the run's corpus.
        bfloat16_cpu: bool. Mixed bfloat16 without XLA trains faster than float32 here
            (`building.bfloat16_trains_faster`, which the trainer asks): for a row where that
            was measured to pay (`RecipeRow.cpu_bfloat16`), unless the config names
            `training.mixed_precision` or `training.jit_compile`, the recipe chooses them
            (`"bf16"`, `false`). Defaults to `False`.
        num_validation: int or `None`. The validation pairs: the length penalty is tuned on
            them (`evaluation.alphas`) only if there are `MIN_TUNING_PAIRS` or more. Defaults
            to `None`: not counted, tuned.
        step_time: callable `(row, config) -> seconds per step` or `None`. Times a step of
            the model `config` (with `row`'s settings) gives (`training.speed`, which the
            trainer passes):
            asked, for a time budget and a model the config leaves to the recipe, once per
            candidate row where several fit the corpus (`choose_row`); the chosen row's time
            then sets the steps the warm-up and checkpoints are planned for. Defaults to
            `None`: the rows' `seconds_per_step`.

    Returns:
        `(config, line)`.

    Example:

    >>> from keras_transformer.training.config import TrainingConfig
    >>> config = TrainingConfig.from_dict({"training": {"train_steps": 2000}})
    >>> config, line = resolve_recipe(config, 700)
    >>> config.data.vocabulary_size, config.data.tokens_per_batch, config.optimizer.warmup_steps
    (1000, 4096, 400)
    """
    if not has_budget(config) or config.training.init_from:
        return config, None
    auto_model = not any(config.is_set(f"model.{name}") for name in ARCHITECTURE)
    probe = None
    if step_time is not None and auto_model:
        def probe(row):
            changes = _row_changes(config, row, bfloat16_cpu, num_validation, None)[0]
            return step_time(row, config.replace(**changes))
    # The curves are the rows' models': a config naming its own model takes the first row's
    # other settings.
    row, forecasts = (choose_row(num_pairs, config, probe) if auto_model
                      else (candidates(num_pairs)[0], []))
    seconds = next((forecast.seconds_per_step for forecast in forecasts
                    if forecast.row is row and forecast.measured), None)
    changes, chosen, from_row = _row_changes(config, row, bfloat16_cpu, num_validation, seconds)
    if not changes:
        return config, None
    budget = (f"training.minutes = {config.training.minutes:g}" if config.training.minutes
              else f"training.train_steps = {config.training.train_steps:,}")
    why = ""
    if from_row:
        why = f" (the {row.name} row: {row.source}"
        if forecasts:
            why += ("; the best forecast of " + "; ".join(forecast.text() for forecast in forecasts)
                    + ", by the sweep's curves")
        why += ")"
    line = (f"recipe for {num_pairs:,} training pairs and {budget}{why}: "
            + ", ".join(chosen) + "; set any of them to override")
    return config.replace(**changes), line


def _row_changes(config, row, bfloat16_cpu, num_validation, seconds_per_step):
    """`(changes, chosen, from_row)`: the settings of `row` that `config` leaves unset, the
    line's words for each, and whether any came from the row's measurements (the line names
    the row and its source only then: a config that names its own sizes gets no claim about
    them); `seconds_per_step` as in `estimated_steps`."""
    changes, chosen, from_row = {}, [], False
    auto_model = not any(config.is_set(f"model.{name}") for name in ARCHITECTURE)
    if auto_model:
        from_row = True
        for name, value in row.model.items():
            if name == "dropout" and config.is_set("model.dropout"):
                continue
            changes[f"model.{name}"] = value
        dropout = changes.get("model.dropout", config.model.dropout)
        chosen.append(f"{row.name} model ({row.model_text(dropout)})")
    elif not config.is_set("model.dropout"):
        changes["model.dropout"] = row.model["dropout"]
        chosen.append(f"dropout {row.model['dropout']:g}")
    if not config.is_set("data.vocabulary_size") and not config.data.sentencepiece_model:
        changes["data.vocabulary_size"] = row.vocabulary_size
        from_row = True
        chosen.append(f"vocabulary {row.vocabulary_size:,}")
    if not config.is_set("data.tokens_per_batch"):
        changes["data.tokens_per_batch"] = max(row.tokens_per_batch, config.data.max_length)
        from_row = True
        chosen.append(f"{changes['data.tokens_per_batch']:,}-token batches")
    steps, estimated = estimated_steps(config, row, seconds_per_step)
    if not config.is_set("optimizer.warmup_steps"):
        warmup = max(1, min(row.warmup_steps, int(steps * WARMUP_SHARE)))
        changes["optimizer.warmup_steps"] = warmup
        from_row = True
        if warmup == row.warmup_steps:
            why = "the row's most"
        elif estimated and seconds_per_step:
            why = (f"{WARMUP_SHARE:.0%} of ~{steps:,} steps, estimated at the "
                   f"{seconds_per_step:.2f} s per step measured here")
        elif estimated:
            why = (f"{WARMUP_SHARE:.0%} of ~{steps:,} steps, estimated at "
                   f"{row.seconds_per_step:g} s per step on a quiet 2-core CPU")
        else:
            why = f"{WARMUP_SHARE:.0%} of the {steps:,} steps"
        chosen.append(f"warm-up {warmup:,} step{'s' * (warmup != 1)} ({why})")
    if auto_model and not config.is_set("optimizer.learning_rate_scale"):
        warmup = changes.get("optimizer.warmup_steps", config.optimizer.warmup_steps)
        scale = round(row.peak_learning_rate * math.sqrt(row.sizes["d_model"] * warmup), 4)
        changes["optimizer.learning_rate_scale"] = scale
        chosen.append(f"learning_rate_scale {scale:g} (the row's peak rate "
                      f"{row.peak_learning_rate:.3g})")
    if not (config.is_set("training.checkpoint_every") or config.is_set("training.average_checkpoints")):
        keep = config.training.average_checkpoints
        every = checkpoint_spacing(steps, keep)
        changes["training.checkpoint_every"] = every
        again = ", spaced again from the measured step time" if estimated else ""
        chosen.append(f"a checkpoint every {every:,} step{'s' * (every != 1)} (the {keep} "
                      f"averaged span the last ~{AVERAGED_SHARE:.0%} of the steps{again})")
    if (auto_model and bfloat16_cpu and row.cpu_bfloat16
            and not config.is_set("training.mixed_precision")
            and not config.is_set("training.jit_compile")):
        changes["training.mixed_precision"] = "bf16"
        changes["training.jit_compile"] = False
        chosen.append(f"mixed bfloat16 without XLA ({BFLOAT16_WHY})")
    if not (config.is_set("evaluation.alpha") or config.is_set("evaluation.alphas")):
        if num_validation is None or num_validation >= MIN_TUNING_PAIRS:
            changes["evaluation.alphas"] = list(ALPHAS)
            chosen.append(f"the length penalty tuned on the validation split once trained "
                          f"({alphas_tried(ALPHAS)})")
        else:
            chosen.append(f"the length penalty untuned ({num_validation:,} validation pairs, "
                          f"fewer than the {MIN_TUNING_PAIRS} it is tuned on)")
    return changes, chosen, from_row
