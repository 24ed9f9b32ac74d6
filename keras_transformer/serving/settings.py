"""The serve settings, each spelled once: its default and its help in `OPTIONS`, which the
command line (`keras_transformer.cli.serve`, argparse) and the server (`Settings`,
`ServedModel`, `Batcher`) both read. Framework-free: the command line imports it at module top.

A help text shows its default as `%(default)s` (filled by the command line), so the number is
written only here.
"""

import dataclasses
import typing

from keras_transformer.engines import compilation
from keras_transformer.engines.names import DEFAULT_WARMUP


class Option(typing.NamedTuple):
    """One serve setting: its default and the command line's help for it."""

    default: object
    help: str


OPTIONS = {
    "host": Option("127.0.0.1", "address to listen on (default: %(default)s, this machine only)"),
    "port": Option(5000, "port (default: %(default)s; 0: any free port)"),
    "char_limit": Option(
        5000, "most characters per request (413 beyond; 0: none; default: %(default)s)"
    ),
    "batch_limit": Option(
        64, "most texts in one request's q list (400 beyond; 0: none; default: %(default)s)"
    ),
    "body_limit": Option(
        1 << 20,
        "most bytes of a request body, checked before it is read (413; default: %(default)s)",
    ),
    "file_limit": Option(
        10 << 20,
        "most bytes of a file sent to POST /translate_file (413 beyond; its text also counts "
        "against --char-limit); 0 turns file translation off (default: %(default)s)",
    ),
    "file_ttl": Option(
        1800.0,
        "seconds a translated file waits for its download before it is removed "
        "(default: %(default)s)",
    ),
    "req_limit": Option(
        0,
        "requests per minute per client address, or per API key without a limit of its own "
        "(429 beyond; default: %(default)s, none)",
    ),
    "api_keys": Option(
        None,
        "a file of API keys, one a line, each optionally followed by its requests per minute; "
        "/translate then needs one (403). Read again within a second of a change (keys "
        "revoked or added without a restart); a file that does not parse keeps the keys read "
        "before",
    ),
    "forwarded_allow_ips": Option(
        (),
        "comma-separated addresses or networks of the reverse proxies whose X-Forwarded-For "
        "(the client, for --req-limit) and X-Forwarded-Proto are trusted, e.g. 127.0.0.1 for a "
        "proxy on this machine; '*' trusts anyone (only where no client can reach the server "
        "but through the proxy). Default: none, the headers are ignored",
    ),
    "cors_origins": Option(
        (),
        "an origin (https://app.example) whose web pages may call the API; '*' for any, as "
        "LibreTranslate allows. Repeat for several (default: none)",
    ),
    "timeout": Option(
        60.0, "seconds a request may wait for its translation (503 beyond; default: %(default)s)"
    ),
    "header_timeout": Option(
        10.0,
        "seconds for a request's line and headers to arrive whole (408 and closed beyond; "
        "default: %(default)s)",
    ),
    "body_timeout": Option(
        30.0,
        "most seconds between two reads of a request body (408 and closed beyond; "
        "default: %(default)s)",
    ),
    "max_connections": Option(
        1000,
        "most open connections; a new one past it is answered 503 (default: %(default)s)",
    ),
    "max_batch_sentences": Option(
        32, "most sentences merged into one engine call (default: %(default)s)"
    ),
    "max_queue_sentences": Option(
        1024, "most sentences waiting per model (503 beyond; default: %(default)s)"
    ),
    "engine_calls": Option(
        0,
        "engine calls run at once per model, each by its own thread (default: %(default)s, "
        "the model's: 2 for a compiled Keras search on 2 cores or more, else 1)",
    ),
    # Seconds in `Settings`; the command line takes milliseconds (`--batch-wait-ms`).
    "batch_wait": Option(
        0.0,
        "milliseconds to wait for more requests before running a batch that is not full "
        "(default: %(default)s: run at once; requests arriving meanwhile make the next batch)",
    ),
    # Seconds in `Settings`; the command line takes milliseconds (`--announced-wait-ms`).
    "announced_wait": Option(
        0.0,
        "milliseconds a free engine thread waits for the requests still being cut into "
        "sentences before it runs a batch that is not full: fewer, fuller engine calls "
        "under load, never a wait for a lone request; pays on tiny models only "
        "(docs/serving.md; default: %(default)s, run at once)",
    ),
    "warmup": Option(
        DEFAULT_WARMUP,
        "compile before ready: 'default' every shape of the default search, 'full' the "
        "target-prefix searches too, 'none' nothing (default: %(default)s)",
    ),
    "background_warmup": Option(
        False,
        "answer ready once every search is warm for one sentence per call (each source "
        "bucket), and compile the larger batches afterwards while serving, in batches of "
        "the sizes already warm: ready in seconds instead of minutes (docs/serving.md)",
    ),
    "segment": Option(
        True,
        "translate each line of a text whole instead of sentence by sentence, as before 0.4: "
        "a line too long for the model is truncated (a request's `segment` field overrides it)",
    ),
    "compilation_cache": Option(compilation.DEFAULT, compilation.HELP),
    "poll_seconds": Option(
        5.0, "how often a base path is checked for a newer version (default: %(default)s; 0: never)"
    ),
}
# Most sentences merged into one engine call, unless the server is told otherwise.
DEFAULT_BATCH_SENTENCES = OPTIONS["max_batch_sentences"].default
DEFAULT_ANNOUNCED_WAIT = OPTIONS["announced_wait"].default


def _default(name):
    return dataclasses.field(default=OPTIONS[name].default)


@dataclasses.dataclass
class Settings:
    """The limits of a server (the command's options); each default is `OPTIONS`'.

    Attributes:
        char_limit: int. Most characters of all texts of one request (413 beyond); `0`: none.
        batch_limit: int. Most texts in one request's `q` list (400 beyond); `0`: none.
        body_limit: int. Most bytes of a request body (413, checked before it is read).
        timeout: float. Seconds a request may wait for its translation (503 beyond).
        req_limit: int. Requests per minute per client address, or per key without a limit
            of its own (429 beyond); `0`: none.
        api_keys: `limits.ApiKeys` or `None`. When given, `/translate` and `/detect` need
            one (403).
        max_batch_sentences: int. Most sentences merged into one engine call.
        max_queue_sentences: int. Most sentences waiting per model (503 beyond).
        batch_wait: float. Seconds to wait for more requests before a batch that is not full.
        announced_wait: float. Seconds a free engine thread waits for the requests being cut
            into sentences (`batching.Batcher.announce`) before a batch that is not full.
        cors_origins: tuple of str. Origins whose pages may call the API from a browser
            (`"*"`: any, as LibreTranslate allows); empty: none (same origin only).
        engine_calls: int. Engine calls run at once per model; `0`: the model's
            (`models.ServedModel.concurrent_calls`).
        segment: bool. Cut each text into sentences before translating (a request's
            `segment` field overrides it); `False`: each line whole, as before 0.4.
        file_limit: int. Most bytes of a file sent to `/translate_file` (413 beyond); `0`:
            file translation off (403).
        file_ttl: float. Seconds a translated file waits for its download.
        header_timeout: float. Seconds for a request's line and headers to arrive whole,
            from the connection or a next request's first byte (408 and closed beyond).
        body_timeout: float. Most seconds between two reads of a request body (408 and
            closed beyond).
        max_connections: int. Most open connections; a new one past it is answered 503.
        forwarded_allow_ips: tuple of str. The proxies (addresses, networks, `"*"`) whose
            `X-Forwarded-For` and `X-Forwarded-Proto` headers name the client and scheme
            (uvicorn's `forwarded_allow_ips`); empty: none, the headers are ignored and a
            client is the address that connected.
    """

    char_limit: int = _default("char_limit")
    batch_limit: int = _default("batch_limit")
    body_limit: int = _default("body_limit")
    timeout: float = _default("timeout")
    req_limit: int = _default("req_limit")
    api_keys: object = _default("api_keys")
    max_batch_sentences: int = _default("max_batch_sentences")
    max_queue_sentences: int = _default("max_queue_sentences")
    batch_wait: float = _default("batch_wait")
    announced_wait: float = _default("announced_wait")
    cors_origins: tuple = _default("cors_origins")
    engine_calls: int = _default("engine_calls")
    segment: bool = _default("segment")
    file_limit: int = _default("file_limit")
    file_ttl: float = _default("file_ttl")
    header_timeout: float = _default("header_timeout")
    body_timeout: float = _default("body_timeout")
    max_connections: int = _default("max_connections")
    forwarded_allow_ips: tuple = _default("forwarded_allow_ips")
