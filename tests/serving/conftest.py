"""Fixtures of the server's tests."""

import pytest


@pytest.fixture
def serve():
    """`start(**settings)`: a `LoopbackServer` (tests/serving/test_connections.py) on the
    v0.1 fixture with those `Settings`, stopped after the test."""
    from tests.serving.test_connections import LoopbackServer

    servers = []

    def start(**settings):
        servers.append(LoopbackServer(**settings))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()
