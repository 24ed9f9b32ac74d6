"""`keras-transformer serve`: the HTTP translation service (`keras_transformer.serving`,
LibreTranslate's API). Thin: the options become a `serving.Settings` and `ServedModel`s.

```
keras-transformer serve --model runs/bible
keras-transformer serve --model es:en=exported/es-en --model en:es=exported/en-es --port 8080
```
"""

import argparse
import ipaddress
import logging

from keras_transformer.cli.common import (
    add_common_arguments,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    print_error,
)
from keras_transformer.engines.names import ENGINES, WARMUPS

# The widest beam `--beam-sizes` takes: past it a search costs more than any quality it buys.
MAX_BEAM_SIZE = 64


def add_serve_parser(subparsers):
    """Registers the `serve` subcommand on an `argparse` subparsers object."""
    parser = subparsers.add_parser(
        "serve",
        help="serve translations over HTTP (LibreTranslate's API, a web page, metrics)",
        description=(
            "Serves translations over HTTP with LibreTranslate's API (POST /translate, POST "
            "/translate_file, GET /languages), a web page at /, Prometheus metrics at /metrics, health at /health "
            "and an OpenAPI description at /openapi.json. Concurrent requests are batched; "
            "the compiled shapes are warmed before /health/ready answers 200. SIGTERM drains: "
            "requests already accepted are answered, then the server exits with status 0."
        ),
    )
    parser.add_argument(
        "--model",
        required=True,
        action="append",
        metavar="[SOURCE:TARGET=]PATH",
        help="a model (any path `translate --model` opens, or a base path of numbered "
        "versions: the highest is served and a newer one is picked up without restart); "
        "SOURCE:TARGET= serves it for that language pair only. Repeat for several pairs",
    )
    parser.add_argument(
        "--engine", choices=ENGINES, default=None, help="the engine (default: from the files)"
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1, this machine only)",
    )
    parser.add_argument(
        "--port", type=non_negative_int, default=5000, help="port (default: 5000; 0: any free port)"
    )
    parser.add_argument(
        "--char-limit",
        type=non_negative_int,
        default=5000,
        help="most characters per request (413 beyond; 0: none; default: 5000)",
    )
    parser.add_argument(
        "--batch-limit",
        type=non_negative_int,
        default=64,
        help="most texts in one request's q list (400 beyond; 0: none; default: 64)",
    )
    parser.add_argument(
        "--body-limit",
        type=positive_int,
        default=1 << 20,
        help="most bytes of a request body, checked before it is read (413; default: 1048576)",
    )
    parser.add_argument(
        "--file-limit",
        type=non_negative_int,
        default=10 << 20,
        help="most bytes of a file sent to POST /translate_file (413 beyond; its text also "
        "counts against --char-limit); 0 turns file translation off (default: 10485760)",
    )
    parser.add_argument(
        "--file-ttl",
        type=positive_float,
        default=1800.0,
        help="seconds a translated file waits for its download before it is removed "
        "(default: 1800)",
    )
    parser.add_argument(
        "--req-limit",
        type=non_negative_int,
        default=0,
        help="requests per minute per client address, or per API key without a limit of its own "
        "(429 beyond; default: 0, none)",
    )
    parser.add_argument(
        "--api-keys",
        metavar="FILE",
        default=None,
        help="a file of API keys, one a line, each optionally followed by its requests per "
        "minute; /translate then needs one (403). Read again within a second of a change "
        "(keys revoked or added without a restart); a file that does not parse keeps the "
        "keys read before",
    )
    parser.add_argument(
        "--forwarded-allow-ips",
        type=forwarded_allow_ips,
        default=(),
        metavar="IPS",
        help="comma-separated addresses or networks of the reverse proxies whose "
        "X-Forwarded-For (the client, for --req-limit) and X-Forwarded-Proto are trusted, e.g. "
        "127.0.0.1 for a proxy on this machine; '*' trusts anyone (only where no client can "
        "reach the server but through the proxy). Default: none, the headers are ignored",
    )
    parser.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="an origin (https://app.example) whose web pages may call the API; '*' for any, "
        "as LibreTranslate allows. Repeat for several (default: none)",
    )
    parser.add_argument(
        "--timeout",
        type=positive_float,
        default=60.0,
        help="seconds a request may wait for its translation (503 beyond; default: 60)",
    )
    parser.add_argument(
        "--header-timeout",
        type=positive_float,
        default=10.0,
        help="seconds for a request's line and headers to arrive whole (408 and closed "
        "beyond; default: 10)",
    )
    parser.add_argument(
        "--body-timeout",
        type=positive_float,
        default=30.0,
        help="most seconds between two reads of a request body (408 and closed beyond; "
        "default: 30)",
    )
    parser.add_argument(
        "--max-connections",
        type=positive_int,
        default=1000,
        help="most open connections; a new one past it is answered 503 (default: 1000)",
    )
    parser.add_argument(
        "--max-batch-sentences",
        type=positive_int,
        default=None,
        help="most sentences merged into one engine call (default: 32)",
    )
    parser.add_argument(
        "--max-queue-sentences",
        type=positive_int,
        default=1024,
        help="most sentences waiting per model (503 beyond; default: 1024)",
    )
    parser.add_argument(
        "--engine-calls",
        type=non_negative_int,
        default=0,
        help="engine calls run at once per model, each by its own thread (default: 0, the "
        "model's: 2 for a compiled Keras search on 2 cores or more, else 1)",
    )
    parser.add_argument(
        "--batch-wait-ms",
        type=non_negative_float,
        default=0.0,
        help="milliseconds to wait for more requests before running a batch that is not full "
        "(default: 0: run at once; requests arriving meanwhile make the next batch)",
    )
    parser.add_argument(
        "--warmup",
        choices=WARMUPS,
        default="default",
        help="compile before ready: 'default' every shape of the default search, 'full' the "
        "target-prefix searches too, 'none' nothing (default: default)",
    )
    parser.add_argument(
        "--beam-sizes",
        type=_beam_sizes,
        default=(),
        metavar="N[,N...]",
        help="beam sizes a request's beam_size may ask for besides the model's own (always "
        "allowed), compiled at warm-up; any other is a 400 (default: the model's own only)",
    )
    parser.add_argument(
        "--sampling",
        action="store_true",
        help="allow sampling (sampling_topk, sampling_topp, sampling_temperature; compiled at "
        "warm-up; default: off, a request asking for it is a 400)",
    )
    parser.add_argument(
        "--no-segment",
        dest="segment",
        action="store_false",
        help="translate each line of a text whole instead of sentence by sentence, as before "
        "0.4: a line too long for the model is truncated (a request's `segment` field "
        "overrides it)",
    )
    parser.add_argument(
        "--poll-seconds",
        type=non_negative_float,
        default=5.0,
        help="how often a base path is checked for a newer version (default: 5; 0: never)",
    )
    add_common_arguments(parser, default=argparse.SUPPRESS)
    parser.set_defaults(handler=run_serve)
    return parser


def forwarded_allow_ips(text):
    """`--forwarded-allow-ips`: a tuple of IP addresses and networks (`10.0.0.0/8`), or
    `("*",)`; refuses anything else with the item named.

    Example:

    >>> forwarded_allow_ips("127.0.0.1, ::1,10.1.0.0/16")
    ('127.0.0.1', '::1', '10.1.0.0/16')
    """
    items = [item.strip() for item in text.split(",") if item.strip()]
    if items == ["*"]:
        return ("*",)
    trusted = []
    for item in items:
        try:
            if "/" in item:
                trusted.append(str(ipaddress.ip_network(item, strict=False)))
            else:
                trusted.append(str(ipaddress.ip_address(item)))
        except ValueError:
            raise argparse.ArgumentTypeError(
                "expected comma-separated IP addresses or networks (10.0.0.0/8), or '*'. "
                f"Received: {item[:100]!r}"
            ) from None
    if not trusted:
        raise argparse.ArgumentTypeError(
            f"expected at least one IP address or network. Received: {text[:100]!r}"
        )
    return tuple(trusted)


def run_serve(args):
    """Handler of `serve`: returns the exit status (0 after a drain, 2 when it cannot start)."""
    # Starlette, uvicorn and the engines' framework: only once the command runs.
    from keras_transformer.serving import (
        ApiKeys,
        SearchPolicy,
        ServedModel,
        ServeError,
        Settings,
        serve,
    )
    from keras_transformer.serving.models import check_specs, parse_model_spec

    try:
        specs = [parse_model_spec(text) for text in args.model]
        check_specs(specs)
        api_keys = ApiKeys.from_file(args.api_keys) if args.api_keys else None
    except ValueError as error:
        print_error(str(error))
        return 2
    _log_to_stderr()
    max_batch = args.max_batch_sentences or 32
    settings = Settings(
        char_limit=args.char_limit,
        batch_limit=args.batch_limit,
        body_limit=args.body_limit,
        timeout=args.timeout,
        req_limit=args.req_limit,
        api_keys=api_keys,
        max_batch_sentences=max_batch,
        max_queue_sentences=args.max_queue_sentences,
        batch_wait=args.batch_wait_ms / 1000,
        cors_origins=tuple(args.cors_origin),
        engine_calls=args.engine_calls,
        segment=args.segment,
        file_limit=args.file_limit,
        file_ttl=args.file_ttl,
        header_timeout=args.header_timeout,
        body_timeout=args.body_timeout,
        max_connections=args.max_connections,
        forwarded_allow_ips=args.forwarded_allow_ips,
    )
    policy = SearchPolicy(beam_sizes=args.beam_sizes, sampling=args.sampling)
    models = [
        ServedModel(spec, args.engine, max_batch, args.warmup, policy=policy) for spec in specs
    ]
    try:
        return serve(models, settings, args.host, args.port, args.poll_seconds)
    except ServeError as error:
        print_error(str(error))
        return 2


def _beam_sizes(text):
    """`--beam-sizes`: comma-separated ints from 1 to `MAX_BEAM_SIZE` (`argparse` type)."""
    sizes = []
    for part in text.split(","):
        try:
            size = int(part)
        except ValueError:
            size = 0
        if not 1 <= size <= MAX_BEAM_SIZE:
            raise argparse.ArgumentTypeError(
                f"must be ints from 1 to {MAX_BEAM_SIZE} separated by commas, got {text!r}"
            )
        sizes.append(size)
    return tuple(sorted(set(sizes)))


def _log_to_stderr():
    """The server's lines (the access log among them) on standard error, one per event;
    TensorFlow's notices that a warm-up traces many shapes (it does: one per shape) hidden."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger = logging.getLogger("keras_transformer.serving")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
