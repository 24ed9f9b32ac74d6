"""`keras-transformer serve` as users run it: a process serving the number-words translator
from a base path of numbered versions, with API keys. LibreTranslate's own Python client and
32 concurrent clients get the offline translations; bad input gets its status while the
server stays healthy; the web page works in a real browser (Debian's chromium); a new version
is picked up under load without a failed request; SIGTERM answers the requests in flight and
exits 0. The tests of this module run in order on one server."""

import concurrent.futures
import http.client
import importlib.util
import io
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import keras
import pytest

from tests.export_helpers import SENTENCES

pytestmark = [pytest.mark.slow, pytest.mark.one_backend]

SCRIPT = os.path.join(os.path.dirname(sys.executable), "keras-transformer")
KEY = "test-key-0123456789"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


class ServerProcess:
    """A `keras-transformer serve` subprocess; its standard error is collected line by line."""

    def __init__(self, *args):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen(
            [SCRIPT, "serve", "--port", "0", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines = []
        self._new = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.url = None

    def _read(self):
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))
            self._new.put(line)
        self._new.put(None)

    def wait_for(self, pattern, timeout=240):
        """The first match of `pattern` in a line of standard error (waiting for it)."""
        deadline = time.monotonic() + timeout
        for line in list(self.lines):
            if match := re.search(pattern, line):
                return match
        while time.monotonic() < deadline:
            try:
                line = self._new.get(timeout=1)
            except queue.Empty:
                continue
            if line is None:
                break
            if match := re.search(pattern, line):
                return match
        raise AssertionError(f"no line matching {pattern!r}:\n" + "\n".join(self.lines[-30:]))

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)


def call(url, path, body=None, data=None, headers=None, timeout=120):
    """`(status, parsed JSON or text)` of a request."""
    if body is not None:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", **(headers or {})}
    request = urllib.request.Request(url + path, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, text = response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def translate(url, texts, **fields):
    return call(
        url, "/translate", {"q": texts, "source": "es", "target": "en", "api_key": KEY, **fields}
    )


@pytest.fixture(scope="module")
def served(number_translator, tmp_path_factory):
    """`(server, translator, base path, sources)`: the number translator served as version 1."""
    translator, test_pairs, keras_path = number_translator
    base = tmp_path_factory.mktemp("served")
    (base / "1").mkdir()
    shutil.copy(keras_path, base / "1" / "translator.keras")
    keys = base.parent / "keys.txt"
    keys.write_text(f"{KEY}\n", encoding="utf-8")
    server = ServerProcess(
        "--model",
        f"es:en={base}",
        "--api-keys",
        str(keys),
        "--max-batch-sentences",
        "8",
        "--poll-seconds",
        "0.5",
        "--background-warmup",  # The first tests run while the larger batches compile.
    )
    server.url = server.wait_for(r"ready: (http://\S+)").group(1)
    sources = [source for source, _ in test_pairs[:64]]
    yield server, translator, base, sources
    server.stop()


def test_libretranslate_client_gets_the_offline_translations(served):
    from libretranslatepy import LibreTranslateAPI

    server, translator, _, _ = served
    client = LibreTranslateAPI(server.url, api_key=KEY)
    assert client.languages() == [{"code": "es", "name": "Spanish", "targets": ["en"]}]
    expected = translator(SENTENCES)
    assert [client.translate(sentence, "es", "en") for sentence in SENTENCES] == expected
    status, answer = translate(server.url, SENTENCES, alternatives=2)
    assert status == 200 and answer["translatedText"] == expected
    n_best = translator.translate(SENTENCES, num_hypotheses=3)
    assert answer["alternatives"] == [[h.text for h in hypotheses[1:]] for hypotheses in n_best]


def test_32_concurrent_clients_get_the_offline_translations(served):
    server, translator, _, sources = served
    expected = dict(zip(sources, translator(sources), strict=True))

    def client(index):
        answers = []
        for round_ in range(4):
            source = sources[(index * 4 + round_) % len(sources)]
            answers.append((source, translate(server.url, source)))
        return answers

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        results = [answer for answers in pool.map(client, range(32)) for answer in answers]
    assert len(results) == 128
    assert [status for _, (status, _) in results] == [200] * 128
    assert [answer["translatedText"] for _, (_, answer) in results] == [
        expected[source] for source, _ in results
    ]
    _, metrics = call(server.url, "/metrics")
    merged = re.search(r'keras_transformer_batch_requests_sum\{model="es:en"\} (\S+)', metrics)
    batches = re.search(r'keras_transformer_batch_requests_count\{model="es:en"\} (\S+)', metrics)
    assert float(merged.group(1)) > float(batches.group(1))  # Requests were merged.


def test_the_background_warm_up_ends_with_every_batch_warm(served):
    server = served[0]
    # Ready after 3 calls (buckets 16 and 32 of one sentence, the n-best call), then 2, 4
    # and 8 sentences in both buckets while the tests above were served.
    assert server.wait_for(r"warm \((\d+) warm-up calls.*in the background\)").group(1) == "3"
    calls = server.wait_for(r"warm for every batch \((\d+) background warm-up calls").group(1)
    assert calls == "6"
    steps = [re.search(r"warm for (\d+) sentences per call", line) for line in server.lines]
    assert [int(step.group(1)) for step in steps if step] == [2, 4, 8]
    status, health = call(server.url, "/health/ready")
    assert status == 200 and health["models"][0]["warm_sentences"] == 8
    _, metrics = call(server.url, "/metrics")
    assert 'keras_transformer_warm_sentences{model="es:en"} 8.0' in metrics


def test_bad_input_gets_its_status_and_the_server_stays_healthy(served):
    server, _, _, _ = served
    url = server.url
    json_header = {"Content-Type": "application/json"}
    assert call(url, "/translate", data=b'{"q": [', headers=json_header)[0] == 400
    assert call(url, "/translate", {"source": "es", "target": "en", "api_key": KEY}) == (
        400,
        {"error": "Invalid request: missing q parameter"},
    )
    # A 3 MB body is refused from its headers, before a byte of it is read (the rest of it is
    # drained, so that a client still sending it reads the answer: test_connections.py).
    connection = http.client.HTTPConnection(url.split("//")[1], timeout=30)
    connection.putrequest("POST", "/translate")
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Content-Length", str(3 << 20))
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 413
    assert "at most 1048576 bytes" in json.loads(response.read())["error"]
    connection.close()
    assert call(
        url, "/translate", {"q": "dos", "source": "es", "target": "en", "api_key": "no"}
    ) == (
        403,
        {"error": "Invalid API key"},
    )
    assert call(url, "/health") == (
        200,
        {
            "status": "ready",
            "models": [
                {"model": "es:en", "path": str(served[2] / "1"), "version": 1, "warm_sentences": 8}
            ],
        },
    )
    assert translate(url, "tres")[0] == 200
    access = [line for line in server.lines if '"POST /translate"' in line]
    assert any(" 413 " in line for line in access) and any(" 403 " in line for line in access)


needs_chromium = pytest.mark.skipif(
    not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
    reason="Debian's chromium and chromium-driver (.ci/run installs them)",
)


def start_chromium(tmp_path):
    """Debian's chromium, headless, driven by Selenium (quit it when done)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
    ):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


@needs_chromium
def test_web_page_in_a_real_browser(served, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    server, translator, _, _ = served
    browser = start_chromium(tmp_path)
    try:
        browser.set_window_size(1000, 640)
        browser.get(server.url + "/")
        wait = WebDriverWait(browser, 60)
        wait.until(lambda b: b.find_element(By.ID, "target").get_attribute("value") == "en")
        assert browser.find_element(By.ID, "key-label").is_displayed()  # Keys configured.
        browser.find_element(By.ID, "api-key").send_keys(KEY)
        # A paragraph of three sentences, then a line: each sentence translated, the
        # paragraph's layout kept (as `documents.texts.translate_texts` does).
        text = "dos mil trescientos ochenta y tres. Cuarenta y dos. Tres.\ncuarenta y dos"
        browser.find_element(By.ID, "text").send_keys(text)
        Select(browser.find_element(By.ID, "alternatives")).select_by_value("2")
        browser.find_element(By.ID, "translate").click()
        result = browser.find_element(By.ID, "result")
        wait.until(lambda b: "empty" not in result.get_attribute("class"))
        sentences = ["dos mil trescientos ochenta y tres.", "Cuarenta y dos.", "Tres."]
        expected = " ".join(translator(sentences)) + "\n" + translator("cuarenta y dos")
        assert result.text == expected
        items = browser.find_elements(By.CSS_SELECTOR, "#alternatives-list li")
        assert len(items) == 2 and all(item.text for item in items)
        assert browser.find_element(By.ID, "error").text == ""
        screenshots = os.environ.get("KT_SCREENSHOT_DIR", str(tmp_path))
        browser.save_screenshot(os.path.join(screenshots, "serve_page.png"))
        # A phone's width: one column, nothing wider than the screen.
        browser.set_window_size(390, 844)
        width = browser.execute_script("return window.innerWidth")
        assert browser.execute_script("return document.documentElement.scrollWidth") <= width
        text_box = browser.find_element(By.ID, "text").rect
        result_box = result.rect
        assert result_box["y"] > text_box["y"] + text_box["height"] - 1  # Stacked.
        assert text_box["x"] + text_box["width"] <= width
        browser.save_screenshot(os.path.join(screenshots, "serve_page_phone.png"))
        # An error shows on the page: a wrong key.
        browser.find_element(By.ID, "api-key").send_keys("x")
        browser.find_element(By.ID, "translate").click()
        wait.until(lambda b: b.find_element(By.ID, "error").text == "Invalid API key")
    finally:
        browser.quit()


@needs_chromium
def test_files_tab_in_a_real_browser(served, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server, translator, _, _ = served
    sentences = ["cuarenta y dos", "tres"]
    (tmp_path / "numeros.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    files = [tmp_path / "numeros.txt"]
    if importlib.util.find_spec("keras_transformer.documents.docx") is not None:
        import docx

        document = docx.Document()
        for sentence in sentences:
            document.add_paragraph(sentence)
        document.save(tmp_path / "numeros.docx")
        files.append(tmp_path / "numeros.docx")
    browser = start_chromium(tmp_path)
    try:
        browser.get(server.url + "/")
        wait = WebDriverWait(browser, 60)
        tab = browser.find_element(By.ID, "tab-files")
        wait.until(lambda b: tab.is_displayed())  # Shown once the settings say files work.
        browser.find_element(By.ID, "api-key").send_keys(KEY)
        tab.click()
        assert not browser.find_element(By.ID, "text").is_displayed()
        assert not browser.find_element(By.ID, "alternatives-label").is_displayed()
        link = browser.find_element(By.ID, "download")
        for path in files:
            browser.find_element(By.ID, "file").send_keys(str(path))
            browser.find_element(By.ID, "translate").click()
            name = path.stem + ".en" + path.suffix
            wait.until(lambda b, name=name: link.text == f"Download {name}")
            assert link.is_displayed() and browser.find_element(By.ID, "error").text == ""
            with urllib.request.urlopen(link.get_attribute("href"), timeout=60) as response:
                assert "attachment" in response.headers["Content-Disposition"]
                data = response.read()
            if path.suffix == ".txt":
                assert data.decode() == "\n".join(translator(sentences)) + "\n"
            else:
                translated = docx.Document(io.BytesIO(data))
                texts = [paragraph.text for paragraph in translated.paragraphs]
                assert texts == translator(sentences)
        screenshots = os.environ.get("KT_SCREENSHOT_DIR", str(tmp_path))
        browser.save_screenshot(os.path.join(screenshots, "serve_page_files.png"))
    finally:
        browser.quit()


def test_a_new_version_is_served_under_load_without_a_failed_request(served, tmp_path):
    from keras_transformer import Transformer
    from keras_transformer.translator import Translator

    server, translator, base, sources = served
    keras.utils.set_random_seed(1)
    model = Transformer.from_preset(
        "tiny", vocabulary_size=translator.tokenizer.vocabulary_size(), num_layers=1
    )
    version_2 = Translator(
        model,
        translator.tokenizer,
        max_source_length=32,
        bucket_boundaries=(16,),
        jit_compile=False,
    )
    sentences = sources[:8]
    before, after = translator(sentences), version_2(sentences)
    assert before != after
    answers, stop = [], threading.Event()

    def load():
        while not stop.is_set():
            answers.append(translate(server.url, sentences))

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    written = tmp_path / ".tmp-2"  # Written whole, then renamed (as `export --version` does).
    written.mkdir()
    version_2.save(written / "translator.keras")
    os.rename(written, base / "2")
    server.wait_for(r"serving version 2 ", timeout=180)
    time.sleep(1.0)
    stop.set()
    for thread in threads:
        thread.join(60)
    assert answers and all(status == 200 for status, _ in answers)
    texts = [answer["translatedText"] for _, answer in answers]
    assert set(map(tuple, texts)) <= {tuple(before), tuple(after)}
    assert texts[-1] == after
    assert call(server.url, "/health")[1]["models"][0]["version"] == 2


def test_sigterm_answers_the_requests_in_flight_then_exits_0(served):
    server, _, _, sources = served
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(translate, server.url, sources[:32]) for _ in range(16)]
        time.sleep(1.0)  # Accepted and queued: 512 sentences in batches of at most 8.
        server.process.send_signal(signal.SIGTERM)
        answers = [future.result(240) for future in futures]
    assert [status for status, _ in answers] == [200] * 16
    assert all(len(answer["translatedText"]) == 32 for _, answer in answers)
    assert server.process.wait(120) == 0
    assert any("draining" in line for line in server.lines)
    port = int(server.url.rsplit(":", 1)[1])
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=5)


def test_a_taken_port_or_a_missing_model_ends_with_one_line_and_status_2(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        process = subprocess.run(
            [SCRIPT, "serve", "--model", str(tmp_path), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert process.returncode == 2
    # The last line (TensorFlow may log before it when TF_CPP_MIN_LOG_LEVEL is set).
    assert process.stderr.strip().splitlines()[-1] == (
        f"keras-transformer: error: cannot listen on 127.0.0.1:{port}: Address already in use"
    )
    process = subprocess.run(
        [SCRIPT, "serve", "--model", str(tmp_path / "missing.keras"), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert process.returncode == 2
    assert (
        process.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"keras-transformer: error: cannot open the model '{tmp_path / 'missing.keras'}'"
        )
    )
