"""The compiled Transformer survives `.keras` save and a reload in a fresh process: outputs,
loss, schedule and optimizer state, and it keeps training.

Every public layer's reload is a check of the shared layer harness (`tests/test_case.py`)."""

import numpy as np
import pytest

import keras_transformer as kt
from tests.test_case import assert_no_build_warnings, run_in_fresh_process, to_numpy

RNG = np.random.default_rng(0)


@pytest.mark.slow
def test_compiled_model_reloads_in_fresh_process(tmp_path):
    expected = {}
    transformer = kt.Transformer.from_preset("tiny", vocab_size=20, norm_first=True, seed=1)
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
