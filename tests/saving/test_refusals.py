"""Refusals of hostile `.keras` files: one line of at most 300 characters naming the file,
the key and the reason, before any weight is read; no Keras warning printed before it.

A quantized tiny `Translator` is saved once; each case rewrites its `config.json` (the
model's `DTypePolicyMap` above all, which Keras would deserialize by the module a file names)
or its weights, and loads it with `keras_transformer.engines.load_translator`.
"""

import json
import os
import warnings
import zipfile

import keras
import numpy as np
import pytest

pytest.importorskip("tensorflow_text")

from keras_transformer import Transformer, Translator  # noqa: E402
from keras_transformer.engines import load_translator  # noqa: E402
from keras_transformer.text import train_tokenizer  # noqa: E402
from tests.saving.test_crafted_files import model_config  # noqa: E402
from tests.saving.test_crafted_files import rewrite as crafted  # noqa: E402

CORPUS = ["¿Dónde está la biblioteca?", "Where is the library?", "Hola, ¿qué tal?"] * 8


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    """`(path, config, translator)` of a saved int8 tiny Translator."""
    tokenizer = train_tokenizer(CORPUS, vocabulary_size=80)
    model = Transformer(
        vocabulary_size=tokenizer.vocabulary_size(),
        num_layers=1,
        d_model=16,
        num_heads=2,
        ff_dim=32,
    )
    translator = Translator(model, tokenizer, max_source_length=8, extra_length=4)
    translator.quantize("int8")
    path = tmp_path_factory.mktemp("int8") / "translator.keras"
    translator.save(path)
    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read("config.json"))
    return path, config, translator


def rewrite(quantized, target, edit):
    """A copy of the saved file with `edit(dtype config)` applied to the model's `dtype`."""
    source, config, _ = quantized
    config = json.loads(json.dumps(config))
    edit(config["config"]["model"]["config"]["dtype"])
    with zipfile.ZipFile(source) as reader, zipfile.ZipFile(target, "w") as writer:
        for item in reader.infolist():
            data = reader.read(item)
            writer.writestr(
                item, json.dumps(config).encode() if item.filename == "config.json" else data
            )
    return target


def policy_map(dtype):
    return dtype["config"]["policy_map"]


EVIL = {
    "module": "os",
    "class_name": "system",
    "config": {"command": "touch pwned"},
    "registered_name": None,
}
EDITS = {
    "os.system in the map": (
        lambda d: policy_map(d).update(shared_embedding=EVIL),
        "policy_map['shared_embedding']` must be a Keras QuantizedDTypePolicy",
    ),
    "os.system as the map": (lambda d: d.update(EVIL), "`dtype` must be a Keras DTypePolicy"),
    "os.system as the default": (
        lambda d: d["config"].update(default_policy=EVIL),
        "`dtype.default_policy` must be a Keras DTypePolicy",
    ),
    "an unknown mode": (
        lambda d: policy_map(d)["shared_embedding"]["config"].update(mode="int3"),
        "must be an int8 policy. Received: mode='int3'",
    ),
    "an unknown float policy": (
        lambda d: d["config"]["default_policy"]["config"].update(name="float99"),
        "`dtype.default_policy` must be one of float32",
    ),
    "a path of no layer": (
        lambda d: policy_map(d).update({"nowhere/dense": policy_map(d)["shared_embedding"]}),
        "names 1 path(s) of no quantizable layer of the model. Received: 'nowhere/dense'",
    ),
    "a layer without a quantized kernel": (
        lambda d: policy_map(d).update(
            {"encoder_block_0/feed_forward_norm": policy_map(d)["shared_embedding"]}
        ),
        "Received: 'encoder_block_0/feed_forward_norm'",
    ),
}


def refusal(path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError) as info:
            load_translator(path)
    assert not [w for w in caught if "keras" in w.filename], [str(w.message)[:200] for w in caught]
    message = str(info.value)
    assert "\n" not in message and len(message) <= 300, (len(message), message[:400])
    assert str(path) in message, message
    return message


@pytest.mark.parametrize("case", list(EDITS))
def test_a_hostile_policy_map_is_one_short_line_naming_the_file_and_key(
    quantized, tmp_path, case, monkeypatch
):
    edit, expected = EDITS[case]
    path = rewrite(quantized, tmp_path / "crafted.keras", edit)

    def no_weights(*args, **kwargs):  # every check runs before a weight is read
        raise AssertionError("weights were read")

    from keras.src.saving import saving_lib

    monkeypatch.setattr(saving_lib, "_load_state", no_weights)
    assert expected in refusal(path)
    assert not os.path.exists("pwned")


def test_the_untouched_int8_file_loads_and_translates_as_saved(quantized):
    path, _, translator = quantized
    loaded = load_translator(path)
    assert loaded.model.quantization == "int8"
    assert loaded.translate(CORPUS[:2]) == translator.translate(CORPUS[:2])


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_nan_or_infinite_weights_of_a_keras_file_are_refused(quantized, tmp_path, value):
    _, _, translator = quantized
    variable = next(w for w in translator.model.weights if w.path.endswith("norm/gamma"))
    before = keras.ops.convert_to_numpy(variable)
    try:
        changed = before.copy()
        changed[0] = value
        variable.assign(changed)
        translator.save(tmp_path / "diverged.keras")
    finally:
        variable.assign(before)
    message = refusal(tmp_path / "diverged.keras")
    assert f"the weight {variable.path} holds 1 NaN or infinite values" in message


# The crafted files of tests/saving/test_crafted_files.py, through `load_translator`.
CRAFTED = {
    "vocabulary path /etc/passwd": dict(
        edit_config=lambda c: c["config"]["tokenizer"]["config"].update(vocabulary="/etc/passwd")
    ),
    "a tokenizer of the model's class": dict(
        edit_config=lambda c: c["config"].update(tokenizer=c["config"]["model"])
    ),
    "os.system as the model": dict(
        edit_config=lambda c: c["config"]["model"].update(
            module="os", class_name="system", registered_name="os>system"
        )
    ),
    "a billion layers": dict(edit_config=lambda c: model_config(c).update(num_layers=10**9)),
    "d_model as a string": dict(edit_config=lambda c: model_config(c).update(d_model="16")),
    "a beam beyond memory": dict(edit_config=lambda c: c["config"].update(beam_size=10**9)),
    "a non-UTF-8 asset": dict(asset=b"\xff\xfe\n" * 80),
    "an oversized asset": dict(asset=b"x" * (2 << 20)),
    "no asset": dict(asset=b""),
}


@pytest.mark.parametrize("case", list(CRAFTED))
def test_every_crafted_file_is_one_short_line_naming_the_file(quantized, tmp_path, case):
    refusal(crafted(quantized, tmp_path, **CRAFTED[case]))
