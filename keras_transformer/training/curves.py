"""The curves of a run as a picture: `OUTPUT_DIR/curves.png`, rewritten at each validation.

`Curves` records, against the optimizer step, the training loss (Keras' running mean over
the epoch, as the progress bar shows it), the learning rate, the validation loss (end of each
epoch) and the validation BLEU (each evaluation of the run's `BleuCallback`). After each
validation, and when training ends, it writes the points to `curves.json` and draws them to
`curves.png` (three panels sharing the step axis: losses, BLEU, learning rate), both
atomically. TensorBoard's logs (`OUTPUT_DIR/logs`) hold the same scalars; the picture needs no
server.

A resumed run keeps the points up to the step it resumes from (as `best.json` keeps its
validations) and adds its own, so the picture of a run killed and resumed is the picture of
the whole run. The picture is drawn with matplotlib (imported when drawing, rendered by Agg
without touching pyplot's global state); without matplotlib the run goes on without it after
one warning line.
"""

import logging
import math
import os

import keras

from keras_transformer.files import atomic_path, read_json, write_json
from keras_transformer.training.tensorboard import learning_rate_at

logger = logging.getLogger("keras_transformer")

# The series of `curves.json`, each a list of `[step, value]`, in drawing order.
SERIES = ("loss", "val_loss", "val_bleu", "learning_rate")


class Curves(keras.callbacks.Callback):
    """Records a run's losses, BLEU and learning rate, and draws them after each validation.

    Args:
        path: str. The picture (`OUTPUT_DIR/curves.png`).
        record_path: str. The points (`OUTPUT_DIR/curves.json`).
        train_steps: int. The run's steps: the training loss and the learning rate are
            recorded every `ceil(train_steps / points)` steps.
        counter: object with a `step` attribute counting the steps trained over all runs (the
            run's `ResumableBackupAndRestore`), or `None` to count from the optimizer's
            iterations. Defaults to `None`.
        bleu: the run's `BleuCallback` (placed before this callback), or `None`. Defaults to
            `None`.
        points: int. About how many training-loss points a whole run records. Defaults to
            `500`.

    Example:

    >>> import tempfile
    >>> directory = tempfile.mkdtemp()
    >>> curves = Curves(os.path.join(directory, "curves.png"),
    ...                 os.path.join(directory, "curves.json"), train_steps=100)
    >>> curves.record["loss"] = [[10, 5.0], [20, 4.0]]
    >>> curves.record["val_loss"] = [[20, 4.5]]
    >>> curves.write()
    True
    >>> os.path.getsize(os.path.join(directory, "curves.png")) > 0
    True
    """

    def __init__(self, path, record_path, train_steps, counter=None, bleu=None, points=500):
        super().__init__()
        self.path = os.fspath(path)
        self.record_path = os.fspath(record_path)
        self.every = max(1, math.ceil(train_steps / points))
        self.counter = counter
        self.bleu = bleu
        self.record = {name: [] for name in SERIES}
        self._step = 0
        self._resumed = False
        self._bleu_seen = 0
        self._warned = False

    # === Callback ===
    def on_train_begin(self, logs=None):
        if self.counter is not None:
            self._step = self.counter.step
        else:
            self._step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        if not self._resumed:  # The first `fit` of the run: keep the points up to its step.
            self._resumed = True
            self.resume(self._step)
        self._bleu_seen = len(self.bleu.history) if self.bleu is not None else 0

    def on_train_batch_end(self, batch, logs=None):
        self._step = self.counter.step if self.counter is not None else self._step + 1
        if self._step % self.every == 0:
            self._add_training(logs)
        if self._new_bleu():
            self.write()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        self._add_training(logs)
        validated = self._new_bleu()
        if "val_loss" in logs:
            self._add("val_loss", logs["val_loss"])
            validated = True
        if validated:
            self.write()

    def on_train_end(self, logs=None):
        self.write()

    # === State ===
    def resume(self, step):
        """Loads `record_path`, keeping the points up to `step` (`0`: none)."""
        record = read_json(self.record_path)
        self.record = {name: [] for name in SERIES}
        if isinstance(record, dict):
            for name in SERIES:
                points = record.get(name, [])
                self.record[name] = [[int(at), float(value)] for at, value in points if int(at) <= step]

    def write(self):
        """Writes `record_path` and draws `path` (both atomically).

        Returns:
            bool, whether the picture was drawn (`False` without matplotlib).
        """
        write_json(self.record_path, self.record)
        drawn = plot_curves(self.record, self.path)
        if not drawn and not self._warned:
            self._warned = True
            logger.warning(
                "curves: matplotlib is not installed, so %s is not drawn (the points are in "
                "%s): pip install matplotlib, or the `train` extra",
                self.path,
                self.record_path,
            )
        return drawn

    # === Helpers ===
    def _add(self, name, value, step=None):
        step = self._step if step is None else step
        points = self.record[name]
        if points and points[-1][0] == step:
            points[-1] = [step, float(value)]
        else:
            points.append([step, float(value)])

    def _add_training(self, logs):
        if logs and "loss" in logs:
            self._add("loss", logs["loss"])
        if self.model is not None:
            learning_rate = learning_rate_at(self.model.optimizer, self._step)
            if learning_rate is not None:
                self._add("learning_rate", learning_rate)

    def _new_bleu(self):
        """Adds the BLEU evaluations made since the last call; whether there were any."""
        if self.bleu is None:
            return False
        new = self.bleu.history[self._bleu_seen :]
        for step, bleu in new:
            self._add("val_bleu", bleu, step)
        self._bleu_seen = len(self.bleu.history)
        return bool(new)


def plot_curves(record, path):
    """Draws `record` (`{series: [[step, value], ...]}`, `SERIES`) to the PNG file `path`,
    atomically: training and validation loss, validation BLEU, and learning rate, one panel
    each, against the optimizer step.

    Returns:
        bool, `False` (and nothing written) when matplotlib is not installed.
    """
    try:
        # Imported here: an optional dependency (the `train` extra), and slow to import.
        from matplotlib.figure import Figure
    except ImportError:
        return False
    figure = Figure(figsize=(7, 8), dpi=100, layout="constrained")
    losses, bleu, learning_rate = figure.subplots(3, 1, sharex=True)
    panels = (
        (losses, "loss", "loss", "training loss (mean over the epoch so far)"),
        (losses, "val_loss", "loss", "validation loss"),
        (bleu, "val_bleu", "validation BLEU", "validation BLEU"),
        (learning_rate, "learning_rate", "learning rate", "learning rate"),
    )
    for axes, name, label, legend in panels:
        points = record.get(name) or []
        if points:
            steps, values = zip(*points, strict=True)
            marker = "o" if name.startswith("val_") else None
            axes.plot(steps, values, marker=marker, markersize=3, label=legend)
        axes.set_ylabel(label)
        axes.grid(True, alpha=0.3)
    if any(record.get(name) for name in ("loss", "val_loss")):
        losses.legend()
    if not record.get("val_bleu"):
        bleu.text(0.5, 0.5, "no BLEU validation yet", ha="center", va="center",
                  transform=bleu.transAxes, color="gray")
    learning_rate.set_xlabel("optimizer step")
    learning_rate.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    figure.suptitle(os.path.basename(os.path.dirname(os.path.abspath(path))) or path)
    with atomic_path(path) as temporary:
        figure.savefig(temporary, format="png")
    return True
