"""Running the server: bind, open the models, serve while they warm, watch for new versions,
drain on SIGTERM.

The socket is bound before anything loads (a taken port fails in a second), the models are
opened before it serves (a model that cannot be opened fails at once), and the warm-up runs
while the server already answers `/health/live` (and 503 on `/health/ready` and
`/translate`). On SIGTERM or SIGINT the server stops accepting connections and reports
`draining`; requests already accepted are answered, then the process exits with status 0.

Connections are uvicorn's h11 protocol with `limits.ConnectionLimits` (a time for a request's
head and between the reads of its body, a cap on open connections, a drained close), and the
process may open enough files for the cap (its soft limit is raised up to the hard one).
"""

import logging
import socket
import sys
import threading
import time

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from keras_transformer.serving.app import ServerState, create_app
from keras_transformer.serving.limits import MAX_REFUSED_DRAINING, connection_limits

LOG = logging.getLogger("keras_transformer.serving")
# Files the process opens besides its connections (models, the framework's threads and
# libraries, the listening socket, logs).
RESERVED_FILES = 256


class ServeError(Exception):
    """The server cannot start (the port, a model): one line for the user."""


def bind(host, port):
    """A listening TCP socket on `host:port` (`port` 0: any free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP spelled out: asyncio sets TCP_NODELAY on the accepted connections only for
    # such a socket. With protocol 0, Nagle's algorithm held each answer until the client's
    # delayed acknowledgement: about 40 ms per request (GET /health/live 44 ms -> 0.5 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as error:
        sock.close()
        raise ServeError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server, with a drain that ends with status 0: on SIGTERM or SIGINT the state
    turns to `draining` (readiness 503) and uvicorn's graceful shutdown answers the requests
    already accepted; the signal is not raised again afterwards (uvicorn re-raises it, which
    would end the process with the signal's status)."""

    def __init__(self, config, state):
        super().__init__(config)
        self.state = state

    def handle_exit(self, sig, frame):
        if self.state.status != "draining":
            LOG.warning("draining: answering the requests accepted, then exiting")
        self.state.set_status("draining")
        super().handle_exit(sig, frame)
        self._captured_signals.clear()


def uvicorn_config(app, settings):
    """uvicorn's configuration of the server of `app` (ASGI) with `settings` (`settings.Settings`):
    its h11 protocol with `limits.ConnectionLimits`, no lifespan, no uvicorn access log, and
    `X-Forwarded-For` honoured from `settings.forwarded_allow_ips` only (uvicorn trusts
    127.0.0.1 by default, which let any local process, or a proxy passing the header through,
    pick its own `--req-limit` bucket)."""
    trusted = list(settings.forwarded_allow_ips)
    return uvicorn.Config(
        app,
        # h11 (uvicorn's own), not httptools even where installed: the limits are written for it.
        http=connection_limits(
            H11Protocol, settings.header_timeout, settings.body_timeout, settings.max_connections
        ),
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=settings.timeout + 30,
        timeout_keep_alive=5,
        proxy_headers=bool(trusted),
        forwarded_allow_ips=trusted,  # Not None: uvicorn would read $FORWARDED_ALLOW_IPS.
    )


def serve(models, settings, host="127.0.0.1", port=5000, poll_seconds=5.0, log=None):
    """Serves `models` until SIGTERM/SIGINT; returns the exit status (0).

    Args:
        models: list of `models.ServedModel`, not yet loaded.
        settings: `settings.Settings`.
        host: str. Defaults to `"127.0.0.1"` (this machine only).
        port: int. `0` picks a free port. Defaults to `5000`.
        poll_seconds: float. How often a base path of numbered versions is checked for a
            newer one; `0`: never. Defaults to `5.0`.
        log: callable `(str)` for the server's own lines. Defaults to `None`: standard error.

    Raises:
        ServeError: the port cannot be bound or a model cannot be opened.
    """
    log = log or _stderr
    sock = bind(host, port)
    host_name, bound_port = sock.getsockname()[:2]
    for model in models:
        started = time.perf_counter()
        try:
            model.load()
        except Exception as error:  # Any load failure: one line, exit 2.
            sock.close()
            message = " ".join(str(error).split())[:1000]
            raise ServeError(
                f"cannot open the model {model.spec.path!r}: {type(error).__name__}: {message}"
            ) from None
        version = "" if model.version is None else f", version {model.version}"
        log(
            f"model {model.spec.name}: {model.directory}{version} "
            f"({type(model.engine).__name__}, {time.perf_counter() - started:.1f} s)"
        )
    _open_files_for(settings.max_connections + MAX_REFUSED_DRAINING + RESERVED_FILES, log)
    state = ServerState(models, settings, log=log)
    server = _Server(uvicorn_config(create_app(state), settings), state)
    stop = threading.Event()
    url = f"http://{'[' + host_name + ']' if ':' in host_name else host_name}:{bound_port}"
    log(f"listening on {url} (warming up; /health/ready answers 200 once ready)")
    threading.Thread(target=_warm, args=(state, log, url), daemon=True, name="warm-up").start()
    if poll_seconds and any(model.version is not None for model in models):
        watch = threading.Thread(
            target=_watch, args=(state, poll_seconds, stop), daemon=True, name="versions"
        )
        watch.start()
    try:
        server.run(sockets=[sock])
    finally:
        stop.set()
        state.set_status("draining")
        state.close(timeout=settings.timeout + 30)
        sock.close()
    log("stopped")
    return 0


def _open_files_for(needed, log):
    """Raises the soft limit of open files to `needed` (at most the hard limit), or says
    that the connection cap may not be reached."""
    try:
        import resource  # Unix only.
    except ImportError:
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    wanted = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (ValueError, OSError):
        wanted = soft
    if wanted < needed:
        log(
            f"open files limited to {wanted} (ulimit -n): the connection cap wants {needed}; "
            "raise the limit or lower --max-connections"
        )


def _warm(state, log, url):
    try:
        for model in state.models:
            started = time.perf_counter()
            calls = model.warm_up()
            later = "" if model.warm_sentences is None else "; larger batches in the background"
            log(
                f"model {model.spec.name}: warm ({calls} warm-up calls, "
                f"{time.perf_counter() - started:.1f} s{later})"
            )
    except Exception as error:  # The server stays up and not ready; /health says so.
        LOG.exception("warm-up failed")
        state.set_status(f"failed to warm up: {type(error).__name__}")
        return
    if state.status == "warming":
        state.set_status("ready")
        log(f"ready: {url}")
    for model in state.models:  # `--background-warmup`: the larger batches, while serving.
        if model.warm_sentences is None:
            continue
        started = time.perf_counter()
        try:
            calls = model.warm_rest(log)
        except Exception:  # Served as it is: batches of the sizes warm, as now.
            LOG.exception("background warm-up failed")
            continue
        log(
            f"model {model.spec.name}: warm for every batch ({calls} background warm-up "
            f"calls, {time.perf_counter() - started:.1f} s)"
        )


def _watch(state, poll_seconds, stop):
    while not stop.wait(poll_seconds):
        if state.status == "draining":
            return
        for model in state.models:
            try:
                updated = model.update()
            except Exception:  # The watch outlives a base path that cannot be read this once.
                LOG.exception("%s: checking for a newer version failed", model.spec.name)
                continue
            if updated is not None:
                state.metrics.version.labels(model.spec.name).set(model.version)


def _stderr(line):
    print(f"keras-transformer serve: {line}", file=sys.stderr, flush=True)
