"""README.md's "Use the model `make demo` made" runs as written: its shell commands
(`keras-transformer translate`, `keras-transformer serve`, the page, the `curl` call) against a
`runs/demo` directory holding the number-words translator trained in the test run (the
`number_translator` fixture, `make demo`'s small twin), not a real `runs/demo`, which a fresh
clone lacks. Its Python block runs in `tests/test_docs_run.py` against the same directory.
"""

import json
import os
import pathlib
import re
import shlex
import shutil
import socket
import subprocess
import sys
import urllib.request

import pytest

from tests.test_docs_snippets import BLOCK

pytestmark = pytest.mark.one_backend  # The translator file is TensorFlow's (the default).

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Use the model `make demo` made"
SCRIPT = os.path.join(os.path.dirname(sys.executable), "keras-transformer")


def section_blocks():
    """`{language: text}` of the fenced blocks of the README's section on the demo model."""
    text = README.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return {match.group(1): match.group(2) for match in BLOCK.finditer(text[start:end])}


def commands():
    """`{program and subcommand: argv}` of the section's shell block, comments dropped."""
    found = {}
    for line in section_blocks()["bash"].splitlines():
        argv = shlex.split(line, comments=True)
        if argv:
            found[" ".join(argv[:2]) if argv[0] == "keras-transformer" else argv[0]] = argv
    return found


@pytest.fixture
def demo_run(number_translator, tmp_path, monkeypatch):
    """A working directory holding `runs/demo/translator.keras`; the fixture's Translator."""
    translator, _, keras_path = number_translator
    (tmp_path / "runs" / "demo").mkdir(parents=True)
    shutil.copy(keras_path, tmp_path / "runs" / "demo" / "translator.keras")
    monkeypatch.chdir(tmp_path)
    return translator


def test_the_section_has_the_commands_it_promises():
    assert {"keras-transformer translate", "keras-transformer serve", "curl"} <= set(commands())
    assert "load_translator(\"runs/demo\")" in section_blocks()["python"]


def test_translate_prints_one_translation_per_sentence(demo_run):
    argv = commands()["keras-transformer translate"]
    sentences = [value for value in argv[2:] if not value.startswith("-") and value != "runs/demo"]
    result = subprocess.run([SCRIPT, *argv[1:]], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == demo_run(sentences)


@pytest.mark.slow
def test_serve_answers_the_page_and_the_curl_call(demo_run):
    from tests.serving.test_server import ServerProcess

    argv = commands()["keras-transformer serve"]
    assert argv[1:] == ["serve", "--model", "runs/demo"]  # the default port, 5000
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    # `ServerProcess` adds `--port 0`; the later `--port` wins: a free port instead of 5000,
    # which another server may hold.
    server = ServerProcess(*argv[2:], "--port", str(port))
    try:
        url = server.wait_for(r"ready: (http://\S+)").group(1)
        assert url == f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(url + "/", timeout=60) as response:
            assert response.status == 200 and "<html" in response.read().decode().lower()
        # The curl line: its URL (on this port), header and body.
        curl = commands()["curl"]
        target = next(value for value in curl[1:] if "/translate" in value)
        target = re.sub(r"^(https?://)?127\.0\.0\.1:5000", url, target)
        header = curl[curl.index("-H") + 1].split(": ", 1)
        body = curl[curl.index("-d") + 1]
        request = urllib.request.Request(target, data=body.encode(), headers=dict([header]))
        with urllib.request.urlopen(request, timeout=120) as response:
            answer = json.loads(response.read().decode())
        assert answer == {"translatedText": demo_run([json.loads(body)["q"]])[0]}
    finally:
        server.stop()
