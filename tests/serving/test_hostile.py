"""`keras-transformer serve` against hostile clients and careless publishers (issue 59), on
loopback servers in process over the fake engine of test_app (and the committed
tests/fixtures/translator_v0_1.keras for versions): a version copied into place in two halves
is served once whole, `X-Forwarded-For` is honoured only from the proxies named, a key file
is read again when it changes (revoked and added keys without a restart, a broken file kept
out), and every error is a bounded `{"error": ...}`."""

import argparse
import collections
import json
import logging
import os
import shutil
import socket
import time
import urllib.error
import urllib.request

import pytest

from keras_transformer.serving import ApiKeys, Settings
from keras_transformer.serving.limits import DRAIN_BYTES, RateLimiter, client_key
from keras_transformer.serving.models import ModelSpec, ServedModel, version_listing
from keras_transformer.serving.server import uvicorn_config
from tests.serving.test_connections import read_to_close

pytestmark = pytest.mark.one_backend

FIXTURE = os.path.join(
    os.path.dirname(os.path.dirname(__file__)), "fixtures", "translator_v0_1.keras"
)
JSON = {"Content-Type": "application/json"}


def call(url, data=None, headers=None, method=None):
    """`(status, content type, body bytes)` of a urllib request."""
    request = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.headers["Content-Type"], error.read()


def translate(url, headers=None, **fields):
    body = json.dumps({"q": "dos", "source": "es", "target": "en", **fields}).encode()
    return call(url + "/translate", body, {**JSON, **(headers or {})})[0]


# Versions


def test_a_version_copied_in_two_halves_is_served_once_whole(tmp_path):
    (tmp_path / "1").mkdir()
    shutil.copy(FIXTURE, tmp_path / "1" / "translator.keras")
    lines = []
    model = ServedModel(ModelSpec(str(tmp_path)), warmup="none", log=lines.append)
    model.load()
    engine, data = model.engine, open(FIXTURE, "rb").read()
    (tmp_path / "2").mkdir()  # `cp -r` makes the directory first: the watch survives it.
    assert model.update() is None and lines == []
    copy = tmp_path / "2" / "translator.keras"
    copy.write_bytes(data[: len(data) // 2])
    # The first half: new at this poll, not tried; unchanged at the next, tried and failed
    # (logged once); not tried again while it stays so (no reload loop).
    assert [model.update() for _ in range(4)] == [None] * 4
    assert model.version == 1 and model.engine is engine
    assert (
        len(lines) == 1
        and "version 2" in lines[0]
        and "tried again when its files change" in lines[0]
    )
    with open(copy, "ab") as file:
        file.write(data[len(data) // 2 :])
    assert model.update() is None  # Changed since the last poll: wait for one more.
    assert model.update() == 2 and model.directory == str(tmp_path / "2")
    assert len(lines) == 2 and "serving version 2" in lines[1]
    # A version renamed into place whole is served at the poll after it appeared.
    staging = tmp_path / ".tmp-3"
    staging.mkdir()
    shutil.copy(FIXTURE, staging / "translator.keras")
    os.rename(staging, tmp_path / "3")
    assert model.update() is None and model.update() == 3
    assert model.engine.translate(["dos"])[0].text == engine.translate(["dos"])[0].text


def test_a_version_listing_sees_sizes_and_times_under_it(tmp_path):
    (tmp_path / "variables").mkdir()
    (tmp_path / "variables" / "data").write_bytes(b"1234")
    before = version_listing(tmp_path)
    assert [entry[0] for entry in before] == ["variables", os.path.join("variables", "data")]
    assert before[1][1] == 4  # Its size.
    (tmp_path / "variables" / "data").write_bytes(b"12345678")
    assert version_listing(tmp_path) != before
    assert version_listing(tmp_path / "missing") is None


# Proxy trust


def test_x_forwarded_for_is_ignored_unless_its_proxy_is_trusted(serve):
    server = serve(req_limit=3)
    spoofed = [translate(server.url, {"X-Forwarded-For": f"10.0.0.{i}"}) for i in range(20)]
    assert spoofed == [200] * 3 + [429] * 17  # One client: the address that connected.
    trusting = serve(req_limit=3, forwarded_allow_ips=("127.0.0.1",))
    honoured = [translate(trusting.url, {"X-Forwarded-For": f"10.0.0.{i}"}) for i in range(20)]
    assert honoured == [200] * 20  # 20 clients behind the proxy, one request each.
    # nginx's `$proxy_add_x_forwarded_for` appends the address it saw: what a client writes
    # before it does not choose its count.
    forged = [
        translate(trusting.url, {"X-Forwarded-For": f"192.0.2.{i}, 10.0.1.1"}) for i in range(5)
    ]
    assert forged == [200] * 3 + [429] * 2
    # One IPv6 host has a whole /64: counted as one client.
    ipv6 = [translate(trusting.url, {"X-Forwarded-For": f"2001:db8:0:1::{i:x}"}) for i in range(5)]
    assert ipv6 == [200] * 3 + [429] * 2


def test_forwarded_allow_ips_option_and_uvicorn_config():
    from keras_transformer.cli.serve import add_serve_parser

    parser = argparse.ArgumentParser()
    add_serve_parser(parser.add_subparsers())
    args = parser.parse_args(["serve", "--model", "m"])
    assert args.forwarded_allow_ips == ()
    args = parser.parse_args(
        ["serve", "--model", "m", "--forwarded-allow-ips", "127.0.0.1,10.0.0.0/8"]
    )
    assert args.forwarded_allow_ips == ("127.0.0.1", "10.0.0.0/8")
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--model", "m", "--forwarded-allow-ips", "proxy.local"])
    config = uvicorn_config(None, Settings())
    assert config.proxy_headers is False and config.forwarded_allow_ips == []
    config = uvicorn_config(None, Settings(forwarded_allow_ips=("10.0.0.0/8",)))
    assert config.proxy_headers is True and config.forwarded_allow_ips == ["10.0.0.0/8"]


def test_the_limiter_table_stays_bounded_and_keeps_ipv6_networks_whole(monkeypatch):
    import keras_transformer.serving.limits as limits

    monkeypatch.setattr(limits, "MAX_TRACKED_CLIENTS", 50)
    limiter = RateLimiter(clock=lambda: 0.0)
    assert [limiter.allow(client_key(f"2001:db8::{i:x}"), 3) for i in range(200)] == (
        [True] * 3 + [False] * 197
    )
    for i in range(200):
        limiter.allow(client_key(f"10.0.{i // 250}.{i % 250}"), 3)
    assert len(limiter._seen) == 50
    assert client_key("::ffff:192.0.2.7") == "192.0.2.7"
    assert client_key("x" * 10_000) == "x" * 100


# Keys


def write(path, text):
    """Writes `path` whole under another name, then renames it into place."""
    staging = f"{path}.tmp"
    with open(staging, "w", encoding="utf-8") as file:
        file.write(text)
    os.replace(staging, path)


def test_keys_are_revoked_and_added_without_a_restart(serve, tmp_path, caplog):
    path = tmp_path / "keys.txt"
    write(path, "alpha-key-1\nbeta-key-2 2\n")
    server = serve(api_keys=ApiKeys.from_file(path, check_seconds=0.0))
    url = server.url
    assert [translate(url, api_key=key) for key in ("alpha-key-1", "gamma-key-3")] == [200, 403]
    with caplog.at_level(logging.WARNING, "keras_transformer.serving"):
        write(path, "beta-key-2\ngamma-key-3  1\n")  # Revokes alpha, adds gamma.
        assert [translate(url, api_key=key) for key in ("alpha-key-1", "gamma-key-3")] == [
            403,
            200,
        ]
        assert translate(url, api_key="gamma-key-3") == 429  # Its own limit, 1 a minute.
        reloaded = [r.getMessage() for r in caplog.records if "read" in r.getMessage()]
        assert len(reloaded) == 1 and "2 keys (1 added, 1 removed, 1 limits changed)" in reloaded[0]
        assert "gamma" not in reloaded[0]  # Keys are never logged.
        caplog.clear()
        # Truncated in place (an editor or `>` before it writes), then half a line written
        # just now, then a malformed line: each keeps the keys read before, logged once.
        for broken in ("", "beta-key-2\ngamma-k", "beta-key-2\ngamma-key-3 many\n"):
            with open(path, "w", encoding="utf-8") as file:
                file.write(broken)
            statuses = [translate(url, api_key="beta-key-2") for _ in range(2)]
            assert statuses == [200, 200] and translate(url, api_key="gamma-k") == 403
        kept = [r.getMessage() for r in caplog.records]
        assert len(kept) == 3 and all("still using the 2 keys read before" in m for m in kept)
        # A file without its last newline, unchanged for 2 s (here: its time set 10 s back),
        # is taken as it is.
        write(path, "beta-key-2\ngamma-k")
        past = time.time() - 10
        os.utime(path, (past, past))
        assert [translate(url, api_key=k) for k in ("gamma-k", "gamma-key-3")] == [200, 403]
        write(path, "delta-key-4\n")
        assert [translate(url, api_key=k) for k in ("beta-key-2", "delta-key-4")] == [403, 200]


def test_a_key_file_is_looked_at_most_once_per_check_interval(tmp_path):
    path = tmp_path / "keys.txt"
    write(path, "alpha-key-1\n")
    now = [0.0]
    keys = ApiKeys.from_file(path, clock=lambda: now[0])
    write(path, "beta-key-2\n")
    now[0] = 0.5
    assert not keys.refresh() and keys.known("alpha-key-1")
    now[0] = 1.0
    assert keys.refresh() and keys.known("beta-key-2") and not keys.known("alpha-key-1")
    now[0] = 2.0
    assert not keys.refresh()  # Unchanged: not read again.
    os.remove(path)
    now[0] = 3.0
    assert not keys.refresh() and keys.known("beta-key-2") and len(keys) == 1


# Errors


def test_every_error_is_bounded_json(serve):
    server = serve(cors_origins=("https://app.example",))
    url = server.url
    status, content_type, body = call(url + "/" + "a" * 60_000)
    assert (status, content_type) == (404, "application/json") and len(body) < 400
    assert json.loads(body)["error"].endswith("... (cut: 60,001 characters)")
    status, content_type, body = call(url + "/health/" + "b" * 5000, b"{}", JSON)
    assert status == 404 and len(body) < 400
    status, _, body = call(url + "/languages", method="DELETE")
    assert status == 405 and json.loads(body) == {"error": "Method not allowed: DELETE /languages"}
    fields = "&".join(f"f{i}=1" for i in range(1001)).encode()
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    assert call(url + "/translate", fields, form)[:3:2] == (
        400,
        b'{"error":"Invalid request: Too many fields. Maximum number of fields is 1000."}',
    )
    parts = b"".join(
        b'--zz\r\nContent-Disposition: form-data; name="f%d"\r\n\r\n1\r\n' % i for i in range(1001)
    )
    multipart = {"Content-Type": "multipart/form-data; boundary=zz"}
    status, content_type, body = call(url + "/translate", parts + b"--zz--\r\n", multipart)
    assert (status, content_type) == (400, "application/json") and "1000" in json.loads(body)[
        "error"
    ]
    preflight = {"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
    status, content_type, body = call(url + "/translate", headers=preflight, method="OPTIONS")
    assert (status, content_type) == (400, "application/json")
    assert json.loads(body) == {"error": "Disallowed CORS origin"}
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost x\r\n\r\n")  # A header without its colon.
        data, _ = read_to_close(sock)
    head, body = data.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 400 ") and b"content-type: application/json" in head
    assert json.loads(body) == {"error": "Invalid HTTP request received."}
    assert translate(url) == 200


def test_an_unexpected_error_is_a_json_500(serve):
    server = serve()

    def broken(options):
        raise RuntimeError("a bug, with details the client should not see")

    server.state.models[0].check_options = broken
    status, content_type, body = call(
        server.url + "/translate",
        json.dumps({"q": "dos", "source": "es", "target": "en"}).encode(),
        JSON,
    )
    assert (status, content_type, json.loads(body)) == (
        500,
        "application/json",
        {"error": "Internal Server Error"},
    )


def test_a_chunked_form_body_is_refused_once_past_the_limit(serve):
    server = serve(body_limit=1 << 20)
    head = (
        b"POST /translate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\n\r\n"
    )
    chunk = b"q=" + b"x" * 65534
    frame = b"%x\r\n%s\r\n" % (len(chunk), chunk)
    sent, answer = 0, b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(head)
        try:
            while sent < 200 << 20:
                sock.sendall(frame)
                sent += len(chunk)
                if not answer:
                    sock.setblocking(False)
                    try:
                        answer = sock.recv(65536)
                        answered_at = sent
                    except BlockingIOError:
                        pass
                    sock.setblocking(True)
        except OSError:  # Reset or broken pipe once the drain is spent.
            pass
        if not answer:
            answered_at = sent
        rest, _ = read_to_close(sock, timeout=10)  # The rest of the answer, if any came.
        answer += rest
    counts = collections.Counter({"sent MiB": sent >> 20, "answered at MiB": answered_at >> 20})
    assert answer.startswith(b"HTTP/1.1 413 "), counts
    assert b'{"error":"Request body too large: at most 1048576 bytes' in answer
    assert sent < (1 << 20) + DRAIN_BYTES + (16 << 20), counts
    assert call(server.url + "/health/live")[0] == 200
