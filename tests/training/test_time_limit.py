"""`keras_transformer.training.time_limit`: the wall-clock budget callback, the linear
decay's end re-planned to where the budget runs out, and the checkpoints spaced again from
the measured step rate."""

import keras
import numpy as np
import pytest

from keras_transformer.optimizers import decay_end, transformer_adam
from keras_transformer.training import TimeLimit
from keras_transformer.training.checkpoints import PeriodicCheckpoint, list_checkpoints
from keras_transformer.training.time_limit import CheckpointPlan, DecayPlan
from tests.training.training_helpers import data, small_model, weights_of


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


class _EndHere(keras.callbacks.Callback):
    """At the start of epoch `epoch`, moves the decay's end to the current step (rate 0)."""

    def __init__(self, end, epoch):
        super().__init__()
        self.end, self.epoch, self.weights = end, epoch, {}

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.epoch:
            self.end.assign(float(keras.ops.convert_to_numpy(self.model.optimizer.iterations)))

    def on_epoch_end(self, epoch, logs=None):
        self.weights[epoch] = weights_of(self.model)


@pytest.mark.parametrize("move", [True, False])
def test_a_decay_end_moved_at_an_epoch_start_reaches_the_compiled_step(move):
    # The end assigned at epoch 2's start puts the rate at 0 from there: Adam then leaves the
    # weights as they are, on every backend (JAX reads the optimizer's variables again at an
    # epoch's start). Left alone, the weights keep changing.
    x, y = data()
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    optimizer = transformer_adam(2, 2, decay="linear", total_steps=1000, movable_end=True)
    model.compile(optimizer, "mse")
    probe = _EndHere(decay_end(optimizer), epoch=1 if move else -1)
    model.fit(x, y, batch_size=2, epochs=2, verbose=0, callbacks=[probe])
    changes = [np.max(np.abs(a - b)) for a, b in zip(probe.weights[0], probe.weights[1])]
    assert (max(changes) == 0.0) == move
    assert float(keras.ops.convert_to_numpy(optimizer.learning_rate)) == 0.0 or not move


def test_decay_plan_ends_the_decay_where_the_budget_runs_out():
    class Counter:
        step = 0

    end = keras.Variable(5000.0)
    plan = DecayPlan(end, TimeLimit(minutes=60), Counter(), train_steps=5000, warmup_steps=800)
    # 1,000 steps done, 0.5 s per step and 1,200 s left: 2,400 more steps.
    assert plan.replan(1000, 0.5, 1200) == 3400
    assert float(keras.ops.convert_to_numpy(end)) == 3400.0
    # Never past the step budget, never inside the warm-up, never at or before the step.
    assert plan.replan(1000, 0.1, 1e6) == 5000
    assert plan.replan(100, 1.0, 10) == 801
    assert plan.replan(900, 1.0, -5) == 901
    assert plan.plans == [(1000, 3400), (1000, 5000), (100, 801), (900, 901)]


class _Counter(keras.callbacks.Callback):
    """The run's optimizer step, as the backup callback counts it."""

    step = 0

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1


class _Budget:
    """A time budget with `seconds` left, whatever the clock says."""

    def __init__(self, seconds):
        self.seconds = seconds

    def remaining_seconds(self):
        return self.seconds


def test_checkpoint_plan_spaces_the_averaged_checkpoints_over_the_reachable_steps():
    class Checkpoints:
        save_freq, keep = 198, 5

    checkpoints = Checkpoints()
    plan = CheckpointPlan(checkpoints, _Budget(0), _Counter(), train_steps=100_000, share=0.1)
    # make bible on a machine faster than the recipe's estimate (~9,900 steps at 0.29 s):
    # 0.27 s per step from step 500 with 3,300 s left reaches step 12,722, so 5 checkpoints
    # 254 steps apart span the last tenth.
    assert plan.replan(500, 0.27, 3300) == 254
    assert checkpoints.save_freq == 254
    # Never past the step budget; at least one step apart.
    assert plan.replan(500, 0.001, 1e9) == 2000
    assert plan.replan(1, 1.0, 0) == 1
    assert plan.plans == [(500, 254), (500, 2000), (1, 1)]
    with pytest.raises(ValueError, match="share=1.5"):
        CheckpointPlan(checkpoints, _Budget(0), _Counter(), train_steps=10, share=1.5)


def test_a_spacing_planned_at_an_epoch_start_is_the_one_fit_saves_at(tmp_path):
    # 3 epochs of 8 steps, a checkpoint every 3 steps planned before training. After the
    # first epoch the plan finds the run reaching its 100-step budget: the 2 kept checkpoints
    # span a fifth of it, 10 steps apart (and the last one is written when training ends).
    x, y = data(rows=16)
    model = small_model()
    counter = _Counter()
    checkpoints = PeriodicCheckpoint(tmp_path, save_freq=3, keep=2)
    plan = CheckpointPlan(checkpoints, _Budget(1e9), counter, train_steps=100, share=0.2)
    model.fit(x, y, batch_size=2, epochs=3, verbose=0, callbacks=[counter, checkpoints, plan])
    assert counter.step == 24
    assert [every for _, every in plan.plans] == [10, 10]
    assert [step for step, _ in list_checkpoints(tmp_path)] == [20, 24]
