"""`keras_transformer.optimizers.transformer_adam`: the paper's Adam settings and schedule."""

import pytest

from keras_transformer import WarmupSchedule, transformer_adam
from tests.test_case import paper_rate, to_numpy


def test_optimizer_is_paper_adam():
    optimizer = transformer_adam(d_model=512, warmup_steps=4000)
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)
    assert isinstance(optimizer.learning_rate, WarmupSchedule) or float(
        to_numpy(optimizer.learning_rate)
    ) == pytest.approx(paper_rate(1), rel=1e-5)
