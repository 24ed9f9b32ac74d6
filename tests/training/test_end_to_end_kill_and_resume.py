"""`kill -9` in the middle of an epoch, then the same command: it resumes and finishes.

The same run is also the end-to-end test of the command: the tiny preset on the number-words
task through `keras-transformer train` (with a time budget), ending in a SavedModel that
translates. It runs on TensorFlow only (see its skip reason).
"""

import json
import os
import signal
import subprocess
import sys
import time

import h5py
import keras
import pytest
import yaml

from tests.training.training_helpers import REPO

TRAIN_STEPS, STEPS_PER_EPOCH, BACKUP_EVERY = 60, 20, 3


def read_state(path):
    try:
        with open(path) as file:
            return json.load(file)
    except (OSError, ValueError):
        return None


def assert_loadable(directory):
    """Every file a next run could load is complete (temporary `.tmp-*` names are skipped)."""
    for root, _, files in os.walk(directory):
        for name in files:
            if name.startswith(".tmp-"):
                continue
            path = os.path.join(root, name)
            if name.endswith(".weights.h5"):
                with h5py.File(path, "r") as file:
                    file.visit(lambda key, file=file: file[key][()] if isinstance(file[key], h5py.Dataset) else None)
            elif name.endswith(".json"):
                with open(path) as file:
                    json.load(file)


@pytest.mark.slow
@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="kept to TensorFlow for time: the kill and the files it leaves do not depend on "
    "the backend, and every backend resumes mid-epoch in test_trainer.py's time-budget test "
    "and restores weights, optimizer and position in test_backup.py",
)
def test_kill_9_mid_epoch_then_resume(tmp_path, tiny_run):
    config = tiny_run(
        training={
            "train_steps": TRAIN_STEPS,
            "steps_per_epoch": STEPS_PER_EPOCH,
            "backup_every": BACKUP_EVERY,
            "checkpoint_every": 10,
            "average_checkpoints": 3,
            "minutes": 10,
        },
        evaluation={"test": True, "num_samples": 2},
        export={"translator": True, "saved_model": True},
    )
    config_path = tmp_path / "run.yaml"
    config_path.write_text(yaml.safe_dump(config))
    output_dir = config["output_dir"]
    state_path = os.path.join(output_dir, "backup", "state.json")
    command = [sys.executable, "-m", "keras_transformer.cli", "train", "--config", str(config_path),
               "--verbose", "2"]
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}

    # Run 1: killed (SIGKILL) as soon as a backup in the middle of epoch 2 or 3 exists.
    log = open(tmp_path / "run1.log", "w")
    process = subprocess.Popen(command, cwd=REPO, env=environment, stdout=log, stderr=log)
    killed_at = None
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and process.poll() is None:
            state = read_state(state_path)
            if state and state["step"] > STEPS_PER_EPOCH and state["step"] % STEPS_PER_EPOCH:
                os.kill(process.pid, signal.SIGKILL)
                killed_at = state["step"]
                break
            time.sleep(0.01)
    finally:
        if process.poll() is None and killed_at is None:
            process.kill()
        process.wait()
        log.close()
    assert killed_at is not None, (tmp_path / "run1.log").read_text()[-3000:]
    assert process.returncode == -signal.SIGKILL
    assert_loadable(output_dir)

    # Run 2: the same command resumes from the backup and finishes.
    result = subprocess.run(
        command, cwd=REPO, env=environment, capture_output=True, text=True, timeout=400
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    resumed = read_state(os.path.join(output_dir, "backup", "state.json"))
    assert resumed is None  # deleted: the run finished
    assert "resuming from the backup of step" in result.stdout
    resumed_step = int(result.stdout.split("resuming from the backup of step ")[1].split()[0])
    assert resumed_step >= killed_at and resumed_step - killed_at < BACKUP_EVERY + 1
    with open(os.path.join(output_dir, "metrics.json")) as file:
        metrics = json.load(file)
    assert metrics["steps"] == TRAIN_STEPS
    assert metrics["optimizer_iterations"] == TRAIN_STEPS  # no step lost or done twice
    # Run 2 ran the rest of the interrupted epoch and the epochs after it.
    assert len(metrics["history"]["loss"]) == TRAIN_STEPS // STEPS_PER_EPOCH - (
        resumed_step // STEPS_PER_EPOCH
    )
    assert metrics["averaged_checkpoints"] == [40, 50, 60]
    assert_loadable(output_dir)

    # The end-to-end part: the run translated its samples with the exported SavedModel.
    assert os.path.exists(os.path.join(output_dir, "saved_model", "saved_model.pb"))
    assert len(metrics["samples"]) == 2
    # After 60 steps a sample may legitimately translate to "" (end token first); what must
    # hold is that the served model says what the saved Keras translator says.
    from keras_transformer import Translator

    translator = Translator.load(os.path.join(output_dir, "translator.keras"))
    sources = [sample["source"] for sample in metrics["samples"]]
    assert all(sources)
    assert [sample["translation"] for sample in metrics["samples"]] == translator(sources)
    assert 0.0 <= metrics["test_exact_match"] <= 1.0 and metrics["test_bleu"] >= 0.0
