"""`keep_best` and `early_stopping_patience`: the `KeepBest` callback on scripted validation
scores, its record across a resume, and `train` exporting the best step and stopping early
across crashes."""

import json
import os

import keras
import numpy as np
import pytest

from keras_transformer.files import unlock_directory
from keras_transformer.training import TrainingConfig, train
from keras_transformer.training.best import KeepBest, summarize
from keras_transformer.training.config import ConfigError
from keras_transformer.training.trainer import fit_run, prepare_run
from tests.training.training_helpers import Crash, data, small_model, weights_of


class ScriptedMetric(keras.callbacks.Callback):
    """Writes `values[epoch]` into the epoch logs as `name` (placed before `KeepBest`) and
    keeps the weights at each epoch end."""

    def __init__(self, name, values):
        super().__init__()
        self.name, self.values, self.weights = name, values, []

    def on_epoch_end(self, epoch, logs=None):
        logs[self.name] = self.values[epoch]
        self.weights.append(weights_of(self.model))


def fit_scripted(tmp_path, monitor, values, patience, epochs=10):
    model = small_model()
    x, y = data(rows=8)
    scripted = ScriptedMetric(monitor, values)
    exports = []
    keep = KeepBest(
        monitor,
        tmp_path / "best.json",
        export_fn=lambda step: exports.append((step, weights_of(model))),
        patience=patience,
    )
    history = model.fit(x, y, batch_size=4, epochs=epochs, verbose=0, callbacks=[scripted, keep])
    return keep, scripted, exports, history


def test_early_stopping_stops_at_the_right_validation(tmp_path):
    # Best 30 at the 3rd validation; the 4th and 5th do not beat it: patience 2 stops at the 5th.
    values = [10.0, 20.0, 30.0, 25.0, 29.0, 40.0, 50.0, 60.0, 70.0, 80.0]
    keep, _, _, history = fit_scripted(tmp_path, "val_bleu", values, patience=2)
    assert len(history.history["loss"]) == 5
    assert keep.stopped
    # 2 steps per epoch (8 rows, batches of 4): the 3rd validation is at step 6.
    assert keep.summary() == {
        "monitor": "val_bleu",
        "best": 30.0,
        "best_step": 6,
        "wait": 2,
        "evaluations": 5,
        "stopped_early": True,
    }


def test_equal_score_is_no_improvement_and_loss_is_minimized(tmp_path):
    keep, _, exports, history = fit_scripted(tmp_path, "val_loss", [3.0, 2.0, 2.0, 2.5], patience=2)
    assert len(history.history["loss"]) == 4
    assert [step for step, _ in exports] == [2, 4]
    assert summarize([(1, 3.0), (2, 2.0), (3, 2.0)], "min")["best_step"] == 2


def test_best_export_happens_at_the_best_step(tmp_path):
    values = [1.0, 3.0, 2.0, 2.5, 2.9, 2.0]
    keep, scripted, exports, _ = fit_scripted(tmp_path, "val_accuracy", values, patience=0, epochs=6)
    assert not keep.stopped  # patience 0: never stops
    assert [step for step, _ in exports] == [2, 4]  # each improvement, at its step
    best_weights = exports[-1][1]
    for exported, at_best in zip(best_weights, scripted.weights[1], strict=True):
        np.testing.assert_array_equal(exported, at_best)
    # The weights went on changing after the best step: the export is not the last state.
    assert any(
        not np.array_equal(exported, last)
        for exported, last in zip(best_weights, scripted.weights[-1], strict=True)
    )


def test_record_survives_a_resume_and_later_validations_are_forgotten(tmp_path):
    path = tmp_path / "best.json"
    steps_values = [(10, 1.0), (20, 2.0), (30, 1.5), (40, 1.8), (50, 1.9)]
    uninterrupted = KeepBest("val_bleu", path, patience=3)
    for step, value in steps_values:
        uninterrupted.observe(step, value)
    assert uninterrupted.stopped and uninterrupted.summary()["best_step"] == 20

    # A crash after the validation of step 40, with the last backup at step 35: the resumed
    # run keeps the validations up to 35 and makes the one of step 40 again (and 50).
    record = json.loads(path.read_text())
    assert record["evaluations"][-1] == [50, 1.9]
    path.write_text(json.dumps({"monitor": "val_bleu", "evaluations": record["evaluations"][:4]}))
    resumed = KeepBest("val_bleu", path, patience=3)
    assert resumed.resume(35) is False
    assert resumed.summary() == {
        "monitor": "val_bleu",
        "best": 2.0,
        "best_step": 20,
        "wait": 1,
        "evaluations": 3,
        "stopped_early": False,
    }
    for step, value in steps_values[3:]:
        resumed.observe(step, value)
    assert resumed.summary() == uninterrupted.summary()

    # Resumed after the stopping validation: it says training is over.
    again = KeepBest("val_bleu", path, patience=3)
    assert again.resume(50) is True and again.summary()["stopped_early"]
    # A fresh start (step 0) forgets every validation; a record of another monitor is ignored.
    assert KeepBest("val_bleu", path, patience=3).resume(0) is False
    assert json.loads(path.read_text())["evaluations"] == []
    path.write_text(json.dumps({"monitor": "val_loss", "evaluations": [[1, 0.5]]}))
    other = KeepBest("val_bleu", path)
    other.resume(10)
    assert other.summary()["evaluations"] == 0


def test_scores_of_a_step_based_evaluation_are_read_after_each_batch(tmp_path):
    # `BleuCallback(every_steps=N)` appends `(step, bleu)` to its history during the epoch.
    history = []

    class StepBleu(keras.callbacks.Callback):
        step = 0

        def on_train_batch_end(self, batch, logs=None):
            self.step += 1
            if self.step % 3 == 0:
                history.append((self.step, {3: 5.0, 6: 4.0, 9: 3.0, 12: 9.0}[self.step]))

    model = small_model()
    x, y = data(rows=8)
    keep = KeepBest("val_bleu", tmp_path / "best.json", patience=2, step_values=lambda: history)
    model.fit(x, y, batch_size=4, epochs=10, verbose=0, callbacks=[StepBleu(), keep])
    assert keep.evaluations == [(3, 5.0), (6, 4.0), (9, 3.0)]
    assert keep.stopped  # at step 9, in the middle of the 5th epoch


@pytest.mark.parametrize(
    "training, evaluation, data_section, message",
    [
        ({"keep_best": "bleu"}, {}, {}, "training.keep_best='bleu'"),
        ({"early_stopping_patience": 2}, {}, {}, "training.keep_best=''"),
        ({"keep_best": "val_bleu"}, {"bleu_every": -1}, {}, "evaluation.bleu_every=-1"),
        ({"keep_best": "val_loss"}, {}, {"num_validation": 0}, "data.num_validation=0"),
        ({"keep_best": "val_loss", "early_stopping_patience": -1}, {}, {}, "patience=-1"),
    ],
)
def test_invalid_keep_best_settings_name_the_setting(training, evaluation, data_section, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        TrainingConfig.from_dict(
            {"training": training, "evaluation": evaluation, "data": data_section}
        )


def transformer_weights(translator_or_path, checkpoint=None):
    from keras_transformer import Translator

    if os.path.isdir(translator_or_path):
        translator = Translator.from_preset(translator_or_path)
    else:
        translator = Translator.load(translator_or_path)
    if checkpoint:
        translator.model.load_weights(checkpoint)
    return weights_of(translator.model)


@pytest.mark.slow
@pytest.mark.one_backend
def test_train_exports_the_best_step_and_early_stopping_survives_a_crash(
    tiny_run, monkeypatch, tmp_path
):
    # The validation loss is scripted (the real one of a few steps is noise): best at step 8,
    # then two validations without improvement: patience 2 stops at step 16 of 20.
    script = {4: 3.0, 8: 2.0, 12: 2.5, 16: 2.6, 20: 1.0}
    on_epoch_end = KeepBest.on_epoch_end
    monkeypatch.setattr(
        KeepBest,
        "on_epoch_end",
        lambda self, epoch, logs=None: on_epoch_end(self, epoch, {**logs, "val_loss": script[self._step]}),
    )

    config = tiny_run(
        training={
            "train_steps": 20,
            "steps_per_epoch": 4,
            "checkpoint_every": 4,
            "average_checkpoints": 5,
            "backup_every": 3,
            "keep_best": "val_loss",
            "early_stopping_patience": 2,
        },
    )

    # Run 1 is stopped early at step 16 and crashes at the end of `fit`: the backup of step 16
    # is there, no stage after training is recorded.
    output_dir = tmp_path / "run"
    with pytest.raises(RuntimeError, match="crash at the end"):
        train(config, callbacks=[Crash(at_end=True)], verbose=0)
    record = json.loads((output_dir / "best.json").read_text())
    assert record["evaluations"] == [[4, 3.0], [8, 2.0], [12, 2.5], [16, 2.6]]
    assert json.loads((output_dir / "backup" / "state.json").read_text())["step"] == 16
    best = str(output_dir / "best")  # a preset directory
    checkpoints = output_dir / "checkpoints"
    at_best = transformer_weights(best, str(checkpoints / "ckpt-00000008.weights.h5"))
    at_end = transformer_weights(best, str(checkpoints / "ckpt-00000016.weights.h5"))
    for exported, expected in zip(transformer_weights(best), at_best, strict=True):
        np.testing.assert_array_equal(exported, expected)
    assert any(not np.array_equal(a, b) for a, b in zip(at_best, at_end, strict=True))

    # Run 2 (the same command) resumes after the stopping validation: it trains no step and
    # finishes with the best of run 1.
    finished = train(config, verbose=0)
    assert finished.metrics["steps"] == finished.metrics["optimizer_iterations"] == 16
    assert finished.metrics["steps_this_run"] == 0
    assert finished.metrics["best"] == {"monitor": "val_loss", "best": 2.0, "best_step": 8,
                                        "wait": 2, "evaluations": 4, "stopped_early": True}
    for kept, expected in zip(transformer_weights(best), at_best, strict=True):
        np.testing.assert_array_equal(kept, expected)


@pytest.mark.slow
@pytest.mark.one_backend
def test_a_validation_killed_after_its_backup_is_done_again_on_resume(
    tiny_run, monkeypatch, tmp_path
):
    # Run 1 dies after the end-of-epoch backup of step 2 and the export of its validation,
    # before `best.json` records it (what a kill there leaves). Before, run 2 resumed after
    # step 2 and never validated it: the step-2 model could never be the best.
    write = KeepBest._write

    def killed(self):
        if self.evaluations and self.evaluations[-1][0] == 2 and not killed.done:
            killed.done = True
            raise RuntimeError("killed before best.json")
        write(self)

    killed.done = False
    monkeypatch.setattr(KeepBest, "_write", killed)
    every = {"steps_per_epoch": 2, "checkpoint_every": 2, "backup_every": 2}
    config = tiny_run(training={"keep_best": "val_loss", "train_steps": 4, **every})
    output_dir = tmp_path / "run"
    with pytest.raises(RuntimeError, match="killed before best.json"):
        train(config, verbose=0)
    assert json.loads((output_dir / "backup" / "state.json").read_text())["step"] == 2
    assert json.loads((output_dir / "best.json").read_text())["evaluations"] == []

    # Run 2 (training only: the stages after it add nothing here).
    run = prepare_run(config, verbose=0)
    outcome = fit_run(run)
    unlock_directory(output_dir)
    steps = [step for step, _ in json.loads((output_dir / "best.json").read_text())["evaluations"]]
    assert steps == [2, 4]
    # `best/` holds the step `best.json` names.
    checkpoint = output_dir / "checkpoints" / f"ckpt-{outcome.best['best_step']:08d}.weights.h5"
    for exported, expected in zip(
        transformer_weights(str(output_dir / "best")),
        transformer_weights(str(output_dir / "best"), str(checkpoint)),
        strict=True,
    ):
        np.testing.assert_array_equal(exported, expected)
