"""Our own layer-test helpers (the checks Keras' private `run_layer_test` makes)."""

import dataclasses
import inspect
import json
import os
import subprocess
import sys
import textwrap
import warnings

import keras
import numpy as np
import pytest
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


# --------------------------------------------------------------------------- the layer harness


@dataclasses.dataclass(frozen=True)
class LayerCase:
    """One public layer as the shared harness (`run_layer_test`) exercises it.

    Args:
        layer_cls: type. The layer class.
        init_kwargs: dict. Constructor arguments of a small instance.
        inputs: dict. NumPy inputs by call-argument name: the first is passed positionally,
            the others by keyword (keyword tensors are functional-model inputs too).
        dropout_kwargs: dict. Constructor arguments that make training calls random (for
            example `{"dropout": 0.5}`); `{}` for a layer without dropout. Defaults to `{}`.
        unchanged_by_training: tuple. Ends of variable paths one fit step may leave unchanged
            because their gradient is zero in exact arithmetic (attention's key bias: softmax
            is shift-invariant, so only rounding moves it). Defaults to `()`.
    """

    layer_cls: type
    init_kwargs: dict
    inputs: dict
    dropout_kwargs: dict = dataclasses.field(default_factory=dict)
    unchanged_by_training: tuple = ()

    def make(self, **changes):
        return self.layer_cls(**{**self.init_kwargs, **changes})

    def call(self, layer, inputs=None, **call_kwargs):
        first, *rest = (self.inputs if inputs is None else inputs).items()
        return layer(first[1], **dict(rest), **call_kwargs)

    def symbolic_inputs(self, fixed_shapes=True):
        """KerasTensors like the inputs (batch and time dimensions `None` unless fixed)."""
        return {
            name: keras.KerasTensor(
                x.shape if fixed_shapes else (None, None, *x.shape[2:]), dtype=str(x.dtype)
            )
            for name, x in self.inputs.items()
        }

    def functional_model(self, layer=None):
        inputs = {
            name: keras.Input(x.shape[1:], dtype=str(x.dtype), name=name)
            for name, x in self.inputs.items()
        }
        return keras.Model(inputs, self.call(layer or self.make(), inputs))


def first_output(outputs):
    return outputs[0] if isinstance(outputs, (tuple, list)) else outputs


def check_config(case):
    """get_config names every constructor argument; get_config/from_config and JSON round
    trips; the clone builds the same weights."""
    layer = case.make()
    config = layer.get_config()
    for name, parameter in inspect.signature(case.layer_cls.__init__).parameters.items():
        if name != "self" and parameter.kind is parameter.POSITIONAL_OR_KEYWORD:
            assert name in config, f"get_config() lacks the constructor argument {name!r}"
    case.call(layer)
    clone = assert_config_round_trip(layer)
    case.call(clone)
    assert [tuple(w.shape) for w in clone.weights] == [tuple(w.shape) for w in layer.weights]
    assert len(clone.trainable_weights) == len(layer.trainable_weights)


def check_symbolic_vs_eager(case):
    """A symbolic call, with fixed or unknown batch and time, gives the eager shape and dtype."""
    layer = case.make()
    eager = first_output(case.call(layer))
    for fixed in (True, False):
        symbolic = first_output(case.call(layer, case.symbolic_inputs(fixed)))
        expected = tuple(eager.shape) if fixed else (None, None, *tuple(eager.shape)[2:])
        assert tuple(symbolic.shape) == expected, (symbolic.shape, expected)
        assert keras.backend.standardize_dtype(symbolic.dtype) == keras.backend.standardize_dtype(
            eager.dtype
        )


def check_mixed_precision(case, policy="mixed_bfloat16"):
    """Under a mixed policy: variables in float32, outputs in the compute dtype and finite."""
    layer = case.make(dtype=policy)
    output = first_output(case.call(layer))
    compute_dtype = keras.DTypePolicy(policy).compute_dtype
    assert layer.compute_dtype == compute_dtype
    assert keras.backend.standardize_dtype(output.dtype) == compute_dtype
    for weight in layer.weights:
        assert keras.backend.standardize_dtype(weight.dtype) == "float32", weight.path
    assert np.isfinite(to_numpy(output).astype("float32")).all()


def check_training_dropout(case):
    """With dropout, training calls differ; inference is deterministic and equals the same
    weights with dropout 0. Without dropout (or with 0), training changes nothing."""
    layer = case.make(**case.dropout_kwargs)
    inference = to_numpy(first_output(case.call(layer, training=False)))
    np.testing.assert_array_equal(to_numpy(first_output(case.call(layer, training=False))), inference)
    first = to_numpy(first_output(case.call(layer, training=True)))
    second = to_numpy(first_output(case.call(layer, training=True)))
    if case.dropout_kwargs:
        assert not np.allclose(first, second), "training calls with dropout were equal"
        assert not np.allclose(first, inference), "training call with dropout equals inference"
    no_dropout = case.make(**{name: 0.0 for name in case.dropout_kwargs})
    case.call(no_dropout)
    assert len(no_dropout.weights) == len(layer.weights)
    for target, source in zip(no_dropout.weights, layer.weights):
        target.assign(source)
    np.testing.assert_allclose(
        to_numpy(first_output(case.call(no_dropout, training=False))), inference, atol=1e-6
    )
    np.testing.assert_allclose(
        to_numpy(first_output(case.call(no_dropout, training=True))), inference, atol=1e-6
    )


def check_fit_step(case):
    """One `fit` step on a functional model around the layer changes every trainable weight
    (but those `case.unchanged_by_training` names)."""
    layer = case.make()
    model = case.functional_model(layer)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mean_squared_error")
    # Off the initial point (zero biases, unit norm scales), where some gradients vanish
    # exactly: at init a post-LN block's output does not change with its first norm's scale.
    rng = np.random.default_rng(0)
    for weight in layer.trainable_weights:
        weight.assign(to_numpy(weight) + rng.normal(0, 0.1, weight.shape).astype("float32"))
    before = {w.path: to_numpy(w) for w in layer.trainable_weights}
    target = np.ones(model.output_shape[1:], "float32")[None].repeat(
        len(next(iter(case.inputs.values()))), axis=0
    )
    with warnings.catch_warnings():  # Dropout has no weights: fit runs its training call.
        warnings.filterwarnings("ignore", "The model does not have any trainable weights")
        history = model.fit(case.inputs, target, batch_size=len(target), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    unchanged = [
        path for path, value in before.items()
        if np.array_equal(value, to_numpy(_variable(layer, path)))
        and not path.endswith(case.unchanged_by_training or ("\0",))
    ]
    assert not unchanged, f"one fit step left these weights unchanged: {unchanged}"


def _variable(layer, path):
    return next(w for w in layer.trainable_weights if w.path == path)


LAYER_CHECKS = {
    "config": check_config,
    "symbolic_vs_eager": check_symbolic_vs_eager,
    "mixed_precision": check_mixed_precision,
    "training_dropout": check_training_dropout,
    "fit_step": check_fit_step,
}


def save_and_reload_in_fresh_process(cases, tmp_path):
    """Saves a functional model around each case's layer; ONE new Python reloads them all.

    `cases`: dict of `LayerCase` by name. Returns `{name: (expected, reloaded)}` outputs and
    the new process' stdout + stderr (warnings and logs included), so that each layer's test
    asserts on its own pair.
    """
    expected = {}
    for name, case in cases.items():
        model = case.functional_model()
        model.save(tmp_path / f"{name}.keras")
        np.savez(tmp_path / f"{name}_inputs.npz", **case.inputs)
        expected[name] = to_numpy(first_output(model(case.inputs)))
    stdout, stderr = run_in_fresh_process(
        f"""
        import warnings, logging
        warnings.simplefilter("always")
        logging.captureWarnings(True)
        import numpy as np, keras
        import keras_transformer  # registers the package's classes
        tmp = {str(tmp_path)!r}
        for name in {sorted(cases)!r}:
            model = keras.saving.load_model(tmp + "/" + name + ".keras")
            inputs = dict(np.load(tmp + "/" + name + "_inputs.npz"))
            output = model(inputs)
            output = output[0] if isinstance(output, (tuple, list)) else output
            np.save(tmp + "/" + name + "_reloaded.npy", keras.ops.convert_to_numpy(output))
        print("RELOADED OK")
        """,
        tmp_path,
    )
    assert "RELOADED OK" in stdout
    reloads = {name: (expected[name], np.load(tmp_path / f"{name}_reloaded.npy")) for name in cases}
    return reloads, stdout + stderr


def run_layer_test(case, check, request):
    """Runs one harness check on `case`: a key of `LAYER_CHECKS` or "fresh_process_reload".

    The checks are those of Keras' private `run_layer_test`, plus dropout and reload. The
    reload compares the case's outputs with those of the one fresh process that reloads every
    layer of the session (`fresh_process_reloads` in `tests/layers/conftest.py`), which runs
    only when the first reload check asks for it.
    """
    if check != "fresh_process_reload":
        LAYER_CHECKS[check](case)
        return
    outputs, log = request.getfixturevalue("fresh_process_reloads")
    name = case.layer_cls.__name__
    expected, reloaded = outputs[name]
    np.testing.assert_allclose(reloaded, expected, atol=1e-6, err_msg=name)
    assert_no_build_warnings(log)


# The reload starts a process (about 10 s, once per session): `slow`, like the other reloads.
HARNESS_CHECKS = [*LAYER_CHECKS, pytest.param("fresh_process_reload", marks=pytest.mark.slow)]

# Every `LayerCase` a collected test module declares (`layer_case(...)`), by class name: the
# fresh process reloads exactly the layers of the test files this session collected.
LAYER_CASES = {}


def layer_case(layer_cls, init_kwargs, inputs, **options):
    """Declares (and returns) the harness case of `layer_cls`; see `LayerCase`."""
    case = LayerCase(layer_cls, init_kwargs, inputs, **options)
    assert layer_cls.__name__ not in LAYER_CASES, f"two cases for {layer_cls.__name__}"
    LAYER_CASES[layer_cls.__name__] = case
    return case
