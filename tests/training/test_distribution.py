"""Data parallelism equals single-device training on the same global batches.

- TensorFlow: `MirroredStrategy` over 2 logical CPU devices, `jit_compile` off and on.
- JAX: `DataParallel` over 4 CPU devices: 2 processes on loopback (gloo), 2 devices each.

Each runs in fresh subprocesses: devices and processes must be set up before the backend
starts. Tolerances: the replicas add the same numbers in a different order, so results agree
to float32 round-off. The attention key biases are left out of the weight comparison: their
exact gradient is 0 (softmax ignores a constant added to all scores of a query), so Adam
(epsilon 1e-9) turns round-off into learning-rate-sized steps of either sign; they do not
change any output, which the logits comparison checks.
"""

import json
import os

import keras
import numpy as np
import pytest

from tests.training.training_helpers import SCRIPTS, run_python, run_ranks

TOLERANCE = 1e-5  # losses and logits: float32 round-off of sums taken in another order
# Weights after 6 Adam steps: Adam divides each gradient element by its own running RMS, so an
# element whose gradient is tiny turns a round-off difference into a visible step. Measured
# worst element with MirroredStrategy + jit: 1.1e-5, where the weights moved by up to 0.3 and
# the learning rate peaks at 0.088 (step 4): 5e-5 is under 1/1000 of one step.
WEIGHT_TOLERANCE = 5e-5
# Logits of the trained weights inherit the weights' difference: measured 2.06e-5 on an AVX2
# machine (also at commit b8c08cd, before any change to the model or the strategy code), so
# they get the weights' tolerance, not the round-off one.
LOGITS_TOLERANCE = WEIGHT_TOLERANCE


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="tf.distribute is TF-only")
def test_mirrored_strategy_equals_one_device():
    result = run_python([os.path.join(SCRIPTS, "mirrored_equivalence.py")], timeout=400)
    assert result.returncode == 0, result.stderr[-4000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("RESULT "))
    results = json.loads(line[len("RESULT "):])
    assert results["replicas"] == 2
    assert results["weight_change"] > 0.05  # the runs did train
    for jit in (0, 1):
        assert results[f"mirrored_jit{jit}_loss_diff"] < TOLERANCE, results
        assert results[f"mirrored_jit{jit}_weight_diff"] < WEIGHT_TOLERANCE, results
        assert results[f"mirrored_jit{jit}_logits_diff"] < LOGITS_TOLERANCE, results
        assert results[f"dropout_jit{jit}_finite"], results


def weights(path):
    with np.load(path) as arrays:
        return {name: arrays[name] for name in arrays.files}


def max_difference(first, second, select):
    return max(float(np.max(np.abs(first[key] - second[key]))) for key in first if select(key))


def is_weight(key):
    return key not in ("logits", "history_loss") and not key.endswith("key/bias")


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "jax", reason="keras.distribution runs on JAX")
def test_jax_data_parallel_over_two_processes_equals_one_device(tmp_path):
    script = os.path.join(SCRIPTS, "jax_data_parallel.py")
    run_ranks(script, [tmp_path])

    single, rank0, rank1 = (weights(tmp_path / f"{name}.npz") for name in ("single", "rank0", "rank1"))
    # Both ranks end with identical weights (all of them, key biases included).
    assert max_difference(rank0, rank1, lambda key: True) == 0.0
    assert max_difference(single, rank0, is_weight) < WEIGHT_TOLERANCE
    assert max_difference(single, rank0, lambda key: key == "logits") < TOLERANCE
    assert max_difference(single, rank0, lambda key: key == "history_loss") < TOLERANCE
