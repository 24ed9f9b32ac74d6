"""Language detection over HTTP, on the fake engines of test_app.py served by uvicorn in a
thread: LibreTranslate's Python client's `detect` and `translate(..., "auto", ...)`, and the
web page's "Detect language" in Debian's chromium (offered when several sources are served;
the text goes to the detected source's model and the page says which language it detected)."""

import os
import socket
import threading
import time

import pytest

from keras_transformer.serving import create_app
from tests.serving.test_app import make_state
from tests.serving.test_server import CHROMEDRIVER, CHROMIUM, start_chromium

pytestmark = pytest.mark.one_backend


@pytest.fixture
def page_url():
    uvicorn = pytest.importorskip("uvicorn")
    state = make_state(specs=("es:en=a", "de:en=b", "en:es=c"))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(create_app(state), log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}", state
    server.should_exit = True
    thread.join(30)
    sock.close()
    state.close(5)


def test_libretranslate_client_detects_and_translates_from_auto(page_url):
    libretranslatepy = pytest.importorskip("libretranslatepy")
    url, state = page_url
    client = libretranslatepy.LibreTranslateAPI(url + "/")
    candidates = client.detect("¿Dónde está la estación de tren?")  # A form body.
    assert [candidate["language"] for candidate in candidates][0] == "es"
    assert {candidate["language"] for candidate in candidates} == {"de", "en", "es"}
    assert client.translate("Guten Morgen", "auto", "en") == "GUTEN MORGEN"
    assert [len(model.engine.calls) for model in state.models] == [0, 1, 0]


@pytest.mark.skipif(
    not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
    reason="Debian's chromium and chromium-driver (.ci/run installs them)",
)
def test_the_page_detects_the_source_and_says_which(page_url, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    url, state = page_url
    browser = start_chromium(tmp_path)
    try:
        browser.get(url + "/")
        wait = WebDriverWait(browser, 60)
        wait.until(lambda b: b.find_element(By.ID, "target").get_attribute("value") != "")
        assert not browser.find_element(By.ID, "key-label").is_displayed()  # No keys.
        source = Select(browser.find_element(By.ID, "source"))
        assert source.first_selected_option.get_attribute("value") == "auto"
        assert source.first_selected_option.text == "Detect language"
        targets = Select(browser.find_element(By.ID, "target")).options
        assert [option.get_attribute("value") for option in targets] == ["en", "es"]
        text = "Ich bin sehr müde."  # Short: the fake engine truncates over 20.
        browser.find_element(By.ID, "text").send_keys(text)
        browser.find_element(By.ID, "translate").click()
        result = browser.find_element(By.ID, "result")
        wait.until(lambda b: "empty" not in result.get_attribute("class"))
        assert result.text == text.upper()  # The fake engine of the German model.
        detected = browser.find_element(By.ID, "detected").text
        assert detected.startswith("Detected: German (") and detected.endswith("%)"), detected
        assert [len(model.engine.calls) for model in state.models] == [0, 1, 0]
        screenshots = os.environ.get("KT_SCREENSHOT_DIR", str(tmp_path))
        browser.save_screenshot(os.path.join(screenshots, "serve_page_detected.png"))
        # A named source shows no detection.
        source.select_by_value("es")
        browser.find_element(By.ID, "translate").click()
        wait.until(lambda b: b.find_element(By.ID, "detected").text == "")
        wait.until(lambda b: len(state.models[0].engine.calls) == 1)
        assert browser.find_element(By.ID, "error").text == ""
    finally:
        browser.quit()
