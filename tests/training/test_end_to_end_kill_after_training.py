"""`kill -9` after training, or while a checkpoint is written: the same command finishes
without retraining, and ends with the files of an uninterrupted run.

Each killed run is `scripts/train_killed_at.py`, which kills itself (`SIGKILL`) inside one
stage of the run: the kill is injected, not timed. The runs form a chain: the run after a
kill at one stage is killed at the next one, so each stage is both interrupted and resumed.
"""

import json
import os
import signal
import time

import h5py
import keras
import numpy as np
import pytest
import yaml

from keras_transformer.training import TrainingConfig, train
from keras_transformer.training.stages import RunStages
from tests.training.training_helpers import SCRIPTS, run_python

BACKEND = keras.backend.backend()
TENSORFLOW = BACKEND == "tensorflow"
# The full chain on TensorFlow (the export needs it in-process); elsewhere one stage (the
# rerun loads the averaged weights and the test metrics recorded), to keep the suite quick.
KILLED_STAGES = (
    ["averaged", "tuned", "evaluated", "saved", "exported", "cleanup"] if TENSORFLOW
    else ["saved"]
)
RECORDED = ["trained", "averaged", "tuned", "evaluated", "saved", "exported", "finished"]
# Per-invocation figures: they differ between an interrupted and an uninterrupted run.
TIMINGS = {"train_seconds", "test_seconds", "total_seconds", "steps_this_run"}


def chain_config(tiny_run, output_dir):
    return {
        **tiny_run(
            evaluation={"test": True, "num_samples": 2, "alphas": [0.0, 1.5]},
            export={"translator": True, "saved_model": TENSORFLOW},
        ),
        "output_dir": str(output_dir),
    }


@pytest.fixture
def reference(tiny_run, tmp_path):
    """An uninterrupted run of the chain's configuration, in this process."""
    return train(chain_config(tiny_run, tmp_path / "reference"), verbose=0)


def run_killed_at(config, stage, directory):
    """Runs `train_killed_at.py CONFIG STAGE`; returns `(result, steps trained, seconds)`."""
    path = os.path.join(directory, "run.yaml")
    with open(path, "w") as file:
        yaml.safe_dump(config, file)
    start = time.monotonic()
    result = run_python([os.path.join(SCRIPTS, "train_killed_at.py"), path, stage], timeout=400)
    seconds = time.monotonic() - start
    steps = [line for line in result.stdout.splitlines() if line.startswith("trained step ")]
    expected = 0 if stage == "none" else -signal.SIGKILL
    assert result.returncode == expected, (stage, result.stdout[-2000:], result.stderr[-3000:])
    return result, len(steps), seconds


def read_json(path):
    with open(path) as file:
        return json.load(file)


def read_weights(path):
    values = {}
    with h5py.File(path, "r") as file:
        file.visititems(
            lambda name, item: values.__setitem__(name, item[()])
            if isinstance(item, h5py.Dataset)
            else None
        )
    return values


def assert_same_weights(path, reference_path):
    """The same variables with the same values, bit for bit (TensorFlow on CPU is
    deterministic across processes)."""
    weights, expected = read_weights(path), read_weights(reference_path)
    assert sorted(weights) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_array_equal(weights[name], value, err_msg=name)


def temporaries(directory):
    return sorted(name for name in os.listdir(directory) if name.startswith(".tmp-"))


def test_stages_record_reloads_and_belongs_to_one_configuration(tmp_path):
    config = TrainingConfig()
    path = tmp_path / "stages.json"
    stages = RunStages(path, config)
    assert stages.record("trained", steps=3, history={"loss": [1.5]}) == {
        "steps": 3,
        "history": {"loss": [1.5]},
    }
    stages.record("averaged", checkpoints=[2, 3])
    # A rerun reads what the stages produced; the time budget and output directory are not
    # part of the configuration a record belongs to.
    same = RunStages(path, config.replace(**{"training.minutes": 5.0, "output_dir": "elsewhere"}))
    assert not same.stale
    assert same.done_stages() == ["trained", "averaged"]
    assert same.get("averaged") == {"checkpoints": [2, 3]} and not same.done("evaluated")
    other = RunStages(path, config.replace(**{"training.train_steps": 7}))
    assert other.stale and other.done_stages() == []
    other.clear()
    assert not path.exists()
    # A run stopped by its time budget records nothing.
    stages = RunStages(path, config)
    stages.recording = False
    assert stages.record("trained", steps=1) == {"steps": 1}
    assert not path.exists() and RunStages(path, config).done_stages() == []
    with pytest.raises(ValueError, match="stage='tested'"):
        stages.get("tested")


@pytest.mark.slow
@pytest.mark.one_backend  # The stage records (`training.stages`) are pure Python.
def test_kill_at_every_stage_after_training_redoes_no_step(tmp_path, tiny_run, reference):
    output_dir = tmp_path / "run"
    config = chain_config(tiny_run, output_dir)
    stages_path = output_dir / "stages.json"
    figures = []
    trained_record = None
    for index, stage in enumerate(KILLED_STAGES):
        result, steps, seconds = run_killed_at(config, stage, tmp_path)
        figures.append((stage, steps, seconds))
        recorded = read_json(stages_path)["stages"]
        done = [name for name in RECORDED if name in recorded]
        # Every stage before the one killed is recorded, and only those (all of them when the
        # kill comes while the backup is deleted).
        assert done == (RECORDED[: RECORDED.index(stage)] if stage in RECORDED else RECORDED)
        if index == 0:
            assert steps == 8  # the first run trains
            trained_record = read_json(stages_path)["stages"]["trained"]
        else:
            # The run after a kill trains no step: training is recorded as done.
            assert steps == 0, result.stdout[-2000:]
            assert "training: finished by an earlier run (8 steps)" in result.stdout
            assert read_json(stages_path)["stages"]["trained"] == trained_record
        # The backup survives every kill until the very end.
        assert (output_dir / "backup" / "state.json").exists() == (stage != "cleanup")
        if stage == "saved":  # what a kill in the middle of a write leaves
            assert [name for name in temporaries(output_dir) if name.endswith("translator.keras")]
        if stage == "exported":
            assert [name for name in temporaries(output_dir) if name.endswith("saved_model")]

    result, steps, seconds = run_killed_at(config, "none", tmp_path)
    figures.append(("none (last rerun)", steps, seconds))
    assert steps == 0
    assert sorted(read_json(stages_path)["stages"]) == sorted(RECORDED)
    assert not (output_dir / "backup").exists()
    assert not temporaries(output_dir)  # the leftovers of the kills are gone
    metrics = read_json(output_dir / "metrics.json")
    assert metrics["steps_this_run"] == 0 and metrics["steps"] == 8

    # The files of an uninterrupted run.
    expected = reference.metrics
    assert expected["steps_this_run"] == 8
    for key in sorted(set(expected) - TIMINGS - {"history"}):
        assert metrics[key] == expected[key], key
    for key, values in expected["history"].items():
        np.testing.assert_allclose(metrics["history"][key], values, rtol=0 if TENSORFLOW else 1e-5)
    assert metrics["averaged_checkpoints"] == [4, 8]
    if TENSORFLOW:
        # Elsewhere training is not bit-reproducible across processes, and the cross-attention
        # key biases (a zero gradient in exact arithmetic: softmax ignores a constant added to
        # every score) get full-size Adam steps from that rounding noise.
        assert_same_weights(
            output_dir / "model.weights.h5", os.path.join(reference.output_dir, "model.weights.h5")
        )
    from keras_transformer import Translator

    sources = [example["source"] for example in expected["test_examples"]]
    translator = Translator.load(str(output_dir / "translator.keras"))
    assert translator(sources) == reference.translator(sources)
    if TENSORFLOW:
        assert (output_dir / "saved_model" / "saved_model.pb").exists()
        assert len(metrics["samples"]) == 2  # translated by the SavedModel (compared above)

    # The command of a finished run, run again, does nothing expensive and changes nothing.
    written = {name: os.path.getmtime(output_dir / name) for name in os.listdir(output_dir)}
    result, steps, seconds = run_killed_at(config, "none", tmp_path)
    figures.append(("none (finished run)", steps, seconds))
    assert steps == 0
    assert "the run finished earlier: nothing left to do" in result.stdout
    for name in ("metrics.json", "model.weights.h5", "translator.keras", "saved_model", "stages.json"):
        if name in written:
            assert os.path.getmtime(output_dir / name) == written[name], name
    print(f"\n{BACKEND}: killed at / steps trained by that run / seconds")
    for stage, steps, seconds in figures:
        print(f"  {stage:24s} {steps:3d} {seconds:6.1f}")


@pytest.mark.slow
@pytest.mark.skipif(
    not TENSORFLOW,
    reason="kept to TensorFlow for time; the checkpoint copy is backend-free, and "
    "test_backup_records_and_restores_the_dropout_seeds checks the seeds on every backend",
)
def test_kill_while_writing_a_checkpoint_keeps_it(tmp_path, tiny_run):
    # The backup callback runs first: at steps 4 and 8 the backup of the step is complete
    # when the checkpoint is being written, so the rerun starts after the step and must
    # write the missing checkpoint itself (a copy of the backup, which holds the same state).
    expected = train(tiny_run(output_dir=str(tmp_path / "reference")), verbose=0)
    assert expected.metrics["averaged_checkpoints"] == [4, 8]
    config = {**tiny_run(), "output_dir": str(tmp_path / "run")}
    checkpoints = tmp_path / "run" / "checkpoints"
    state_path = tmp_path / "run" / "backup" / "state.json"

    result, steps, _ = run_killed_at(config, "checkpoint-4", tmp_path)
    assert steps == 4 and read_json(state_path)["step"] == 4
    assert os.listdir(checkpoints) == [".tmp-killed-ckpt-00000004.weights.h5"]

    result, steps, _ = run_killed_at(config, "checkpoint-8", tmp_path)
    assert "restored the checkpoint of step 4 from the backup" in result.stdout
    assert steps == 4 and read_json(state_path)["step"] == 8  # steps 5 to 8, none twice
    assert sorted(os.listdir(checkpoints)) == [
        ".tmp-killed-ckpt-00000008.weights.h5",
        "ckpt-00000004.weights.h5",
        "sha256.json",  # The checkpoints' SHA-256 (the restored one's included).
    ]

    result, steps, _ = run_killed_at(config, "none", tmp_path)
    assert "restored the checkpoint of step 8 from the backup" in result.stdout
    assert steps == 0
    assert sorted(os.listdir(checkpoints)) == [
        "ckpt-00000004.weights.h5",
        "ckpt-00000008.weights.h5",
        "sha256.json",
    ]
    metrics = read_json(tmp_path / "run" / "metrics.json")
    assert metrics["averaged_checkpoints"] == [4, 8]
    assert metrics["optimizer_iterations"] == 8
    # The restored checkpoint is the uninterrupted run's, and so is the rest: the backup
    # restores the dropout seeds too, so steps 5 to 8 draw the same masks.
    for name in ("checkpoints/ckpt-00000004.weights.h5", "checkpoints/ckpt-00000008.weights.h5",
                 "model.weights.h5"):
        assert_same_weights(tmp_path / "run" / name, tmp_path / "reference" / name)
