"""Callbacks and utilities of `keras_transformer.training`, on a small Dense model."""

import json
import os

import keras
import numpy as np
import pytest

from keras_transformer.training import (
    BleuCallback,
    PeriodicCheckpoint,
    ResumableBackupAndRestore,
    TensorBoardLogger,
    TimeLimit,
    average_checkpoints,
    corpus_bleu,
    exact_match,
    list_checkpoints,
    plan_fits,
)
from keras_transformer.training.files import atomic_directory, atomic_path, remove_temporaries


def small_model():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(0.01), "mse")
    return model


def data(rows=12):
    rng = np.random.default_rng(0)
    return rng.normal(size=(rows, 3)).astype("float32"), rng.normal(size=(rows, 1)).astype("float32")


def weights_of(model):
    return [keras.ops.convert_to_numpy(variable.value) for variable in model.weights]


def test_average_checkpoints_is_the_mean(tmp_path):
    model = small_model()
    model.optimizer.build(model.trainable_variables)
    rng = np.random.default_rng(1)
    saved = []
    for index in range(3):
        values = [rng.normal(size=w.shape).astype("float32") for w in weights_of(model)]
        model.set_weights(values)
        model.save_weights(str(tmp_path / f"ckpt-{index}.weights.h5"))
        saved.append(values)
    averaged = average_checkpoints(model, [str(tmp_path / f"ckpt-{i}.weights.h5") for i in range(3)])
    for position, value in enumerate(weights_of(model)):
        expected = np.mean([values[position] for values in saved], axis=0)
        np.testing.assert_allclose(value, expected, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(averaged[position], expected, rtol=1e-6, atol=1e-7)


def test_periodic_checkpoint_keeps_the_last_ones_and_averages(tmp_path):
    model = small_model()
    x, y = data()
    directory = str(tmp_path / "checkpoints")
    callback = PeriodicCheckpoint(directory, save_freq=2, keep=3)
    model.fit(x, y, batch_size=2, epochs=2, verbose=0, callbacks=[callback])  # 12 steps
    assert [step for step, _ in list_checkpoints(directory)] == [8, 10, 12]
    assert not [name for name in os.listdir(directory) if name.startswith(".tmp-")]


def test_atomic_path_never_leaves_a_partial_file(tmp_path):
    path = tmp_path / "ckpt-00000001.weights.h5"
    path.write_text("complete")
    with pytest.raises(RuntimeError), atomic_path(path) as temporary:
        with open(temporary, "w") as file:
            file.write("half")
        raise RuntimeError("killed")
    assert path.read_text() == "complete"
    assert os.listdir(tmp_path) == [path.name]
    # What a `kill -9` leaves: a temporary file. Loaders never see it; the next run removes it.
    (tmp_path / ".tmp-1234abcd-ckpt-00000002.weights.h5").write_text("half")
    assert [step for step, _ in list_checkpoints(str(tmp_path))] == [1]
    assert remove_temporaries(str(tmp_path)) == 1


def test_atomic_directory_replaces_the_whole_directory(tmp_path):
    target = tmp_path / "saved_model"
    target.mkdir()
    (target / "old.pb").write_text("old")
    with atomic_directory(target) as temporary:
        os.makedirs(temporary)
        with open(os.path.join(temporary, "new.pb"), "w") as file:
            file.write("new")
    assert os.listdir(target) == ["new.pb"]
    assert os.listdir(tmp_path) == ["saved_model"]


def test_atomic_directory_temporaries_are_all_cleaned_and_the_old_one_put_back(
    tmp_path, monkeypatch
):
    # Fail the swap between its two renames: the moment a kill would leave both the new
    # directory and the old one under temporary names.
    target = tmp_path / "saved_model"
    target.mkdir()
    (target / "old.pb").write_text("old")
    replace, seen = os.replace, []

    def failing_replace(source, destination):
        if os.fspath(destination) == str(target) and not seen:
            seen.extend(sorted(os.listdir(tmp_path)))
            raise OSError("killed")
        replace(source, destination)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="killed"), atomic_directory(target) as temporary:
        os.makedirs(temporary)
    # One naming rule: every temporary there was starts with `.tmp-` (what
    # `remove_temporaries` clears), and the old directory is back in place.
    assert len(seen) == 2 and all(name.startswith(".tmp-") for name in seen)
    assert os.listdir(tmp_path) == ["saved_model"]
    assert os.listdir(target) == ["old.pb"]


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


def test_plan_fits_resumes_mid_epoch():
    assert plan_fits(0, 10, 4) == [(0, 3, 4, 0)]
    assert plan_fits(6, 10, 4) == [(1, 2, 2, 6), (2, 3, 4, 8)]
    assert plan_fits(9, 10, 4) == [(2, 3, 1, 9)]
    assert plan_fits(8, 10, 4) == [(2, 3, 4, 8)]
    assert plan_fits(10, 10, 4) == []


def test_time_limit_stops_training():
    x, y = data()
    limit = TimeLimit(minutes=1e-9)
    history = small_model().fit(
        x, y, batch_size=2, epochs=4, verbose=0, callbacks=[limit]
    )
    assert limit.stopped
    assert len(history.history["loss"]) == 1
    with pytest.raises(ValueError, match="minutes=0"):
        TimeLimit(minutes=0)


def test_bleu_callback_logs_to_history_and_tensorboard(tmp_path):
    import tensorflow as tf

    x, y = data()
    sources = ["uno dos tres cuatro", "cinco seis siete ocho"]
    references = ["one two three four", "five six seven eight"]
    table = dict(zip(sources, references, strict=True))
    bleu = BleuCallback(
        lambda batch: [table[source] for source in batch],
        sources,
        references,
        log_dir=str(tmp_path / "logs"),
    )
    logger = TensorBoardLogger(str(tmp_path / "logs"), update_freq=2)
    history = small_model().fit(
        x, y, batch_size=2, epochs=2, verbose=0, callbacks=[bleu, logger]
    )
    assert history.history["val_bleu"] == pytest.approx([100.0, 100.0])
    assert [step for step, _ in bleu.history] == [6, 12]
    tags = {}
    for run in ("train", "validation"):
        for path in tf.io.gfile.glob(str(tmp_path / "logs" / run / "events.out.tfevents.*")):
            for event in tf.compat.v1.train.summary_iterator(path):
                for value in event.summary.value:
                    tags.setdefault(run, set()).add(value.tag)
    assert {"batch_loss", "epoch_loss"} <= tags["train"]
    assert {"bleu", "epoch_bleu"} <= tags["validation"]


def test_bleu_and_exact_match():
    assert corpus_bleu(["the cat sat on the mat"], ["the cat sat on the mat"]) == pytest.approx(100)
    assert corpus_bleu(["a b c d e"], ["v w x y z"]) == 0.0
    assert exact_match(["forty - two", "one"], ["forty - two", "two"]) == 0.5
    with pytest.raises(ValueError, match="same length"):
        corpus_bleu(["a"], [])


def test_state_file_is_json(tmp_path):
    x, y = data()
    backup = ResumableBackupAndRestore(str(tmp_path), save_freq=2, delete_checkpoint=False)
    small_model().fit(x, y, batch_size=2, epochs=1, verbose=0, callbacks=[backup])
    with open(tmp_path / "state.json") as file:
        assert json.load(file)["weights"] == "backup-00000006.weights.h5"
