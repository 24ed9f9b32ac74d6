"""Fixtures of the layer tests."""

import pytest

from tests.test_case import LAYER_CASES, save_and_reload_in_fresh_process


@pytest.fixture(scope="session")
def fresh_process_reloads(tmp_path_factory):
    """`({name: (expected, reloaded)}, log)`: every declared layer case saved to `.keras` and
    reloaded in ONE new Python process (one process start per session, not one per layer)."""
    return save_and_reload_in_fresh_process(dict(LAYER_CASES), tmp_path_factory.mktemp("reload"))
