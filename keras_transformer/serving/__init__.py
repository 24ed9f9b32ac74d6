"""The HTTP translation service (`keras-transformer serve`): LibreTranslate's API over any
model `keras_transformer.engines.load_translator` opens, with batching across requests,
warm-up before readiness, versions picked up without restart, limits, API keys, Prometheus
metrics, a graceful drain and a web page.

Rooms: `batching` (requests merged into engine calls), `models` (which model answers which
pair, versions, warm-up), `requests` (LibreTranslate's fields), `limits` (keys, rates, body
size), `file_translation` (`/translate_file`, `/download_file`) and `downloads` (the translated
files kept for download), `metrics`, `openapi`, `app` (the Starlette routes) and `server`
(uvicorn, signals).
Needs the `serve` extra (Starlette, uvicorn, prometheus-client, python-multipart). See
docs/serving.md.
"""

from keras_transformer.serving.app import ServerState, Settings, create_app
from keras_transformer.serving.batching import Batcher, Job, SearchOptions
from keras_transformer.serving.limits import ApiKeys, RateLimiter
from keras_transformer.serving.models import (
    ModelSpec,
    SearchPolicy,
    ServedModel,
    parse_model_spec,
)
from keras_transformer.serving.server import ServeError, serve

__all__ = [
    "ApiKeys",
    "Batcher",
    "Job",
    "ModelSpec",
    "RateLimiter",
    "SearchOptions",
    "SearchPolicy",
    "ServeError",
    "ServedModel",
    "ServerState",
    "Settings",
    "create_app",
    "parse_model_spec",
    "serve",
]
