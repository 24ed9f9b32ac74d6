"""A `POST /translate` body, as LibreTranslate accepts it, read into a `TranslateRequest`
(and a `POST /detect` body into a `DetectRequest`).

LibreTranslate's fields: `q` (a string, or a list of strings), `source`, `target`, `format`
(`"text"`, or `"html"`: markup kept, text translated, `keras_transformer.documents.html`;
not with `alternatives` or `target_prefix`), `alternatives` (how many other translations to return),
`api_key`. This package's extra fields: `target_prefix` (a string per text: each translation
starts with it), `beam_size`, `sampling_topk`, `sampling_topp`, `sampling_temperature`,
`seed`, `scores` (return each translation's score) and `segment` (`false`: translate each
line whole instead of sentence by sentence). A JSON body gives them typed; a form
body (`application/x-www-form-urlencoded` or `multipart/form-data`, what LibreTranslate's
clients send) gives strings, read as the same types; `q` may repeat in a form.

A text is cut into sentences (`keras_transformer.documents.segmentation`), a sentence too long
for the model further, and the translation keeps the text's layout: paragraph and line breaks
and the whitespace between sentences come back where they were.
"""

import dataclasses
import math

from keras_transformer.translation import SearchOptions


class ApiError(Exception):
    """An error answered as `{"error": message}` with an HTTP status."""

    def __init__(self, status, message, headers=None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


@dataclasses.dataclass
class TranslateRequest:
    """A checked `/translate` request.

    Attributes:
        texts: list of str. The texts (`q`, one for a single string).
        single: bool. `q` was a string (the answer then holds strings, not lists).
        source, target: str. Language codes (`"auto"` allowed as source).
        alternatives: int. Other translations per text (LibreTranslate's `alternatives`).
        api_key: str or `None`.
        prefixes: list of str (one per text) or `None`.
        options: `SearchOptions`.
        scores: bool. Return the scores.
        segment: bool or `None`. Cut texts into sentences (`None`: the server's setting).
        text_format: str. `"text"` or `"html"` (LibreTranslate's `format`).
    """

    texts: list
    single: bool
    source: str
    target: str
    alternatives: int = 0
    api_key: str = None
    prefixes: list = None
    options: SearchOptions = dataclasses.field(default_factory=SearchOptions)
    scores: bool = False
    segment: bool = None
    text_format: str = "text"

    @property
    def characters(self):
        return sum(len(text) for text in self.texts)


def _short(value, limit=60):
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _string(fields, name, required=True):
    value = fields.get(name)
    if value is None or value == "":
        if required:
            raise ApiError(400, f"Invalid request: missing {name} parameter")
        return None
    if not isinstance(value, str):
        raise ApiError(400, f"Invalid request: {name} must be a string. Received: {_short(value)}")
    return value


# The largest int a numeric field takes (a seed below 2**31, as the engines'; beam sizes and
# counts are bounded further by what the server allows): past it, a 400, not an overflow.
MAX_INT = 2**31 - 1


def _number(fields, name, kind, minimum=None):
    """An int or float field (a form's string read as one), or `None` when absent. Any value
    a client sends is checked without overflow (a 400-digit integer is a 400 naming it,
    shortened)."""
    value = fields.get(name)
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = int(value) if kind is int else float(value)
        except ValueError:
            raise ApiError(
                400, f"Invalid request: {name} must be a number. Received: {_short(value)}"
            ) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ApiError(400, f"Invalid request: {name} must be a number. Received: {_short(value)}")
    if isinstance(value, int):
        if not -MAX_INT <= value <= MAX_INT:
            raise ApiError(
                400,
                f"Invalid request: {name} must be at most {MAX_INT} in size. Received: "
                + _short(str(value)),
            )
        value = float(value) if kind is float else value
    elif not math.isfinite(value):
        raise ApiError(
            400, f"Invalid request: {name} must be a finite number. Received: {_short(value)}"
        )
    elif kind is int:
        if not value.is_integer():
            raise ApiError(
                400, f"Invalid request: {name} must be an integer. Received: {_short(value)}"
            )
        if abs(value) > MAX_INT:
            raise ApiError(
                400,
                f"Invalid request: {name} must be at most {MAX_INT} in size. Received: {value}",
            )
        value = int(value)
    if minimum is not None and value < minimum:
        raise ApiError(
            400, f"Invalid request: {name} must be a finite number >= {minimum}. Received: {value}"
        )
    return value


def _boolean(fields, name):
    value = fields.get(name)
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "1", "false", "0", ""):
        return value.lower() in ("true", "1")
    raise ApiError(400, f"Invalid request: {name} must be true or false. Received: {_short(value)}")


def _texts(value, name):
    """`(list of str, single)` of `q` or `target_prefix`."""
    if isinstance(value, str):
        return [value], True
    if isinstance(value, list) and all(isinstance(text, str) for text in value):
        return list(value), False
    raise ApiError(
        400,
        f"Invalid request: {name} must be a string or a list of strings. Received: {_short(value)}",
    )


def _api_key(fields):
    api_key = fields.get("api_key")
    if api_key is not None and not isinstance(api_key, str):
        raise ApiError(
            400, f"Invalid request: api_key must be a string. Received: {_short(api_key)}"
        )
    return api_key


def _check_object(fields):
    if not isinstance(fields, dict):
        raise ApiError(
            400, f"Invalid request: the body must be a JSON object. Received: {_short(fields)}"
        )


def _q(fields, batch_limit):
    """`(texts, single)` of `q`, checked."""
    if fields.get("q") is None:
        raise ApiError(400, "Invalid request: missing q parameter")
    texts, single = _texts(fields["q"], "q")
    if not texts:
        raise ApiError(400, "Invalid request: q must hold at least one text")
    if batch_limit and len(texts) > batch_limit:
        raise ApiError(
            400, f"Invalid request: request ({len(texts)}) exceeds text limit ({batch_limit})"
        )
    return texts, single


@dataclasses.dataclass
class DetectRequest:
    """A checked `/detect` request: `q` (a string, or a list of strings detected as one text)
    and `api_key`.

    Attributes:
        texts: list of str. The texts (`q`, one for a single string).
        api_key: str or `None`.
    """

    texts: list
    api_key: str = None

    @property
    def characters(self):
        return sum(len(text) for text in self.texts)


def parse_detect(fields, batch_limit=None):
    """The `DetectRequest` of a body's fields (LibreTranslate's `q` and `api_key`).

    Raises:
        ApiError: 400 naming the field and the value received (a blank `q` included).
    """
    _check_object(fields)
    texts, _ = _q(fields, batch_limit)
    if not any(text.strip() for text in texts):
        raise ApiError(
            400, f"Invalid request: q must hold a text that is not blank. Received: {_short(texts)}"
        )
    return DetectRequest(texts=texts, api_key=_api_key(fields))


def parse_translate(fields, batch_limit=None):
    """The `TranslateRequest` of a body's fields (a dict; a form's repeated `q` as a list).

    Raises:
        ApiError: 400 naming the field and the value received.
    """
    _check_object(fields)
    texts, single = _q(fields, batch_limit)
    source = _string(fields, "source")
    target = _string(fields, "target")
    text_format = _string(fields, "format", required=False) or "text"
    if text_format not in ("text", "html"):
        raise ApiError(
            400,
            f"Invalid request: format must be 'text' or 'html'. Received: {_short(text_format)}",
        )
    api_key = _api_key(fields)
    alternatives = _number(fields, "alternatives", int, minimum=0) or 0
    prefixes = None
    if fields.get("target_prefix") not in (None, ""):
        prefixes, single_prefix = _texts(fields["target_prefix"], "target_prefix")
        if single_prefix != single or len(prefixes) != len(texts):
            raise ApiError(
                400,
                "Invalid request: target_prefix must be a string for a string q and a list of "
                f"as many strings for a list. Received: {len(prefixes)} prefixes for "
                f"{len(texts)} texts",
            )
    if text_format == "html" and (alternatives or prefixes is not None):
        raise ApiError(
            400,
            "Invalid request: format 'html' translates the markup's texts with the best "
            "translation only: no alternatives or target_prefix. Received: "
            f"alternatives={alternatives}, target_prefix "
            + ("given" if prefixes is not None else "none"),
        )
    sampling = {
        "sampling_topk": _number(fields, "sampling_topk", int, minimum=0),
        "sampling_topp": _number(fields, "sampling_topp", float),
        "sampling_temperature": _number(fields, "sampling_temperature", float),
    }
    options = SearchOptions(
        beam_size=_number(fields, "beam_size", int, minimum=1),
        num_hypotheses=alternatives + 1 if alternatives else None,
        seed=_number(fields, "seed", int, minimum=0) or 0,
        prefixed=prefixes is not None,
        **sampling,
    )
    return TranslateRequest(
        texts=texts,
        single=single,
        source=source,
        target=target,
        alternatives=alternatives,
        api_key=api_key,
        prefixes=prefixes,
        options=options,
        scores=_boolean(fields, "scores"),
        segment=_boolean(fields, "segment") if fields.get("segment") is not None else None,
        text_format=text_format,
    )
