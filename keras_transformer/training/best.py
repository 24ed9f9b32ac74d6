"""Keep the best: export the best-by-validation translator, and stop early.

`KeepBest` watches one validation metric (`val_bleu`, `val_loss`, `val_accuracy`). Each
time it improves, the translator at that step is exported to `OUTPUT_DIR/best/`
(`export_best`); after `patience` validations without improvement it stops training.

What it has seen is kept in its own record, `OUTPUT_DIR/best.json`: the validations as
`[step, value]` pairs, rewritten atomically after each one. The best value, its step and the
patience count are computed from that list, never stored apart from it, so they cannot
disagree. A run resumed from a backup of step S keeps the validations of steps up to S and
forgets the later ones: the resumed run trains those steps again on the same batches and
validates at the same steps, so each validation is counted once. (A validation at step S
itself comes after the backup of step S, in both the end-of-epoch and the every-N-steps
case, and the resumed run starts after it: it is kept. A kill between the backup of step S
and the record of its validation leaves that validation unrecorded: the resumed run
validates step S again before it trains, and exports it if it is the best.)
"""

import logging
import os

import keras

from keras_transformer._checks import check_int
from keras_transformer.files import read_json, write_json
from keras_transformer.models.lora import merged_translator
from keras_transformer.training.bleu import BleuCallback
from keras_transformer.training.config import BEST_MONITORS

logger = logging.getLogger("keras_transformer")



def export_best(translator, directory):
    """Writes `translator` as the run's best export: a preset directory
    (`Translator.from_preset(directory)`), replaced atomically.

    The one place that says what the best export is.

    Args:
        translator: `keras_transformer.Translator`.
        directory: str. The export directory (`OUTPUT_DIR/best`).
    """
    merged_translator(translator).save_to_preset(directory)  # `lora_rank`: a plain model


def best_mode(monitor):
    """`"min"` for a loss, `"max"` for the other metrics of `BEST_MONITORS`."""
    if monitor not in BEST_MONITORS:
        raise ValueError(
            f"`monitor` must be one of {list(BEST_MONITORS)}. Received: monitor={monitor!r}"
        )
    return BEST_MONITORS[monitor]


def summarize(evaluations, mode):
    """The best of `evaluations` and the patience count after them.

    Args:
        evaluations: list of `(step, value)`, in the order they were made.
        mode: str. `"max"` or `"min"`.

    Returns:
        dict: `best` (value or `None`), `best_step` (or `None`), `wait` (validations since
        the best; all of them when there is none), `evaluations` (their count).

    Example:

    >>> summarize([(10, 1.0), (20, 3.0), (30, 2.0)], "max")
    {'best': 3.0, 'best_step': 20, 'wait': 1, 'evaluations': 3}
    """
    best = best_step = None
    wait = 0
    for step, value in evaluations:
        if best is None or (value > best if mode == "max" else value < best):
            best, best_step, wait = value, step, 0
        else:
            wait += 1
    return {"best": best, "best_step": best_step, "wait": wait, "evaluations": len(evaluations)}


class KeepBest(keras.callbacks.Callback):
    """Exports the model at its best validation score, and stops after `patience` validations
    without improvement.

    The score is read from the epoch logs (`val_loss`, `val_accuracy`, and `val_bleu` as a
    `BleuCallback` earlier in the callback list writes it), or, for a BLEU evaluated every N
    steps, from `step_values()` after each batch. Improvements are strict; the first
    validation always counts as one.

    Args:
        monitor: str. `"val_bleu"`, `"val_loss"` or `"val_accuracy"`.
        record_path: str. The record of the validations (JSON, rewritten atomically).
        export_fn: callable `(step) -> None` that exports the current model as the best one,
            or `None` (only track and stop). Defaults to `None`.
        export_dir: str. Where `export_fn` writes; a fresh start (`resume(0)`) removes it, so
            that an earlier run's export is never taken for this run's. Defaults to `None`.
        patience: int. Stop after this many validations without improvement; `0` never
            stops. Defaults to `0`.
        counter: object with a `step` attribute counting the steps trained over all runs (the
            `ResumableBackupAndRestore`, placed first in the callback list), or `None` to
            count from the optimizer's iterations. Defaults to `None`.
        step_values: callable returning the list of `(step, value)` evaluated so far (e.g.
            `lambda: bleu_callback.history` for `BleuCallback(every_steps=N)`), or `None`.
            Defaults to `None`.
        is_chief: bool. Whether this process writes the record. Defaults to `True`.

    Example:

    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "best.json")
    >>> keep = KeepBest("val_loss", path, patience=2)
    >>> for step, loss in [(1, 0.5), (2, 0.4), (3, 0.45), (4, 0.41)]:
    ...     keep.observe(step, loss)
    >>> keep.summary()["best_step"], keep.stopped
    (2, True)
    """

    def __init__(
        self,
        monitor,
        record_path,
        export_fn=None,
        export_dir=None,
        patience=0,
        counter=None,
        step_values=None,
        is_chief=True,
    ):
        super().__init__()
        self.mode = best_mode(monitor)
        check_int("patience", patience, minimum=0)
        self.monitor = monitor
        self.record_path = os.fspath(record_path)
        self.export_fn = export_fn
        self.export_dir = export_dir
        self.patience = patience
        self.counter = counter
        self.step_values = step_values
        self.is_chief = is_chief
        self.evaluations = []
        self.stopped = False
        self._step = 0
        self._seen = 0  # Entries of `step_values()` already observed.

    # === State ===
    def resume(self, step):
        """Loads the record, keeping the validations up to `step` (the step training resumes
        from; `0` on a fresh start forgets them all).

        Returns:
            bool, whether those validations had already stopped training (the run needs no
            more steps).
        """
        record = read_json(self.record_path)
        evaluations = []
        if isinstance(record, dict) and record.get("monitor") == self.monitor:
            evaluations = [
                (int(done), float(value))
                for done, value in record.get("evaluations", [])
                if int(done) <= step
            ]
        self.evaluations = evaluations
        if not step and self.is_chief and self.export_dir and os.path.isdir(self.export_dir):
            import shutil

            shutil.rmtree(self.export_dir)
        self._step = step
        self.stopped = self._patience_spent()
        self._write()
        return self.stopped

    def summary(self):
        """`{"monitor", "best", "best_step", "wait", "evaluations", "stopped_early"}`."""
        return {"monitor": self.monitor, **summarize(self.evaluations, self.mode),
                "stopped_early": self.stopped}

    def observe(self, step, value):
        """Records the validation `value` at `step`: exports on improvement, and stops
        training when the patience is spent."""
        value = float(value)
        previous = summarize(self.evaluations, self.mode)["best"]
        self.evaluations.append((int(step), value))
        improved = previous is None or (value > previous if self.mode == "max" else value < previous)
        if improved and self.export_fn is not None:
            self.export_fn(step)
            logger.info("%s improved to %.4f at step %d: exported.", self.monitor, value, step)
        # The record is written after the export: a record naming a best step always has its
        # export in place.
        self._write()
        if self._patience_spent():
            self.stopped = True
            if self.model is not None:
                self.model.stop_training = True
            logger.info(
                "%s did not improve for %d validations: stopping at step %d.",
                self.monitor,
                self.patience,
                step,
            )

    # === Callback ===
    def on_train_begin(self, logs=None):
        if self.counter is None:
            self._step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        self._seen = len(self.step_values()) if self.step_values else 0
        if self.stopped:
            self.model.stop_training = True

    def on_train_batch_end(self, batch, logs=None):
        self._step = self.counter.step if self.counter is not None else self._step + 1
        if self.step_values:
            values = self.step_values()
            for step, value in values[self._seen :]:
                self.observe(step, value)
            self._seen = len(values)

    def on_epoch_end(self, epoch, logs=None):
        if logs and self.monitor in logs and not self.step_values:
            self.observe(self._step, logs[self.monitor])

    # === Helpers ===
    def _patience_spent(self):
        return bool(self.patience) and summarize(self.evaluations, self.mode)["wait"] >= self.patience

    def _write(self):
        if self.is_chief:
            write_json(
                self.record_path,
                {"monitor": self.monitor, "evaluations": [list(pair) for pair in self.evaluations]},
            )


def make_keep_best(config, paths, export_fn, counter, callbacks, is_chief=True):
    """The `KeepBest` of a run's `config` (`training.keep_best`, `early_stopping_patience`),
    appended to `callbacks` after the `BleuCallback` whose scores it reads.

    Args:
        config: `TrainingConfig`.
        paths: the run's `RunPaths` (`best`, the export directory; `best_record`).
        export_fn: callable `(step) -> None` exporting the best translator.
        counter: the run's `ResumableBackupAndRestore` (its `step`).
        callbacks: list. The run's callbacks so far (appended to).
        is_chief: bool. Defaults to `True`.

    Returns:
        The `KeepBest`.
    """
    monitor = config.training.keep_best
    step_values = None
    if monitor == "val_bleu" and config.evaluation.bleu_every > 0:
        bleu = next(callback for callback in callbacks if isinstance(callback, BleuCallback))
        step_values = lambda: bleu.history  # noqa: E731
    keep_best = KeepBest(
        monitor,
        paths.best_record,
        export_fn=export_fn,
        export_dir=paths.best,
        patience=config.training.early_stopping_patience,
        counter=counter,
        step_values=step_values,
        is_chief=is_chief,
    )
    callbacks.append(keep_best)
    return keep_best
