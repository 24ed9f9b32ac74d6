"""The records of a training run: its files (`RunPaths`), its held-out pairs as text files
(`write_held_out`), the state its phases hand on (`Run`, `FitOutcome`) and what `train`
returns (`TrainingResult`)."""

import dataclasses
import os

from keras_transformer.datasets.splits import HELD_OUT_FILES, held_out_lines
from keras_transformer.files import write_text
from keras_transformer.training.backup import ResumableBackupAndRestore
from keras_transformer.training.config import TrainingConfig
from keras_transformer.training.stages import RunStages
from keras_transformer.training.state import copy_weights
from keras_transformer.translator import KERAS_FILE


@dataclasses.dataclass
class TrainingResult:
    """What `train` did.

    Attributes:
        model: the trained `Transformer` (final, averaged weights).
        translator: `keras_transformer.Translator` around a copy of the model that decodes
            outside any distribution strategy (`None` on processes other than 0).
        tokenizer: the `keras_transformer.text.Tokenizer`.
        history: dict of lists, the merged `History.history` of the `fit` calls of this run.
        metrics: dict. `steps`, `stopped_by_time_limit`, `train_seconds`, and on process 0
            `test_bleu`, `test_chrf`, `test_signatures`, `test_exact_match`, `samples` (as also written to `metrics.json`).
        output_dir: str.
        config: the `TrainingConfig` used.
    """

    model: object
    translator: object
    tokenizer: object
    history: dict
    metrics: dict
    output_dir: str
    config: TrainingConfig


@dataclasses.dataclass
class RunPaths:
    """The files of a run under `output_dir` (see the module docstring)."""

    output_dir: str

    def __post_init__(self):
        join = os.path.join
        self.config = join(self.output_dir, "train_config.json")
        # The name until 0.2.0, keras-hub's name for a preset's model configuration.
        self.legacy_config = join(self.output_dir, "config.json")
        self.tokenizer = join(self.output_dir, "tokenizer.json")
        self.backup = join(self.output_dir, "backup")
        self.checkpoints = join(self.output_dir, "checkpoints")
        self.logs = join(self.output_dir, "logs")
        self.weights = join(self.output_dir, "model.weights.h5")
        self.translator = join(self.output_dir, KERAS_FILE)
        self.preset = join(self.output_dir, "preset")
        self.saved_model = join(self.output_dir, "saved_model")
        self.metrics = join(self.output_dir, "metrics.json")
        self.stages = join(self.output_dir, "stages.json")
        self.best = join(self.output_dir, "best")
        self.best_record = join(self.output_dir, "best.json")
        self.curves = join(self.output_dir, "curves.png")
        self.curves_record = join(self.output_dir, "curves.json")
        # Split name -> (sources, references): `valid.src`, `valid.ref`, `test.src`, `test.ref`.
        self.held_out = {
            split: tuple(join(self.output_dir, name) for name in names)
            for split, names in HELD_OUT_FILES.items()
        }


def write_held_out(paths, splits):
    """Writes the run's validation and test pairs to `paths.held_out` (`valid.src`,
    `valid.ref`, `test.src`, `test.ref`): one sentence per line, UTF-8, each file atomically.

    A file that already holds the same text is left alone, so a resumed run (whose splits are
    the same) rewrites nothing; an empty split writes no files and removes those an earlier
    run left under its names.

    Args:
        paths: the run's `RunPaths`.
        splits: the run's `Splits`.

    Returns:
        dict, split name -> `{"pairs", "joined", "written"}`: the pairs in the files, the
        sentences whose line breaks became spaces (`held_out_lines`), and whether any file
        was written by this call.
    """
    counts = {}
    for split, files in paths.held_out.items():
        pairs = getattr(splits, split)
        written = False
        if not pairs:
            for path in files:
                if os.path.exists(path):
                    os.remove(path)
            counts[split] = {"pairs": 0, "joined": 0, "written": False}
            continue
        *texts, joined = held_out_lines(pairs)
        for path, text in zip(files, texts, strict=True):
            if _read_text(path) != text:
                write_text(path, text)
                written = True
        counts[split] = {"pairs": len(pairs), "joined": joined, "written": written}
    return counts


def held_out_report(counts):
    """The report line of `write_held_out`'s `counts`: every pair written is counted.

    Example:

    >>> held_out_report({"validation": {"pairs": 16, "joined": 1, "written": True},
    ...                  "test": {"pairs": 0, "joined": 0, "written": False}})
    'held-out files: valid.src, valid.ref (16 pairs; 1 sentence with line breaks, now spaces); no test split: no test files'
    """
    parts = []
    for split, (source, reference) in HELD_OUT_FILES.items():
        count = counts[split]
        if not count["pairs"]:
            parts.append(f"no {split} split: no {split} files")
            continue
        detail = f"{count['pairs']} pairs"
        if count["joined"]:
            plural = "s" if count["joined"] > 1 else ""
            detail += f"; {count['joined']} sentence{plural} with line breaks, now spaces"
        parts.append(f"{source}, {reference} ({detail})")
    return "held-out files: " + "; ".join(parts)


def _read_text(path):
    """The text of `path`, or `None` if it cannot be read."""
    try:
        with open(path, encoding="utf-8", newline="") as file:
            return file.read()
    except (OSError, ValueError):
        return None


@dataclasses.dataclass
class Run:
    """A run of `train` once `prepare_run` has set it up: what `fit_run` and `finalize_run` use.

    Attributes:
        config: the validated `TrainingConfig`.
        start_time: float. `time.monotonic()` when `train` started (the time budget counts
            from it).
        context: the `DistributionContext`.
        report: callable, str -> None. Prints a report line (process 0, unless silenced).
        paths: the run's `RunPaths`.
        splits: the dataset's `Splits(train, validation, test)`.
        tokenizer: the `keras_transformer.text.Tokenizer`.
        train_data: the training pipeline of `make_dataset` (a repeated, seeded stream).
        validation_data: the validation `tf.data.Dataset` prepared for the strategy, or `None`.
        steps_per_epoch: int.
        model: the compiled `Transformer`, created in the strategy's scope.
        eval_model: the model that decodes: `model` itself, or a copy outside the strategy.
        translator: the `Translator` around `eval_model`.
        initial: the `Translator` of `training.init_from`, or `None`.
        checkpoint_share: float or `None`. With a time budget and the recipe's checkpoint
            spacing, the share of the steps the averaged checkpoints span, the spacing planned
            again from the measured step rate (`time_limit.CheckpointPlan`); `None` keeps
            `training.checkpoint_every`.
    """

    config: TrainingConfig
    start_time: float
    context: object
    report: object
    paths: RunPaths
    splits: object
    tokenizer: object
    train_data: object
    validation_data: object
    steps_per_epoch: int
    model: object
    eval_model: object
    translator: object
    initial: object = None
    checkpoint_share: float = None

    def translate(self, sources):
        """Translates `sources` with the current weights of `model`."""
        if self.eval_model is not self.model:
            copy_weights(self.model, self.eval_model)
        return self.translator(list(sources))


@dataclasses.dataclass
class FitOutcome:
    """What `fit_run` leaves to `finalize_run`.

    Attributes:
        stages: the run's `RunStages` (`trained` recorded, unless the time budget stopped it).
        backup: the `ResumableBackupAndRestore`, deleted once the last stage is recorded.
        steps_done: int. Steps trained before this run.
        steps: int. Steps trained in all.
        trained: dict. What the `trained` stage recorded.
        stopped_by_time: bool. The time budget stopped training before `train_steps`.
        best: dict. The `KeepBest.summary()` with `keep_best`, else `None`.
    """

    stages: RunStages
    backup: ResumableBackupAndRestore
    steps_done: int
    steps: int
    trained: dict
    stopped_by_time: bool
    best: dict = None
