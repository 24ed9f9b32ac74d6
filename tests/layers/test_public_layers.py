"""Every public layer runs the shared harness (`tests/test_case.py`) in its mirrored file."""

import pathlib

import keras

import keras_transformer.layers

HERE = pathlib.Path(__file__).parent


def test_every_public_layer_declares_a_harness_case_in_its_mirrored_test_file():
    layers = [
        obj
        for obj in map(keras_transformer.layers.__dict__.get, keras_transformer.layers.__all__)
        if isinstance(obj, type) and issubclass(obj, keras.layers.Layer)
    ]
    assert len(layers) >= 6
    for layer_cls in layers:
        module = layer_cls.__module__.rsplit(".", 1)[-1]
        text = (HERE / f"test_{module}.py").read_text()
        assert f"layer_case(\n    {layer_cls.__name__}," in text, (layer_cls, module)
        assert "run_layer_test(CASE, check, request)" in text, (layer_cls, module)
