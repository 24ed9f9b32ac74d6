"""The training state of a LoRA model (`keras_transformer.training.lora_state`): checkpoints
hold the LoRA factors and the optimizer only, with a checked reference to the base written
once, and load back exactly; `Dense` is not patched."""

import hashlib
import shutil

import h5py
import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.models import lora
from keras_transformer.saving.weights import DamagedFileError
from keras_transformer.training import lora_state
from keras_transformer.training.averaging import average_checkpoints
from keras_transformer.training.checkpoints import load_weights, save_weights_atomically
from tests.test_case import to_numpy


def lora_model(seed):
    model = kt.Transformer.from_preset("tiny", vocabulary_size=30, num_layers=1, seed=seed)
    lora.enable_lora(model, rank=2, targets="all", seed=seed)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=kt.LabelSmoothedCrossentropy())
    model.optimizer.build(model.trainable_variables)
    rng = np.random.default_rng(seed)  # A trained state: every factor and moment nonzero.
    for variable in [*lora.lora_weights(model), *model.optimizer.variables]:
        variable.assign(rng.normal(size=variable.shape).astype(variable.dtype))
    return model


def state(model):
    return [to_numpy(v) for v in [*model.weights, *model.optimizer.variables]]


def test_checkpoints_hold_the_factors_and_a_reference_and_load_exactly(tmp_path):
    model = lora_model(seed=1)
    lora_state.use_base_path(model, tmp_path)
    first = save_weights_atomically(model, str(tmp_path / "checkpoints" / "a.weights.h5"))
    save_weights_atomically(model, str(tmp_path / "backup" / "b.weights.h5"))
    base = tmp_path / lora_state.BASE_FILENAME
    with h5py.File(tmp_path / "checkpoints" / "a.weights.h5", "r") as file:
        assert set(file) == {"lora", "optimizer"}  # no base weight
        assert f'"sha256": "{hashlib.sha256(base.read_bytes()).hexdigest()}"' in (
            file.attrs["base"]
        )
    assert "save_own_variables" not in vars(lora.lora_layers(model)["decoder_block_0/cross_attention/query"])

    for name in ("checkpoints/a.weights.h5", "backup/b.weights.h5"):
        fresh = lora_model(seed=2)  # other base weights, factors and moments
        load_weights(fresh, str(tmp_path / name))
        for ours, theirs in zip(state(fresh), state(model), strict=True):
            np.testing.assert_array_equal(ours, theirs)
    assert isinstance(first, str) and len(first) == 64


def test_a_changed_base_or_a_reference_elsewhere_is_refused(tmp_path):
    model = lora_model(seed=1)
    path = str(tmp_path / "ckpt.weights.h5")
    save_weights_atomically(model, path)
    other = lora_model(seed=3)
    lora_state.use_base_path(other, tmp_path / "other")
    (tmp_path / "other").mkdir()
    save_weights_atomically(other, str(tmp_path / "other" / "x.weights.h5"))
    shutil.copyfile(tmp_path / "other" / lora_state.BASE_FILENAME, tmp_path / lora_state.BASE_FILENAME)
    with pytest.raises(DamagedFileError, match="ckpt.weights.h5"):
        load_weights(lora_model(seed=2), path)
    with h5py.File(path, "a") as file:
        file.attrs["base"] = '{"path": "../../etc/lora_base.weights.h5", "sha256": "0"}'
    with pytest.raises(ValueError, match=r"Received: path='../../etc/lora_base.weights.h5'"):
        load_weights(lora_model(seed=2), path)


def test_averaging_lora_checkpoints_averages_the_factors(tmp_path):
    model = lora_model(seed=1)
    paths = [str(tmp_path / "checkpoints" / f"ckpt-{step}.weights.h5") for step in (1, 2)]
    factors = []
    for path in paths:
        save_weights_atomically(model, path)
        factors.append([to_numpy(variable) for variable in lora.lora_weights(model)])
        for variable in lora.lora_weights(model):
            variable.assign(variable + 1.0)
    fresh = lora_model(seed=2)
    average_checkpoints(fresh, paths)
    for variable, first, second in zip(lora.lora_weights(fresh), *factors, strict=True):
        np.testing.assert_allclose(to_numpy(variable), (first + second) / 2, rtol=1e-6)
    for ours, theirs in zip(lora.base_weights(fresh), lora.base_weights(model), strict=True):
        np.testing.assert_array_equal(to_numpy(ours), to_numpy(theirs))
