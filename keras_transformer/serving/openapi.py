"""The OpenAPI 3 description of the server (`GET /openapi.json`, `GET /spec`)."""

from keras_transformer.serving.routes import ROUTES
from keras_transformer.version import __version__

_ERROR = {
    "description": "An error",
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "properties": {"error": {"type": "string"}},
                "required": ["error"],
            }
        }
    },
}


def _json(schema, description="OK"):
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _text(media_type):
    return {"description": "OK", "content": {media_type: {"schema": {"type": "string"}}}}


def _status(schema):
    return {
        "200": _json(schema),
        "503": _json(schema, "Warming up or draining"),
    }


def openapi_document(settings):
    """The OpenAPI 3.0 document, with the server's limits in the descriptions."""
    texts = {
        "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
    }
    request = {
        "type": "object",
        "required": ["q", "source", "target"],
        "properties": {
            "q": {
                **texts,
                "description": "Text(s) to translate, line by line; at most "
                f"{settings.char_limit or 'any number of'} characters in all, "
                f"{settings.batch_limit or 'any number of'} texts",
            },
            "source": {"type": "string", "description": "Source language code, or 'auto'"},
            "target": {"type": "string", "description": "Target language code"},
            "format": {"type": "string", "enum": ["text"], "default": "text"},
            "alternatives": {
                "type": "integer",
                "minimum": 0,
                "default": 0,
                "description": "Other translations to return (at most the beam size - 1)",
            },
            "api_key": {"type": "string", "description": "Needed when the server has keys"},
            "target_prefix": {
                **texts,
                "description": "Extra: each translation starts with this (one per text)",
            },
            "beam_size": {
                "type": "integer",
                "minimum": 1,
                "description": "Extra: beam size "
                "(another than the model's compiles a search on first use)",
            },
            "sampling_topk": {
                "type": "integer",
                "minimum": 0,
                "description": "Extra: sample from the K most probable tokens (needs beam_size 1)",
            },
            "sampling_topp": {"type": "number", "description": "Extra: nucleus sampling"},
            "sampling_temperature": {
                "type": "number",
                "description": "Extra: sampling temperature",
            },
            "seed": {"type": "integer", "minimum": 0, "description": "Extra: sampling seed"},
            "scores": {
                "type": "boolean",
                "default": False,
                "description": "Extra: return each translation's score",
            },
        },
    }
    candidate = {
        "type": "object",
        "properties": {"language": {"type": "string"}, "confidence": {"type": "number"}},
    }
    detect_request = {
        "type": "object",
        "required": ["q"],
        "properties": {
            "q": {
                **texts,
                "description": "Text to detect the language of (a list is read as one text)",
            },
            "api_key": request["properties"]["api_key"],
        },
    }
    response = {
        "type": "object",
        "required": ["translatedText"],
        "properties": {
            "translatedText": texts,
            "alternatives": {"type": "array", "items": {}},
            "scores": {
                "oneOf": [{"type": "number"}, {"type": "array", "items": {"type": "number"}}]
            },
            "alternativeScores": {"type": "array", "items": {}},
            "truncated": {
                "oneOf": [{"type": "boolean"}, {"type": "array", "items": {"type": "boolean"}}],
                "description": "Present when a line was longer than the model's "
                "longest source and was cut",
            },
            "detectedLanguage": {
                **candidate,
                "description": "With source 'auto': the source detected (among those with "
                "a model into the target) and its confidence (0 to 100)",
            },
        },
    }
    body = {"application/json": {"schema": request}}
    body["application/x-www-form-urlencoded"] = {"schema": request}
    body["multipart/form-data"] = {"schema": request}
    detect_body = {kind: {"schema": detect_request} for kind in body}
    language = {
        "type": "object",
        "properties": {
            "code": {"type": "string"},
            "name": {"type": "string"},
            "targets": {"type": "array", "items": {"type": "string"}},
        },
    }
    health = {
        "type": "object",
        "properties": {"status": {"type": "string"}, "models": {"type": "array", "items": {}}},
    }
    errors = {
        "400": _ERROR,
        "403": _ERROR,
        "413": _ERROR,
        "429": _ERROR,
        "500": _ERROR,
        "503": _ERROR,
    }
    languages = {"200": _json({"type": "array", "items": language})}
    file_form = {
        "type": "object",
        "required": ["file", "source", "target"],
        "properties": {
            "file": {
                "type": "string",
                "format": "binary",
                "description": "The file (its extension chooses the format: "
                "/frontend/settings lists them); at most "
                f"{settings.file_limit} bytes and {settings.char_limit or 'any number of'} "
                "characters of text",
            },
            "source": {"type": "string", "description": "Source language code, or 'auto'"},
            "target": {"type": "string", "description": "Target language code"},
            "api_key": {"type": "string", "description": "Needed when the server has keys"},
        },
    }
    file_answer = {
        "type": "object",
        "required": ["translatedFileUrl"],
        "properties": {
            "translatedFileUrl": {
                "type": "string",
                "description": "Where to download the translated file "
                f"(for {settings.file_ttl:g} seconds)",
            },
            "truncated": {
                "type": "boolean",
                "description": "Present when a line was longer than the model's longest "
                "source and was cut",
            },
        },
    }
    path_parameter = {"in": "path", "required": True, "schema": {"type": "string"}}
    # Each route's operation (the same for each of its methods), but its summary: the route
    # list's (`routes.ROUTES`), which also gives the paths and methods.
    operations = {
        "/translate": {
            "requestBody": {"required": True, "content": body},
            "responses": {"200": _json(response), **errors},
        },
        "/detect": {
            "requestBody": {"required": True, "content": detect_body},
            "responses": {"200": _json({"type": "array", "items": candidate}), **errors},
        },
        "/translate_file": {
            "requestBody": {
                "required": True,
                "content": {"multipart/form-data": {"schema": file_form}},
            },
            "responses": {"200": _json(file_answer), **errors},
        },
        "/download_file/{token}/{name}": {
            "parameters": [
                {"name": "token", **path_parameter},
                {"name": "name", **path_parameter},
            ],
            "responses": {
                "200": {
                    "description": "The file, as an attachment",
                    "content": {
                        "application/octet-stream": {
                            "schema": {"type": "string", "format": "binary"}
                        }
                    },
                },
                "404": _ERROR,
            },
        },
        "/languages": {"responses": languages},
        "/frontend/settings": {"responses": {"200": _json({"type": "object"})}},
        "/health": {"responses": _status(health)},
        "/health/ready": {"responses": _status(health)},
        "/health/live": {"responses": {"200": _json(health)}},
        "/metrics": {"responses": {"200": _text("text/plain")}},
        "/openapi.json": {"responses": {"200": _json({"type": "object"})}},
        "/spec": {"responses": {"200": _json({"type": "object"})}},
        "/": {"responses": {"200": _text("text/html")}},
    }
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "keras-transformer serve",
            "version": __version__,
            "description": "LibreTranslate's API over Transformer translators, with extras.",
        },
        "paths": {
            route.path: {
                method.lower(): {"summary": route.summary, **operations[route.path]}
                for method in route.methods
            }
            for route in ROUTES
        },
    }
