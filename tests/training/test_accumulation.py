"""Gradient accumulation: k micro-batches make the update of one batch, counted as one step.

The weight comparisons use micro-batches holding the same number of target tokens: the loss
is a mean over each batch's real tokens, so only then is the mean of the micro-batches'
gradients the gradient of the whole batch (see `keras_transformer.training.accumulation`).
"""

import json
import os

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer import Transformer
from keras_transformer.losses import LabelSmoothedCrossentropy
from keras_transformer.optimizers import transformer_adam
from keras_transformer.schedules import AccumulatedSchedule, WarmupSchedule
from keras_transformer.training import PerUpdate, TensorBoardLogger, TrainingConfig, train
from keras_transformer.training.building import compile_model
from tests.training.training_helpers import SCRIPTS, run_ranks, weights_of

VOCAB, LENGTH, ROWS = 30, 10, 8
# float32 round-off of gradients summed in another order, after 3 updates that move the
# weights by up to about 1. Adam divides each element by its running RMS, so an element with
# a gradient near 0 (the attention key biases: softmax ignores a constant added to all
# scores) turns round-off into a visible step; those elements do not change any output and
# are left out of the Adam comparison.
TOLERANCE = 1e-5
# Under DataParallel the gradients are also summed over 2 devices. Over 14 random initial
# weights the largest difference was 5.2e-5 (median 2.3e-6; measured with 2 CPU devices in
# one process, the script's earlier form); the weight change is 0.18, and a lost or repeated
# micro-batch moves weights by about the learning rate (1e-2). The script seeds its initial
# weights, so a run is reproducible (seed 0, 2 processes: 2.8e-6).
DATA_PARALLEL_TOLERANCE = 1e-4


def batches(updates, accumulate_steps):
    """`updates` batches of `ROWS` pairs whose `accumulate_steps` slices hold equal token counts."""
    rng = np.random.default_rng(0)
    micro_rows = ROWS // accumulate_steps
    encoder = np.zeros((updates * ROWS, LENGTH), "int32")
    decoder = np.zeros_like(encoder)
    targets = np.zeros_like(encoder)
    base_lengths = rng.integers(2, LENGTH + 1, micro_rows)
    for micro_batch in range(updates * accumulate_steps):
        # Every micro-batch: the same lengths in another order (equal token counts).
        for row, length in enumerate(rng.permutation(base_lengths)):
            index = micro_batch * micro_rows + row
            tokens = rng.integers(4, VOCAB, length)
            encoder[index, :length] = rng.integers(4, VOCAB, length)
            decoder[index, 0] = 2
            decoder[index, 1:length] = tokens[:-1]
            targets[index, :length] = tokens
    return {"encoder_inputs": encoder, "decoder_inputs": decoder}, targets


def train_tiny(optimizer, batch_size, x, y):
    keras.utils.set_random_seed(0)
    model = Transformer(
        vocabulary_size=VOCAB, num_layers=1, d_model=16, num_heads=2, ff_dim=32, dropout=0.0, seed=0
    )
    model.compile(
        optimizer=optimizer,
        loss=LabelSmoothedCrossentropy(label_smoothing=0.1),
        # XLA compilation costs more than these few steps on TensorFlow; torch.compile
        # does not trace the Transformer's mask arguments.
        jit_compile=keras.backend.backend() == "jax",
    )
    initial = weights_of(model)
    model.fit(x, y, batch_size=batch_size, shuffle=False, verbose=0)
    return model, initial


@pytest.mark.slow
@pytest.mark.parametrize("optimizer_name", ["sgd", "adam"])
def test_micro_batches_make_the_update_of_one_batch(optimizer_name):
    accumulate_steps, updates = 2, 3
    x, y = batches(updates, accumulate_steps)

    def optimizer(steps):
        if optimizer_name == "adam":
            return transformer_adam(16, warmup_steps=2, scale=0.5, gradient_accumulation_steps=steps)
        schedule = WarmupSchedule(16, warmup_steps=2, scale=10.0)
        if steps > 1:
            schedule = AccumulatedSchedule(schedule, steps)
        return keras.optimizers.SGD(schedule, gradient_accumulation_steps=steps if steps > 1 else None)

    accumulated, initial = train_tiny(optimizer(accumulate_steps), ROWS // accumulate_steps, x, y)
    whole, _ = train_tiny(optimizer(1), ROWS, x, y)
    assert int(accumulated.optimizer.iterations) == int(whole.optimizer.iterations) == updates
    names = [variable.path for variable in whole.weights]
    moved = differences = 0.0
    for name, start, first, second in zip(
        names, initial, weights_of(accumulated), weights_of(whole), strict=True
    ):
        if optimizer_name == "adam" and name.endswith("key/bias"):
            continue
        moved = max(moved, float(np.max(np.abs(second - start))))
        differences = max(differences, float(np.max(np.abs(first - second))))
    print(f"accumulation {keras.backend.backend()} {optimizer_name}: max weight difference "
          f"{differences:.3g}, largest weight change {moved:.3g}")
    assert moved > 0.1  # the runs did train
    assert differences < TOLERANCE, (differences, moved)


def linear_loss(y_true, y_pred):
    # Gradient 1 for every weight of a bias-free Dense(1) on inputs of ones.
    return ops.mean(y_pred)


class WeightsPerUpdate(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.batches, self.weights = [], []

    def on_train_batch_end(self, batch, logs=None):
        self.batches.append(batch)
        self.weights.append(float(ops.convert_to_numpy(self.model.weights[0])[0, 0]))


def test_learning_rate_at_update_n_is_the_schedule_at_n(tmp_path):
    import tensorflow as tf

    accumulate_steps, updates = 3, 5
    schedule = WarmupSchedule(d_model=4, warmup_steps=3)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, use_bias=False)])
    model.compile(
        keras.optimizers.SGD(
            AccumulatedSchedule(schedule, accumulate_steps),
            gradient_accumulation_steps=accumulate_steps,
        ),
        linear_loss,
    )
    start = float(ops.convert_to_numpy(model.weights[0])[0, 0])
    recorder = WeightsPerUpdate()
    callbacks = [
        PerUpdate(recorder, accumulate_steps),
        PerUpdate(TensorBoardLogger(str(tmp_path), update_freq=1), accumulate_steps),
    ]
    x = np.ones((updates * accumulate_steps, 2), "float32")
    model.fit(x, np.zeros((len(x), 1)), batch_size=1, shuffle=False, verbose=0, callbacks=callbacks)

    assert int(model.optimizer.iterations) == updates
    assert recorder.batches == list(range(updates))  # one batch per update, numbered in updates
    steps = np.diff([start, *recorder.weights])
    expected = [-float(schedule(update)) for update in range(updates)]
    np.testing.assert_allclose(steps, expected, rtol=1e-5)
    # TensorBoard: steps 1..updates, each with the rate of the update that follows it.
    logged = {}
    for path in tf.io.gfile.glob(str(tmp_path / "train" / "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == "learning_rate":
                    logged[event.step] = float(tf.make_ndarray(value.tensor))
    assert sorted(logged) == list(range(1, updates + 1))
    for step, rate in logged.items():
        assert rate == pytest.approx(float(schedule(step)), rel=1e-6)


def test_accumulated_schedule_counts_updates_and_reloads():
    schedule = AccumulatedSchedule(WarmupSchedule(d_model=64, warmup_steps=10, scale=2.0), 4)
    optimizer = keras.optimizers.Adam(learning_rate=schedule, gradient_accumulation_steps=4)
    reloaded = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    inner = WarmupSchedule(d_model=64, warmup_steps=10, scale=2.0)
    for micro_step in (0, 3, 4, 39, 40, 41, 1000):
        for rates in (schedule, reloaded._learning_rate):
            assert float(rates(micro_step)) == pytest.approx(float(inner(micro_step // 4)))
    assert isinstance(reloaded._learning_rate, AccumulatedSchedule)
    assert reloaded.gradient_accumulation_steps == 4
    with pytest.raises(ValueError, match="accumulate_steps=0"):
        AccumulatedSchedule(inner, 0)
    with pytest.raises(ValueError, match="Received: schedule=0.1"):
        AccumulatedSchedule(0.1, 2)
    with pytest.raises(ValueError, match="gradient_accumulation_steps=0"):
        transformer_adam(64, gradient_accumulation_steps=0)
    assert transformer_adam(64, gradient_accumulation_steps=1).gradient_accumulation_steps is None


def test_config_checks_accumulate_steps():
    config = TrainingConfig.from_dict({"training": {"accumulate_steps": 4}})
    assert config.training.accumulate_steps == 4
    with pytest.raises(ValueError, match="training.accumulate_steps=0"):
        TrainingConfig.from_dict({"training": {"accumulate_steps": 0}})
    with pytest.raises(ValueError, match="micro-batch.*training.accumulate_steps=4"):
        TrainingConfig.from_dict(
            {"data": {"max_length": 64, "tokens_per_batch": 200}, "training": {"accumulate_steps": 4}}
        )


class Crash(keras.callbacks.Callback):
    """Raises after `fit`'s `batches`-th batch (callbacks passed to `train` see micro-batches)."""

    def __init__(self, batches):
        super().__init__()
        self.batches = batches
        self.seen = 0

    def on_train_batch_end(self, batch, logs=None):
        self.seen += 1
        if self.seen == self.batches:
            raise KeyboardInterrupt


@pytest.mark.slow
# The run's orchestration (backups counted in updates, the dropped half-accumulated gradient)
# is backend-independent; what depends on the backend runs on all three: the accumulation
# equality above and the backup's restore of weights and optimizer (tests/training/test_backup.py).
@pytest.mark.one_backend
def test_accumulated_run_resumes_to_the_weights_of_an_uninterrupted_one(tiny_run, tmp_path):
    # 2 epochs of 4 updates of 2 micro-batches, backups every 4 updates. The crash comes after
    # micro-batch 9, the first of update 5: the resumed run restores update 4 (its epoch
    # end), drops the half-accumulated gradient and redoes that micro-batch.
    training = {"accumulate_steps": 2, "backup_every": 4}
    whole = train(tiny_run(training=training, output_dir=str(tmp_path / "whole")), verbose=0)
    assert whole.metrics["steps"] == whole.metrics["optimizer_iterations"] == 8
    assert whole.metrics["averaged_checkpoints"] == [4, 8]  # named after updates

    with pytest.raises(KeyboardInterrupt):
        train(tiny_run(training=training), callbacks=[Crash(batches=9)], verbose=0)
    resumed = train(tiny_run(training=training), verbose=0)
    assert resumed.metrics["steps_this_run"] == 4
    assert resumed.metrics["steps"] == resumed.metrics["optimizer_iterations"] == 8
    assert resumed.metrics["averaged_checkpoints"] == [4, 8]
    for first, second in zip(weights_of(whole.model), weights_of(resumed.model), strict=True):
        np.testing.assert_array_equal(first, second)


def test_mirrored_strategy_refuses_accumulation():
    # Keras 3 applies the accumulated update in a cond; under tf.distribute the all-reduce in
    # it fails at the first step (RuntimeError: merge_call in control flow): refused upfront.
    config = TrainingConfig.from_dict({"training": {"accumulate_steps": 2}})
    model = Transformer(vocabulary_size=VOCAB, num_layers=1, d_model=16, num_heads=2, ff_dim=32)
    with pytest.raises(ValueError, match="MirroredStrategy.*accumulate_steps=2"):
        compile_model(model, config, strategy="mirrored")


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "jax", reason="keras.distribution runs on JAX")
def test_accumulation_with_data_parallel_equals_one_device():
    # DataParallel over 2 processes of one CPU device each (gloo), 2 micro-batches per
    # update, vs. one device without accumulation; fresh processes (the devices come first).
    script = os.path.join(SCRIPTS, "accumulation_distributed.py")
    outputs = run_ranks(script, [])
    line = next(line for line in outputs[0].splitlines() if line.startswith("RESULT "))
    results = json.loads(line[len("RESULT "):])
    print(f"accumulation {results['strategy']}: max weight difference {results['weight_diff']:.3g}")
    assert results["replicas"] == 2
    assert results["processes"] == 2
    assert results["iterations"] == [3, 3]
    assert results["weight_change"] > 0.1  # the runs did train
    assert results["weight_diff"] < DATA_PARALLEL_TOLERANCE, results
