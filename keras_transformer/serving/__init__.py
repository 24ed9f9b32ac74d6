"""The HTTP translation service (`keras-transformer serve`): LibreTranslate's API over any
model `keras_transformer.engines.load_translator` opens, with batching across requests,
warm-up before readiness, versions picked up without restart, limits, API keys, Prometheus
metrics, a graceful drain and a web page.

Rooms: `settings` (the serve settings with their defaults and help) and `routes` (the HTTP
routes), both framework-free and read by the command line; `batching` (requests merged into
engine calls), `models` (which model answers which pair, versions, warm-up), `requests`
(LibreTranslate's fields), `limits` (keys, rates, body size), `file_translation`
(`/translate_file`, `/download_file`) and `downloads` (the translated files kept for download),
`metrics`, `openapi`, `app` (the Starlette routes) and `server` (uvicorn, signals). The
package's names load on first use.
Needs the `serve` extra (Starlette, uvicorn, prometheus-client, python-multipart). See
docs/serving.md.
"""

from keras_transformer._lazy import lazy_attributes

_EXPORTS = {
    "ApiKeys": "limits",
    "Batcher": "batching",
    "Job": "batching",
    "ModelSpec": "models",
    "RateLimiter": "limits",
    "SearchOptions": "batching",
    "SearchPolicy": "models",
    "ServeError": "server",
    "ServedModel": "models",
    "ServerState": "app",
    "Settings": "settings",
    "check_specs": "models",
    "create_app": "app",
    "parse_model_spec": "models",
    "serve": "server",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS)
