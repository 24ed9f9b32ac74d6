"""`keras_transformer.schedules.WarmupSchedule`: the paper's learning-rate formula."""

import keras
import pytest

from keras_transformer import WarmupSchedule
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
