"""`keras_transformer.losses`: the label-smoothed, padding-masked cross-entropy."""

import math

import keras
import numpy as np
import pytest

from keras_transformer import LabelSmoothedCrossentropy
from tests.test_case import to_numpy


def test_label_smoothed_loss_against_hand_computation():
    probs = np.array([[[0.7, 0.2, 0.1], [0.1, 0.6, 0.3], [0.3, 0.3, 0.4]]], "float32")
    logits = np.log(probs)
    y_true = np.array([[1, 2, 0]])  # last position is padding
    eps, vocab = 0.1, 3
    per_token = []
    for position, label in ((0, 1), (1, 2)):
        q = np.full(vocab, eps / vocab)
        q[label] += 1 - eps
        per_token.append(-(q * np.log(probs[0, position])).sum())
    expected = np.mean(per_token)
    loss = LabelSmoothedCrossentropy(label_smoothing=0.1)
    assert float(to_numpy(loss(y_true, logits))) == pytest.approx(expected, rel=1e-5)
    plain = LabelSmoothedCrossentropy(label_smoothing=0.0)
    assert float(to_numpy(plain(y_true, logits))) == pytest.approx(
        -(math.log(0.2) + math.log(0.3)) / 2, rel=1e-5
    )
    none = LabelSmoothedCrossentropy(label_smoothing=0.1, reduction="none")
    per = to_numpy(none(y_true, logits))
    np.testing.assert_allclose(per[0, :2], per_token, rtol=1e-5)
    assert per[0, 2] == 0.0
    # Padding positions contribute nothing, whatever their logits.
    changed = logits.copy()
    changed[0, 2] = [9.0, -9.0, 3.0]
    assert float(to_numpy(loss(y_true, changed))) == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ValueError, match="label_smoothing=1.0"):
        LabelSmoothedCrossentropy(label_smoothing=1.0)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_label_smoothed_loss_gradient_equals_softmax_minus_target(smoothing):
    # The loss has hand-written gradients on PyTorch and on TensorFlow outside XLA: they must
    # equal (softmax(z) - q) / number of real tokens, with 0 at padding.
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(2, 4, 7)).astype("float32") * 3
    y_true = np.array([[1, 6, 3, 0], [2, 2, 0, 0]], "int32")
    real = y_true != 0
    q = np.full(logits.shape, smoothing / 7, "float32")
    np.put_along_axis(q, y_true[..., None], 1 - smoothing + smoothing / 7, axis=-1)
    softmax = np.exp(logits - logits.max(-1, keepdims=True))
    softmax /= softmax.sum(-1, keepdims=True)
    expected = (softmax - q) * real[..., None] / real.sum()
    loss = LabelSmoothedCrossentropy(label_smoothing=smoothing)
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        def gradient(z):
            with tf.GradientTape() as tape:
                tape.watch(z)
                value = loss(y_true, z)
            return tape.gradient(value, z)

        variable = tf.constant(logits)
        results = [gradient(variable), tf.function(gradient, jit_compile=True)(variable)]
    elif backend == "jax":
        import jax

        results = [jax.grad(lambda z: loss(y_true, z))(logits)]
    else:
        import torch

        z = torch.tensor(logits, requires_grad=True)
        loss(torch.tensor(y_true), z).backward()
        results = [z.grad]
    for result in results:
        np.testing.assert_allclose(to_numpy(result), expected, atol=1e-6)


def test_label_smoothed_loss_is_exact_for_extreme_logits():
    # Logits hundreds apart: the true token's probability underflows float32 (e^-400), and
    # the log-sum-exp (taken from the softmax on some paths) must still be exact.
    rng = np.random.default_rng(5)
    logits = (rng.normal(size=(2, 3, 50)) * 150).astype("float32")
    y_true = np.argmin(logits, axis=-1).astype("int32")  # the least likely token everywhere
    z = logits.astype("float64")
    lse = z.max(-1) + np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1))
    true_logit = np.take_along_axis(z, y_true[..., None], -1)[..., 0]
    expected = np.mean(lse - 0.9 * true_logit - 0.1 * z.mean(-1))
    loss = LabelSmoothedCrossentropy(label_smoothing=0.1, ignore_class=None)
    values = [loss(y_true, logits)]
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        values.append(tf.function(loss, jit_compile=True)(y_true, tf.constant(logits)))
    for value in values:
        assert np.isfinite(expected) and expected > 300
        assert float(to_numpy(value)) == pytest.approx(expected, rel=1e-6)


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="tf.distribute only")
def test_loss_is_not_multiplied_by_replicas_under_mirrored_strategy(tmp_path):
    from tests.test_case import run_in_fresh_process

    stdout, _ = run_in_fresh_process(
        """
        import numpy as np, tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        import keras, keras_transformer as kt
        rng = np.random.default_rng(0)
        x = {"encoder_inputs": rng.integers(3, 12, (8, 5)).astype("int32"),
             "decoder_inputs": rng.integers(3, 12, (8, 6)).astype("int32")}
        y = rng.integers(3, 12, (8, 6)).astype("int32")
        def build():
            model = kt.Transformer.from_preset("tiny", vocabulary_size=12, dropout=0.0)
            model.compile(optimizer="adam", loss=kt.LabelSmoothedCrossentropy())
            return model
        single = build()
        expected = single.evaluate(x, y, batch_size=8, verbose=0)
        with tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
            mirrored = build()
        mirrored.set_weights(single.get_weights())
        got = mirrored.evaluate(x, y, batch_size=8, verbose=0)
        print("LOSSES", expected, got)
        assert abs(expected - got) < 1e-5 * max(1.0, abs(expected)), (expected, got)
        """,
        tmp_path,
    )
    assert "LOSSES" in stdout
