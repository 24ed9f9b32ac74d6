import os

import keras
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

if keras.backend.backend() == "torch":
    import torch

    # The test models are tiny: torch's intra-op thread pool costs far more than it
    # saves on them (measured: 40 tiny fit steps 60 s with the default pool under load,
    # 4.4 s with one thread).
    torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """`one_backend` tests run once, under TensorFlow: what they test does not depend on the
    Keras backend (or they start the other backends themselves), and every backend-specific
    part they touch has its own test on all three backends. CI time stays bounded."""
    if keras.backend.backend() == "tensorflow":
        return
    skip = pytest.mark.skip(reason="one_backend: runs on KERAS_BACKEND=tensorflow only")
    for item in items:
        if "one_backend" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _reset_keras_state():
    """Every test starts with float32 policy, a fixed seed and a clean session."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1337)
    yield
    keras.config.set_dtype_policy("float32")
    keras.backend.clear_session()


@pytest.fixture(scope="session")
def exported(tmp_path_factory):
    """`(translator, keras_path, saved_model_path)`: the number-words Translator of
    `tests/export_helpers.py`, trained, saved and exported once per session (TensorFlow only)."""
    if keras.backend.backend() != "tensorflow":
        pytest.skip("SavedModel export runs on the TensorFlow backend")
    from keras_transformer.export import export_saved_model
    from tests.export_helpers import train_number_translator

    directory = tmp_path_factory.mktemp("exported_number_translator")
    keras_path = directory / "translator.keras"
    saved_model_path = directory / "saved_model"
    translator = train_number_translator()
    translator.save(keras_path)
    export_saved_model(translator, saved_model_path)
    return translator, keras_path, saved_model_path
