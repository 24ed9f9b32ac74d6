"""Periodic, atomically written weight checkpoints, numbered by training step.

Each file's SHA-256 is recorded in `checkpoints/sha256.json` once the file is in place, and
checked before it is loaded (`check_checkpoint`). The record also keeps the step from which
it records every checkpoint (`RECORDED_FROM_KEY`, set by its first record): a checkpoint
without a record loads (unchecked, with a note) only when it is older than that step, a file
of 0.2.0 (which recorded nothing) or of a version that did not keep the step; a later one
without a record is refused. A run killed between a checkpoint's two writes leaves one
such file, of its backup's step: the resumed run writes it again from the backup
(`restore_checkpoint`), recorded; one killed while pruning leaves older ones whose record
it removed first: the resumed run deletes them.
"""

import hashlib
import logging
import os
import re
import shutil

import keras

from keras_transformer._checks import check_int, is_int
from keras_transformer.files import (
    atomic_path,
    read_json,
    remove_temporaries,
    write_bytes,
    write_json,
)
from keras_transformer.models.lora import lora_layers
from keras_transformer.saving.weights import (
    DamagedFileError,
    check_sha256,
    save_weights,
    sha256_file,
    weights_bytes,
)
from keras_transformer.training import lora_state
from keras_transformer.training.state import sync_model_state

logger = logging.getLogger("keras_transformer")

CHECKPOINT_PATTERN = re.compile(r"^ckpt-(\d+)\.weights\.h5$")
SHA256_FILENAME = "sha256.json"
# In `sha256.json`: the step of the first checkpoint recorded there; every later one is.
RECORDED_FROM_KEY = "recorded_from_step"


def checkpoint_path(directory, step):
    """`directory/ckpt-00001234.weights.h5` for `step=1234`."""
    return os.path.join(directory, f"ckpt-{int(step):08d}.weights.h5")


def list_checkpoints(directory):
    """The complete checkpoints in `directory`, oldest first, as `[(step, path), ...]`.

    Temporary files of an interrupted write never match, so every listed file is complete.
    """
    if not os.path.isdir(directory):
        return []
    found = []
    for name in os.listdir(directory):
        match = CHECKPOINT_PATTERN.match(name)
        if match:
            found.append((int(match.group(1)), os.path.join(directory, name)))
    return sorted(found)


def save_weights_atomically(model, path, is_chief=True):
    """`model.save_weights(path)` through a temporary file and an atomic rename.

    The file is built in memory and written by Python (`keras_transformer.saving.weights`):
    a full disk is one `OSError`, the old file untouched.

    In multi-process JAX training every process must call it at the same point (syncing and
    reading distributed variables are collective operations): process 0 (`is_chief`) writes
    `path`, the others build the file in memory and drop it.

    A model with LoRA enabled (`keras_transformer.models.lora`) writes its LoRA factors and
    optimizer state only, with a reference to its frozen base weights, written once
    (`keras_transformer.training.lora_state`); `load_weights` reads either kind of file.

    Args:
        model: a built `keras.Model`.
        path: str. Must end in `.weights.h5`.
        is_chief: bool. Whether this process writes `path`. Defaults to `True`.

    Returns:
        str, the SHA-256 of the file (`None` on the other processes).
    """
    sync_model_state(model)
    if lora_layers(model):
        data = lora_state.state_bytes(model, os.fspath(path), write_base=is_chief)
        if not is_chief:
            return None
        write_bytes(path, data)
        return hashlib.sha256(data).hexdigest()
    if is_chief:
        return save_weights(model, path)
    weights_bytes(model)
    return None


def load_weights(model, path):
    """`model.load_weights(path)`, or for a LoRA state file (`save_weights_atomically` of a
    LoRA model) `keras_transformer.training.lora_state.load`."""
    if lora_state.is_lora_state(path):
        lora_state.load(model, path)
    else:
        model.load_weights(path)


def record_sha256(directory, name, sha256):
    """Records the SHA-256 of the checkpoint `name` in `directory/sha256.json`, keeping the
    records of the files still there only."""
    path = os.path.join(directory, SHA256_FILENAME)
    records = read_json(path)
    records = records if isinstance(records, dict) else {}
    if not is_int(records.get(RECORDED_FROM_KEY)):
        records[RECORDED_FROM_KEY] = _step_of(name)
    records[name] = sha256
    present = {*os.listdir(directory), RECORDED_FROM_KEY}
    write_json(path, {key: value for key, value in records.items() if key in present})


def _step_of(name):
    match = CHECKPOINT_PATTERN.match(name)
    return int(match.group(1)) if match else 0


def _remove_unrecorded(directory, keep_step):
    """Deletes the checkpoints that a run killed while pruning left (their record removed
    first, the file not yet): those of steps the record covers, without a record, but for
    `keep_step`'s (written again from the backup)."""
    records = read_json(os.path.join(directory, SHA256_FILENAME))
    since = records.get(RECORDED_FROM_KEY) if isinstance(records, dict) else None
    if not is_int(since):
        return
    for step, path in list_checkpoints(directory):
        if step >= since and step != keep_step and os.path.basename(path) not in records:
            os.remove(path)
            logger.info("Removed %s, pruned by a run killed before it was deleted.", path)


def _recorded(directory, name):
    records = read_json(os.path.join(directory, SHA256_FILENAME))
    return isinstance(records, dict) and records.get(name) is not None


def check_checkpoint(path):
    """Raises `DamagedFileError` (an `OSError`) if the checkpoint `path` differs from the
    SHA-256 recorded for it, or has none though it is not older than the record (see the
    module docstring); an older one without a record loads unchecked, with a note."""
    directory, name = os.path.split(os.fspath(path))
    record = os.path.join(directory, SHA256_FILENAME)
    records = read_json(record)
    records = records if isinstance(records, dict) else {}
    expected = records.get(name)
    if expected is None:
        since = records.get(RECORDED_FROM_KEY)
        if is_int(since) and _step_of(name) >= since:
            raise DamagedFileError(
                f"{path}: {record} records no SHA-256 of it, though it records every "
                f"checkpoint from step {since} on: it cannot be checked, so it is not loaded"
            )
        logger.warning(
            "keras_transformer: note: %s: no SHA-256 recorded (a checkpoint older than %s's "
            "records, by 0.2.0 or 0.3.0): it loads unchecked",
            path,
            SHA256_FILENAME,
        )
        return
    check_sha256(path, expected, record)


def restore_checkpoint(directory, step, weights_path, keep=5):
    """Writes the missing checkpoint of `step` as a copy of `weights_path`, then prunes.

    `train` calls it when it resumes from a backup: `ResumableBackupAndRestore` comes first
    among the callbacks, so at a step where both write, the backup is complete before the
    checkpoint is started, and a kill during the checkpoint's write leaves a backup that
    says the step is done without its checkpoint. The backup file holds the same state
    (`save_weights` of the same model at the same step), so a copy of it is that checkpoint.
    Only the checkpoint of the backup's own step can be missing: every earlier one was
    complete before training went on.

    Args:
        directory: str. The checkpoint directory.
        step: int. The step of `weights_path`.
        weights_path: str. A `.weights.h5` file of the model at `step` (the backup).
        keep: int. Newest checkpoints kept. Defaults to `5`.

    Returns:
        bool, whether the checkpoint was missing or unrecorded (and is now written).
    """
    path = checkpoint_path(directory, step)
    _remove_unrecorded(directory, keep_step=step)
    if os.path.exists(path) and _recorded(directory, os.path.basename(path)):
        return False  # Without a record: killed between its two writes, written again.
    with atomic_path(path) as temporary:
        shutil.copyfile(weights_path, temporary)
    record_sha256(directory, os.path.basename(path), sha256_file(path))
    prune_checkpoints(directory, keep)
    logger.info("Restored the checkpoint of step %d from %s.", step, weights_path)
    return True


def prune_checkpoints(directory, keep):
    """Deletes all but the newest `keep` checkpoints of `directory`: their SHA-256 records
    first, so that no record ever names a missing file."""
    doomed = [path for _, path in list_checkpoints(directory)[:-keep]]
    if not doomed:
        return
    path = os.path.join(directory, SHA256_FILENAME)
    records = read_json(path)
    names = {os.path.basename(old) for old in doomed}
    if isinstance(records, dict) and names & set(records):
        write_json(path, {key: value for key, value in records.items() if key not in names})
    for old in doomed:
        os.remove(old)


class PeriodicCheckpoint(keras.callbacks.Callback):
    """Saves the model weights every `save_freq` steps, keeping the last `keep` files.

    Files are named `ckpt-STEP.weights.h5` after the optimizer step and written atomically
    (temporary file, then rename), so a killed process never leaves a partial checkpoint. A
    last checkpoint is written when training ends (unless one exists for that step). These
    are the checkpoints `average_checkpoints` averages (paper §6.1: the last 5).

    Only process 0 writes (`is_chief`), in multi-process training; every process must use
    the callback (saving is a collective operation there).

    Args:
        directory: str. Where the checkpoints go.
        save_freq: int or `"epoch"`. Steps between checkpoints, or the end of each epoch.
            Defaults to `"epoch"`.
        keep: int. Newest checkpoints kept; older ones are deleted. Defaults to `5`.
        is_chief: bool. Whether this process writes. Defaults to `True`.

    Example:

    >>> import numpy as np, tempfile
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", "mse")
    >>> directory = tempfile.mkdtemp()
    >>> _ = model.fit(np.ones((8, 2)), np.ones((8, 1)), batch_size=2, verbose=0,
    ...               callbacks=[PeriodicCheckpoint(directory, save_freq=3, keep=2)])
    >>> [step for step, _ in list_checkpoints(directory)]
    [3, 4]
    """

    def __init__(self, directory, save_freq="epoch", keep=5, is_chief=True):
        super().__init__()
        if save_freq != "epoch" and (
            isinstance(save_freq, bool) or not isinstance(save_freq, int) or save_freq < 1
        ):
            raise ValueError(
                f"`save_freq` must be 'epoch' or an int >= 1. Received: save_freq={save_freq!r}"
            )
        check_int("keep", keep, minimum=1)
        self.directory = os.fspath(directory)
        self.save_freq = save_freq
        self.keep = keep
        self.is_chief = is_chief
        self._step = 0
        self._saved_step = None

    def on_train_begin(self, logs=None):
        # The optimizer step, counted here from now on: reading the variable in the middle of
        # a JAX epoch would need a full state sync.
        sync_model_state(self.model)
        self._step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        if self.is_chief:
            os.makedirs(self.directory, exist_ok=True)
            remove_temporaries(self.directory)

    def on_train_batch_end(self, batch, logs=None):
        self._step += 1
        if self.save_freq != "epoch" and self._step % self.save_freq == 0:
            self.save()

    def on_epoch_end(self, epoch, logs=None):
        if self.save_freq == "epoch":
            self.save()

    def on_train_end(self, logs=None):
        self.save()

    def save(self):
        """Writes the checkpoint of the current step (if missing) and prunes old ones.

        Returns:
            str, the checkpoint path.
        """
        step = self._step
        path = checkpoint_path(self.directory, step)
        if step == self._saved_step:
            return path
        self._saved_step = step
        sha256 = save_weights_atomically(self.model, path, is_chief=self.is_chief)
        if self.is_chief:
            record_sha256(self.directory, os.path.basename(path), sha256)
            prune_checkpoints(self.directory, self.keep)
        return path

