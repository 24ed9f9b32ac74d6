"""The HTTP application (Starlette, ASGI): LibreTranslate's API over the served models, the
health, metrics and OpenAPI endpoints and the web page.

| route | what |
| --- | --- |
| `POST /translate` | LibreTranslate's translate (JSON or form body), with this package's extras |
| `POST /detect` | LibreTranslate's detect: the served source languages, most likely first |
| `POST /translate_file` | LibreTranslate's file translation (`file_translation`): a download URL |
| `GET /download_file/{token}/{name}` | the translated file |
| `GET/POST /languages` | the served languages, LibreTranslate's shape |
| `GET /frontend/settings` | LibreTranslate's settings of its page (character limit, keys) |
| `GET /health`, `/health/ready` | 200 once every model is warm, 503 while warming or draining |
| `GET /health/live` | 200 while the process runs |
| `GET /metrics` | Prometheus text format |
| `GET /openapi.json` (and `/spec`) | the OpenAPI 3 description |
| `GET /` | the web page |

Errors are `{"error": message}` with LibreTranslate's status codes: 400 bad request, 403 bad or
missing key (when keys are configured; `/detect` too), 413 too large, 429 too many requests,
503 overloaded (queue full, time limit, warming, draining), 500 when the engine fails. Every
answer of 400 or more is such a JSON body (`JsonErrors` rewrites the plain-text ones of
Starlette and its middleware), its message at most `MAX_ERROR_CHARACTERS` long (a request's
path quoted in it at most `MAX_QUOTED_PATH`).
"""

import asyncio
import importlib.resources
import json
import logging
import time

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from keras_transformer.documents.detection import LanguageDetector
from keras_transformer.documents.files import available_formats
from keras_transformer.documents.html import translate_html
from keras_transformer.documents.texts import plan_for, rounds
from keras_transformer.serving import routes as routing
from keras_transformer.serving.batching import (
    Batcher,
    Job,
    QueueClosed,
    QueueFull,
)
from keras_transformer.serving.downloads import FileStore
from keras_transformer.serving.file_translation import (
    FORM_OVERHEAD,
    DocumentTranslate,
    download_file_route,
    translate_file_route,
)
from keras_transformer.serving.limits import BodyLimit, BodyTooLarge, RateLimiter, admit
from keras_transformer.serving.metrics import Metrics
from keras_transformer.serving.openapi import openapi_document
from keras_transformer.serving.requests import ApiError, parse_detect, parse_translate
from keras_transformer.serving.settings import Settings  # noqa: F401 (its home until 0.4.0)
from keras_transformer.translation import Translation

ACCESS_LOG = logging.getLogger("keras_transformer.serving.access")
# Names of common language codes, for `/languages` (others are named by their code).
LANGUAGE_NAMES = {
    "ar": "Arabic",
    "de": "German",
    "en": "English",
    "es": "Spanish",
    "fi": "Finnish",
    "fr": "French",
    "it": "Italian",
    "ja": "Japanese",
    "ko": "Korean",
    "nl": "Dutch",
    "pl": "Polish",
    "pt": "Portuguese",
    "ru": "Russian",
    "sv": "Swedish",
    "tr": "Turkish",
    "uk": "Ukrainian",
    "zh": "Chinese",
    "auto": "Auto (the served source)",
}
# A handler (made for a `ServerState`) per route of `routes.ROUTES`, where the paths and
# methods are spelled; `create_app` serves them, the access log names requests by them.
HANDLERS = {
    "/": lambda state: _page(),
    "/translate": lambda state: _translate(state),
    "/detect": lambda state: _detect(state),
    "/translate_file": lambda state: translate_file_route(state),
    "/download_file/{token}/{name}": lambda state: download_file_route(state),
    "/languages": lambda state: _languages(state),
    "/frontend/settings": lambda state: _frontend_settings(state),
    "/health": lambda state: _ready(state),
    "/health/ready": lambda state: _ready(state),
    "/health/live": lambda state: _live,
    "/metrics": lambda state: _metrics(state),
    "/openapi.json": lambda state: _openapi(state),
    "/spec": lambda state: _openapi(state),
}
# The paths (a request outside them is logged as "other").
ROUTES = routing.PATHS
# The longest error message answered (a longer one is cut, saying so), and the longest part of
# a request's path an error quotes: a 60,000-character path gets a short 404.
MAX_ERROR_CHARACTERS = 1000
MAX_QUOTED_PATH = 200
# Bytes of a plain-text error body that `JsonErrors` reads to quote; the rest is discarded.
MAX_TEXT_ERROR_BYTES = 4096


class ServerState:
    """What the routes share: the models with their batchers, settings, metrics, status
    (`"warming"`, `"ready"`, `"draining"`) and the language detector of the served sources.

    Args:
        models: list of `models.ServedModel`, loaded.
        settings: `Settings`.
        log: callable `(str)`, for why language detection is off. Defaults to `None`: the
            `keras_transformer.serving` logger.
    """

    def __init__(self, models, settings, log=None):
        self.models = models
        self.settings = settings
        self.detector, self.no_detection = _detector(self.sources)
        if self.detector is None and self.sources:
            (log or logging.getLogger("keras_transformer.serving").warning)(
                f"language detection is off: {self.no_detection}"
            )
        self.metrics = Metrics()
        self.limiter = RateLimiter()
        self.files = FileStore(settings.file_ttl)
        self.status = "warming"
        self.metrics.ready.set(0)
        self.batchers = {}
        for model in models:
            name = model.spec.name
            self.batchers[name] = Batcher(
                model.translate,
                max_batch_sentences=settings.max_batch_sentences,
                max_queue_sentences=settings.max_queue_sentences,
                max_wait=settings.batch_wait,
                announced_wait=settings.announced_wait,
                on_batch=self.metrics.batch_observer(name),
                name=f"batcher {name}",
                workers=settings.engine_calls or model.concurrent_calls(),
            )
            self.metrics.version.labels(name).set(-1 if model.version is None else model.version)

    def set_status(self, status):
        self.status = status
        self.metrics.ready.set(1 if status == "ready" else 0)

    @property
    def sources(self):
        """The served source languages, sorted (none for a model of any pair)."""
        return sorted({model.spec.source for model in self.models} - {None})

    def find(self, source, target, texts=()):
        """`(model, source, confidence)`: the model serving `source` -> `target` and the
        source it serves. For `source="auto"` that source is detected in `texts` among the
        sources with a model into `target` (`confidence` 0 to 100); otherwise, and when
        detection is off, `confidence` is `None`."""
        if len(self.models) == 1 and self.models[0].spec.source is None:
            return self.models[0], source, None
        candidates = [
            model
            for model in self.models
            if model.spec.target == target and source in ("auto", model.spec.source)
        ]
        if source == "auto" and candidates and self.detector is not None:
            code, confidence = self.detect(texts, [model.spec.source for model in candidates])[0]
            return next(m for m in candidates if m.spec.source == code), code, confidence
        if len(candidates) == 1:
            return candidates[0], candidates[0].spec.source, None
        pairs = ", ".join(model.spec.name for model in self.models)
        if len(candidates) > 1:
            raise ApiError(
                400,
                f"source 'auto' is ambiguous for target {target!r} (language detection is "
                f"off: {self.no_detection}): name one of {pairs}",
            )
        raise ApiError(400, f"{source}:{target} is not supported (this server translates {pairs})")

    def detect(self, texts, among=None):
        """The detector's `(code, confidence)` candidates for `texts` (a list of str, read
        as one text); a blank text ranks them all at 0, in order."""
        text = "\n".join(texts)
        if not text.strip():
            return [(code, 0.0) for code in (among or self.detector.languages)]
        return self.detector.detect(text, among=among)

    def close(self, timeout=None):
        """Answers what is queued, then stops the batchers and removes the translated files."""
        for batcher in self.batchers.values():
            batcher.close(timeout)
        self.files.close()


def create_app(state):
    """The Starlette application of a `ServerState` (wrapped in the body-size bound and the
    access log)."""
    routes = [
        Route(route.path, HANDLERS[route.path](state), methods=list(route.methods))
        for route in routing.ROUTES
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={404: _not_found, 405: _not_allowed, ApiError: _api_error},
    )
    if state.settings.cors_origins:
        app = CORSMiddleware(
            app,
            allow_origins=list(state.settings.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Content-Type"],
            max_age=3600,
        )
    settings = state.settings
    file_body = settings.file_limit + FORM_OVERHEAD  # The file and the form's other fields.
    app = BodyLimit(app, settings.body_limit, {"/translate_file": file_body})
    return AccessLog(JsonErrors(app), state.metrics)


def bounded(text, most=MAX_ERROR_CHARACTERS):
    """`text` if at most `most` characters long, else its start and how long it was."""
    if len(text) <= most:
        return text
    return f"{text[:most]}... (cut: {len(text):,} characters)"


def error_response(status, message, headers=None):
    return JSONResponse({"error": bounded(message)}, status_code=status, headers=headers)


async def _api_error(request, error):
    return error_response(error.status, error.message, error.headers)


async def _not_found(request, error):
    return error_response(404, f"Not found: {bounded(request.url.path, MAX_QUOTED_PATH)}")


async def _not_allowed(request, error):
    path = bounded(request.url.path, MAX_QUOTED_PATH)
    return error_response(405, f"Method not allowed: {request.method} {path}")


async def _read_fields(request, body_limit):
    """The body's fields: a JSON object, or a form (repeated `q` as a list)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    try:
        if content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            try:
                form = await request.form()
            except HTTPException as error:  # A malformed form, or more than 1,000 fields.
                raise ApiError(400, f"Invalid request: {error.detail}") from None
            fields = {key: form.getlist(key) for key in form.keys()}
            if any(not isinstance(value, str) for values in fields.values() for value in values):
                raise ApiError(400, "Invalid request: files are not accepted, only text fields")
            return {
                key: values if key == "q" and len(values) > 1 else values[0]
                for key, values in fields.items()
            }
        body = await request.body()
    except BodyTooLarge:  # A streamed body (no Content-Length) passed the bound.
        raise ApiError(413, f"Request body too large: at most {body_limit} bytes") from None
    if not body:
        return dict(request.query_params)
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as error:
        message = str(error)[:200] if isinstance(error, ValueError) else "nested too deeply"
        raise ApiError(400, f"Invalid request: the body is not valid JSON ({message})") from None


async def _admitted(state, request, parse):
    """The body of a `/translate` or `/detect` request read by `parse` (`parse_translate`,
    `parse_detect`); raises the `ApiError` of a body that its key, its client's rate or its
    characters do not admit."""
    settings = state.settings
    fields = await _read_fields(request, settings.body_limit)
    parsed = parse(fields, settings.batch_limit)
    client = request.client.host if request.client else "?"
    admit(settings, state.limiter, client, parsed.api_key)  # Key and rate, as files.
    if settings.char_limit and parsed.characters > settings.char_limit:
        raise ApiError(
            413,
            f"Invalid request: request ({parsed.characters}) exceeds text limit "
            f"({settings.char_limit} characters)",
        )
    return parsed


def _detect(state):
    async def detect(request):
        parsed = await _admitted(state, request, parse_detect)
        if state.detector is None:
            raise ApiError(400, f"Language detection is not available: {state.no_detection}")
        candidates = state.detect(parsed.texts)
        return JSONResponse(
            [{"language": code, "confidence": confidence} for code, confidence in candidates]
        )

    return detect


def _translate(state):
    settings = state.settings

    async def translate(request):
        parsed = await _admitted(state, request, parse_translate)
        if state.status != "ready":
            raise ApiError(
                503, f"The server is {state.status}: try again later", {"Retry-After": "5"}
            )
        model, source, confidence = state.find(parsed.source, parsed.target, parsed.texts)
        try:
            model.check_options(parsed.options)
        except ValueError as error:
            raise ApiError(400, "Invalid request: " + " ".join(str(error).split())) from None
        segment = settings.segment if parsed.segment is None else parsed.segment
        language = source if source not in (None, "auto") else None
        if parsed.text_format == "html":
            answer = await _translate_markup(state, model, parsed, source, confidence, segment)
            return JSONResponse(answer)
        name = model.spec.name
        # While this request is cut into sentences, a free engine thread waits a moment for
        # them (`Batcher.announce`): withdrawn once its first sentences are queued.
        batcher, announced = state.batchers[name], [True]
        batcher.announce()

        def queued():
            if announced[0]:
                announced[0] = False
                batcher.withdraw()

        try:
            plan = await asyncio.to_thread(
                plan_for,
                model.engine,
                parsed.texts,
                language,
                segment=segment,
                prefixes=parsed.prefixes,
            )
            if len(plan.sentences) > settings.max_queue_sentences:  # Never queued.
                raise ApiError(
                    413,
                    f"Invalid request: {len(plan.sentences)} sentences, more than the server "
                    f"queues ({settings.max_queue_sentences}): send fewer at a time",
                )
            deadline = time.monotonic() + settings.timeout

            async def submit(sentences, prefixes):
                return await _submit(
                    state, name, sentences, prefixes, parsed.options, deadline, queued
                )

            results = await _run_plan(plan, submit)
        finally:
            queued()  # Refused, failed, or nothing to translate.
        state.metrics.sentences.labels(name).inc(len(plan.sentences))
        state.metrics.characters.labels(name).inc(parsed.characters)
        translations = plan.assemble(results, parsed.alternatives + 1)
        return JSONResponse(_answer(parsed, translations, source, confidence))

    return translate


async def _translate_markup(state, model, parsed, source, confidence, segment):
    """The answer to a `format: "html"` request: each text's markup kept and its texts
    translated (`documents.html.translate_html`, inline tags put back through the word
    alignments), in a worker thread whose translate calls go through the model's batcher."""
    language = source if source not in (None, "auto") else None
    deadline = time.monotonic() + state.settings.timeout
    translate = DocumentTranslate(state, model, deadline, language, segment=segment)

    def markup():
        return [translate_html(text, translate) for text in parsed.texts]

    texts = await asyncio.to_thread(markup)
    translations = [[Translation(text, 0.0, None, translate.truncated, None, None)] for text in texts]
    return _answer(parsed, translations, source, confidence)


async def _run_plan(plan, submit):
    """`texts.run_plan` through the batcher (`submit` awaited for each of the plan's
    `texts.rounds`)."""
    calls = rounds(plan)
    try:
        call = next(calls)
        while True:
            call = calls.send(await submit(*call))
    except StopIteration as done:
        return done.value


async def _submit(state, name, sentences, prefixes, options, deadline, queued=None):
    """One batch of sentences through the model's batcher: its results, or the `ApiError` of
    a full queue (503), the deadline (503), a bad option (400) or a failure (500). `queued`:
    called once the job is in the queue (or refused), before any wait."""
    batcher = state.batchers[name]
    try:
        future = batcher.submit(Job(sentences, prefixes, options))
    except (QueueFull, QueueClosed) as error:
        raise ApiError(503, f"Overloaded: {error}", {"Retry-After": "1"}) from None
    finally:
        state.metrics.queue.labels(name).set(batcher.depth)
        if queued is not None:
            queued()
    try:
        left = max(0.0, deadline - time.monotonic())
        return await asyncio.wait_for(asyncio.wrap_future(future), left)
    except TimeoutError:
        raise ApiError(
            503,
            f"Timed out: no translation within {state.settings.timeout:g} s",
            {"Retry-After": "1"},
        ) from None
    except ValueError as error:
        raise ApiError(400, "Invalid request: " + " ".join(str(error).split())) from None
    except Exception as error:
        logging.getLogger(__name__).exception("translation failed")
        raise ApiError(500, f"Translation failed: {type(error).__name__}") from None


def _answer(parsed, translations, source, confidence=None):
    """LibreTranslate's response body of one request's results: one whole-text translation
    (a list of hypotheses, best first) per text."""
    texts, alternatives, scores, alternative_scores, truncated = [], [], [], [], []
    for hypotheses in translations:
        texts.append(hypotheses[0].text)
        scores.append(hypotheses[0].score)
        truncated.append(hypotheses[0].truncated)
        others = hypotheses[1 : parsed.alternatives + 1]
        alternatives.append([hypothesis.text for hypothesis in others])
        alternative_scores.append([hypothesis.score for hypothesis in others])

    def shaped(values):
        return values[0] if parsed.single else values

    body = {"translatedText": shaped(texts)}
    if parsed.alternatives:
        body["alternatives"] = shaped(alternatives)
    if parsed.scores:
        body["scores"] = shaped(scores)
        if parsed.alternatives:
            body["alternativeScores"] = shaped(alternative_scores)
    if any(truncated):
        body["truncated"] = shaped(truncated)
    if parsed.source == "auto":
        body["detectedLanguage"] = {"language": source, "confidence": confidence or 0}
    return body


def language_list(state):
    """LibreTranslate's `/languages`: each served source with its targets."""
    targets = {}
    for model in state.models:
        if model.spec.source is not None:
            targets.setdefault(model.spec.source, []).append(model.spec.target)
    return [
        {
            "code": code,
            "name": LANGUAGE_NAMES.get(code.split("-")[0].lower(), code),
            "targets": sorted(codes),
        }
        for code, codes in sorted(targets.items())
    ]


def _languages(state):
    async def languages(request):
        return JSONResponse(language_list(state))

    return languages


def _frontend_settings(state):
    async def frontend_settings(request):
        settings = state.settings
        return JSONResponse(
            {
                "charLimit": settings.char_limit or -1,
                "keyRequired": settings.api_keys is not None,
                "suggestions": False,
                "filesTranslation": bool(settings.file_limit),
                "supportedFilesFormat": available_formats() if settings.file_limit else [],
                "fileLimit": settings.file_limit,
                "anyPair": len(state.models) == 1 and state.models[0].spec.source is None,
                # This package's: `source: "auto"` detects (the page then offers it).
                "languageDetection": state.detector is not None,
                "alternatives": min(_beam_sizes(state)) - 1,
            }
        )

    return frontend_settings


def _detector(sources):
    """`(LanguageDetector or None, why it is None)` of the served source languages."""
    if not sources:
        return None, "the model translates any pair, so its languages are unknown"
    try:
        return LanguageDetector(sources), None
    except ImportError as error:  # The `detect` extra is missing.
        return None, f"{error} (install keras-transformer-nmt[detect])"
    except ValueError as error:  # A served code the library does not know.
        return None, " ".join(str(error).split())


def _beam_sizes(state):
    """The default beam size of each served engine (`Engine.beam_size`; `None`, as a
    SavedModel export that does not record it: 1)."""
    return [model.engine.beam_size or 1 for model in state.models]


def _ready(state):
    async def ready(request):
        models = [
            {
                "model": model.spec.name,
                "path": model.directory,
                "version": model.version,
                "warm_sentences": model.warm_batch_sentences,
            }
            for model in state.models
        ]
        status = 200 if state.status == "ready" else 503
        return JSONResponse({"status": state.status, "models": models}, status_code=status)

    return ready


async def _live(request):
    return JSONResponse({"status": "alive"})


def _metrics(state):
    async def metrics(request):
        for name, batcher in state.batchers.items():
            state.metrics.queue.labels(name).set(batcher.depth)
        for model in state.models:
            state.metrics.version.labels(model.spec.name).set(
                -1 if model.version is None else model.version
            )
            state.metrics.warm_sentences.labels(model.spec.name).set(model.warm_batch_sentences)
        body, content_type = state.metrics.exposition()
        return Response(body, media_type=content_type)

    return metrics


def _openapi(state):
    async def openapi(request):
        return JSONResponse(openapi_document(state.settings))

    return openapi


def _page():
    page = importlib.resources.files(__package__).joinpath("page.html").read_text("utf-8")

    async def index(request):
        return HTMLResponse(page)

    return index


class JsonErrors:
    """ASGI middleware: an answer of status 400 or more that is not JSON (Starlette's own
    plain-text ones: a malformed form, a refused CORS preflight, its 500 of an unexpected
    error) is sent as `{"error": its text}`, the text's first `MAX_TEXT_ERROR_BYTES` bytes
    at most; its other headers are kept. JSON answers pass as they are."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, text, done, started = None, bytearray(), False, False

        async def json_send(message):
            nonlocal start, done, started
            if message["type"] == "http.response.start":
                started = True
                headers = dict(message.get("headers", []))
                content_type = headers.get(b"content-type", b"").split(b";")[0].strip()
                if message["status"] < 400 or content_type == b"application/json":
                    await send(message)
                else:
                    start = message  # Held until its body is read.
                return
            if start is None or message["type"] != "http.response.body" or done:
                await send(message)
                return
            room = MAX_TEXT_ERROR_BYTES - len(text)
            text.extend(message.get("body", b"")[: max(room, 0)])
            if message.get("more_body", False):
                return
            done = True
            message_text = bytes(text).decode("utf-8", "replace").strip()
            body = json.dumps({"error": bounded(message_text or "Error")}).encode()
            headers = [
                (name, value)
                for name, value in start.get("headers", [])
                if name.lower() not in (b"content-type", b"content-length", b"transfer-encoding")
            ]
            headers += [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ]
            await send({**start, "headers": headers})
            head = scope.get("method") == "HEAD"  # A HEAD answer carries no body.
            await send({"type": "http.response.body", "body": b"" if head else body})

        try:
            await self.app(scope, receive, json_send)
        except Exception:
            if not started:  # Else uvicorn's plain-text 500; the error is still raised (logged).
                await json_send(_plain_start(500))
                await json_send({"type": "http.response.body", "body": b"Internal Server Error"})
            raise


def _plain_start(status):
    return {
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"text/plain; charset=utf-8")],
    }


class AccessLog:
    """ASGI middleware: one log line per request (client, method, path, status, bytes,
    milliseconds; never a body or a key) and the request metrics."""

    def __init__(self, app, metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status, size = 500, 0

        async def logged_send(message):
            nonlocal status, size
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                size += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, logged_send)
        finally:
            seconds = time.perf_counter() - start
            path = scope.get("path", "")
            if path.startswith("/download_file/"):
                path = route = "/download_file/{token}/{name}"  # A token is a key: not logged.
            else:
                route = path if path in ROUTES else "other"
            self.metrics.requests.labels(route, str(status)).inc()
            self.metrics.latency.labels(route).observe(seconds)
            client = scope.get("client") or ("-", 0)
            ACCESS_LOG.info(
                '%s "%s %s" %d %dB %.1fms',
                client[0],
                scope.get("method", "-"),
                path[:200],
                status,
                size,
                1000 * seconds,
            )
