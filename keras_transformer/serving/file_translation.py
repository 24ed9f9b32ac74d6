"""LibreTranslate's file translation: `POST /translate_file` (a multipart form: `file`,
`source`, `target`, `api_key`) answers `{"translatedFileUrl": ...}`, and `GET
/download_file/<token>/<name>` sends the translated file as an attachment.

The file's format comes from its extension (`keras_transformer.documents.files`). Its texts
go through the model's batcher as the sentences of `/translate` do, merged with other
requests; the document's reading and writing run in a worker thread. Limits: the file's
bytes (`Settings.file_limit`, 413), the characters of its texts (`Settings.char_limit`, 413,
before anything is translated), the time (`Settings.timeout`, 503). Translated files wait in
a `downloads.FileStore` for `Settings.file_ttl` seconds.
"""

import asyncio
import concurrent.futures
import logging
import time
import urllib.parse

from starlette.exceptions import HTTPException
from starlette.responses import FileResponse, JSONResponse

from keras_transformer.documents.files import (
    FORMATS,
    available_formats,
    extension_of,
    translate_file,
)
from keras_transformer.documents.texts import plan_for, run_plan
from keras_transformer.serving.batching import Job, QueueClosed, QueueFull
from keras_transformer.serving.limits import BodyTooLarge, admit
from keras_transformer.serving.requests import ApiError
from keras_transformer.translation import SearchOptions

# Bytes of a multipart body beyond its file: the other fields and the part headers.
FORM_OVERHEAD = 64 << 10


class DocumentTranslate:
    """The `translate(texts) -> results` call of one document: its texts cut into sentences
    (`documents.texts.plan_texts`, in the source language), queued on `model`'s batcher (in
    jobs of `max_batch_sentences`, with word alignments where the engine has them, for the
    markup of HTML and .docx), and joined back in each text's layout. `truncated` says whether
    a piece was still cut (a single word longer than the model reads).

    Args:
        state: `app.ServerState`.
        model: `models.ServedModel`.
        deadline: float. The `time.monotonic()` by which the translations must be back.
        language: str or `None`. The source language, for segmentation.
        choose: callable `(texts) -> (model, source, confidence)` or `None`: for `source:
            auto`, `model` is `None` and the first texts of the document choose it
            (`ServerState.find` detecting their language).
        segment: bool or `None`. Cut texts into sentences (`None`: the server's setting).

    Raises (when called):
        ApiError: 413 past the character limit or the queue's size, 503 when the queue is
            full or the deadline passes.
    """

    def __init__(self, state, model, deadline, language=None, choose=None, segment=None):
        self.state = state
        self.segment = state.settings.segment if segment is None else segment
        self.deadline = deadline
        self.choose = choose
        self.characters = 0
        self.truncated = False
        if model is not None:
            self._serve_with(model, language)

    def _serve_with(self, model, language):
        self.name = model.spec.name
        self.engine = model.engine
        self.language = language
        self.options = SearchOptions(alignments=model.engine.capabilities.alignments)

    def __call__(self, texts):
        settings = self.state.settings
        if self.choose is not None:  # `source: auto`: the model of the document's language.
            model, source, _ = self.choose(texts)
            self._serve_with(model, source)
            self.choose = None
        self.characters += sum(len(text) for text in texts)
        if settings.char_limit and self.characters > settings.char_limit:
            raise ApiError(
                413,
                f"Invalid request: the file's text ({self.characters} characters) exceeds the "
                f"text limit ({settings.char_limit} characters)",
            )
        plan = plan_for(self.engine, texts, self.language, segment=self.segment)
        if len(plan.sentences) > settings.max_queue_sentences:
            raise ApiError(
                413,
                f"Invalid request: the file has {len(plan.sentences)} sentences, more than the "
                f"server queues ({settings.max_queue_sentences})",
            )
        batcher = self.state.batchers[self.name]
        results = run_plan(
            plan,
            lambda sentences, prefixes: _run(
                sentences, batcher, settings, self.deadline, self.options
            ),
        )
        metrics = self.state.metrics
        metrics.sentences.labels(self.name).inc(len(plan.sentences))
        metrics.characters.labels(self.name).inc(sum(len(text) for text in texts))
        translations = plan.assemble(results)
        self.truncated = self.truncated or any(found.truncated for found in translations)
        return translations


def _run(sentences, batcher, settings, deadline, options):
    """The results of `sentences`, queued as jobs of `max_batch_sentences`, waited for until
    `deadline` (the jobs not started are cancelled past it)."""
    size = settings.max_batch_sentences
    futures = []
    try:
        for start in range(0, len(sentences), size):
            job = Job(sentences[start : start + size], None, options)
            futures.append(batcher.submit(job))
    except (QueueFull, QueueClosed) as error:
        for future in futures:
            future.cancel()
        raise ApiError(503, f"Overloaded: {error}", {"Retry-After": "1"}) from None
    results = []
    try:
        for future in futures:
            results += future.result(timeout=max(0.0, deadline - time.monotonic()))
    except concurrent.futures.TimeoutError:
        for future in futures:
            future.cancel()
        raise ApiError(
            503, f"Timed out: no translation within {settings.timeout:g} s", {"Retry-After": "1"}
        ) from None
    return results


def translate_file_route(state):
    """The `POST /translate_file` handler of a `ServerState`."""
    settings = state.settings

    async def translate_file_endpoint(request):
        if not settings.file_limit:
            raise ApiError(403, "Files translation are disabled on this server")
        deadline = time.monotonic() + settings.timeout
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "multipart/form-data":
            raise ApiError(
                400,
                "Invalid request: send the file as multipart/form-data. Received: "
                f"Content-Type={content_type or 'none'}",
            )
        try:
            form = await request.form(max_files=1, max_fields=16)
        except HTTPException as error:  # A malformed form, or more than one file.
            raise ApiError(400, f"Invalid request: {error.detail}") from None
        except BodyTooLarge:  # A streamed body (no Content-Length) passed the bound.
            raise ApiError(413, "Invalid request: the body is too large") from None
        try:
            upload = form.get("file")
            fields = {
                key: value
                for key, value in form.items()
                if key != "file" and isinstance(value, str)
            }
            if upload is None or isinstance(upload, str):
                raise ApiError(400, "Invalid request: missing file parameter")
            for field in ("source", "target"):
                if not fields.get(field):
                    raise ApiError(400, f"Invalid request: missing {field} parameter")
            client = request.client.host if request.client else "?"
            admit(settings, state.limiter, client, fields.get("api_key"))
            filename = upload.filename or ""
            if not filename:
                raise ApiError(400, "Invalid request: empty file name")
            if extension_of(filename) not in available_formats():
                raise ApiError(
                    400,
                    f"Invalid request: file format not supported (the extensions are "
                    f"{', '.join(available_formats())}). Received: filename={filename[:100]!r}",
                )
            data = await upload.read(settings.file_limit + 1)
        finally:
            await form.close()  # The upload's spooled temporary file.
        if len(data) > settings.file_limit:
            raise ApiError(
                413,
                f"Invalid request: the file is larger than {settings.file_limit} bytes",
            )
        if state.status != "ready":
            raise ApiError(
                503, f"The server is {state.status}: try again later", {"Retry-After": "5"}
            )
        model, source, _ = state.find(fields["source"], fields["target"])
        language = source if source not in (None, "auto") else None
        choose = None
        if fields["source"] == "auto" and state.detector is not None:
            # Detected on the document's own texts (its first translate call), not on nothing.
            target = fields["target"]
            model, choose = None, lambda texts: state.find("auto", target, texts)
        translate = DocumentTranslate(state, model, deadline, language, choose)
        try:
            output, name = await asyncio.to_thread(
                translate_file, data, filename, translate, fields["target"]
            )
        except ApiError:
            raise
        except ValueError as error:
            raise ApiError(400, "Invalid request: " + " ".join(str(error).split())) from None
        except Exception as error:
            logging.getLogger(__name__).exception("file translation failed")
            raise ApiError(500, f"Translation failed: {type(error).__name__}") from None
        token, name = state.files.put(output, name)
        base = str(request.base_url).rstrip("/")
        url = f"{base}/download_file/{token}/{urllib.parse.quote(name)}"
        answer = {"translatedFileUrl": url}
        if translate.truncated:
            answer["truncated"] = True
        return JSONResponse(answer)

    return translate_file_endpoint


def download_file_route(state):
    """The `GET /download_file/{token}/{name}` handler of a `ServerState`."""

    async def download_file_endpoint(request):
        token = request.path_params["token"]
        name = request.path_params["name"]
        path = state.files.path(token, name)
        if path is None:
            raise ApiError(404, "Not found: no such file (or it expired): translate it again")
        media_type = FORMATS.get(extension_of(name), "application/octet-stream")
        return FileResponse(path, media_type=media_type, filename=name)

    return download_file_endpoint
