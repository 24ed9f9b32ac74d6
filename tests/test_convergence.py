"""The tiny preset learns the copy task (exact copies of held-out sequences)."""

import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.datasets import copy_task, to_model_inputs


def uncached_greedy(model, source, max_length, start_id=1):
    """Simple greedy decoding: re-run the decoder over a static buffer each step."""
    buffer = np.zeros((source.shape[0], max_length + 1), "int32")
    buffer[:, 0] = start_id
    for index in range(max_length):
        logits = model.predict_on_batch(
            {"encoder_inputs": source, "decoder_inputs": buffer[:, :-1]}
        )
        buffer[:, index + 1] = np.argmax(logits[:, index], axis=-1)
    return buffer[:, 1:]


@pytest.mark.slow
def test_tiny_preset_learns_copy_task():
    splits = copy_task(num_train=4000, num_validation=100, num_test=200, vocabulary_size=12,
                       max_length=7, seed=0)
    inputs, targets = to_model_inputs(splits.train)
    model = kt.Transformer.from_preset("tiny", vocabulary_size=12, dropout=0.0, seed=0)
    model.compile(
        optimizer=kt.transformer_adam(d_model=64, warmup_steps=100, scale=0.6),
        loss=kt.LabelSmoothedCrossentropy(label_smoothing=0.0),
        metrics=[kt.MaskedAccuracy()],
    )
    model.fit(inputs, targets, batch_size=32, epochs=10, verbose=0)  # 1250 steps
    test_inputs, test_targets = to_model_inputs(splits.test)
    predicted = uncached_greedy(model, test_inputs["encoder_inputs"], test_targets.shape[1])
    lengths = (test_targets != 0).sum(axis=1)
    exact = np.mean(
        [np.array_equal(p[:n], t[:n]) for p, t, n in zip(predicted, test_targets, lengths)]
    )
    assert exact >= 0.99, exact
