"""`keras_transformer.engines.use_compilation_cache`: compiled searches kept on disk are found
again by the next process, and translate the same."""

import json
import os
import subprocess
import sys

import keras
import pytest

from keras_transformer.engines import use_compilation_cache
from keras_transformer.engines.compilation import TF_XLA_FLAGS, default_directory, tf_xla_flags

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "translator_v0_1.keras")

# One process: open the cache, translate with the compiled search, report the outputs, the
# cache's files and (JAX) its hits and misses.
SCRIPT = """
import json, os, sys
import keras
events = []
if keras.backend.backend() == "jax":
    import jax.monitoring
    jax.monitoring.register_event_listener(lambda event, **kwargs: events.append(event))
from keras_transformer.engines import use_compilation_cache
from keras_transformer.translator import Translator
directory = use_compilation_cache(sys.argv[1])
translator = Translator.load(sys.argv[2])
translator.jit_compile = True
texts = translator(["a b c", "the quick brown fox", "x"], beam_size=2)
# The compiled programs; not JAX's bounded cache's bookkeeping (each entry's last read time,
# rewritten by every read, and its lock file).
files = {
    name: os.path.getmtime(os.path.join(directory, name))
    for name in os.listdir(directory)
    if not name.endswith("-atime") and name != ".lockfile"
}
print(json.dumps({
    "texts": texts,
    "files": files,
    "locked": os.path.exists(os.path.join(directory, ".lockfile")),
    "hits": events.count("/jax/compilation_cache/cache_hits"),
    "misses": events.count("/jax/compilation_cache/cache_misses"),
}))
"""


def _run(directory):
    environment = {**os.environ, "KERAS_BACKEND": keras.backend.backend()}
    environment.pop(TF_XLA_FLAGS, None)
    process = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(directory), FIXTURE],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    return json.loads(process.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(
    keras.backend.backend() == "torch", reason="PyTorch compiles nothing (tested below)"
)
def test_a_second_process_loads_the_compiled_searches_and_translates_the_same(tmp_path):
    cache = tmp_path / "compiled"
    first = _run(cache)
    assert first["files"], "the first process wrote no compiled program"
    second = _run(cache)
    assert second["texts"] == first["texts"]
    # The first process's programs are found again, none rewritten. (TensorFlow may add one:
    # a graph whose name differs from process to process gets a new key.)
    assert {name: second["files"][name] for name in first["files"]} == first["files"]
    if keras.backend.backend() == "tensorflow":
        assert len(second["files"]) <= len(first["files"]) + 1, (first, second)
    else:
        assert second["files"] == first["files"]
        # Bounded: JAX locks each read and write, so that processes may share the directory.
        assert first["locked"] and second["locked"]
        assert first["misses"] > 0 and first["hits"] == 0
        assert second["hits"] == first["misses"] and second["misses"] == 0


def test_pytorch_uses_no_cache(tmp_path):
    assert use_compilation_cache(str(tmp_path / "c"), backend="torch") is None
    assert not (tmp_path / "c").exists()


def test_bad_directories_are_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="Received: directory=''"):
        use_compilation_cache("", backend="jax")
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(ValueError, match=f"a file is there. Received: directory={a_file}"):
        use_compilation_cache(str(a_file), backend="tensorflow")
    with pytest.raises(ValueError, match="whitespace"):
        use_compilation_cache(str(tmp_path / "a b"), backend="tensorflow")


def test_tf_flags_keep_the_others_and_replace_an_earlier_cache():
    flags = tf_xla_flags("--tf_xla_auto_jit=2 --tf_xla_persistent_cache_directory=/old", "/new")
    assert flags == "--tf_xla_auto_jit=2 --tf_xla_persistent_cache_directory=/new"


def test_the_default_directory_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_directory() == str(tmp_path / "keras-transformer" / "compiled")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_directory().endswith(os.path.join(".cache", "keras-transformer", "compiled"))


def test_translate_refuses_an_unusable_cache_and_writes_a_usable_one(tmp_path, capsysbinary):
    from tests.cli.helpers import run_main

    a_file = tmp_path / "file"
    a_file.write_text("x")
    status, _, errors = run_main(
        capsysbinary,
        ["translate", "--model", FIXTURE, "--compilation-cache", str(a_file), "a b c"],
    )
    assert status == 2
    assert errors.strip().endswith(
        f"--compilation-cache: `directory` must be a directory; a file is there. Received: directory={a_file}"
    )
    if keras.backend.backend() == "torch":
        return
    # `translate` compiles its search with XLA for more than a few sentences.
    cache = tmp_path / "compiled"
    sentences = ["a b c"] * 20
    status, lines, _ = run_main(
        capsysbinary,
        ["translate", "--model", FIXTURE, "--compilation-cache", str(cache), *sentences],
    )
    assert status == 0 and len(lines) == 20
    # Opened before the model (what it holds: the subprocess test above; in this process
    # JAX's cache was set up by the test session, TensorFlow's flags maybe read already).
    assert cache.is_dir()


def test_a_directory_others_could_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ValueError, match=r"writable by its group or by others .* Mode 777"):
        use_compilation_cache(str(shared), backend="jax")
    shared.chmod(0o755)
    assert use_compilation_cache(str(shared), backend="tensorflow") == str(shared)
    os.environ.pop(TF_XLA_FLAGS, None)  # This process's TensorFlow keeps no cache.


def test_the_default_directory_that_cannot_be_used_is_a_note(tmp_path, monkeypatch, capsys):
    from keras_transformer.cli.common import open_compilation_cache

    shared = tmp_path / "keras-transformer" / "compiled"
    shared.mkdir(parents=True)
    shared.chmod(0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert open_compilation_cache("default") is True
    if keras.backend.backend() == "torch":  # No cache: the directory is not looked at.
        assert capsys.readouterr().err == ""
        assert open_compilation_cache(str(shared)) is True
        return
    assert "note: no compilation cache (The compilation cache directory must not be" in (
        capsys.readouterr().err
    )
    assert open_compilation_cache(str(shared)) is False
    assert "error: --compilation-cache: The compilation cache" in capsys.readouterr().err
