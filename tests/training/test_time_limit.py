"""`keras_transformer.training.time_limit.TimeLimit`: the wall-clock budget callback."""

import pytest

from keras_transformer.training import TimeLimit
from tests.training.training_helpers import data, small_model


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
