"""Loading a crafted `.keras` file: refused with a clear `ValueError`, never reading the disk.

Each test saves a tiny `Translator`, rewrites one part of the file (the `config.json` or the
tokenizer's `vocabulary.txt` asset) and loads it with `Translator.load` or
`keras.saving.load_model`. Paths named in a file are guarded so that a regression fails
instead of hanging (`/dev/stdin`) or exhausting memory (`/dev/zero`); oversized shapes are
guarded so that nothing allocates.
"""

import builtins
import json
import os
import zipfile

import keras
import pytest

pytest.importorskip("tensorflow_text")

# The checks a crafted file meets run before any weight is made, in pure Python: one_backend
# (a Translator saved and loaded under each backend: tests/test_translator.py, tests/saving/).
pytestmark = pytest.mark.one_backend

from keras_transformer import Transformer, _checks  # noqa: E402
from keras_transformer.text import END_TOKEN, Tokenizer, train_tokenizer  # noqa: E402
from keras_transformer.translator import Translator  # noqa: E402

CORPUS = ["¿Dónde está la biblioteca?", "Where is the library?", "Hola, ¿qué tal?"] * 8
LOADERS = {"Translator.load": Translator.load, "keras.saving.load_model": keras.saving.load_model}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """`(path, config, vocabulary)` of a saved tiny Translator."""
    tokenizer = train_tokenizer(CORPUS, vocabulary_size=80)
    model = Transformer(
        vocabulary_size=tokenizer.vocabulary_size(), num_layers=1, d_model=16, num_heads=2, ff_dim=32
    )
    path = tmp_path_factory.mktemp("translator") / "translator.keras"
    Translator(model, tokenizer, max_source_length=8, extra_length=4).save(path)
    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read("config.json"))
    return path, config, tokenizer.get_vocabulary()


def rewrite(saved, tmp_path, edit_config=None, asset=None):
    """A copy of the saved file with `edit_config(config)` applied and the vocabulary asset
    replaced by the bytes `asset` (removed when `asset` is `b""`)."""
    source, config, _ = saved
    config = json.loads(json.dumps(config))
    if edit_config is not None:
        edit_config(config)
    target = tmp_path / "crafted.keras"
    with zipfile.ZipFile(source) as reader, zipfile.ZipFile(target, "w") as writer:
        for item in reader.infolist():
            data = reader.read(item)
            if item.filename == "config.json":
                data = json.dumps(config).encode()
            elif item.filename.endswith("vocabulary.txt") and asset is not None:
                if not asset:
                    continue
                data = asset
            writer.writestr(item, data)
    return target


def model_config(config):
    return config["config"]["model"]["config"]


def tokenizer_config(config):
    return config["config"]["tokenizer"]["config"]


def load_error(path, loader="keras.saving.load_model"):
    with pytest.raises(ValueError) as info:
        LOADERS[loader](path)
    return str(info.value)


# --------------------------------------------------------------------------- paths in config


@pytest.fixture
def hostile_paths(tmp_path, saved):
    """Paths a crafted config may name: a secret, a file that looks like the vocabulary,
    endless devices, and a missing file (whose absence must not be told apart)."""
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:TOP-SECRET-LINE\n", encoding="utf-8")
    lookalike = tmp_path / "lookalike.txt"
    lookalike.write_text("\n".join(saved[2]) + "\n", encoding="utf-8")
    return {
        "secret": str(secret),
        "lookalike": str(lookalike),
        "zero": "/dev/zero",
        "stdin": "/dev/stdin",
        "missing": str(tmp_path / "missing.txt"),
        "passwd": "/etc/passwd",
    }


@pytest.fixture
def guard_paths(monkeypatch, hostile_paths):
    """Makes opening or inspecting a hostile path fail the test (no hang, no read)."""
    hostile = set(hostile_paths.values())
    touched = []

    def guarded(function):
        def wrapper(path, *args, **kwargs):
            if isinstance(path, (str, os.PathLike)) and os.fspath(path) in hostile:
                touched.append(os.fspath(path))
                raise AssertionError(f"the loader touched a path named in the file: {path}")
            return function(path, *args, **kwargs)

        return wrapper

    for module, name in ((builtins, "open"), (os, "open"), (os, "stat"), (os, "lstat")):
        monkeypatch.setattr(module, name, guarded(getattr(module, name)))
    return touched


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_vocabulary_path_in_config_is_refused_without_touching_it(
    saved, tmp_path, hostile_paths, guard_paths, loader
):
    messages = {}
    for kind, hostile in hostile_paths.items():

        def edit(config, hostile=hostile):
            tokenizer_config(config)["vocabulary"] = hostile

        message = load_error(rewrite(saved, tmp_path, edit), loader)
        assert "`vocabulary`" in message and "never opens a path" in message
        assert "TOP-SECRET-LINE" not in message and "root:" not in message
        messages[kind] = message.split("Received:")[0]
    assert guard_paths == []
    # The same refusal whatever the path: nothing tells whether it exists or what it holds.
    assert len(set(messages.values())) == 1, messages


@pytest.mark.parametrize("vocabulary", [{"path": "/etc/passwd"}, 7, ["[PAD]", 3]])
def test_other_non_token_vocabularies_in_config_are_refused(saved, tmp_path, vocabulary):
    def edit(config):
        tokenizer_config(config)["vocabulary"] = vocabulary

    assert "`vocabulary`" in load_error(rewrite(saved, tmp_path, edit))


def test_token_list_in_config_must_fit_the_embedding(saved, tmp_path):
    # Tokens written in the configuration are data from the file itself, held to the same size.
    def edit(config):
        tokenizer_config(config)["vocabulary"] = saved[2][:-1]

    message = load_error(rewrite(saved, tmp_path, edit))
    assert f"has {len(saved[2]) - 1} tokens" in message and f"vocabulary_size={len(saved[2])}" in message


# --------------------------------------------------------------------------- oversized shapes


@pytest.mark.parametrize(
    "sizes",
    [
        dict(num_layers=2, d_model=16, num_heads=2, ff_dim=32),
        dict(
            num_layers=1,
            num_decoder_layers=2,
            d_model=8,
            num_heads=2,
            ff_dim=12,
            norm_first=True,
            share_embeddings=False,
            target_vocabulary_size=30,
        ),
    ],
)
def test_weight_memory_bound_is_exact_at_the_limit(monkeypatch, sizes):
    model = Transformer(vocabulary_size=20, **sizes)
    needed = 4 * model.count_params()  # float32 weights
    monkeypatch.setattr(_checks, "physical_memory_bytes", lambda: needed)
    Transformer(vocabulary_size=20, **sizes)
    monkeypatch.setattr(_checks, "physical_memory_bytes", lambda: needed - 1)
    with pytest.raises(ValueError, match=f"{model.count_params()} weights \\({needed} bytes"):
        Transformer(vocabulary_size=20, **sizes)


@pytest.fixture
def no_weights(monkeypatch):
    """Makes creating any weight fail the test: a refusal must come before allocation."""

    def add_weight(self, *args, **kwargs):
        raise AssertionError("a weight was allocated before the sizes were checked")

    monkeypatch.setattr(keras.layers.Layer, "add_weight", add_weight)


@pytest.mark.parametrize(
    "sizes, match",
    [
        ({"vocabulary_size": 10**12, "target_vocabulary_size": 10**12}, "vocabulary_size=1000000000000"),
        ({"d_model": 2**30}, "d_model=1073741824"),
        ({"ff_dim": 10**15}, "ff_dim=1000000000000000"),
        ({"num_layers": 10**9, "num_decoder_layers": 10**9}, "num_layers=1000000000"),
        ({"num_heads": 0}, "num_heads=0"),
        ({"d_model": "16"}, "d_model='16'"),
    ],
)
def test_oversized_or_invalid_model_sizes_are_refused_before_allocating(
    saved, tmp_path, no_weights, sizes, match
):
    message = load_error(rewrite(saved, tmp_path, lambda c: model_config(c).update(sizes)))
    assert match in message


@pytest.mark.parametrize(
    "settings, match",
    [({"extra_length": 10**12}, "extra_length=1000000000000"), ({"beam_size": 10**9}, "beam_size")],
)
def test_decoding_settings_beyond_memory_are_refused(saved, tmp_path, settings, match):
    message = load_error(rewrite(saved, tmp_path, lambda c: c["config"].update(settings)))
    assert match in message and "bytes of memory" in message


def test_a_part_of_another_class_is_refused(saved, tmp_path):
    def edit(config):
        config["config"]["tokenizer"] = config["config"]["model"]

    message = load_error(rewrite(saved, tmp_path, edit))
    assert "`tokenizer` must be the configuration of a `Tokenizer`" in message
    assert "'keras_transformer>Transformer'" in message


# --------------------------------------------------------------------------- wrong assets


def vocabulary_bytes(tokens):
    return ("\n".join(tokens) + "\n").encode("utf-8")


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_asset_with_a_different_size_than_the_embedding_is_refused(saved, tmp_path, loader):
    vocabulary = saved[2]
    for tokens in (vocabulary[:-1], vocabulary + ["zzz"]):
        message = load_error(rewrite(saved, tmp_path, asset=vocabulary_bytes(tokens)), loader)
        assert "vocabulary.txt" in message and f"vocabulary_size={len(vocabulary)}" in message
        assert str(len(tokens)) in message


def test_asset_without_reserved_tokens_is_refused(saved, tmp_path):
    tokens = ["zzz" if token == END_TOKEN else token for token in saved[2]]
    message = load_error(rewrite(saved, tmp_path, asset=vocabulary_bytes(tokens)))
    assert "vocabulary.txt" in message and "reserved tokens" in message


def test_non_utf8_asset_is_refused(saved, tmp_path):
    asset = vocabulary_bytes(saved[2][:-1]) + b"\xff\xfe\n"  # the same number of lines
    message = load_error(rewrite(saved, tmp_path, asset=asset))
    assert "vocabulary.txt" in message and "not valid UTF-8" in message


def test_oversized_asset_is_refused_before_reading(saved, tmp_path):
    asset = vocabulary_bytes(saved[2]) + b"x" * (2 << 20)  # 2 MiB line
    message = load_error(rewrite(saved, tmp_path, asset=asset))
    assert "vocabulary.txt" in message and "too large" in message


def test_missing_asset_is_refused(saved, tmp_path):
    # Without any asset, Keras never calls `load_assets`: `Translator.load` checks.
    message = load_error(rewrite(saved, tmp_path, asset=b""), "Translator.load")
    assert "no vocabulary asset" in message


def test_untouched_file_still_loads(saved):
    translator = Translator.load(saved[0])
    assert translator.tokenizer.get_vocabulary() == saved[2]
    assert isinstance(translator.tokenizer, Tokenizer)
