"""Gradient accumulation under JAX `DataParallel` vs. one device without accumulation.

Run in a fresh process (the logical CPU devices must be set up before the backend starts):
`python accumulation_distributed.py` prints one `RESULT` JSON line. The distributed run
splits each batch of `ROWS` pairs into 2 micro-batches (equal token counts), each split again
over 2 CPU devices; the reference trains on the whole batches on one device. Both compile
with `compile_model`, as `train` does. (`MirroredStrategy` refuses accumulation: see
`keras_transformer.training.accumulation.check_strategy`.)
"""

import contextlib
import json
import os

os.environ["KERAS_BACKEND"] = "jax"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from keras_transformer.training import DistributionConfig, TrainingConfig, setup_distribution  # noqa: E402

context = setup_distribution(DistributionConfig(strategy="data_parallel", cpu_devices=2))

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_transformer import Transformer  # noqa: E402
from keras_transformer.training.building import compile_model  # noqa: E402
from tests.training.test_accumulation import ROWS, VOCAB, batches  # noqa: E402

ACCUMULATE, UPDATES = 2, 3


def make_model():
    return Transformer(
        vocabulary_size=VOCAB, num_layers=1, d_model=16, num_heads=2, ff_dim=32, dropout=0.0, seed=0
    )


def run(scope, initial, accumulate, strategy):
    config = TrainingConfig.from_dict(
        {
            "optimizer": {"warmup_steps": 2, "learning_rate_scale": 0.5},
            "training": {"accumulate_steps": accumulate, "jit_compile": False},
        }
    )
    x, y = batches(UPDATES, ACCUMULATE)
    with scope():
        model = make_model()
        model.set_weights(initial)
        compile_model(model, config, strategy=strategy)
        model.fit(x, y, batch_size=ROWS // accumulate, shuffle=False, verbose=0)
    iterations = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
    weights = {v.path: keras.ops.convert_to_numpy(v.value) for v in model.weights}
    return iterations, weights


keras.utils.set_random_seed(0)  # the same initial weights in every run
keras.utils.set_random_seed(0)  # the same initial weights in every run
initial = [keras.ops.convert_to_numpy(v.value) for v in make_model().weights]
iterations, distributed = run(context.scope, initial, ACCUMULATE, context.strategy)
reference_iterations, reference = run(contextlib.nullcontext, initial, 1, "none")
# The attention key biases are left out: their exact gradient is 0 (see test_distribution).
selected = [path for path in reference if not path.endswith("key/bias")]
initial_by_path = dict(zip(reference, initial, strict=True))
results = {
    "strategy": context.strategy,
    "replicas": context.num_replicas,
    # A one-process JAX cluster: the CPU devices all-reduce through gloo (see strategy.py).
    "cluster": [jax.distributed.is_initialized(), jax.process_count()],
    "iterations": [iterations, reference_iterations],
    "weight_diff": max(float(np.max(np.abs(distributed[p] - reference[p]))) for p in selected),
    "weight_change": max(float(np.max(np.abs(reference[p] - initial_by_path[p]))) for p in selected),
}
print("RESULT " + json.dumps(results), flush=True)
