"""`POST /translate_file` and `GET /download_file` (LibreTranslate's file translation) in
process over the fake engine of `test_app`: the round trip, the download's headers, keys,
limits, path traversal, expiry and cleanup."""

import logging
import os
import threading

import pytest
from starlette.testclient import TestClient

from keras_transformer.serving import ApiKeys, create_app
from keras_transformer.serving.downloads import FileStore, safe_name
from tests.serving.test_app import make_state

pytestmark = pytest.mark.one_backend

SUBTITLES = (
    b"1\n00:00:01,000 --> 00:00:02,500\nhola\namigo\n\n2\n00:00:03,000 --> 00:00:04,000\nadios\n"
)


@pytest.fixture
def served():
    state = make_state()
    with TestClient(create_app(state)) as client:
        yield client, state
    state.close(5)


def upload(client, name, data, **fields):
    form = {"source": "es", "target": "en", **fields}
    return client.post("/translate_file", data=form, files={"file": (name, data)})


def download(client, answer):
    assert answer.status_code == 200, answer.text
    url = answer.json()["translatedFileUrl"]
    assert url.startswith("http://testserver/download_file/")
    return client.get(url)


def test_a_text_file_round_trip(served):
    client, state = served
    answer = upload(client, "notas.txt", "\ufeffhola\r\n\r\nadiós\r\n".encode())
    token = answer.json()["translatedFileUrl"].split("/")[-2]
    assert len(token) >= 32  # 192 random bits.
    result = download(client, answer)
    assert result.status_code == 200
    assert result.content == "\ufeffHOLA\r\n\r\nADIÓS\r\n".encode()  # Blank line kept.
    assert result.headers["content-type"].startswith("text/plain")
    assert result.headers["content-disposition"] == 'attachment; filename="notas.en.txt"'
    # The blank line was not sent to the engine: two sentences, one engine call.
    assert state.models[0].engine.calls == [["hola", "adiós"]]


def test_subtitles_keep_their_timings(served):
    client, _ = served
    result = download(client, upload(client, "film.srt", SUBTITLES))
    lines = result.content.decode().split("\n")
    assert lines == [
        "1",
        "00:00:01,000 --> 00:00:02,500",
        "HOLA AMIGO",
        "",
        "2",
        "00:00:03,000 --> 00:00:04,000",
        "ADIOS",
        "",
    ]


def test_an_html_file_through_the_server(served):
    pytest.importorskip("keras_transformer.documents.html")
    client, _ = served
    result = download(client, upload(client, "page.html", b"<p>hola <b>amigo</b></p>"))
    assert b"<b>" in result.content and b"HOLA" in result.content


def test_settings_and_bad_uploads(served):
    client, _ = served
    settings = client.get("/frontend/settings").json()
    assert settings["filesTranslation"] is True
    assert {".txt", ".srt"} <= set(settings["supportedFilesFormat"])
    answer = upload(client, "report.pdf", b"%PDF")
    assert answer.status_code == 400
    assert "file format not supported" in answer.json()["error"]
    assert "report.pdf" in answer.json()["error"]
    answer = upload(client, "latin1.txt", b"caf\xe9")
    assert answer.status_code == 400 and "not UTF-8 text" in answer.json()["error"]
    answer = client.post("/translate_file", data={"source": "es", "target": "en"})
    assert answer.status_code == 400  # Not even multipart.
    answer = client.post(
        "/translate_file", data={"source": "es", "target": "en"}, files={"other": ("a", b"x")}
    )
    assert answer.json() == {"error": "Invalid request: missing file parameter"}
    answer = upload(client, "a.txt", b"x", target="")
    assert answer.json() == {"error": "Invalid request: missing target parameter"}
    answer = upload(client, "a.txt", b"x", source="fr")
    assert answer.status_code == 400 and "fr:en is not supported" in answer.json()["error"]
    answer = client.post(
        "/translate_file",
        data={"source": "es", "target": "en"},
        files=[("file", ("a.txt", b"x")), ("file", ("b.txt", b"y"))],
    )
    assert answer.status_code == 400


def test_unknown_tokens_and_path_traversal_are_404(served, tmp_path):
    client, state = served
    answer = upload(client, "secret.txt", b"hola")
    url = answer.json()["translatedFileUrl"]
    token = url.split("/")[-2]
    assert client.get(url).status_code == 200
    outside = tmp_path / "outside.txt"
    outside.write_text("private")
    for path in (
        f"/download_file/{token}/other.en.txt",
        f"/download_file/{token}/..",
        f"/download_file/{token}/%2e%2e",
        f"/download_file/{token}/..%2f..%2fetc%2fpasswd",
        f"/download_file/{token}/%2fetc%2fpasswd",
        f"/download_file/{token}/{outside}",
        f"/download_file/..%2f{token}/secret.en.txt",
        f"/download_file/%2e%2e/{os.path.basename(state.files.directory)}",
        "/download_file/" + "A" * 32 + "/secret.en.txt",
        f"/download_file/{token}",
    ):
        answer = client.get(path)
        assert answer.status_code == 404, path
        assert "error" in answer.json()
    assert client.get(url).content == b"HOLA"  # Still there.


def test_limits_of_bytes_and_characters():
    state = make_state(file_limit=100, char_limit=10)
    with TestClient(create_app(state)) as client:
        answer = upload(client, "big.txt", b"x" * 101)
        assert answer.status_code == 413 and "larger than 100 bytes" in answer.json()["error"]
        # Far past the file limit: refused from its Content-Length, before it is read.
        answer = upload(client, "huge.txt", b"x" * (200 << 10))
        assert answer.status_code == 413 and "Request body too large" in answer.json()["error"]
        answer = upload(client, "long.txt", b"hola hola hola")
        assert answer.status_code == 413
        assert "(14 characters) exceeds the text limit (10" in answer.json()["error"]
        assert state.models[0].engine.calls == []  # Refused before any translation.
        assert upload(client, "short.txt", b"hola").status_code == 200
    state.close(5)
    state = make_state(file_limit=0)
    with TestClient(create_app(state)) as client:
        answer = upload(client, "a.txt", b"hola")
        assert answer.status_code == 403 and "disabled" in answer.json()["error"]
        settings = client.get("/frontend/settings").json()
        assert settings["filesTranslation"] is False and settings["supportedFilesFormat"] == []
    state.close(5)


def test_keys_time_limit_and_status(tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("alpha-key\n", encoding="utf-8")
    gate = threading.Event()
    state = make_state(api_keys=ApiKeys.from_file(keys), gate=gate, timeout=0.3)
    with TestClient(create_app(state)) as client:
        assert upload(client, "a.txt", b"hola").status_code == 403
        answer = upload(client, "a.txt", b"hola", api_key="wrong")
        assert answer.json() == {"error": "Invalid API key"}
        answer = upload(client, "a.txt", b"hola", api_key="alpha-key")
        assert answer.status_code == 503 and "Timed out" in answer.json()["error"]
        gate.set()
        state.set_status("draining")
        answer = upload(client, "a.txt", b"hola", api_key="alpha-key")
        assert answer.status_code == 503 and "draining" in answer.json()["error"]
    state.close(5)


def test_access_log_and_metrics_hide_the_token(served, caplog):
    client, _ = served
    with caplog.at_level(logging.INFO, logger="keras_transformer.serving.access"):
        url = upload(client, "a.txt", b"hola").json()["translatedFileUrl"]
        client.get(url)
    token = url.split("/")[-2]
    lines = [record.getMessage() for record in caplog.records]
    assert '"POST /translate_file" 200' in lines[0]
    assert '"GET /download_file/{token}/{name}" 200' in lines[1]
    assert not any(token in line for line in lines)
    metrics = client.get("/metrics").text
    assert 'route="/download_file/{token}/{name}",status="200"' in metrics


def test_files_expire_and_the_directory_goes_at_close():
    now = [0.0]
    store = FileStore(max_age=60, clock=lambda: now[0])
    assert store.directory is None  # Nothing created before the first file.
    token, name = store.put(b"one", "../../a b.en.txt")
    assert name == "a b.en.txt"
    directory = store.directory
    path = store.path(token, name)
    assert open(path, "rb").read() == b"one"
    assert os.path.dirname(os.path.dirname(path)) == directory
    now[0] = 30.0
    second, _ = store.put(b"two", "b.txt")
    now[0] = 61.0  # The first is past its age: gone on the next lookup, from the disk too.
    assert store.path(token, name) is None and not os.path.exists(path)
    assert store.path(second, "b.txt") is not None and len(store) == 1
    store.close()
    assert not os.path.exists(directory) and store.path(second, "b.txt") is None


def test_stored_names_are_safe():
    assert safe_name("../x/..\\report.en.txt") == "report.en.txt"
    assert safe_name("..") == "file"
    assert safe_name(".hidden.txt") == "hidden.txt"
    assert safe_name("a\x00b;rm -rf.txt") == "a_b_rm -rf.txt"
    assert safe_name("informe é.docx") == "informe é.docx"
    assert len(safe_name("x" * 500 + ".txt")) == 120 and safe_name("x" * 500 + ".txt").endswith(
        ".txt"
    )


def test_serve_options_set_the_file_limits(monkeypatch):
    import keras_transformer.serving
    from keras_transformer import cli

    seen = {}

    def fake_serve(models, settings, host, port, poll_seconds):
        seen["settings"] = settings
        return 0

    monkeypatch.setattr(keras_transformer.serving, "serve", fake_serve)
    # Its log handler would stop the access log's records reaching pytest's (caplog).
    monkeypatch.setattr("keras_transformer.cli.serve._log_to_stderr", lambda: None)
    argv = ["serve", "--model", "es:en=somewhere", "--file-limit", "5000", "--file-ttl", "90"]
    assert cli.main(argv) == 0
    assert (seen["settings"].file_limit, seen["settings"].file_ttl) == (5000, 90.0)
    assert cli.main(["serve", "--model", "x"]) == 0
    assert (seen["settings"].file_limit, seen["settings"].file_ttl) == (10 << 20, 1800.0)


def test_expired_files_go_without_a_request(monkeypatch):
    import time

    from keras_transformer.serving import downloads

    monkeypatch.setattr(downloads, "SWEEP_SECONDS", 0.02)
    now = [0.0]
    store = FileStore(max_age=60, clock=lambda: now[0])
    token, name = store.put(b"data", "a.txt")
    folder = os.path.dirname(store.path(token, name))
    time.sleep(0.1)
    assert os.path.exists(folder)  # Looked at, not yet expired.
    now[0] = 60.0
    deadline = time.monotonic() + 5
    while os.path.exists(folder) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not os.path.exists(folder) and len(store) == 0
    store.close()


def test_auto_source_is_detected_on_the_file_itself():
    state = make_state(specs=("es:en=a", "de:en=c"))
    with TestClient(create_app(state)) as client:
        german = "Wo ist der nächste Bahnhof?\nIch habe meine Schlüssel verloren.\n"
        answer = upload(client, "reise.txt", german.encode(), source="auto")
        assert download(client, answer).content == german.upper().encode()
    spanish_engine, german_engine = (model.engine for model in state.models)
    assert spanish_engine.calls == [] and german_engine.calls  # The German model's.
    state.close(5)
