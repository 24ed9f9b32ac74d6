"""The HTTP routes are one list (`serving.routes.ROUTES`): the application's handlers and the
OpenAPI document's paths and methods follow it."""

import pytest

from keras_transformer.serving import app, routes
from keras_transformer.serving.openapi import openapi_document
from keras_transformer.serving.settings import Settings

pytestmark = pytest.mark.one_backend


def test_every_route_has_one_handler_and_one_spelling():
    assert len(set(routes.PATHS)) == len(routes.PATHS)
    assert set(app.HANDLERS) == set(routes.PATHS)
    assert app.ROUTES == routes.PATHS


def test_openapi_paths_and_methods_are_the_routes():
    document = openapi_document(Settings())
    assert list(document["paths"]) == list(routes.PATHS)
    for route in routes.ROUTES:
        operations = document["paths"][route.path]
        assert sorted(operations) == sorted(method.lower() for method in route.methods)
        for operation in operations.values():
            assert operation["summary"] == route.summary and "200" in operation["responses"]
