"""`keras_transformer.training.averaging`: checkpoint averaging."""

import numpy as np

from keras_transformer.training import average_checkpoints
from tests.training.training_helpers import small_model, weights_of


def test_average_checkpoints_is_the_mean(tmp_path):
    model = small_model()
    model.optimizer.build(model.trainable_variables)
    rng = np.random.default_rng(1)
    saved = []
    for index in range(3):
        values = [rng.normal(size=w.shape).astype("float32") for w in weights_of(model)]
        model.set_weights(values)
        model.save_weights(str(tmp_path / f"ckpt-{index}.weights.h5"))
        saved.append(values)
    averaged = average_checkpoints(model, [str(tmp_path / f"ckpt-{i}.weights.h5") for i in range(3)])
    for position, value in enumerate(weights_of(model)):
        expected = np.mean([values[position] for values in saved], axis=0)
        np.testing.assert_allclose(value, expected, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(averaged[position], expected, rtol=1e-6, atol=1e-7)
