"""Runs `keras-transformer train --config CONFIG`, killing itself (`SIGKILL`) at STAGE.

Usage: `python train_killed_at.py CONFIG STAGE`. Each STAGE kills the process in the middle
of one step of the run, after the work a real kill there would have done:

- `checkpoint-N`: while the periodic checkpoint of step N is written (its temporary file is
  on disk, the backup of step N complete);
- `averaged`: after the checkpoints are averaged, before `model.weights.h5` is written;
- `tuned`: after the length penalties are tried on the validation split (`evaluation.alphas`);
- `evaluated`: after the test split is translated and scored;
- `saved`: while `translator.keras` is written (its temporary file is complete);
- `exported`: while the SavedModel is written (its temporary directory is complete);
- `cleanup`: while the backup is deleted, after the last stage is recorded;
- `none`: no kill.

The kill is injected by wrapping the function that does the step: deterministic, no timing.
Every training step the process makes is printed as a line `trained step N`.
"""

import os
import signal
import sys

CONFIG, STAGE = sys.argv[1], sys.argv[2]


def kill():
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def after(owner, name, condition=lambda *args, **kwargs: True):
    """Wraps `owner.name` to kill the process once it returns (when `condition` holds)."""
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        result = original(*args, **kwargs)
        if condition(*args, **kwargs):
            kill()
        return result

    setattr(owner, name, wrapper)


from keras_transformer.training.backup import ResumableBackupAndRestore  # noqa: E402

on_train_batch_end = ResumableBackupAndRestore.on_train_batch_end


def count_step(self, batch, logs=None):
    on_train_batch_end(self, batch, logs)
    print(f"trained step {self.step}", flush=True)


ResumableBackupAndRestore.on_train_batch_end = count_step

if STAGE.startswith("checkpoint-"):
    from keras_transformer.training.checkpoints import PeriodicCheckpoint

    step = int(STAGE.split("-")[1])
    save = PeriodicCheckpoint.save

    def save_then_kill(self):
        if self._step != step:
            return save(self)
        # What a kill in the middle of the write leaves: the temporary file, not the checkpoint.
        name = f".tmp-killed-ckpt-{step:08d}.weights.h5"
        self.model.save_weights(os.path.join(self.directory, name))
        kill()

    PeriodicCheckpoint.save = save_then_kill
elif STAGE == "averaged":
    from keras_transformer.training import averaging

    after(averaging, "average_checkpoints")
elif STAGE == "tuned":
    from keras_transformer.training import trainer

    after(trainer, "tune_alpha")
elif STAGE == "evaluated":
    from keras_transformer.training import trainer

    after(trainer, "evaluate_translations")
elif STAGE == "saved":
    from keras_transformer import Translator

    after(Translator, "save")
elif STAGE == "exported":
    import contextlib

    from keras_transformer import files

    atomic_directory = files.atomic_directory

    @contextlib.contextmanager
    def written_then_kill(path):
        # The SavedModel is complete under its temporary name; the kill comes before the swap.
        with atomic_directory(path) as temporary:
            yield temporary
            if os.path.basename(os.fspath(path)) == "saved_model":  # not `preset/`, saved before
                kill()

    files.atomic_directory = written_then_kill
elif STAGE == "cleanup":
    from keras_transformer.training.backup import STATE_FILENAME

    def delete_then_kill(self):
        os.remove(os.path.join(self.backup_dir, STATE_FILENAME))
        kill()

    ResumableBackupAndRestore.delete = delete_then_kill
elif STAGE != "none":
    raise ValueError(f"Unknown stage. Received: STAGE={STAGE!r}")

from keras_transformer.cli import main  # noqa: E402

sys.exit(main(["train", "--config", CONFIG, "--verbose", "2"]))
