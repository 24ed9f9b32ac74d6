"""What a deployed server bounds: API keys and their request rates, the body size (checked
before the body is read), the sliding-window rate limiter behind both, and the connections
(`ConnectionLimits`: a time for a request's head and between the reads of its body, a cap on
open connections, and a bounded drain of a body refused before it was read).

API keys come from a text file, one key a line, optionally followed by its requests per
minute; `#` starts a comment:

```
# key                          requests per minute (optional: the server's --req-limit)
9f6e0c1d-team-a                 120
b7c2aa54-batch-jobs             0
```

`0` means no limit. Keys are compared by their SHA-256 digests, never logged. The file is
read again when it changes (`ApiKeys.refresh`, at most once a second): a key removed is refused
and a key added is accepted without a restart; a file that cannot be read or parsed, or that
reads as half-written, keeps the keys read before.

A client without a key is counted by its address: the address that connected, or with
trusted proxies (`Settings.forwarded_allow_ips`) the one the proxy names; an IPv6 client by
its /64 network (`client_key`), so that one host cannot take a new count per address.
"""

import collections
import hashlib
import ipaddress
import json
import logging
import os
import threading
import time

from starlette.requests import ClientDisconnect

from keras_transformer.serving.requests import ApiError

# Who is remembered by the rate limiter at most (the least recently seen forgotten first): a
# flood of new addresses costs bounded memory. The addresses are those that connected (a TCP
# handshake each: none can be made up), or those a trusted proxy names.
MAX_TRACKED_CLIENTS = 100_000
# The longest client name kept (a trusted proxy's header may name anything).
MAX_CLIENT_LENGTH = 100
# How often a key file is checked for a change (seconds; its size, times and inode).
KEY_FILE_CHECK_SECONDS = 1.0
# A key file that ends in the middle of a line, where the one read before ended each line, is
# taken only once its modification time is this many seconds old: until then it may be a file
# read while it was written.
KEY_FILE_SETTLE_SECONDS = 2.0
# A key: printable ASCII without spaces, up to this long.
MAX_KEY_LENGTH = 256
WINDOW_SECONDS = 60.0
# A connection closed while its client is still sending a body (a 413 answered from the
# headers) is drained first, as nginx's lingering close: the answer sent and the sending side
# shut, up to this many more bytes are read and discarded (never kept) for up to this many
# seconds, or until the client closes. Closed at once, a socket with unread bytes sends a
# reset, and a client that sends its whole body before reading (Python's urllib) saw the reset,
# not the answer.
DRAIN_BYTES = 8 << 20
DRAIN_SECONDS = 10.0
# Past the connection cap, a new connection is answered 503 at once and its request drained
# for this long (so that the client reads the answer); at most this many such connections at a
# time, the others are closed without an answer: the descriptors stay bounded under a flood.
REFUSED_DRAIN_SECONDS = 1.0
MAX_REFUSED_DRAINING = 128
LOG = logging.getLogger("keras_transformer.serving")


def _digest(key):
    return hashlib.sha256(key.encode("utf-8", errors="surrogatepass")).hexdigest()


class ApiKeys:
    """The API keys of a key file and each one's requests per minute (`None`: the server's
    default limit; `0`: none), read again when the file changes.

    Args:
        limits: dict `{key: requests per minute or None}`.
        path: str or `None`. The key file, for `refresh`. Defaults to `None` (no file).
        check_seconds: float. Least seconds between two looks at the file. Defaults to
            `KEY_FILE_CHECK_SECONDS`.
        clock: callable `() -> float` of seconds. Defaults to `time.monotonic`.
    """

    def __init__(self, limits, path=None, check_seconds=KEY_FILE_CHECK_SECONDS, clock=None):
        self._limits = {_digest(key): limit for key, limit in limits.items()}
        self.path = path
        self.check_seconds = check_seconds
        self._clock = clock or time.monotonic
        self._checked = self._clock()
        self._signature = None  # The file's (device, inode, size, mtime) when it was read,
        self._whole = True  # and whether its last line ended with a newline.
        self._refused = None  # The signature of a file that was not taken (logged once),
        self._unsettled = None  # and of one that ends mid-line, written just now.
        self.settle_seconds = KEY_FILE_SETTLE_SECONDS
        self._lock = threading.Lock()

    def __len__(self):
        return len(self._limits)

    @classmethod
    def from_file(cls, path, check_seconds=KEY_FILE_CHECK_SECONDS, clock=None):
        """Reads a key file (see the module docstring), watched by `refresh`. Raises `OSError`
        when it cannot be read and `ValueError` naming the line when a line is malformed or a
        key repeats."""
        limits, signature, whole = _read_key_file(path)
        keys = cls(limits, path=path, check_seconds=check_seconds, clock=clock)
        keys._signature, keys._whole = signature, whole
        return keys

    def refresh(self):
        """Reads the key file again if it changed (its device, inode, size or modification
        time) since it was read, looking at most once per `check_seconds`. The new keys
        replace the old ones at once, as a whole; a file that cannot be read or parsed, or
        holds no key, keeps the old keys until it changes, and is logged once. One that ends
        in the middle of a line where the one read before did not (maybe read while it was
        written) keeps the old keys until its modification time is `KEY_FILE_SETTLE_SECONDS`
        old.

        Returns:
            bool, whether the keys were replaced.
        """
        if self.path is None or self._clock() - self._checked < self.check_seconds:
            return False
        if not self._lock.acquire(blocking=False):
            return False  # Another thread is at it.
        try:
            self._checked = self._clock()
            signature = _signature(self.path)
            if signature in (self._signature, self._refused):
                return False
            try:
                limits, signature, whole = _read_key_file(self.path)
            except (OSError, ValueError) as error:  # UnicodeDecodeError is a ValueError.
                self._refused = signature
                LOG.warning(
                    "API keys: %s not read again, still using the %d keys read before: %s",
                    self.path,
                    len(self._limits),
                    " ".join(str(error).split())[:300],
                )
                return False
            if self._whole and not whole and time.time() - signature[3] / 1e9 < self.settle_seconds:
                # Its last line cut, and written just now: maybe still being written. Looked
                # at again at the next check; taken once it stays so for `settle_seconds`.
                if signature != self._unsettled:
                    self._unsettled = signature
                    LOG.warning(
                        "API keys: %s ends in the middle of a line (still being written?): "
                        "still using the %d keys read before for now",
                        self.path,
                        len(self._limits),
                    )
                return False
            old = self._limits
            new = {_digest(key): limit for key, limit in limits.items()}
            self._limits, self._signature, self._whole = new, signature, whole
            self._refused = None
            LOG.warning(
                "API keys: read %s again: %d keys (%d added, %d removed, %d limits changed)",
                self.path,
                len(new),
                len(new.keys() - old.keys()),
                len(old.keys() - new.keys()),
                sum(old[key] != new[key] for key in new.keys() & old.keys()),
            )
            return True
        finally:
            self._lock.release()

    def known(self, key):
        """Whether `key` (str or `None`) is a key of the file."""
        return isinstance(key, str) and _digest(key) in self._limits

    def limit(self, key, default):
        """The requests per minute of a known `key` (`default` where its line gives none)."""
        limit = self._limits.get(_digest(key))
        return default if limit is None else limit


def _signature(path):
    """`(device, inode, size, modification time in ns)` of `path`, or the error's name."""
    try:
        stat = os.stat(path)
    except OSError as error:
        return (type(error).__name__,)
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


def _read_key_file(path):
    """`(limits, signature, whole)` of a key file: `{key: requests per minute or None}`, the
    file's `_signature` when it was opened, and whether it ends with a newline (or is
    blank). Raises `OSError` or `ValueError` naming the line."""
    with open(path, encoding="utf-8") as file:
        stat = os.fstat(file.fileno())
        signature = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
        text = file.read()
    limits = {}
    for number, line in enumerate(text.split("\n"), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        where = f"{path}, line {number}"
        if len(fields) > 2:
            raise ValueError(
                f"{where}: expected `KEY [REQUESTS_PER_MINUTE]`, got {len(fields)} fields"
            )
        key = fields[0]
        if len(key) > MAX_KEY_LENGTH or not key.isascii() or not key.isprintable():
            raise ValueError(
                f"{where}: a key is printable ASCII of at most {MAX_KEY_LENGTH} characters"
            )
        if key in limits:
            raise ValueError(f"{where}: this key was given before")
        limit = None
        if len(fields) == 2:
            if not fields[1].isdigit():
                raise ValueError(
                    f"{where}: the requests per minute must be an int >= 0. "
                    f"Received: {fields[1][:40]!r}"
                )
            limit = int(fields[1])
        limits[key] = limit
    if not limits:
        raise ValueError(f"{path}: no API key in the file")
    return limits, signature, text.endswith("\n") or not text.strip()


def client_key(host):
    """The rate limiter's name of a client address: an IPv4 address (IPv4-mapped IPv6 too) as
    is, an IPv6 address by its /64 network (one host usually has a whole /64: per address, it
    could take any number of counts), anything else (a name a trusted proxy sent) cut to
    `MAX_CLIENT_LENGTH` characters.

    Example:

    >>> client_key("2001:db8::1"), client_key("::ffff:10.0.0.1")
    ('2001:db8::/64', '10.0.0.1')
    """
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return str(host)[:MAX_CLIENT_LENGTH]
    if address.version == 6:
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((int(address) >> 64 << 64, 64)))
    return str(address)


def admit(settings, limiter, client, api_key):
    """Checks a request's API key (when the server has keys: 403 without a known one) and its
    rate (429 past the key's or the server's requests per minute), for every route that
    translates.

    Args:
        settings: `settings.Settings`.
        limiter: `RateLimiter`.
        client: str. The client's address (`client_key` names it).
        api_key: str or `None`. The request's key.

    Raises:
        ApiError: 403 or 429.
    """
    limit = settings.req_limit
    client = client_key(client)
    if settings.api_keys is not None:
        settings.api_keys.refresh()  # Revoked and added keys count from the next request.
        if not api_key:
            raise ApiError(403, "Please contact the server operator to get an API key")
        if not settings.api_keys.known(api_key):
            raise ApiError(403, "Invalid API key")
        limit = settings.api_keys.limit(api_key, settings.req_limit)
        client = "key:" + _digest(api_key)
    if not limiter.allow(client, limit):
        raise ApiError(429, f"Slowdown: {limit} per 1 minute", headers={"Retry-After": "60"})


class RateLimiter:
    """Requests per minute per client (a key's digest or an address), in a sliding window.

    `allow(client, limit)` records a request and says whether it is within `limit` requests
    in the last 60 seconds (`limit` 0 or `None`: always).
    """

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._seen = collections.OrderedDict()  # client -> deque of request times
        self._lock = threading.Lock()

    def allow(self, client, limit):
        if not limit:
            return True
        now = self._clock()
        with self._lock:
            times = self._seen.pop(client, None) or collections.deque()
            self._seen[client] = times  # Most recent last.
            while times and times[0] <= now - WINDOW_SECONDS:
                times.popleft()
            while len(self._seen) > MAX_TRACKED_CLIENTS:
                self._seen.popitem(last=False)
            if len(times) >= limit:
                return False
            times.append(now)
            return True


class BodyLimit:
    """ASGI middleware: refuses a request body larger than `max_bytes` with 413, from its
    `Content-Length` before anything is read, or once the bytes received pass the bound (a
    chunked body), so that no oversized body is ever parsed or held whole. A body that never
    arrives whole (the client disconnected or timed out) is logged as 408, without the
    application's traceback.

    Args:
        app: the ASGI application.
        max_bytes: int. The bound of every path's bodies but those of `path_limits`.
        path_limits: dict `{path: bound}` or `None`: other bounds for some paths (an
            uploaded file's).
    """

    def __init__(self, app, max_bytes, path_limits=None):
        self.app = app
        self.max_bytes = max_bytes
        self.path_limits = dict(path_limits or {})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        max_bytes = self.path_limits.get(scope.get("path"), self.max_bytes)
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > max_bytes):
            await _too_large(send, max_bytes, declared.decode("latin-1")[:20])
            return
        received = 0
        started = gone = False

        async def counted_receive():
            nonlocal received, gone
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > max_bytes:
                    raise BodyTooLarge()
            elif message["type"] == "http.disconnect" and not started:
                gone = True
            return message

        async def tracked_send(message):
            nonlocal started
            if gone:
                return  # Nobody reads it (Starlette's 500 for the disconnect among others).
            started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except BodyTooLarge:
            if not started:
                await _too_large(send, max_bytes, f"more than {max_bytes}")
        except ClientDisconnect:
            if not gone:
                raise
            # The body never arrived whole: the client went away, or stopped sending
            # (`ConnectionLimits.body_timeout`). Logged as 408, not as the application's 500.
            await _error(send, 408, "The request body did not arrive whole")


class BodyTooLarge(Exception):
    """A streamed body passed the server's bound."""


async def _too_large(send, max_bytes, received):
    await _error(
        send, 413, f"Request body too large: at most {max_bytes} bytes. Received: {received} bytes"
    )


async def _error(send, status, message):
    body = json.dumps({"error": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class ConnectionLimits:
    """Mixin for uvicorn's HTTP/1.1 protocol (`class P(ConnectionLimits, H11Protocol)`, or
    `connection_limits(H11Protocol, ...)`): bounds what a client holds without finishing.

    - **Head**: a request's line and headers must arrive whole within `header_timeout` seconds
      of the connection (or of the first byte of a next request on a kept-alive one); else
      `408` (nothing when no byte came) and the connection is closed.
    - **Body**: at most `body_timeout` seconds between two reads of a body the application
      waits for; else `408` and closed (the application sees the client disconnect).
    - **Cap**: with `max_connections` open, a new connection is answered `503` (with
      `Retry-After`) before its request is read, and closed.
    - **Drain**: closing while the client still sends a body (a `413` answered from the
      headers), the answer is sent, the sending side shut, and up to `DRAIN_BYTES` of the body
      read and discarded within `DRAIN_SECONDS`, so that the client reads the answer instead
      of a reset. A body answered before it was read on a kept-alive connection (a `413` of
      a chunked body) is discarded as it comes up to the same `DRAIN_BYTES`, then closed.

    The protocol sees its transport through `_DrainingTransport`, whose `close()` drains.
    Times are measured by the event loop; nothing of a discarded body is kept.
    """

    header_timeout = 10.0
    body_timeout = 30.0
    max_connections = 1000
    drain_bytes = DRAIN_BYTES
    drain_seconds = DRAIN_SECONDS
    _refused_draining = 0  # Of this class's connections: past the cap, answered, draining.

    def connection_made(self, transport):
        self._raw_transport = transport
        self._timer = None
        self._timer_kind = None
        self._drained = None  # Bytes discarded once draining, else None.
        self._discarding, self._discarded = None, 0  # A body's rest after its answer.
        self._refused = None  # Past the cap: "draining" (answered 503) or "closed".
        if len(self.server_state.connections) >= self.max_connections:
            self._refuse(transport)
            return
        super().connection_made(_DrainingTransport(transport, self))
        self._arm("head", self.header_timeout)

    def data_received(self, data):
        if self._drained is not None:
            self._drained += len(data)
            if self._drained > self.drain_bytes:
                self._close_now()
            return
        super().data_received(data)
        if self._drained is not None or self._raw_transport.is_closing():
            return
        cycle = self.cycle
        if cycle is not None and cycle.response_complete and cycle.more_body:
            # Answered before its body was read (h11 discards the rest, keeping the
            # connection): a bounded rest, as a drain's.
            if self._discarding is not cycle:
                self._discarding, self._discarded = cycle, 0
            self._discarded += len(data)
            if self._discarded > self.drain_bytes:
                self._close_now()
                return
        if cycle is not None and not cycle.response_complete:
            if cycle.more_body:
                self._arm("body", self.body_timeout)  # From its last read.
            else:
                self._cancel()  # The application answers; its own time limit applies.
        elif self._timer_kind != "head":
            self._arm("head", self.header_timeout)  # A next request's first bytes.

    def connection_lost(self, exc):
        self._cancel()
        if self._refused:
            if self._refused == "draining":
                type(self)._refused_draining -= 1
            return
        super().connection_lost(exc)

    def send_400_response(self, msg):
        """uvicorn's answer to a request h11 cannot parse (a malformed line or header, a head
        larger than h11's bound), as `{"error": ...}` like every other error."""
        self._raw_transport.write(_answer(400, "Bad Request", msg))
        self.transport.close()

    def pause_writing(self):
        if not self._refused:
            super().pause_writing()

    def resume_writing(self):
        if not self._refused:
            super().resume_writing()

    def _close(self):
        """The protocol's `transport.close()`: drains first while the client sends a body."""
        cycle = self.cycle
        if (
            self._drained is None
            and cycle is not None
            and cycle.more_body
            and not cycle.disconnected
            and not self._raw_transport.is_closing()
        ):
            self._drain(self.drain_seconds)
        else:
            self._close_now()

    def _drain(self, seconds):
        transport = self._raw_transport
        self._drained = 0
        if transport.can_write_eof():
            transport.write_eof()  # After what is buffered: the client sees the answer end.
        flow = getattr(self, "flow", None)
        if flow is not None:
            flow.read_paused = False
        transport.resume_reading()
        self._arm("drain", seconds)

    def _close_now(self):
        self._cancel()
        self._raw_transport.close()

    def _refuse(self, transport):
        cls = type(self)
        if cls._refused_draining >= MAX_REFUSED_DRAINING:
            self._refused = "closed"
            transport.close()
            return
        self._refused = "draining"
        cls._refused_draining += 1
        transport.write(
            _answer(
                503,
                "Service Unavailable",
                f"Too many connections: at most {self.max_connections} at once. Try again later",
                retry_after=1,
            )
        )
        self._drain(REFUSED_DRAIN_SECONDS)

    def _arm(self, kind, seconds):
        self._cancel()
        self._timer_kind = kind
        self._timer = self.loop.call_later(seconds, self._timed_out, kind)

    def _cancel(self):
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._timer_kind = None

    def _timed_out(self, kind):
        self._timer = self._timer_kind = None
        if kind == "drain":
            self._close_now()
            return
        cycle = self.cycle
        in_body = cycle is not None and not cycle.response_complete and cycle.more_body
        if kind == "body":
            if not in_body:
                return
            if self.flow.read_paused:  # The application reads no faster: not the client's wait.
                self._arm("body", self.body_timeout)
                return
            if not cycle.response_started:  # (Then closed: the application sees a disconnect.)
                self._raw_transport.write(
                    _answer(
                        408, "Request Timeout", f"No byte of the body in {self.body_timeout:g} s"
                    )
                )
            LOG.debug("body timeout: closing the connection of %s", self.client)
        else:
            if cycle is not None and not cycle.response_complete:
                return  # A request came (pipelined); the watch re-arms on its reads.
            if _has_partial_request(self):
                self._raw_transport.write(
                    _answer(
                        408,
                        "Request Timeout",
                        f"The request's head did not arrive whole in {self.header_timeout:g} s",
                    )
                )
            LOG.debug("header timeout: closing the connection of %s", self.client)
        self._close_now()


class _DrainingTransport:
    """A transport as the protocol sees it: `close()` is the protocol's `_close` (which drains
    while the client sends a body) and the transport reads as closing once draining; the rest
    is the transport's."""

    def __init__(self, transport, protocol):
        self._transport = transport
        self._protocol = protocol

    def __getattr__(self, name):
        return getattr(self._transport, name)

    def close(self):
        self._protocol._close()

    def is_closing(self):
        return self._protocol._drained is not None or self._transport.is_closing()


def _has_partial_request(protocol):
    """Whether bytes of a next request were received (h11's buffer), not only a silence."""
    conn = getattr(protocol, "conn", None)
    return bool(conn is not None and conn.trailing_data[0])


def connection_limits(protocol_class, header_timeout, body_timeout, max_connections):
    """`protocol_class` (uvicorn's `H11Protocol`) with `ConnectionLimits` and these bounds."""
    for name, value in (("header_timeout", header_timeout), ("body_timeout", body_timeout)):
        if not value > 0:
            raise ValueError(f"{name} must be > 0 seconds. Received: {name}={value!r}")
    if not (isinstance(max_connections, int) and max_connections >= 1):
        raise ValueError(
            f"max_connections must be an int >= 1. Received: max_connections={max_connections!r}"
        )
    return type(
        f"Limited{protocol_class.__name__}",
        (ConnectionLimits, protocol_class),
        {
            "header_timeout": float(header_timeout),
            "body_timeout": float(body_timeout),
            "max_connections": max_connections,
            "_refused_draining": 0,
        },
    )


def _answer(status, reason, message, retry_after=None):
    """A whole HTTP/1.1 answer `{"error": message}` that closes the connection, as bytes."""
    body = json.dumps({"error": message}).encode()
    extra = f"retry-after: {retry_after}\r\n" if retry_after is not None else ""
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n{extra}connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body
