"""`keras_transformer.schedules`: the paper's learning-rate formula, and its linear decay to zero."""

import keras
import pytest

from keras_transformer import WarmupLinearDecaySchedule, WarmupSchedule
from tests.test_case import paper_rate, to_numpy


def test_schedule_matches_formula():
    schedule = WarmupSchedule(d_model=512, warmup_steps=4000)
    for step in (1, 4000, 16000):
        assert float(to_numpy(schedule(step))) == pytest.approx(paper_rate(step), rel=1e-5)
    assert float(to_numpy(schedule(4000))) == pytest.approx(512**-0.5 * 4000**-0.5, rel=1e-5)
    # Step 0 is safe: finite, positive, equal to step 1.
    assert float(to_numpy(schedule(0))) == pytest.approx(paper_rate(1), rel=1e-5)
    scaled = WarmupSchedule(d_model=512, warmup_steps=4000, scale=2.0)
    assert float(to_numpy(scaled(100))) == pytest.approx(2 * paper_rate(100), rel=1e-5)
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert clone.get_config() == schedule.get_config()
    with pytest.raises(ValueError, match="warmup_steps=0"):
        WarmupSchedule(512, warmup_steps=0)


def test_linear_decay_warms_up_like_the_paper_then_falls_to_zero_at_the_end():
    paper = WarmupSchedule(d_model=128, warmup_steps=800, scale=1.5)
    schedule = WarmupLinearDecaySchedule(d_model=128, warmup_steps=800, total_steps=5000, scale=1.5)
    rate = lambda s, step: float(to_numpy(s(step)))  # noqa: E731
    # The warm-up and its peak are the paper schedule's, step 0 included.
    for step in (0, 1, 400, 800):
        assert rate(schedule, step) == pytest.approx(rate(paper, step), rel=1e-5)
    peak = rate(paper, 800)
    # Then a straight line: half the peak halfway through the decay, zero at the end and after.
    assert rate(schedule, 2900) == pytest.approx(peak / 2, rel=1e-5)
    assert rate(schedule, 4790) == pytest.approx(peak * 210 / 4200, rel=1e-4)
    assert rate(schedule, 5000) == 0.0
    assert rate(schedule, 7000) == 0.0
    # Falling at a constant rate after the warm-up.
    falls = [rate(schedule, s) - rate(schedule, s + 100) for s in range(800, 4900, 100)]
    assert falls == pytest.approx([peak * 100 / 4200] * len(falls), rel=1e-3)
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert clone.get_config() == schedule.get_config()
    assert rate(clone, 2900) == pytest.approx(peak / 2, rel=1e-5)


def test_linear_decay_names_bad_arguments():
    with pytest.raises(ValueError, match="total_steps=800"):
        WarmupLinearDecaySchedule(128, warmup_steps=800, total_steps=800)
    with pytest.raises(ValueError, match="warmup_steps=0"):
        WarmupLinearDecaySchedule(128, warmup_steps=0, total_steps=10)
    with pytest.raises(ValueError, match="scale=0"):
        WarmupLinearDecaySchedule(128, warmup_steps=10, total_steps=100, scale=0)
