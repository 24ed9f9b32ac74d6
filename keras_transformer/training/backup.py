"""Fault tolerance: `BackupAndRestore` with atomic, step-exact backups.

Keras' `BackupAndRestore` writes `latest.weights.h5` and `training_metadata.json` in place,
one after the other: a `kill -9` during either write leaves a corrupt or inconsistent backup,
and on restart it resumes at the start of the interrupted epoch, redoing its steps.
`ResumableBackupAndRestore` fixes both:

- each backup is a new file `backup-STEP.weights.h5` (weights and optimizer state) written
  through a temporary name, and only then `state.json` (epoch, batch, step, file name) is
  atomically replaced to point at it; so at every instant `state.json` names a complete
  file, and a kill at any point loses at most the steps since the last backup;
- the state records the batch within the epoch, and `keras_transformer.training.train`
  resumes there (it skips the batches already trained on, so the total number of optimizer
  steps is the same as in an uninterrupted run);
- the state also records the seed generators' states (the dropout seeds), which
  `save_weights` leaves out: the resumed steps draw the dropout masks an uninterrupted run
  draws, so the run ends with the same weights.
"""

import logging
import os
import re
import shutil

import keras

from keras_transformer.files import read_json, remove_temporaries, write_json
from keras_transformer.saving.weights import check_sha256
from keras_transformer.training.checkpoints import load_weights, save_weights_atomically
from keras_transformer.training.state import to_numpy

logger = logging.getLogger("keras_transformer")

STATE_FILENAME = "state.json"
BACKUP_PATTERN = re.compile(r"^backup-(\d+)\.weights\.h5$")


class ResumableBackupAndRestore(keras.callbacks.BackupAndRestore):
    """`BackupAndRestore` that writes atomically and records the step within the epoch.

    On `on_train_begin` it restores the weights and optimizer state of the last complete
    backup (if any) and sets the initial epoch, like Keras' callback. It backs up every
    `save_freq` steps (counted over the whole run, so backups fall on the same steps after a
    restart) and at the end of every epoch. `state()` tells where the backup stands:
    `{"epoch", "batch", "step", "weights"}`, `batch` being the number of steps of `epoch`
    already done; `keras_transformer.training.train` uses it to resume mid-epoch. Used on
    its own with `model.fit`, the interrupted epoch restarts from its first batch (Keras'
    behaviour).

    Only process 0 writes (`is_chief`); all processes restore, and all must use the callback
    (saving is a collective operation in multi-process JAX training).

    Args:
        backup_dir: str. A directory used by this callback only.
        save_freq: int or `"epoch"`. Steps between backups (besides the end of each epoch).
            Defaults to `"epoch"`.
        delete_checkpoint: bool. Delete the backup when `fit` ends. Defaults to `True`.
        is_chief: bool. Whether this process writes. Defaults to `True`.
        restore_epoch: bool. Set the initial epoch of `fit` from the backup, as Keras'
            callback does. `train` passes `False` and gives `fit` the epoch itself.
            Defaults to `True`.

    Example:

    >>> import numpy as np, tempfile
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", "mse")
    >>> backup = ResumableBackupAndRestore(tempfile.mkdtemp(), save_freq=2,
    ...                                    delete_checkpoint=False)
    >>> _ = model.fit(np.ones((6, 2)), np.ones((6, 1)), batch_size=2, verbose=0,
    ...               callbacks=[backup])
    >>> backup.state()["step"], backup.state()["epoch"], backup.state()["batch"]
    (3, 1, 0)
    """

    def __init__(
        self,
        backup_dir,
        save_freq="epoch",
        delete_checkpoint=True,
        is_chief=True,
        restore_epoch=True,
    ):
        super().__init__(
            backup_dir, save_freq=save_freq, double_checkpoint=False, delete_checkpoint=delete_checkpoint
        )
        if save_freq != "epoch" and (isinstance(save_freq, bool) or save_freq < 1):
            raise ValueError(
                f"`save_freq` must be 'epoch' or an int >= 1. Received: save_freq={save_freq!r}"
            )
        self.is_chief = is_chief
        self.restore_epoch = restore_epoch
        self._state_path = os.path.join(backup_dir, STATE_FILENAME)
        self._step = 0  # Steps (batches) trained in all, this run and the ones before.
        self._epoch = 0
        self._batch = 0  # Steps done in `self._epoch`.
        self._batches_this_fit = 0  # Steps of the current epoch in this `fit`.
        self._saved_step = None
        self._saved_position = None
        self._restored_step = None

    # === State ===
    def state(self):
        """The last complete backup: `{"epoch", "batch", "step", "weights"}`, or `None`."""
        state = read_json(self._state_path)
        if not state or not isinstance(state, dict):
            return None
        weights = os.path.join(self.backup_dir, str(state.get("weights", "")))
        if not os.path.isfile(weights):
            return None
        return state

    @property
    def step(self):
        """Steps trained so far, counting the runs before a restart."""
        return self._step

    # === Callback ===
    def on_train_begin(self, logs=None):
        state = self.state()
        if state is None:
            self._restored_step = None
            return
        if self._restored_step != state["step"] or self._step != state["step"]:
            # A fresh process (or model): load the backup. A second `fit` of the same run,
            # already in sync with the backup, skips this.
            if not self.model.built:
                raise ValueError(
                    "To use ResumableBackupAndRestore the model must be built before `fit()`. "
                    f"Received: an unbuilt model {self.model.name!r}"
                )
            if self.model.optimizer is not None and not self.model.optimizer.built:
                self.model.optimizer.build(self.model.trainable_variables)
            weights = os.path.join(self.backup_dir, state["weights"])
            check_sha256(weights, state.get("sha256"), self._state_path)
            load_weights(self.model, weights)
            restore_seed_states(self.model, state.get("seed_states"))
            logger.info(
                "Restored the backup of step %d (epoch %d, batch %d).",
                state["step"],
                state["epoch"] + 1,
                state["batch"],
            )
        self._step = self._restored_step = self._saved_step = state["step"]
        self._epoch, self._batch = state["epoch"], state["batch"]
        self._saved_position = (self._epoch, self._batch)
        if self.restore_epoch:
            self.model._initial_epoch = state["epoch"]

    def on_epoch_begin(self, epoch, logs=None):
        if epoch != self._epoch:
            self._epoch, self._batch = epoch, 0
        self._batches_this_fit = 0

    def on_train_batch_end(self, batch, logs=None):
        self._step += 1
        self._batch += 1
        self._batches_this_fit += 1
        if self.save_freq != "epoch" and self._step % self.save_freq == 0:
            self._save_model()

    def on_epoch_end(self, epoch, logs=None):
        steps = (self.params or {}).get("steps")
        if steps is None or self._batches_this_fit >= steps:
            self._epoch, self._batch = epoch + 1, 0
        # else: the epoch was cut short (`stop_training`); the backup says where it stopped.
        self._save_model()

    def on_train_end(self, logs=None):
        if self.restore_epoch:
            self.model._initial_epoch = None
        if self.delete_checkpoint:
            self.delete()

    def delete(self):
        """Deletes the backup (a finished run does not need it)."""
        if self.is_chief and os.path.isdir(self.backup_dir):
            shutil.rmtree(self.backup_dir, ignore_errors=True)
        self._saved_step = self._restored_step = None

    def _save_model(self):
        if self._saved_step == self._step and self._last_state_matches():
            return
        self._saved_step = self._step
        self._saved_position = (self._epoch, self._batch)
        name = f"backup-{self._step:08d}.weights.h5"
        if self.is_chief:
            os.makedirs(self.backup_dir, exist_ok=True)
            remove_temporaries(self.backup_dir)
        # Every process saves (a collective in multi-process JAX); process 0 keeps the file.
        sha256 = save_weights_atomically(
            self.model, os.path.join(self.backup_dir, name), is_chief=self.is_chief
        )
        if not self.is_chief:
            return
        iterations = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        write_json(
            self._state_path,
            {
                "epoch": self._epoch,
                "batch": self._batch,
                "step": self._step,
                "iterations": iterations,
                "weights": name,
                "sha256": sha256,
                "seed_states": [to_numpy(v).tolist() for v in seed_state_variables(self.model)],
            },
        )
        # Older backups are unreachable now that state.json names the new one.
        for old in os.listdir(self.backup_dir):
            match = BACKUP_PATTERN.match(old)
            if match and old != name:
                os.remove(os.path.join(self.backup_dir, old))

    def _last_state_matches(self):
        return self._saved_position == (self._epoch, self._batch)


def seed_state_variables(model):
    """The variables of `model` that `save_weights` leaves out: its seed generators' states.

    In `model.variables` order, which depends only on the architecture.
    """
    weights = {id(variable) for variable in model.weights}
    return [variable for variable in model.variables if id(variable) not in weights]


def restore_seed_states(model, values):
    """Assigns `values` (as recorded by the backup) to `seed_state_variables(model)`.

    A backup without them (written by an earlier version) leaves the states as they are.
    """
    if not values:
        return
    variables = seed_state_variables(model)
    if len(values) != len(variables):
        raise ValueError(
            f"The backup holds {len(values)} seed states but the model has {len(variables)}. "
            f"Received: a backup of another architecture for model {model.name!r}"
        )
    for variable, value in zip(variables, values, strict=True):
        variable.assign(keras.ops.convert_to_tensor(value, dtype=variable.dtype))
