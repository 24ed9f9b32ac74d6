"""MirroredStrategy on 2 logical CPU devices vs. one device, on the same global batches.

With `LORA_RANK=r` in the environment, LoRA of rank `r` on every projection trains
(`keras_transformer.models.lora`), the other weights frozen.

Run in a fresh process (the logical devices must be configured before TensorFlow starts):
`KERAS_BACKEND=tensorflow python mirrored_equivalence.py` prints one JSON line.
"""

import json
import os
import sys

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from keras_transformer.training import DistributionConfig, TrainingConfig, setup_distribution  # noqa: E402

context = setup_distribution(DistributionConfig(strategy="mirrored", cpu_devices=2))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer import Transformer  # noqa: E402
from keras_transformer.models.lora import enable_lora  # noqa: E402
from keras_transformer.training.building import compile_model  # noqa: E402

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 6
LORA_RANK = int(os.environ.get("LORA_RANK", 0))
VOCAB, ROWS, LENGTH = 40, 8, 12


def global_batches():
    """Global batches whose two halves hold very different numbers of real tokens."""
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(3):
        lengths = np.concatenate([rng.integers(2, 5, ROWS // 2), rng.integers(8, LENGTH + 1, ROWS // 2)])
        encoder = np.zeros((ROWS, LENGTH), "int32")
        decoder = np.zeros((ROWS, LENGTH), "int32")
        targets = np.zeros((ROWS, LENGTH), "int32")
        for row, length in enumerate(lengths):
            tokens = rng.integers(4, VOCAB, length)
            encoder[row, :length] = tokens
            decoder[row, 0] = 2
            decoder[row, 1:length] = tokens[: length - 1]
            targets[row, :length] = tokens
        batches.append(({"encoder_inputs": encoder, "decoder_inputs": decoder}, targets))
    return batches


BATCHES = global_batches()


def dataset():
    def generator():
        for step in range(STEPS):
            yield BATCHES[step % len(BATCHES)]

    spec = tf.TensorSpec((None, LENGTH), tf.int32)
    return tf.data.Dataset.from_generator(
        generator,
        output_signature=({"encoder_inputs": spec, "decoder_inputs": spec}, spec),
    )


def config(jit_compile):
    return TrainingConfig.from_dict(
        {
            "optimizer": {"warmup_steps": 4},
            "training": {"jit_compile": jit_compile, "label_smoothing": 0.1},
        }
    )


def make_model(dropout):
    keras.utils.set_random_seed(0)
    return Transformer(
        vocabulary_size=VOCAB, num_layers=1, d_model=32, num_heads=2, ff_dim=64, dropout=dropout, seed=0
    )


class StepLosses(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.losses = []

    def on_train_batch_end(self, batch, logs=None):
        self.losses.append(float(logs["loss"]))  # running mean over the epoch


def run(strategy_scope, initial_weights, jit_compile, dropout=0.0, strategy="mirrored"):
    with strategy_scope():
        model = make_model(dropout)
        model.set_weights(initial_weights)
        if LORA_RANK:
            enable_lora(model, LORA_RANK, "all", seed=0)
        compile_model(model, config(jit_compile), strategy=strategy)
    recorder = StepLosses()
    model.fit(dataset(), epochs=1, steps_per_epoch=STEPS, verbose=0, callbacks=[recorder])
    weights = {variable.path: np.array(variable.numpy()) for variable in model.weights}
    weights["logits"] = np.array(model(BATCHES[0][0], training=False))
    return np.array(recorder.losses), weights


def is_key_bias(path):
    # The attention key bias adds q.b_k to every score of a query: softmax ignores it, so its
    # exact gradient is 0 and Adam (epsilon 1e-9) turns float round-off into lr-sized steps.
    return path.endswith("key/bias")


def max_difference(first, second, select=lambda path: path != "logits" and not is_key_bias(path)):
    paths = [path for path in first if path in second and select(path)]  # LoRA's: in both runs
    return float(max(np.max(np.abs(first[path] - second[path])) for path in paths))


initial = [np.array(v.numpy()) for v in make_model(0.0).weights]
initial_by_path = {v.path: w for v, w in zip(make_model(0.0).weights, initial, strict=True)}
single = tf.distribute.OneDeviceStrategy("/cpu:0").scope
mirrored = context.tf_strategy.scope
results = {"replicas": context.num_replicas, "devices": list(context.tf_strategy.extended.worker_devices)}
reference_losses, reference_weights = run(single, initial, jit_compile=False, strategy="none")
results["single_losses"] = reference_losses.tolist()
results["weight_change"] = max_difference(reference_weights, initial_by_path)  # LoRA: frozen
if LORA_RANK:  # B starts at zero
    results["lora_change"] = max(
        float(np.max(np.abs(value)))
        for path, value in reference_weights.items()
        if path.endswith("lora_kernel_b")
    )
for jit in [int(j) == 1 for j in os.environ.get("JITS", "0,1").split(",")]:
    losses, weights = run(mirrored, initial, jit_compile=jit)
    results[f"mirrored_jit{int(jit)}_losses"] = losses.tolist()
    results[f"mirrored_jit{int(jit)}_loss_diff"] = float(np.max(np.abs(losses - reference_losses)))
    results[f"mirrored_jit{int(jit)}_weight_diff"] = max_difference(weights, reference_weights)
    results[f"mirrored_jit{int(jit)}_key_bias_diff"] = max_difference(
        weights, reference_weights, select=is_key_bias
    )
    results[f"mirrored_jit{int(jit)}_logits_diff"] = max_difference(
        weights, reference_weights, select=lambda path: path == "logits"
    )
    dropout_losses, dropout_weights = run(mirrored, initial, jit_compile=jit, dropout=0.1)
    results[f"dropout_jit{int(jit)}_finite"] = bool(
        np.all(np.isfinite(dropout_losses))
        and all(np.all(np.isfinite(w)) for w in dropout_weights.values())
    )
    results[f"dropout_jit{int(jit)}_losses"] = dropout_losses.tolist()
if os.environ.get("COMPARE_PLAIN_LOSS"):
    # The per-replica token mean (LabelSmoothedCrossentropy), for comparison: what
    # GlobalTokenMeanCrossentropy fixes.
    losses, weights = run(mirrored, initial, jit_compile=False, strategy="none")
    results["plain_loss_weight_diff"] = max_difference(weights, reference_weights)
    results["plain_loss_loss_diff"] = float(np.max(np.abs(losses - reference_losses)))
print("RESULT " + json.dumps(results), flush=True)
