"""The compiled Transformer survives `.keras` save and a reload in a fresh process: outputs,
loss, schedule and optimizer state, and it keeps training.

Every public layer's reload is a check of the shared layer harness (`tests/test_case.py`)."""

import importlib.util

import keras
import numpy as np
import pytest

import keras_transformer as kt
from tests.test_case import assert_no_build_warnings, run_in_fresh_process, to_numpy

RNG = np.random.default_rng(0)
IDS = np.array([[5, 6, 7, 0], [8, 9, 0, 0]], "int32")
X = RNG.normal(size=(2, 4, 16)).astype("float32")


@pytest.mark.slow
def test_compiled_model_reloads_in_fresh_process(tmp_path):
    expected = {}
    transformer = kt.Transformer.from_preset("tiny", vocabulary_size=20, norm_first=True, seed=1)
    transformer.compile(
        optimizer=kt.transformer_adam(64, warmup_steps=10),
        loss=kt.LabelSmoothedCrossentropy(),
        metrics=[kt.MaskedAccuracy()],
    )
    source = RNG.integers(3, 20, size=(8, 6)).astype("int32")
    batch = {"encoder_inputs": source, "decoder_inputs": np.pad(source, ((0, 0), (1, 0)))[:, :-1]}
    batch["decoder_inputs"][:, 0] = 1
    transformer.fit(batch, source, batch_size=4, epochs=1, verbose=0)
    transformer.save(tmp_path / "transformer.keras")
    np.savez(tmp_path / "transformer_inputs.npz", **batch, targets=source)
    expected["transformer"] = to_numpy(transformer(batch))
    np.savez(tmp_path / "expected.npz", **expected)
    iterations = int(to_numpy(transformer.optimizer.iterations))

    stdout, stderr = run_in_fresh_process(
        f"""
        import warnings, logging, sys
        warnings.simplefilter("always")
        logging.captureWarnings(True)
        import numpy as np, keras
        import keras_transformer  # registers the package's classes
        tmp = {str(tmp_path)!r}
        expected = np.load(tmp + "/expected.npz")
        model = keras.saving.load_model(tmp + "/transformer.keras")
        data = dict(np.load(tmp + "/transformer_inputs.npz"))
        targets = data.pop("targets")
        out = keras.ops.convert_to_numpy(model(data))
        np.testing.assert_allclose(out, expected["transformer"], atol=1e-6)
        assert type(model).__name__ == "Transformer"
        assert type(model.loss).__name__ == "LabelSmoothedCrossentropy", model.loss
        schedule = model.optimizer.get_config()["learning_rate"]
        assert schedule["registered_name"] == "keras_transformer>WarmupSchedule", schedule
        assert int(model.optimizer.iterations) == {iterations}
        history = model.fit(data, targets, batch_size=4, epochs=2, verbose=0)
        assert int(model.optimizer.iterations) == {iterations} + 4
        assert all(np.isfinite(history.history["loss"]))
        print("RELOADED OK", history.history["loss"])
        """,
        tmp_path,
    )
    assert "RELOADED OK" in stdout
    assert_no_build_warnings(stdout + stderr)


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    """A functional model around an `EncoderBlock` and a tiny `Transformer`, saved to `.keras`,
    with their inputs and outputs."""
    directory = tmp_path_factory.mktemp("saved_models")
    x = keras.Input((None, 16))
    encoder = keras.Model(x, kt.EncoderBlock(4, 32)(x))
    transformer = kt.Transformer.from_preset("tiny", vocabulary_size=20, seed=1)
    batch = {"encoder_inputs": IDS, "decoder_inputs": IDS[:, ::-1].copy()}
    encoder.save(directory / "encoder.keras")
    transformer.save(directory / "transformer.keras")
    np.savez(directory / "expected.npz", encoder=to_numpy(encoder(X)), X=X,
             transformer=to_numpy(transformer(batch)), **batch)
    return directory


@pytest.mark.slow
@pytest.mark.one_backend  # The registration hook (`_lazy`) is pure Python.
@pytest.mark.parametrize(
    "imports",
    [
        "import keras_transformer; import keras",
        "import keras; import keras_transformer",
        # TensorFlow imports Keras while it initializes.
        pytest.param(
            "import keras_transformer; import tensorflow",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("tensorflow") is None, reason="no TensorFlow"
            ),
        ),
        # Keras is first imported inside the package's own `layers`: registering waits for it.
        "from keras_transformer.layers import EncoderBlock",
    ],
)
def test_importing_the_package_registers_its_classes_in_any_order(saved_models, imports, tmp_path):
    # `import keras_transformer` loads no framework; the classes must still be registered when
    # Keras is imported after it (by anyone), not only at the first use of a package name.
    stdout, _ = run_in_fresh_process(
        f"""
        import sys, warnings
        warnings.simplefilter("error", RuntimeWarning)
        {imports}
        import keras
        import numpy as np
        directory = {str(saved_models)!r}
        expected = np.load(directory + "/expected.npz")
        encoder = keras.saving.load_model(directory + "/encoder.keras")
        transformer = keras.saving.load_model(directory + "/transformer.keras")
        assert type(transformer).__name__ == "Transformer", type(transformer)
        out = {{"encoder": encoder(expected["X"]), "transformer": transformer(
            {{"encoder_inputs": expected["encoder_inputs"],
              "decoder_inputs": expected["decoder_inputs"]}})}}
        for name, value in out.items():
            value = keras.ops.convert_to_numpy(value)
            np.testing.assert_allclose(value, expected[name], atol=1e-6, err_msg=name)
        for name in ("Translator", "Tokenizer", "WarmupSchedule", "GlobalTokenMeanCrossentropy"):
            assert keras.saving.get_registered_object("keras_transformer>" + name), name
        hook = sys.modules["keras_transformer._lazy"]._KerasImportHook
        assert not any(isinstance(finder, hook) for finder in sys.meta_path)  # removed itself
        print("LOADED OK")
        """,
        tmp_path,
    )
    assert "LOADED OK" in stdout
