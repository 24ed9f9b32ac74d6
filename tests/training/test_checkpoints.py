"""`keras_transformer.training.checkpoints`: periodic checkpoints and their averaging."""

import os

from keras_transformer.training import PeriodicCheckpoint, list_checkpoints
from tests.training.training_helpers import data, small_model


def test_periodic_checkpoint_keeps_the_last_ones_and_averages(tmp_path):
    model = small_model()
    x, y = data()
    directory = str(tmp_path / "checkpoints")
    callback = PeriodicCheckpoint(directory, save_freq=2, keep=3)
    model.fit(x, y, batch_size=2, epochs=2, verbose=0, callbacks=[callback])  # 12 steps
    assert [step for step, _ in list_checkpoints(directory)] == [8, 10, 12]
    assert not [name for name in os.listdir(directory) if name.startswith(".tmp-")]
