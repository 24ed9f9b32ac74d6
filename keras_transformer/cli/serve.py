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

from keras_transformer import serving
from keras_transformer.cli.common import (
    add_common_arguments,
    add_compilation_cache_argument,
    non_negative_float,
    non_negative_int,
    open_compilation_cache,
    positive_float,
    positive_int,
    print_error,
)
from keras_transformer.engines.names import ENGINES, WARMUPS
from keras_transformer.serving.settings import OPTIONS, Settings

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
    parser.add_argument("--host", **_option("host"))
    parser.add_argument("--port", type=non_negative_int, **_option("port"))
    parser.add_argument("--char-limit", type=non_negative_int, **_option("char_limit"))
    parser.add_argument("--batch-limit", type=non_negative_int, **_option("batch_limit"))
    parser.add_argument("--body-limit", type=positive_int, **_option("body_limit"))
    parser.add_argument("--file-limit", type=non_negative_int, **_option("file_limit"))
    parser.add_argument("--file-ttl", type=positive_float, **_option("file_ttl"))
    parser.add_argument("--req-limit", type=non_negative_int, **_option("req_limit"))
    parser.add_argument("--api-keys", metavar="FILE", **_option("api_keys"))
    parser.add_argument(
        "--forwarded-allow-ips",
        type=forwarded_allow_ips,
        metavar="IPS",
        **_option("forwarded_allow_ips"),
    )
    # `append` adds to a copy of its default: a list.
    cors_origins = _option("cors_origins")
    cors_origins["default"] = list(cors_origins["default"])
    parser.add_argument("--cors-origin", action="append", metavar="ORIGIN", **cors_origins)
    parser.add_argument("--timeout", type=positive_float, **_option("timeout"))
    parser.add_argument("--header-timeout", type=positive_float, **_option("header_timeout"))
    parser.add_argument("--body-timeout", type=positive_float, **_option("body_timeout"))
    parser.add_argument("--max-connections", type=positive_int, **_option("max_connections"))
    parser.add_argument(
        "--max-batch-sentences", type=positive_int, **_option("max_batch_sentences")
    )
    parser.add_argument(
        "--max-queue-sentences", type=positive_int, **_option("max_queue_sentences")
    )
    parser.add_argument("--engine-calls", type=non_negative_int, **_option("engine_calls"))
    parser.add_argument("--batch-wait-ms", type=non_negative_float, **_option("batch_wait", 1000))
    parser.add_argument(
        "--announced-wait-ms", type=non_negative_float, **_option("announced_wait", 1000)
    )
    parser.add_argument("--warmup", choices=WARMUPS, **_option("warmup"))
    parser.add_argument("--background-warmup", action="store_true", **_option("background_warmup"))
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
        "--no-segment", dest="segment", action="store_false", **_option("segment")
    )
    parser.add_argument("--poll-seconds", type=non_negative_float, **_option("poll_seconds"))
    add_compilation_cache_argument(parser, **_option("compilation_cache"))
    add_common_arguments(parser, default=argparse.SUPPRESS)
    parser.set_defaults(handler=run_serve)
    return parser


def _option(name, scale=None):
    """`default` and `help` of the serve setting `name` (`serving.settings.OPTIONS`), the
    default times `scale` if given (a unit of the flag's own), shown as `%g` for a float."""
    default = OPTIONS[name].default
    if scale is not None:
        default *= scale
    shown = format(default, "g") if isinstance(default, float) else str(default)
    return {"default": default, "help": OPTIONS[name].help.replace("%(default)s", shown)}


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
    # `serving`'s names load on first use: Starlette, uvicorn and the engines' framework only
    # once the command runs.

    try:
        specs = [serving.parse_model_spec(text) for text in args.model]
        serving.check_specs(specs)
        api_keys = serving.ApiKeys.from_file(args.api_keys) if args.api_keys else None
    except ValueError as error:
        print_error(str(error))
        return 2
    if not open_compilation_cache(args.compilation_cache):
        return 2
    _log_to_stderr()
    max_batch = args.max_batch_sentences
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
        announced_wait=args.announced_wait_ms / 1000,
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
    policy = serving.SearchPolicy(beam_sizes=args.beam_sizes, sampling=args.sampling)
    models = [
        serving.ServedModel(
            spec,
            args.engine,
            max_batch,
            args.warmup,
            policy=policy,
            background_warmup=args.background_warmup,
        )
        for spec in specs
    ]
    try:
        return serving.serve(models, settings, args.host, args.port, args.poll_seconds)
    except serving.ServeError as error:
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
