"""Fixtures of the training tests."""

import pytest

from tests.training.training_helpers import TINY_RUN, merge


@pytest.fixture
def tiny_run(tmp_path):
    """`tiny_run(**sections)`: the tiny run's config dict, writing under `tmp_path/run`."""

    def make(**changes):
        return merge({**TINY_RUN, "output_dir": str(tmp_path / "run")}, changes)

    return make
