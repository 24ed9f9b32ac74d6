"""Our layers inside a user's own Keras models: train, save, reload."""

import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_transformer import EncoderBlock, PositionalEmbedding
from tests.test_case import to_numpy


def classification_data(num=256, length=8, vocab=12, seed=0):
    """Label: does token 3 occur in the (padded) sequence?"""
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, vocab, size=(num, length)).astype("int32")
    lengths = rng.integers(3, length + 1, size=num)
    labels = rng.integers(0, 2, size=num)
    for row in range(num):
        if labels[row]:
            ids[row, rng.integers(0, lengths[row])] = 3
        ids[row, lengths[row] :] = 0
    return ids, labels.astype("float32")


def functional_classifier():
    ids = keras.Input((None,), dtype="int32")
    x = PositionalEmbedding(vocabulary_size=12, d_model=32, dropout=0.0)(ids)
    x = EncoderBlock(num_heads=4, ff_dim=64, dropout=0.0)(x)  # implicit padding mask
    x = keras.layers.GlobalAveragePooling1D()(x)
    return keras.Model(ids, keras.layers.Dense(1, activation="sigmoid")(x))


def sequential_classifier():
    return keras.Sequential(
        [
            keras.Input((None,), dtype="int32"),
            PositionalEmbedding(vocabulary_size=12, d_model=32, dropout=0.0),
            EncoderBlock(num_heads=4, ff_dim=64, dropout=0.0),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )


@pytest.mark.parametrize("build", [functional_classifier, sequential_classifier])
def test_encoder_block_in_user_classifier_trains_and_round_trips(build, tmp_path):
    ids, labels = classification_data()
    model = build()
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="binary_crossentropy",
                  metrics=["accuracy"])
    history = model.fit(ids, labels, batch_size=32, epochs=12, verbose=0)
    assert history.history["accuracy"][-1] > 0.9, history.history["accuracy"]
    assert history.history["loss"][-1] < history.history["loss"][0]
    path = tmp_path / "classifier.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path)
    np.testing.assert_allclose(to_numpy(reloaded(ids)), to_numpy(model(ids)), atol=1e-6)
    # The reloaded model keeps training.
    reloaded.fit(ids, labels, batch_size=32, epochs=1, verbose=0)


@pytest.mark.one_backend
def test_loading_without_the_import_fails_with_the_message_the_docs_quote(tmp_path):
    """Keras' "Could not locate class" (docs/troubleshooting.md) names our package in the
    config it prints, and the import is all the fix needs."""
    path = tmp_path / "classifier.keras"
    functional_classifier().save(path)
    script = "import keras, sys; keras.saving.load_model(sys.argv[1])"
    failed = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=False
    )
    assert failed.returncode == 1
    lines = failed.stderr.strip().splitlines()
    assert lines[-1].startswith("Exception encountered: Could not locate class 'PositionalEmbedding'.")
    assert "'registered_name': 'keras_transformer>PositionalEmbedding'" in lines[-1]
    outer = "TypeError: <class 'keras.src.models.functional.Functional'> could not be deserialized"
    assert any(line.startswith(outer) for line in lines)
    docs = (pathlib.Path(__file__).parents[1] / "docs" / "troubleshooting.md").read_text()
    assert "Exception encountered: Could not locate class 'PositionalEmbedding'." in docs
    assert outer in docs
    fixed = "import keras, keras_transformer, sys; keras.saving.load_model(sys.argv[1])"
    subprocess.run([sys.executable, "-c", fixed, str(path)], check=True, capture_output=True)
