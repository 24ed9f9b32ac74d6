"""Package-level contracts: imports without TensorFlow, registered public classes."""

import os
import subprocess
import sys

import keras
import pytest

import keras_transformer


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_import_needs_no_tensorflow(backend):
    code = (
        "import sys\n"
        "sys.modules['tensorflow'] = None  # any `import tensorflow` now fails\n"
        "import keras_transformer, keras_transformer.datasets, keras_transformer.decoding\n"
        "import keras_transformer.text, keras_transformer.data, keras_transformer.training\n"
        "import keras_transformer.export, keras_transformer.cli, keras_transformer.generation\n"
        "assert 'tensorflow' not in {m.split('.')[0] for m in sys.modules if sys.modules[m]}\n"
        "print('ok')\n"
    )
    env = dict(os.environ, KERAS_BACKEND=backend)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-3000:]


def test_public_classes_are_registered_serializables():
    for name in keras_transformer.__all__:
        obj = getattr(keras_transformer, name)
        if isinstance(obj, type):
            registered = keras.saving.get_registered_name(obj)
            assert registered == f"keras_transformer>{name}", registered
    assert keras_transformer.__version__
