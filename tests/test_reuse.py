"""Our layers inside a user's own Keras models: train, save, reload."""

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
