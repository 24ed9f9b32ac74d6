"""What a downloaded directory can make the loaders do: never run a graph it carries, never
follow a link out of the preset, never accept a file the model cannot use.

The presets are copies of the committed 0.2.0 fixture (`tests/fixtures/preset_v0_2`); the
planted SavedModel is a two-line `tf.Module` whose `serving_default` writes a marker file:
the marker must never appear.
"""

import contextlib
import os
import shutil
import socket
import threading
import time

import pytest

from keras_transformer import Translator, engines
from keras_transformer.cli import main

pytest.importorskip("tensorflow_text")

# What is loaded is decided in pure Python before any backend work: one_backend.
pytestmark = pytest.mark.one_backend

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")
PRESET = os.path.join(FIXTURES, "preset_v0_2")


@pytest.fixture
def preset(tmp_path):
    """A fresh copy of the fixture preset."""
    return shutil.copytree(PRESET, tmp_path / "preset")


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """`(saved_model_dir, marker)`: a SavedModel whose `serving_default` writes `marker`."""
    import tensorflow as tf

    root = tmp_path_factory.mktemp("planted")
    marker = str(root / "marker.txt")

    class Planted(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
        def serve(self, inputs):
            tf.io.write_file(marker, "the graph ran")
            return {"translations": inputs, "scores": tf.zeros_like(inputs, tf.float32)}

    module = Planted()
    directory = str(root / "saved_model")
    tf.saved_model.save(module, directory, signatures={"serving_default": module.serve})
    return directory, marker


def plant(planted, directory):
    """Copies the planted SavedModel's files into `directory`."""
    shutil.copytree(planted[0], directory, dirs_exist_ok=True)


@pytest.mark.parametrize("where", ["top", "version"])
def test_a_preset_carrying_a_saved_model_never_runs_it(planted, preset, where, capsys):
    _, marker = planted
    plant(planted, preset if where == "top" else preset / "1")
    for call in (
        lambda: engines.load_translator(preset)("hola"),
        lambda: engines.detect_engine(preset),
    ):
        with pytest.raises(ValueError, match=r"a SavedModel is a program.*Received: path="):
            call()
    assert main(["translate", "--model", str(preset), "hola"]) == 2
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1 and "saved_model.pb" in error
    # Named as a preset, it loads as the preset (translating with it is the preset tests'
    # business): the graph is never run either.
    if where == "top":
        assert isinstance(engines.load_translator(preset, engine="keras"), Translator)
    assert not os.path.exists(marker)


def test_a_saved_model_runs_only_without_preset_files_or_when_named(planted, tmp_path):
    directory, marker = planted
    assert engines.detect_engine(directory) == "saved_model"
    base = tmp_path / "served"  # A model server's base path of the SavedModel only.
    plant(planted, base / "3")
    assert engines.detect_engine(base) == "saved_model"
    # A directory of the preset's metadata only is a preset, never a SavedModel.
    shutil.copy(os.path.join(PRESET, "metadata.json"), base / "3")
    with pytest.raises(ValueError, match="a SavedModel is a program"):
        engines.detect_engine(base)
    assert not os.path.exists(marker)


@pytest.fixture(scope="module")
def loaded():
    """The fixture preset's Translator (not to be modified)."""
    return Translator.from_preset(PRESET)


def test_a_huge_beam_is_refused_by_the_memory_bound_before_the_search(
    loaded, monkeypatch, capsys
):
    def search(*args, **kwargs):
        raise AssertionError("the search ran")

    monkeypatch.setattr("keras_transformer.translator._search", search)
    for options in ({"beam_size": 10**9}, {"beam_size": 10**9, "num_hypotheses": 10**9}):
        with pytest.raises(ValueError, match=r"needs about \d+ bytes.*beam_size=1000000000"):
            loaded.translate(["hola"], **options)
    with pytest.raises(ValueError, match="beam_size=1000000000"):
        engines.check_options(loaded, 10**9, None)
    assert main(["translate", "--model", PRESET, "--beam-size", "1000000000", "hola"]) == 2
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1 and "--beam-size 1000000000" in error


def test_a_vocabulary_token_with_a_nul_byte_is_refused_at_load(preset, capsys):
    from keras_transformer.text import Tokenizer

    path = preset / "assets" / "tokenizer" / "vocabulary.txt"
    tokens = path.read_text(encoding="utf-8").split("\n")
    tokens[10] = "ab\x00c"
    path.write_text("\n".join(tokens), encoding="utf-8")
    with pytest.raises(ValueError, match=r"token 10 \(line 11\) holds a NUL byte.*vocabulary\.txt"):
        Translator.from_preset(preset)
    assert main(["translate", "--model", str(preset), "hola"]) == 2
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1 and "token 10" in error
    with pytest.raises(ValueError, match=r"Received: vocabulary\[5\]='x\\x00'"):
        Tokenizer(vocabulary=[*tokens[:5], "x\x00"])


def test_an_unknown_config_json_key_is_refused(preset):
    import json

    from keras_transformer import Transformer

    config = json.loads((preset / "config.json").read_text(encoding="utf-8"))
    config["config"]["evil"] = "os.system"
    (preset / "config.json").write_text(json.dumps(config), encoding="utf-8")
    for load in (Translator.from_preset, Transformer.from_preset):
        with pytest.raises(ValueError, match=r"config\.json: unknown settings \['evil'\]"):
            load(preset)


def broken_inputs(tmp_path):
    """`{name: (setting, value)}`: the model and tokenizer files a run must refuse."""
    broken = shutil.copytree(PRESET, tmp_path / "broken")
    os.remove(broken / "model.weights.h5")
    evil = shutil.copytree(PRESET, tmp_path / "evil")
    text = (evil / "config.json").read_text(encoding="utf-8")
    (evil / "config.json").write_text(text.replace("keras_transformer>Transformer", "os>system"))
    truncated = tmp_path / "truncated"
    truncated.mkdir()
    with open(os.path.join(FIXTURES, "translator_v0_1.keras"), "rb") as file:
        (truncated / "translator.keras").write_bytes(file.read(3000))
    (tmp_path / "zero.model").write_bytes(b"")
    (tmp_path / "random.model").write_bytes(os.urandom(4096))
    return {
        "broken preset": ("training.init_from", str(broken)),
        "preset naming os.system": ("training.init_from", str(evil)),
        "truncated translator.keras": ("training.init_from", str(truncated)),
        "zero-byte sentencepiece model": ("data.sentencepiece_model", str(tmp_path / "zero.model")),
        "random sentencepiece model": ("data.sentencepiece_model", str(tmp_path / "random.model")),
    }


def test_a_broken_init_from_or_sentencepiece_model_is_one_line_before_any_write(
    tmp_path, capsys
):
    for name, (setting, value) in broken_inputs(tmp_path).items():
        output_dir = tmp_path / f"run {name}"
        argv = ["train", "--set", f"output_dir={str(output_dir)!r}", "--set", f"{setting}={value!r}"]
        if setting.startswith("data."):
            argv += ["--set", "data.tokenizer='sentencepiece'"]
        assert main(argv) == 2, name
        error = capsys.readouterr().err.strip()
        assert len(error.splitlines()) == 1, (name, error)
        assert f"`{setting}`" in error and value in error, (name, error)
        assert not output_dir.exists(), name


@pytest.mark.parametrize(
    "name", ["config.json", "model.weights.h5", "assets", "assets/tokenizer/vocabulary.txt"]
)
def test_a_link_leading_out_of_the_preset_is_refused_before_it_is_opened(
    preset, tmp_path, name, monkeypatch
):
    outside = tmp_path / "outside" / name
    outside.parent.mkdir(parents=True)
    os.replace(preset / name, outside)
    os.symlink(outside, preset / name)
    opened = []
    real_open = open

    def guarded(path, *args, **kwargs):
        if os.fspath(path).startswith(str(tmp_path / "outside")):
            opened.append(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", guarded)
    with pytest.raises(ValueError, match=rf"{name}: a symbolic link leading outside the preset"):
        Translator.from_preset(preset)
    assert opened == []


def hub_cache(root, preset, links=True):
    """A Hugging Face hub cache at `root` holding `preset` as the repository owner/name, in
    the layout `snapshot_download` writes (files are links into `blobs/`). Returns the
    snapshot directory."""
    import hashlib

    repository = root / "hub" / "models--owner--name"
    snapshot = repository / "snapshots" / ("0" * 40)
    (repository / "refs").mkdir(parents=True)
    (repository / "refs" / "main").write_text("0" * 40)
    (repository / "blobs").mkdir()
    for parent, _, files in os.walk(preset):
        for file in files:
            relative = os.path.relpath(os.path.join(parent, file), preset)
            with open(os.path.join(parent, file), "rb") as handle:
                data = handle.read()
            blob = repository / "blobs" / hashlib.sha256(data).hexdigest()
            blob.write_bytes(data)
            target = snapshot / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.path.relpath(blob, target.parent), target)
    return snapshot


def test_a_hugging_face_cache_snapshot_loads(loaded, tmp_path):
    snapshot = hub_cache(tmp_path / "hf", PRESET)
    assert os.path.islink(snapshot / "assets" / "tokenizer" / "vocabulary.txt")
    translator = Translator.from_preset(snapshot)
    assert translator.get_config() == loaded.get_config()
    assert translator.tokenizer.get_vocabulary() == loaded.tokenizer.get_vocabulary()
    # A link out of the repository's blobs is refused all the same.
    os.remove(snapshot / "translator.json")
    os.symlink(os.path.join(PRESET, "translator.json"), snapshot / "translator.json")
    with pytest.raises(ValueError, match="translator.json: a symbolic link leading outside"):
        Translator.from_preset(snapshot)


def test_a_blobs_link_in_a_hugging_face_cache_is_no_link_root(tmp_path):
    # Before: `blobs -> elsewhere` made `elsewhere` a legal target of the snapshot's links.
    snapshot = hub_cache(tmp_path / "hf", PRESET)
    blobs = snapshot.parent.parent / "blobs"
    os.replace(blobs, tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", blobs)
    with pytest.raises(ValueError, match="a symbolic link leading outside the preset"):
        Translator.from_preset(snapshot)


def test_hub_handles_load_from_the_hubs_caches_offline(loaded, tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    pytest.importorskip("kagglehub")
    import huggingface_hub.constants
    from kagglehub.cache import Cache, get_cached_path
    from kagglehub.handle import parse_model_handle

    # Hugging Face: the cache `snapshot_download` writes, read with the network off.
    hub_cache(tmp_path / "hf", PRESET)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    # Kaggle: a versioned handle found complete in kagglehub's cache is not downloaded.
    monkeypatch.setenv("KAGGLEHUB_CACHE", str(tmp_path / "kaggle"))
    handle = parse_model_handle("owner/model/keras/tiny/1")
    shutil.copytree(PRESET, get_cached_path(handle))
    Cache().mark_as_complete(handle)
    for translator in (
        Translator.from_preset("hf://owner/name"),
        engines.load_translator("kaggle://owner/model/keras/tiny/1"),
    ):
        assert translator.get_config() == loaded.get_config()
    with pytest.raises(ValueError, match=r"huggingface_hub could not provide.*hf://owner/other"):
        Translator.from_preset("hf://owner/other")


@pytest.fixture
def silent_hub():
    """`http://127.0.0.1:PORT`: a server that accepts connections and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    connections = []

    def accept():
        with contextlib.suppress(OSError):  # closed at teardown
            while True:
                connections.append(server.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    server.close()
    for connection in connections:  # The given-up downloads end on the closed connections.
        connection.close()


def test_a_hub_that_never_answers_is_given_up_on_with_how_to_go_offline(
    silent_hub, tmp_path, monkeypatch, capsys
):
    pytest.importorskip("huggingface_hub")
    pytest.importorskip("kagglehub")
    import huggingface_hub.constants
    import kagglesdk.kaggle_env

    monkeypatch.setenv("KERAS_TRANSFORMER_HUB_TIMEOUT", "1")
    # HF_ENDPOINT and HF_HOME as huggingface_hub read them at its import.
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", silent_hub)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("KAGGLE_API_ENVIRONMENT", "TEST")  # kagglesdk's localhost endpoint
    monkeypatch.setitem(kagglesdk.kaggle_env._env_to_endpoint, kagglesdk.kaggle_env.KaggleEnv.TEST, silent_hub)
    monkeypatch.setenv("KAGGLEHUB_CACHE", str(tmp_path / "kaggle"))
    start = time.monotonic()
    assert main(["translate", "--model", "hf://owner/name", "hola"]) == 2
    errors = capsys.readouterr().err
    assert errors.count("\n") == 1
    assert "huggingface_hub got no answer from the hub for 1 s" in errors
    assert "set HF_HUB_OFFLINE=1" in errors and "hf://owner/name" in errors
    with pytest.raises(ValueError, match="kagglehub got no answer from the hub for 1 s.*local"):
        engines.load_translator("kaggle://owner/model/keras/tiny/1")
    assert time.monotonic() - start < 10


def test_empty_lines_skip_the_preprocessor_and_the_model(loaded, monkeypatch):
    from keras_transformer.translation import Translation

    calls = []
    preprocess = loaded.preprocessor.generate_preprocess
    monkeypatch.setattr(
        loaded.preprocessor,
        "generate_preprocess",
        lambda strings: calls.append(len(strings)) or preprocess(strings),
    )

    def search(*args, **kwargs):
        raise AssertionError("the search ran")

    monkeypatch.setattr("keras_transformer.translator._search", search)
    empty = Translation("", 0.0, [], False, ["[START]", "[END]"], [], None)
    assert loaded.translate(["", b"", ""]) == [empty] * 3
    assert loaded.translate("", num_hypotheses=2) == [empty]
    assert loaded([""] * 1000) == [""] * 1000
    assert calls == []
    # Whitespace-only lines too, once one encoding has shown that the tokenizer gives
    # whitespace no token (the translation the preprocessor and the search would give).
    assert loaded.translate([" ", b"\t \r\n", "  "]) == [empty] * 3
    assert loaded([" \t"] * 1000) == [""] * 1000
    assert calls == [1]
    assert loaded.preprocessor.generate_preprocess([" \t", "\x0c"])["empty"].numpy().all()


def test_a_saved_model_request_above_its_size_limit_is_refused(loaded):
    import tensorflow as tf

    from keras_transformer.export.saved_model import make_serving_function

    serve = make_serving_function(loaded, 1, 0.6, jit_compile=False, max_request_size=2)
    # Empty sentences: the limit is checked without running the model.
    assert serve(tf.constant(["", ""]))["translations"].numpy().tolist() == [b"", b""]
    with pytest.raises(tf.errors.InvalidArgumentError, match="at most 2 sentences"):
        serve(tf.constant(["", "", ""]))
