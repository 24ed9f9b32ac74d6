"""The recipe chooses its row by the steps this machine buys (issue 56): step times measured by
`training.speed`, forecast against each row's curve (`RecipeRow.bleu_by_steps`)."""

import dataclasses
import json
import os

import keras
import numpy as np
import pytest

from keras_transformer.files import unlock_directory
from keras_transformer.training import recipe, speed, trainer
from keras_transformer.training.building import build_model
from keras_transformer.training.config import TrainingConfig
from keras_transformer.training.recipe import RECIPE, estimated_steps, resolve_recipe

HOUR = {"training": {"minutes": 60}}
# Measured here (2 cores of an AMD EPYC with AVX-512 BF16, 2026-11-29): the Bible rows' 4,096-
# token steps alone on one core in float32 with XLA, the slow class's stand-in (an AVX2 machine
# at 156 GFLOP/s took 1.35 s for the wide row's), and on two cores in mixed bfloat16.
ONE_CORE_FLOAT32 = {"small": 0.65, "wide": 1.10}
TWO_CORES_BFLOAT16 = {"small": 0.27, "wide": 0.40}


def timed(times, calls=None):
    def step_time(row, config):
        if calls is not None:
            calls.append((row.name, config))
        return times[row.name]
    return step_time


def test_a_slow_machine_gets_the_small_row_and_a_fast_one_the_wide_row():
    calls = []
    config, line = resolve_recipe(
        TrainingConfig.from_dict(HOUR), 29_077, step_time=timed(ONE_CORE_FLOAT32, calls)
    )
    assert config.model.d_model == 128
    # Each candidate timed once, with its own model, vocabulary and batch.
    assert [(name, probed.model.d_model, probed.data.vocabulary_size,
             probed.data.tokens_per_batch) for name, probed in calls] == [
        ("small", 128, 8000, 4096), ("wide", 192, 8000, 4096)]
    assert ("the best forecast of small ~4,430 steps at 0.65 s (measured here), validation BLEU "
            "36.0; wide ~2,618 steps at 1.10 s (measured here), validation BLEU 34.2") in line
    # The chosen row's measured time plans the checkpoints: the 5 averaged span the last
    # tenth of ~4,430 steps.
    assert config.training.checkpoint_every == 4_430 // 50
    config, line = resolve_recipe(
        TrainingConfig.from_dict(HOUR), 29_077, step_time=timed(TWO_CORES_BFLOAT16)
    )
    assert config.model.d_model == 192 and "(the wide row: " in line
    assert config.training.checkpoint_every == estimated_steps(config, RECIPE[2], 0.40)[0] // 50


def test_the_warmup_comes_from_the_measured_steps():
    # Five minutes at a measured 0.60 s: ~400 steps, a warm-up of two fifths of them.
    config, line = resolve_recipe(
        TrainingConfig.from_dict({"training": {"minutes": 5}}), 29_077,
        step_time=timed({"small": 0.6, "wide": 1.8}),
    )
    assert config.model.d_model == 128 and config.optimizer.warmup_steps == 160
    assert "warm-up 160 steps (40% of ~400 steps, estimated at the 0.60 s per step measured here)" in line


def test_nothing_is_timed_where_there_is_nothing_to_choose():
    calls = []
    step_time = timed(ONE_CORE_FLOAT32, calls)
    for values, pairs in (
        (HOUR, 700),  # one row for 700 pairs
        ({"training": {"train_steps": 3000}}, 29_077),  # a step budget: equal steps
        ({"model": {"d_model": 256, "num_heads": 4}, **HOUR}, 29_077),  # a model named
        ({"training": {"minutes": 60, "init_from": "x.keras"}}, 29_077),  # a fine-tune
    ):
        resolve_recipe(TrainingConfig.from_dict(values), pairs, step_time=step_time)
    assert calls == []


def test_the_curves_are_the_sweeps_and_the_wide_row_is_ahead_at_equal_steps():
    small, wide = recipe.candidates(29_077)
    assert (small.name, wide.name) == ("small", "wide")
    for steps in (250, 500, 1_000, 2_000, 4_000, 8_000, 20_000):
        assert wide.expected_bleu(steps) > small.expected_bleu(steps), steps
    # Non-decreasing, flat after the last point.
    values = [small.expected_bleu(steps) for steps in range(0, 12_000, 100)]
    assert values == sorted(values) and values[-1] == max(bleu for _, bleu in small.bleu_by_steps)
    assert RECIPE[0].expected_bleu(1_000) is None  # the tiny row has no curve


def test_a_config_read_back_from_the_run_ignores_the_record():
    values = TrainingConfig.from_dict(HOUR).to_dict()
    values[speed.RECORD_KEY] = {"line": "recipe ...", "step_times": {"small": {"seconds": 0.3}}}
    assert TrainingConfig.from_dict(values) == TrainingConfig.from_dict(HOUR)


def test_recorded_step_times_reads_what_a_run_wrote(tmp_path):
    path = tmp_path / "train_config.json"
    assert speed.recorded_step_times(path) == {}
    good = {"seconds": 0.5, "cpu_seconds": 0.5}
    path.write_text(json.dumps({"recipe": {"step_times": {"small": good, "wide": {"seconds": -1},
                                                          "odd": "x"}}}))
    assert speed.recorded_step_times(path) == {"small": good}
    # What a run could not have recorded: no time, not a number, infinite, over an hour.
    for seconds in ("0.5", True, float("inf"), float("nan"), 1e9, None):
        path.write_text(json.dumps({"recipe": {"step_times": {"small": {"seconds": seconds}}}}))
        assert speed.recorded_step_times(path) == {}, seconds
    for text in ("[]", "{\"recipe\": 3}", "{\"recipe\": {\"step_times\": []}}", "not json"):
        path.write_text(text)
        assert speed.recorded_step_times(path) == {}


def _tiny_config(**changes):
    values = {
        "model": {"preset": "tiny", "d_model": 32, "ff_dim": 64},
        "data": {"vocabulary_size": 120, "tokens_per_batch": 128, "max_length": 16},
        "training": {"minutes": 1},
    }
    return TrainingConfig.from_dict(values).replace(**changes)


def test_a_probe_times_real_steps_and_leaves_the_runs_weights_alone():
    config = _tiny_config()
    keras.utils.set_random_seed(config.training.seed)
    expected = [np.asarray(weight) for weight in build_model(config, 120).weights]
    keras.utils.set_random_seed(config.training.seed)
    measured = speed.measure_step_time(config, 120, length=8, warmup=1, steps=2)
    assert measured.steps == 2 and 0 < measured.seconds <= measured.probe_seconds
    assert measured.cpu_seconds > 0
    speed.reseed(config.training.seed)
    weights = [np.asarray(weight) for weight in build_model(config, 120).weights]
    for want, got in zip(expected, weights, strict=True):
        np.testing.assert_array_equal(want, got)


def test_row_probe_reports_records_and_reuses():
    lines, config = [], _tiny_config()
    probe = speed.RowProbe({"wide": {"seconds": 0.9, "cpu_seconds": 1.0}}, lines.append)
    assert probe(RECIPE[2], config) == 0.9 and not probe.probed and lines == []
    seconds = probe(RECIPE[1], config)
    assert probe.probed and seconds == pytest.approx(probe.times["small"]["seconds"], abs=1e-4)
    assert probe.times["small"]["tokens"] == 128
    assert probe.times["small"]["precision"] in ("float32 with XLA", "float32 without XLA")
    assert lines[0].startswith("recipe: timing the small row's 128-token training step here")
    assert lines[1].startswith("recipe: the small row: ")
    assert set(probe.times) == {"small", "wide"}


@pytest.mark.one_backend
def test_a_run_times_its_candidates_once_and_a_resumed_run_keeps_the_choice(
    tiny_run, monkeypatch, capsys
):
    # Two rows for the tiny run's 400 pairs, with curves: "narrow" ahead at 2 steps of
    # "broad"'s, "broad" ahead at 4. The run's budget is 4 steps or 24 s of training.
    narrow = dataclasses.replace(
        RECIPE[0], name="narrow", model={"preset": "tiny", "d_model": 32, "ff_dim": 64,
                                         "dropout": 0.1},
        bleu_by_steps=((4, 10.0),))
    broad = dataclasses.replace(RECIPE[0], name="broad", bleu_by_steps=((2, 8.0), (4, 20.0)))
    monkeypatch.setattr(recipe, "RECIPE", (narrow, broad, *RECIPE[3:]))
    calls = []

    def measure(config, vocabulary_size):
        calls.append(config.model.d_model)
        seconds = 0.01 if config.model.d_model == 32 else 12.0  # broad: 2 steps in 24 s
        return speed.StepTime(seconds, seconds, 3, 1.0)

    monkeypatch.setattr(speed, "measure_step_time", measure)
    monkeypatch.setattr(trainer, "bfloat16_trains_faster", lambda: False)
    values = tiny_run(training={"train_steps": 4, "minutes": 0.5})
    del values["model"]["preset"]
    run = trainer.prepare_run(values, verbose=2)
    line = next(line for line in capsys.readouterr().out.splitlines()
                if line.startswith("recipe for"))
    assert "(the narrow row: " in line and "broad ~2 steps at 12.00 s (measured here)" in line
    assert sorted(calls, key=str) == [32, None] and run.model.d_model == 32
    with open(os.path.join(run.paths.output_dir, "train_config.json")) as file:
        written = json.load(file)
    assert written["recipe"]["line"] == line
    assert {name: time["seconds"] for name, time in written["recipe"]["step_times"].items()} == {
        "narrow": 0.01, "broad": 12.0}
    assert trainer.TrainingConfig.from_dict(written) == run.config
    del run
    # Started again in the same directory: the recorded times, nothing timed, the same row.
    run = trainer.prepare_run(values, verbose=2)
    assert len(calls) == 2 and run.model.d_model == 32
    unlock_directory(run.paths.output_dir)
