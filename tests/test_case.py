"""Our own layer-test helpers (the checks Keras' private `run_layer_test` makes)."""

import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
from keras import ops


def to_numpy(x):
    return np.asarray(ops.convert_to_numpy(x))


def snapshot(obj):
    """Values of every variable (weights and dropout seed states) of a layer or model."""
    return [to_numpy(v.value) for v in obj.variables]


def paper_rate(step, d_model=512, warmup=4000):
    """The paper's learning rate: d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)."""
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def restore(obj, values):
    for variable, value in zip(obj.variables, values):
        variable.assign(value)


def assert_config_round_trip(layer):
    """`get_config`/`from_config` and JSON serialization give an equal config."""
    config = layer.get_config()
    clone = layer.__class__.from_config(config)
    assert clone.get_config() == config
    serialized = keras.saving.serialize_keras_object(layer)
    revived = keras.saving.deserialize_keras_object(json.loads(json.dumps(serialized)))
    assert type(revived) is type(layer)
    assert revived.get_config() == config
    return clone


def assert_symbolic_matches_eager(layer, inputs, **call_kwargs):
    """The symbolic (functional) call gives the shape the eager call produces."""
    eager = layer(*inputs, **call_kwargs)
    symbolic_inputs = [
        keras.KerasTensor(x.shape, dtype=str(x.dtype)) if x is not None else None for x in inputs
    ]
    symbolic = layer(*symbolic_inputs, **call_kwargs)
    eager_list = eager if isinstance(eager, (tuple, list)) else [eager]
    symbolic_list = symbolic if isinstance(symbolic, (tuple, list)) else [symbolic]
    for e, s in zip(eager_list, symbolic_list):
        assert tuple(e.shape) == tuple(s.shape), (e.shape, s.shape)


def run_in_fresh_process(code, tmp_path, timeout=300):
    """Runs `code` in a new Python with the same backend; returns (stdout, stderr)."""
    script = tmp_path / "fresh_process.py"
    script.write_text(textwrap.dedent(code))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=timeout, env=env
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc.stdout, proc.stderr


def assert_no_build_warnings(text):
    lowered = text.lower()
    for needle in ("never built", "not built", "unbuilt", "did not load", "skipping variable"):
        assert needle not in lowered, f"warning {needle!r} found in:\n{text[-3000:]}"
