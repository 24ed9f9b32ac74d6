"""The HTTP routes, each spelled once: path, methods and summary. The application
(`app.create_app`, with a handler per path), the access log (a request named by its route) and
the OpenAPI document (`openapi.openapi_document`, one operation per method) are derived from
`ROUTES`. Framework-free."""

import typing


class Route(typing.NamedTuple):
    """One route: its `path` (Starlette's pattern), its HTTP `methods` and a `summary` (the
    OpenAPI operation's)."""

    path: str
    methods: tuple
    summary: str


ROUTES = (
    Route("/translate", ("POST",), "Translate text"),
    Route(
        "/detect",
        ("POST",),
        "Detect the language of a text among the served sources (most likely first; 400 for "
        "a model of any pair)",
    ),
    Route("/translate_file", ("POST",), "Translate a file"),
    Route("/download_file/{token}/{name}", ("GET",), "Download a translated file"),
    Route("/languages", ("GET", "POST"), "Served languages"),
    Route("/frontend/settings", ("GET",), "Settings of the page"),
    Route("/health", ("GET",), "Readiness"),
    Route("/health/ready", ("GET",), "Readiness"),
    Route("/health/live", ("GET",), "Liveness"),
    Route("/metrics", ("GET",), "Prometheus metrics"),
    Route("/openapi.json", ("GET",), "This document"),
    Route("/spec", ("GET",), "This document"),
    Route("/", ("GET",), "The web page"),
)
PATHS = tuple(route.path for route in ROUTES)
