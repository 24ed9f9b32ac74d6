"""`keras_transformer.training.backup.ResumableBackupAndRestore`: resuming mid-epoch."""

import json
import os

import keras
import numpy as np

from keras_transformer.training import ResumableBackupAndRestore
from tests.training.training_helpers import data, small_model, weights_of


def test_backup_restores_weights_optimizer_and_position(tmp_path):
    x, y = data()
    backup_dir = str(tmp_path / "backup")
    model = small_model()
    backup = ResumableBackupAndRestore(backup_dir, save_freq=4, delete_checkpoint=False)
    model.fit(x, y, batch_size=2, epochs=1, steps_per_epoch=5, verbose=0, callbacks=[backup])
    state = backup.state()
    assert (state["epoch"], state["batch"], state["step"], state["iterations"]) == (1, 0, 5, 5)
    assert len([n for n in os.listdir(backup_dir) if n.endswith(".weights.h5")]) == 1

    # A corrupt file that state.json does not name (a killed write) is never loaded.
    with open(os.path.join(backup_dir, "backup-00000009.weights.h5"), "wb") as file:
        file.write(b"\x89HDF\r\n garbage")
    restored = small_model()
    resumed = ResumableBackupAndRestore(backup_dir, save_freq=4, delete_checkpoint=False)
    restored.fit(x, y, batch_size=2, epochs=1, steps_per_epoch=1, verbose=0, callbacks=[resumed])
    # fit's `initial_epoch` came from the backup (epoch 1 of 1 done): nothing trained.
    assert int(keras.ops.convert_to_numpy(restored.optimizer.iterations)) == 5
    for restored_value, value in zip(weights_of(restored), weights_of(model), strict=True):
        np.testing.assert_array_equal(restored_value, value)


def test_backup_records_the_batch_within_the_epoch(tmp_path):
    x, y = data(rows=60)
    backup = ResumableBackupAndRestore(str(tmp_path), save_freq=3, delete_checkpoint=False)

    class Stop(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if backup.step == 7:
                self.model.stop_training = True

    small_model().fit(
        x, y, batch_size=2, epochs=3, steps_per_epoch=5, verbose=0, callbacks=[backup, Stop()]
    )
    # Backups at steps 3, 5 (end of epoch 0), 6, and 7 when the stop ends epoch 1 early: the
    # state says 2 steps of epoch 1 are done, not that epoch 1 is.
    state = backup.state()
    assert (state["step"], state["epoch"], state["batch"]) == (7, 1, 2)


def test_state_file_is_json(tmp_path):
    x, y = data()
    backup = ResumableBackupAndRestore(str(tmp_path), save_freq=2, delete_checkpoint=False)
    small_model().fit(x, y, batch_size=2, epochs=1, verbose=0, callbacks=[backup])
    with open(tmp_path / "state.json") as file:
        assert json.load(file)["weights"] == "backup-00000006.weights.h5"


def test_backup_records_and_restores_the_dropout_seeds(tmp_path):
    # `save_weights` leaves out the seed generators' states: without them a resumed run
    # would draw other dropout masks than an uninterrupted one.
    from keras_transformer.training.backup import seed_state_variables

    def dropout_model():
        model = keras.Sequential(
            [keras.Input((3,)), keras.layers.Dropout(0.5, seed=1), keras.layers.Dense(1)]
        )
        model.compile("sgd", "mse")
        return model

    def seeds(model):
        return [keras.ops.convert_to_numpy(v.value).tolist() for v in seed_state_variables(model)]

    x, y = data()
    model = dropout_model()
    initial = seeds(model)
    backup = ResumableBackupAndRestore(str(tmp_path), save_freq=2, delete_checkpoint=False)
    model.fit(x, y, batch_size=2, epochs=1, steps_per_epoch=4, verbose=0, callbacks=[backup])
    trained = seeds(model)
    assert len(trained) == 1 and trained != initial  # every step draws a mask
    assert backup.state()["seed_states"] == trained
    fresh = dropout_model()
    assert seeds(fresh) == initial
    # The backup says epoch 1 is done: `fit` restores the state and trains no more.
    fresh.fit(x, y, batch_size=2, epochs=1, verbose=0,
              callbacks=[ResumableBackupAndRestore(str(tmp_path), delete_checkpoint=False)])
    assert seeds(fresh) == trained
    np.testing.assert_array_equal(weights_of(fresh)[0], weights_of(model)[0])
