"""Preset directories (`keras_transformer.saving.preset`): round trips, one error listing every
mismatch, loading under another backend, and the command line reading them.

The source model is the committed compatibility fixture `tests/fixtures/translator_v0_1.keras`
(a one-layer tiny translator trained on number words).
"""

import json
import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest

pytest.importorskip("tensorflow_text")

from keras_transformer import Transformer, Translator  # noqa: E402
from keras_transformer.saving.preset import FORMAT_VERSION  # noqa: E402

FIXTURE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "translator_v0_1.keras"
)
SOURCES = ["dos mil trescientos ochenta y tres", "cuarenta y dos", "tres", "mil " * 40, ""]
BATCH = {
    "encoder_inputs": np.array([[2, 40, 41, 42, 3, 0], [2, 17, 3, 0, 0, 0]], "int32"),
    "decoder_inputs": np.array([[2, 50, 51, 52], [2, 60, 0, 0]], "int32"),
}
TRANSLATOR_FILES = [
    "assets/tokenizer/vocabulary.txt",
    "config.json",
    "metadata.json",
    "model.weights.h5",
    "tokenizer.json",
    "translator.json",
]


@pytest.fixture(scope="module")
def translator():
    return Translator.load(FIXTURE)


@pytest.fixture(scope="module")
def preset(translator, tmp_path_factory):
    """A preset directory of the fixture translator (not to be modified: copy it first)."""
    return translator.save_to_preset(str(tmp_path_factory.mktemp("presets") / "translator"))


def files(directory):
    return sorted(
        os.path.relpath(os.path.join(root, name), directory).replace(os.sep, "/")
        for root, _, names in os.walk(directory)
        for name in names
    )


def outputs(translator):
    """What a loaded translator must reproduce: beam and greedy results, and the logits."""
    beam = translator.translate(SOURCES)
    greedy = translator.translate(SOURCES, beam_size=1)
    return (
        [(t.text, t.tokens, t.score, t.truncated) for t in beam + greedy],
        keras.ops.convert_to_numpy(translator.model(BATCH)),
    )


def crafted(preset, tmp_path, edit=None, remove=()):
    """A copy of `preset` with `edit(directory)` applied and the files `remove` deleted."""
    directory = tmp_path / "crafted"
    shutil.copytree(preset, directory)
    for name in remove:
        path = directory / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    if edit is not None:
        edit(directory)
    return str(directory)


def edit_json(name, change):
    def edit(directory):
        value = json.loads((directory / name).read_text())
        change(value)
        (directory / name).write_text(json.dumps(value))

    return edit


def load_error(directory, loader=Translator.from_preset):
    with pytest.raises(ValueError) as info:
        loader(directory)
    return str(info.value)


# --------------------------------------------------------------------------- round trips


def test_translator_round_trip_gives_the_same_translations_and_logits(translator, preset):
    assert files(preset) == TRANSLATOR_FILES
    metadata = json.loads(open(os.path.join(preset, "metadata.json")).read())
    assert metadata["format_version"] == FORMAT_VERSION
    assert metadata["class_name"] == "Translator"
    assert metadata["backend"] == keras.backend.backend()
    assert metadata["keras_version"] == keras.__version__
    assert metadata["parameter_count"] == translator.model.count_params() == 129856
    # keras-hub's config.json: the Keras serialized model.
    config = json.loads(open(os.path.join(preset, "config.json")).read())
    assert config["registered_name"] == "keras_transformer>Transformer"
    assert config["config"]["vocabulary_size"] == translator.tokenizer.vocabulary_size()
    vocabulary = open(os.path.join(preset, "assets/tokenizer/vocabulary.txt")).read().split("\n")
    assert vocabulary[:-1] == translator.tokenizer.get_vocabulary()

    loaded = Translator.from_preset(preset)
    expected, logits = outputs(translator)
    found, loaded_logits = outputs(loaded)
    assert found == expected
    np.testing.assert_array_equal(loaded_logits, logits)
    assert loaded.get_config() == translator.get_config()  # the search settings came along


def test_transformer_preset_and_the_model_of_a_translator_preset(translator, preset, tmp_path):
    # A Transformer of its own: separate source and target vocabularies.
    model = Transformer(
        vocabulary_size=70,
        target_vocabulary_size=90,
        num_layers=1,
        d_model=16,
        num_heads=2,
        ff_dim=32,
        share_embeddings=False,
    )
    directory = model.save_to_preset(tmp_path / "transformer")
    assert files(directory) == ["config.json", "metadata.json", "model.weights.h5"]
    batch = {key: np.minimum(value, 69) for key, value in BATCH.items()}
    loaded = Transformer.from_preset(directory)
    assert (loaded.vocabulary_size, loaded.target_vocabulary_size, loaded.d_model) == (70, 90, 16)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(loaded(batch)), keras.ops.convert_to_numpy(model(batch))
    )
    # The model of a Translator preset, keras-hub's backbone-from-task-preset.
    backbone = Transformer.from_preset(preset)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(backbone(BATCH)),
        keras.ops.convert_to_numpy(translator.model(BATCH)),
    )
    fresh = Transformer.from_preset(preset, load_weights=False)
    assert fresh.count_params() == backbone.count_params()
    assert not np.allclose(fresh.get_weights()[0], backbone.get_weights()[0])
    # The architecture names keep working, and ask for the vocabulary size.
    assert Transformer.from_preset("tiny", vocabulary_size=30).d_model == 64
    with pytest.raises(ValueError, match="`vocabulary_size` is needed to build 'tiny'"):
        Transformer.from_preset("tiny")
    with pytest.raises(ValueError, match="or a preset directory. Received: preset='huge'"):
        Transformer.from_preset("huge", vocabulary_size=30)


def test_a_compiled_model_is_saved_without_its_optimizer(tmp_path):
    from keras_transformer import LabelSmoothedCrossentropy, transformer_adam

    model = Transformer(vocabulary_size=20, num_layers=1, d_model=8, num_heads=2, ff_dim=16)
    model.compile(optimizer=transformer_adam(8, warmup_steps=2), loss=LabelSmoothedCrossentropy())
    tokens = np.array([[2, 5, 6, 3], [2, 7, 3, 0]], "int32")
    model.fit({"encoder_inputs": tokens, "decoder_inputs": tokens}, tokens, verbose=0)
    directory = model.save_to_preset(tmp_path / "trained")
    import h5py

    with h5py.File(os.path.join(directory, "model.weights.h5")) as file:
        assert "optimizer" not in file  # the weights alone, a third of the file
    config = json.loads(open(os.path.join(directory, "config.json")).read())
    assert "compile_config" not in config
    loaded = Transformer.from_preset(directory)
    assert getattr(loaded, "optimizer", None) is None  # uncompiled, as keras-hub backbones
    for saved, restored in zip(model.get_weights(), loaded.get_weights(), strict=True):
        np.testing.assert_array_equal(saved, restored)


def test_saving_replaces_a_preset_but_never_another_directory(translator, preset, tmp_path):
    target = tmp_path / "target"
    shutil.copytree(preset, target)
    (target / "stale.txt").write_text("from the earlier preset")
    translator.save_to_preset(target)
    assert files(target) == TRANSLATOR_FILES  # replaced as a whole
    other = tmp_path / "home"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(
        ValueError,
        match=r"new, empty or an earlier preset.*without metadata.json that holds 1 entry",
    ):
        translator.save_to_preset(other)
    assert (other / "notes.txt").read_text() == "mine"
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".tmp-")]


# --------------------------------------------------------------------------- one error per load


def test_missing_files_and_an_unknown_format_are_listed_in_one_error(preset, tmp_path):
    directory = crafted(
        preset,
        tmp_path,
        edit=edit_json("metadata.json", lambda value: value.update(format_version=7)),
        remove=["model.weights.h5", "tokenizer.json"],
    )
    message = load_error(directory)
    assert message.startswith("The preset directory cannot be loaded as a Translator (3 problems)")
    assert "- metadata.json: unknown format version: expected format_version=1, found 7" in message
    assert "- tokenizer.json: missing" in message
    assert "- model.weights.h5: missing" in message
    assert message.endswith(f"Received: directory={directory!r}")
    with pytest.raises(FileNotFoundError, match="No preset directory"):
        Translator.from_preset(tmp_path / "nowhere")


def test_architecture_mismatch_names_both_sides(preset, tmp_path):
    def wider(value):
        value["config"]["ff_dim"] = 96  # the weights were trained with 128

    directory = crafted(preset, tmp_path, edit=edit_json("config.json", wider))
    for loader in (Translator.from_preset, Transformer.from_preset):
        message = load_error(directory, loader)
        assert message.startswith(
            f"The preset directory cannot be loaded as a {loader.__self__.__name__} (2 problems)"
        )
        assert (
            "- architecture mismatch: config.json builds 88576 parameters, metadata.json "
            "records parameter_count=129856\n"
        ) in message
        assert (
            "- architecture mismatch between config.json and model.weights.h5: expected 43 "
            "arrays, 88576 weights (vocabulary_size=205, target_vocabulary_size=205, num_layers=1, "
            "d_model=64, num_heads=4, ff_dim=96); found 43 arrays, 129856 weights; shapes "
            "expected but not found: [(64, 96), (64, 96), (96,), (96,)], found but not "
            "expected: [(64, 256), (64, 256), (256,), (256,)]\n"
        ) in message


def test_vocabulary_mismatch_names_both_sizes(preset, tmp_path):
    def shorter(directory):
        path = directory / "assets" / "tokenizer" / "vocabulary.txt"
        path.write_text("\n".join(path.read_text().split("\n")[:-2]) + "\n")

    message = load_error(crafted(preset, tmp_path, edit=shorter))
    assert (
        "(1 problem):\n- assets/tokenizer: The `vocabulary.txt` asset of the tokenizer" in message
    )
    assert "it has 204 tokens. Received: vocabulary_size=204, vocabulary_size=205" in message


def test_configurations_are_checked_and_no_path_in_them_is_opened(preset, tmp_path, monkeypatch):
    def not_a_transformer(value):
        value["registered_name"] = "keras_transformer>Tokenizer"

    message = load_error(
        crafted(preset, tmp_path, edit=edit_json("config.json", not_a_transformer))
    )
    assert "`model` must be the configuration of a `Transformer`" in message
    shutil.rmtree(tmp_path / "crafted")

    # A vocabulary path in tokenizer.json is refused, never opened.
    opened = []
    real_open = open
    monkeypatch.setattr(
        "builtins.open", lambda path, *a, **k: opened.append(str(path)) or real_open(path, *a, **k)
    )

    def path_vocabulary(value):
        value["config"]["vocabulary"] = "/dev/zero"

    message = load_error(
        crafted(preset, tmp_path, edit=edit_json("tokenizer.json", path_vocabulary))
    )
    monkeypatch.undo()
    assert "it never opens a path" in message and "/dev/zero" in message
    assert "/dev/zero" not in opened
    shutil.rmtree(tmp_path / "crafted")

    def extra_setting(value):
        value["config"]["vocabulary_path"] = "/etc/passwd"

    message = load_error(
        crafted(preset, tmp_path, edit=edit_json("translator.json", extra_setting))
    )
    assert "translator.json: unknown settings ['vocabulary_path']" in message


def test_a_transformer_preset_is_not_a_translator(tmp_path):
    model = Transformer(vocabulary_size=20, num_layers=1, d_model=8, num_heads=2, ff_dim=16)
    message = load_error(model.save_to_preset(tmp_path / "model"))
    assert "(4 problems)" in message
    assert "expected a Translator preset, found a Transformer-only preset" in message
    assert "- translator.json: missing" in message and "- assets/tokenizer: missing" in message


# --------------------------------------------------------------------------- other processes


LOAD_SCRIPT = """
import json, sys
import keras, numpy as np
from keras_transformer import Translator
translator = Translator.from_preset(sys.argv[1])
batch = {key: np.array(value, "int32") for key, value in json.loads(sys.argv[2]).items()}
print(json.dumps({
    "backend": keras.backend.backend(),
    "beam": [[t.text, t.tokens, t.score] for t in translator.translate(json.loads(sys.argv[3]))],
    "logits": keras.ops.convert_to_numpy(translator.model(batch)).tolist(),
}))
"""


@pytest.mark.slow
@pytest.mark.one_backend
def test_a_preset_saved_under_one_backend_loads_under_the_other_two(translator, preset):
    # This process's backend saved `preset`; CI runs this test under each of the three.
    sources = SOURCES[:3]
    expected = [[t.text, t.tokens, t.score] for t in translator.translate(sources)]
    logits = keras.ops.convert_to_numpy(translator.model(BATCH))
    batch = json.dumps({key: value.tolist() for key, value in BATCH.items()})
    for backend in sorted({"tensorflow", "jax", "torch"} - {keras.backend.backend()}):
        result = subprocess.run(
            [sys.executable, "-c", LOAD_SCRIPT, preset, batch, json.dumps(sources)],
            env={**os.environ, "KERAS_BACKEND": backend},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        found = json.loads(result.stdout.strip().splitlines()[-1])
        assert found["backend"] == backend
        assert [row[:2] for row in found["beam"]] == [row[:2] for row in expected]
        np.testing.assert_allclose(
            [row[2] for row in found["beam"]], [row[2] for row in expected], atol=1e-4
        )
        np.testing.assert_allclose(found["logits"], logits, atol=1e-4)


@pytest.mark.one_backend  # The command's part; presets load under every backend above.
def test_cli_translates_with_a_preset_directory(translator, preset, capsysbinary):
    from keras_transformer.cli import main

    assert main(["translate", "--model", preset, "--scores", "tres", "cuarenta y dos"]) == 0
    lines = capsysbinary.readouterr().out.decode().splitlines()
    expected = translator.translate(["tres", "cuarenta y dos"])
    assert lines == [f"{t.score:.6f}\t{t.text}" for t in expected]  # as --n-best: 6 decimals


@pytest.mark.slow
@pytest.mark.one_backend  # Off TensorFlow it is the export of tests/export/test_export.py.
def test_cli_exports_a_preset_directory(translator, preset, tmp_path, capsysbinary):
    if keras.backend.backend() != "tensorflow":
        pytest.skip("the SavedModel is checked where TensorFlow is the backend")
    import tensorflow as tf

    from keras_transformer.cli import main

    exported = str(tmp_path / "saved_model")
    assert main(["export", preset, exported, "--no-jit-compile"]) == 0
    serve = tf.saved_model.load(exported).signatures["serving_default"]
    texts = serve(inputs=tf.constant(SOURCES[:3]))["translations"].numpy()
    assert [text.decode() for text in texts] == translator(SOURCES[:3])


@pytest.mark.parametrize(
    "version, sha256, loads",
    [("0.2.0", None, True), ("0.3.0", None, False), ("0.3.0", "absent", False), (None, None, False)],
)
def test_weights_without_a_sha256_load_only_from_a_0_2_0_preset(
    preset, tmp_path, caplog, version, sha256, loads
):
    def edit(value):
        value["keras_transformer_version"] = version
        if sha256 == "absent":
            del value["weights_sha256"]
        else:
            value["weights_sha256"] = sha256

    directory = crafted(preset, tmp_path, edit=edit_json("metadata.json", edit))
    if loads:
        with caplog.at_level("WARNING", logger="keras_transformer"):
            Translator.from_preset(directory)
        assert "written by keras_transformer 0.2.0, which recorded no SHA-256" in caplog.text
    else:
        message = load_error(directory)
        assert f"metadata.json records no weights_sha256, which keras_transformer {version!r}" in message


def test_weights_holding_nan_are_refused_at_load(preset, tmp_path):
    import hashlib

    import h5py

    def plant_nan(directory):
        with h5py.File(directory / "model.weights.h5", "r+") as weights:
            name = next(name for name in _dataset_names(weights) if "embedding" in name)
            values = weights[name][...]
            values.flat[0] = np.nan
            weights[name][...] = values
        digest = hashlib.sha256((directory / "model.weights.h5").read_bytes()).hexdigest()
        edit_json("metadata.json", lambda value: value.update(weights_sha256=digest))(directory)

    message = load_error(crafted(preset, tmp_path, edit=plant_nan))
    assert "- model.weights.h5: the weight " in message
    assert " holds 1 NaN or infinite values (a training that diverged" in message


def _dataset_names(group):
    names = []
    group.visit(names.append)
    return [name for name in names if hasattr(group[name], "shape")]
