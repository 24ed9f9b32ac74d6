"""Helpers of the training tests: a tiny run configuration and subprocess running.

A uniquely named module (not `conftest`) so that tests can import it by name."""

import copy
import os
import socket
import subprocess
import sys

import keras
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")

# A run that trains the tiny preset on 400 number names for a few steps: seconds, not minutes.
TINY_RUN = {
    "data": {
        "dataset": "number_words",
        "options": {"num_train": 400, "max_number": 2000},
        "num_validation": 16,
        "num_test": 16,
        "vocabulary_size": 200,
        "max_length": 16,
        "tokens_per_batch": 256,
        "bucket_boundaries": [16],  # one batch shape: one compilation
    },
    "model": {"preset": "tiny"},
    "optimizer": {"warmup_steps": 10},
    "training": {
        "train_steps": 8,
        "steps_per_epoch": 4,
        "checkpoint_every": 4,
        "average_checkpoints": 2,
        "backup_every": 4,
    },
    # `alphas` named, empty: the recipe (the run names a budget) leaves the length penalty
    # untuned; the tests of the tuning name theirs.
    "evaluation": {"bleu_every": -1, "test": False, "beam_size": 2, "extra_length": 8,
                   "alphas": []},
    "export": {"translator": False, "saved_model": False},
}


def merge(base, changes):
    """`base` (nested dicts) updated with `changes`, recursively, as a new dict."""
    result = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merge(result[key], value)
        else:
            result[key] = value
    return result


def script_environment(env=None):
    """This process's environment for a test script, quiet, with `env` on top; the repository
    root goes on the script's path (scripts import `tests.*` helpers)."""
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})}
    paths = [REPO, environment.get("PYTHONPATH", "")]
    environment["PYTHONPATH"] = os.pathsep.join(path for path in paths if path)
    return environment


def run_python(arguments, timeout, env=None, **kwargs):
    """Runs `python ARGUMENTS` in the repository with the current backend; returns the result."""
    return subprocess.run(
        [sys.executable, *arguments],
        cwd=REPO,
        env=script_environment(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )


# A small compiled Dense model and its data, for the callback tests.


def small_model():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(0.01), "mse")
    return model


def data(rows=12):
    rng = np.random.default_rng(0)
    return rng.normal(size=(rows, 3)).astype("float32"), rng.normal(size=(rows, 1)).astype("float32")


def weights_of(model):
    return [keras.ops.convert_to_numpy(variable.value) for variable in model.weights]


class Crash(keras.callbacks.Callback):
    """Raises after training step `at_step`, or at the end of `fit` after the run's own
    callbacks (a crash injected at a known point: every file a run writes is atomic, so a
    `kill -9` there leaves the same files)."""

    def __init__(self, at_step=None, at_end=False):
        super().__init__()
        self.at_step, self.at_end, self.step = at_step, at_end, 0

    def on_train_begin(self, logs=None):
        from keras_transformer.training.state import sync_model_state

        sync_model_state(self.model)
        self.step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if self.step == self.at_step:
            raise RuntimeError(f"crash at step {self.step}")

    def on_train_end(self, logs=None):
        if self.at_end:
            raise RuntimeError("crash at the end of training")


def free_port():
    """A free TCP port on the loopback interface (for a JAX coordinator)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_ranks(script, arguments, processes=2, timeout=300):
    """Runs `python SCRIPT *ARGUMENTS PORT RANK` for each rank at once, on the JAX backend,
    with a free coordinator port; asserts that every rank exits with 0 and returns their
    outputs (standard output and error together), rank 0 first."""
    environment = script_environment({"KERAS_BACKEND": "jax"})
    port = free_port()
    ranks = [
        subprocess.Popen(
            [sys.executable, script, *map(str, arguments), str(port), str(rank)],
            cwd=REPO,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(processes)
    ]
    try:
        outputs = [rank.communicate(timeout=timeout)[0] for rank in ranks]
    finally:
        for rank in ranks:
            if rank.poll() is None:
                rank.kill()
    for rank, output in zip(ranks, outputs, strict=True):
        assert rank.returncode == 0, output[-4000:]
    return outputs
