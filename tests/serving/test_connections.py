"""The connections of `keras-transformer serve` (`limits.ConnectionLimits` on uvicorn's h11), on
a real loopback server in process over the fake engine of test_app: a half-sent request head
or a stalled body gets 408 and is closed after its timeout, a connection past the cap gets 503,
an oversized body refused from its headers reaches Python's urllib as the 413 (drained, not
reset), and a hostile 200 MB body is not read to its end."""

import asyncio
import json
import logging
import selectors
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
import uvicorn

from keras_transformer.serving import create_app
from keras_transformer.serving.limits import DRAIN_BYTES
from keras_transformer.serving.server import bind, uvicorn_config
from tests.serving.test_app import make_state

pytestmark = pytest.mark.one_backend

HALF_REQUEST = b"POST /translate HT"


class LoopbackServer:
    """The app of `make_state(**settings)` served by uvicorn with `uvicorn_config`, in a thread."""

    def __init__(self, **settings):
        self.state = make_state(**settings)
        self.sock = bind("127.0.0.1", 0)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn_config(create_app(self.state), self.state.settings))
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)

    def _run(self):
        asyncio.run(self.server.serve(sockets=[self.sock]))

    def stop(self):
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()
        self.state.close(5)


def read_to_close(sock, timeout=30):
    """`(bytes the server sent, seconds until it closed)`."""
    sock.settimeout(timeout)
    started, data = time.monotonic(), b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data, time.monotonic() - started


def get(url, data=None, headers=None):
    """`(status, headers, parsed JSON body)` of a urllib request."""
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, json.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:  # Closed now, not when collected: the server counts open connections.
            return error.code, error.headers, json.loads(error.read())


def test_half_sent_requests_are_answered_408_and_closed_after_the_header_timeout(serve):
    server = serve(header_timeout=1.0)
    selector = selectors.DefaultSelector()
    opened = {}
    for _ in range(50):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        sock.sendall(HALF_REQUEST)
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
        opened[sock] = time.monotonic()
    silent = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    time.sleep(0.5)
    assert not selector.select(timeout=0)  # Still open before the timeout.
    answers, lifetimes = set(), []
    deadline = time.monotonic() + 20
    while opened and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.5):
            sock = key.fileobj
            sock.setblocking(True)
            data, _ = read_to_close(sock)
            lifetimes.append(time.monotonic() - opened.pop(sock))
            answers.add(data.split(b"\r\n", 1)[0])
            assert json.loads(data.split(b"\r\n\r\n", 1)[1]) == {
                "error": "The request's head did not arrive whole in 1 s"
            }
            selector.unregister(sock)
            sock.close()
    assert not opened and answers == {b"HTTP/1.1 408 Request Timeout"}
    assert 0.9 < min(lifetimes) and max(lifetimes) < 5.0
    assert read_to_close(silent)[0] == b""  # A connection that sent nothing: closed, no answer.
    silent.close()
    # A kept-alive connection: its next request, half sent, has the same time.
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while not answer.endswith(b'{"status":"alive"}'):
            answer += sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200 OK")
        sock.sendall(b"GET /hea")
        data, seconds = read_to_close(sock)
    assert data.startswith(b"HTTP/1.1 408 Request Timeout") and 0.9 < seconds < 5.0
    assert get(server.url + "/health/live")[0] == 200


def test_a_body_that_stops_is_answered_408_and_logged_as_408(serve, caplog):
    server = serve(body_timeout=1.0)
    with (
        caplog.at_level(logging.INFO, "keras_transformer.serving.access"),
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock,
    ):
        sock.sendall(
            b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"q": "dos'
        )
        data, seconds = read_to_close(sock)
        time.sleep(0.2)
    assert data.startswith(b"HTTP/1.1 408 Request Timeout") and 0.9 < seconds < 5.0
    assert json.loads(data.split(b"\r\n\r\n", 1)[1]) == {"error": "No byte of the body in 1 s"}
    logged = [record.getMessage() for record in caplog.records]
    assert any('"POST /translate" 408' in line for line in logged)
    assert not any("Exception in ASGI application" in line for line in logged)


def test_past_the_connection_cap_a_new_connection_is_answered_503(serve):
    server = serve(max_connections=10, header_timeout=1.5)
    held = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(10)]
    for sock in held:
        sock.sendall(HALF_REQUEST)
    time.sleep(0.2)
    status, headers, body = get(server.url + "/health/live")
    assert status == 503 and headers["Retry-After"] == "1"
    assert body == {"error": "Too many connections: at most 10 at once. Try again later"}
    for sock in held:  # Once the held ones time out, there is room again.
        assert read_to_close(sock)[0].startswith(b"HTTP/1.1 408")
        sock.close()
    time.sleep(0.2)
    assert get(server.url + "/health/live")[:3:2] == (200, {"status": "alive"})


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_an_oversized_body_reaches_urllib_as_the_413(serve, chunked):
    server = serve(body_limit=1 << 20)
    text = "x" * (5 << 20)
    body = json.dumps({"q": text, "source": "es", "target": "en"}).encode()
    headers = {"Content-Type": "application/json"}
    for _ in range(5):  # Before the drain, most tries got a reset or a broken pipe.
        data = iter([body[i : i + 65536] for i in range(0, len(body), 65536)]) if chunked else body
        status, _, answer = get(server.url + "/translate", data=data, headers=headers)
        assert status == 413
        assert answer["error"].startswith("Request body too large: at most 1048576 bytes")
    # LibreTranslate's client (urllib underneath, a form body): the 413 as its HTTPError.
    from libretranslatepy import LibreTranslateAPI

    with pytest.raises(urllib.error.HTTPError) as raised:
        LibreTranslateAPI(server.url).translate(text, "es", "en")
    with raised.value as error:
        assert error.code == 413
    assert (
        get(
            server.url + "/translate",
            json.dumps({"q": "dos", "source": "es", "target": "en"}).encode(),
            headers,
        )[0]
        == 200
    )


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_hostile_200_mb_body_is_not_read_to_its_end(serve, chunked):
    server = serve(body_limit=1 << 20)
    head = b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    head += (
        b"Transfer-Encoding: chunked\r\n\r\n"
        if chunked
        else b"Content-Length: %d\r\n\r\n" % (200 << 20)
    )
    chunk = b"x" * 65536
    frame = b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk
    sent = 0
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(head)
        with pytest.raises(OSError):  # Reset or broken pipe once the drain is spent.
            while sent < 200 << 20:
                sock.sendall(frame)
                sent += len(chunk)
    # What was sent: the 1 MB bound, the drain, and what the kernels' buffers held.
    assert sent < 1.1 * (1 << 20) + DRAIN_BYTES + (16 << 20)
    assert get(server.url + "/health/live")[0] == 200


def test_keras_transformer_serve_on_the_committed_translator():
    """The command itself (`--header-timeout`, `--max-connections`) on
    tests/fixtures/translator_v0_1.keras: urllib and LibreTranslate's client get the 413 of a
    5 MB body, half requests are closed after the timeout, one past the cap gets 503."""
    import os

    from libretranslatepy import LibreTranslateAPI

    from tests.serving.test_server import ServerProcess

    fixture = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures")
    server = ServerProcess(
        "--model",
        os.path.join(fixture, "translator_v0_1.keras"),
        "--warmup",
        "none",
        "--header-timeout",
        "1",
        "--max-connections",
        "30",
    )
    try:
        url = server.wait_for(r"ready: (http://\S+)").group(1)
        port = int(url.rsplit(":", 1)[1])
        headers = {"Content-Type": "application/json"}
        text = "dos " * (5 << 18)  # 5 MB.
        body = json.dumps({"q": text, "source": "es", "target": "en"}).encode()
        status, _, answer = get(url + "/translate", data=body, headers=headers)
        assert (status, answer) == (
            413,
            {
                "error": f"Request body too large: at most 1048576 bytes. Received: {len(body)} bytes"
            },
        )
        with pytest.raises(urllib.error.HTTPError) as raised:
            LibreTranslateAPI(url).translate(text, "es", "en")
        with raised.value as error:
            assert error.code == 413
            assert "Request body too large" in json.loads(error.read())["error"]
        time.sleep(0.3)  # The server sees those connections closed.
        held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(30)]
        for sock in held:
            sock.sendall(HALF_REQUEST)
        time.sleep(0.3)
        assert get(url + "/health/live")[0] == 503
        for sock in held:
            data, seconds = read_to_close(sock)
            assert data.startswith(b"HTTP/1.1 408 Request Timeout") and seconds < 5.0
            sock.close()
        time.sleep(0.2)
        assert LibreTranslateAPI(url).translate("dos", "es", "en") == "two"
    finally:
        server.stop()
