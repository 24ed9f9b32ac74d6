"""`training.lora_rank` under data parallelism: a `MirroredStrategy` run (2 logical CPU
devices) and a JAX `DataParallel` run (2 processes on loopback, 2 devices each) train the LoRA
weights only, as one device does, and write the merged plain translator.

Each runs in fresh subprocesses (devices and processes are set up before the backend
starts); tolerances as in `test_distribution.py`.
"""

import json
import os

import keras
import numpy as np
import pytest

from tests.training.test_distribution import LOGITS_TOLERANCE, TOLERANCE, WEIGHT_TOLERANCE
from tests.training.training_helpers import SCRIPTS, run_python, run_ranks

SCRIPT = os.path.join(SCRIPTS, "lora_distributed.py")


def arrays(path):
    with np.load(path) as loaded:
        return {name: loaded[name] for name in loaded.files}


def lora_paths(weights):
    return [path for path in weights if path.endswith(("lora_kernel_a", "lora_kernel_b"))]


def check_written_translator_is_merged(weights):
    # The run's `preset/` is the plain model with LoRA merged: the trained model's outputs.
    np.testing.assert_allclose(weights["written_logits"], weights["logits"], atol=1e-5)
    assert max(np.abs(weights[path]).max() for path in weights if path.endswith("lora_kernel_b")) > 1e-3


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="tf.distribute is TF-only")
def test_mirrored_lora_equals_one_device():
    result = run_python(
        [os.path.join(SCRIPTS, "mirrored_equivalence.py")],
        timeout=400,
        env={"LORA_RANK": "4", "JITS": "0"},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("RESULT "))
    results = json.loads(line[len("RESULT "):])
    assert results["replicas"] == 2
    assert results["weight_change"] == 0.0  # every weight but LoRA's frozen, on both runs
    assert results["lora_change"] > 0.05  # B starts at zero: it trained
    assert results["mirrored_jit0_loss_diff"] < TOLERANCE, results
    assert results["mirrored_jit0_weight_diff"] < WEIGHT_TOLERANCE, results
    assert results["mirrored_jit0_logits_diff"] < LOGITS_TOLERANCE, results


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="tf.distribute is TF-only")
def test_mirrored_lora_run_writes_the_merged_translator(tmp_path):
    # `train` under `MirroredStrategy` decodes with a local copy of the model (once a
    # `set_weights` count mismatch: the copy has no LoRA variables; it gets them merged).
    result = run_python([SCRIPT, str(tmp_path), "mirrored"], timeout=400)
    assert result.returncode == 0, result.stderr[-4000:]
    distributed = arrays(tmp_path / "distributed.npz")
    check_written_translator_is_merged(distributed)
    assert set(lora_paths(distributed)) == set(lora_paths(arrays(tmp_path / "single.npz")))


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "jax", reason="keras.distribution runs on JAX")
def test_jax_data_parallel_lora_over_two_processes_equals_one_device(tmp_path):
    run_ranks(SCRIPT, [tmp_path, "data_parallel"])
    single, rank0, rank1 = (
        arrays(tmp_path / f"{name}.npz") for name in ("single", "distributed0", "distributed1")
    )
    check_written_translator_is_merged(rank0)
    paths = lora_paths(single)
    assert paths and set(paths) == set(lora_paths(rank0))
    for path in paths:
        np.testing.assert_array_equal(rank0[path], rank1[path], err_msg=path)
        np.testing.assert_allclose(rank0[path], single[path], atol=WEIGHT_TOLERANCE, err_msg=path)
    np.testing.assert_allclose(rank0["logits"], single["logits"], atol=LOGITS_TOLERANCE)
    np.testing.assert_allclose(rank0["history_loss"], single["history_loss"], atol=TOLERANCE)
