"""What a deployed server bounds: API keys and their request rates, the body size (checked
before the body is read), and the sliding-window rate limiter behind both.

API keys come from a text file, one key a line, optionally followed by its requests per
minute; `#` starts a comment:

```
# key                          requests per minute (optional: the server's --req-limit)
9f6e0c1d-team-a                 120
b7c2aa54-batch-jobs             0
```

`0` means no limit. Keys are compared by their SHA-256 digests, never logged.
"""

import collections
import hashlib
import json
import threading
import time

from keras_transformer.serving.requests import ApiError

# Who is remembered by the rate limiter at most (oldest forgotten first): a flood of new
# addresses costs bounded memory.
MAX_TRACKED_CLIENTS = 100_000
# A key: printable ASCII without spaces, up to this long.
MAX_KEY_LENGTH = 256
WINDOW_SECONDS = 60.0


def _digest(key):
    return hashlib.sha256(key.encode("utf-8", errors="surrogatepass")).hexdigest()


class ApiKeys:
    """The API keys of a key file and each one's requests per minute (`None`: the server's
    default limit; `0`: none).

    Args:
        limits: dict `{key: requests per minute or None}`.
    """

    def __init__(self, limits):
        self._limits = {_digest(key): limit for key, limit in limits.items()}

    def __len__(self):
        return len(self._limits)

    @classmethod
    def from_file(cls, path):
        """Reads a key file (see the module docstring). Raises `OSError` when it cannot be
        read and `ValueError` naming the line when a line is malformed or a key repeats."""
        limits = {}
        with open(path, encoding="utf-8") as file:
            for number, line in enumerate(file, 1):
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
        return cls(limits)

    def known(self, key):
        """Whether `key` (str or `None`) is a key of the file."""
        return isinstance(key, str) and _digest(key) in self._limits

    def limit(self, key, default):
        """The requests per minute of a known `key` (`default` where its line gives none)."""
        limit = self._limits[_digest(key)]
        return default if limit is None else limit


def admit(settings, limiter, client, api_key):
    """Checks a request's API key (when the server has keys: 403 without a known one) and its
    rate (429 past the key's or the server's requests per minute), for every route that
    translates.

    Args:
        settings: `app.Settings`.
        limiter: `RateLimiter`.
        client: str. The client's address.
        api_key: str or `None`. The request's key.

    Raises:
        ApiError: 403 or 429.
    """
    limit = settings.req_limit
    if settings.api_keys is not None:
        if not api_key:
            raise ApiError(403, "Please contact the server operator to get an API key")
        if not settings.api_keys.known(api_key):
            raise ApiError(403, "Invalid API key")
        limit = settings.api_keys.limit(api_key, settings.req_limit)
        client = "key:" + api_key
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
    chunked body), so that no oversized body is ever parsed or held whole.

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
        started = False

        async def counted_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > max_bytes:
                    raise BodyTooLarge()
            return message

        async def tracked_send(message):
            nonlocal started
            started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except BodyTooLarge:
            if not started:
                await _too_large(send, max_bytes, f"more than {max_bytes}")


class BodyTooLarge(Exception):
    """A streamed body passed the server's bound."""


async def _too_large(send, max_bytes, received):
    body = json.dumps(
        {"error": f"Request body too large: at most {max_bytes} bytes. Received: {received} bytes"}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
