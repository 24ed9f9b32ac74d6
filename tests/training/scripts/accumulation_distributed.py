"""Gradient accumulation under JAX `DataParallel` over 2 processes vs. one device without it.

Usage: `python accumulation_distributed.py PORT RANK` for RANK 0 and 1, at the same time
(`tests/training/test_accumulation.py` starts both). Each process has one CPU device and
feeds its half of every micro-batch; the processes all-reduce through gloo. Each batch of
`ROWS` pairs is split into 2 micro-batches (equal token counts). Process 0 then trains the
reference on the whole batches on its own device and prints one `RESULT` JSON line. Both
compile with `compile_model`, as `train` does. (`MirroredStrategy` refuses accumulation: see
`keras_transformer.training.accumulation.check_strategy`.)

One process with 2 CPU devices would be simpler, but XLA's in-process all-reduce between
CPU devices hung now and then on a 2-core machine (9 runs of 23 of that version of this
script, one device waiting at the rendezvous for the other until XLA ended the process).
"""

import contextlib
import json
import os
import sys

os.environ["KERAS_BACKEND"] = "jax"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from keras_transformer.training import DistributionConfig, TrainingConfig, setup_distribution  # noqa: E402

PORT, RANK = sys.argv[1], int(sys.argv[2])
PROCESSES = 2
context = setup_distribution(
    DistributionConfig(
        strategy="data_parallel",
        coordinator_address=f"127.0.0.1:{PORT}",
        num_processes=PROCESSES,
        process_id=RANK,
        initialization_timeout=60,
    )
)

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_transformer import Transformer  # noqa: E402
from keras_transformer.training.building import compile_model  # noqa: E402
from keras_transformer.training.state import to_numpy  # noqa: E402
from tests.training.test_accumulation import ROWS, VOCAB, batches  # noqa: E402

ACCUMULATE, UPDATES = 2, 3


def make_model():
    return Transformer(
        vocabulary_size=VOCAB, num_layers=1, d_model=16, num_heads=2, ff_dim=32, dropout=0.0, seed=0
    )


def local_rows(array, micro_rows):
    """This process's rows of every micro-batch of `micro_rows` (its contiguous share)."""
    share = micro_rows // PROCESSES
    split = array.reshape(-1, PROCESSES, share, *array.shape[1:])
    return split[:, RANK].reshape(-1, *array.shape[1:])


def run(scope, initial, accumulate, strategy, local):
    config = TrainingConfig.from_dict(
        {
            "optimizer": {"warmup_steps": 2, "learning_rate_scale": 0.5},
            "training": {"accumulate_steps": accumulate},
        }
    )
    x, y = batches(UPDATES, ACCUMULATE)
    micro_rows = ROWS // accumulate
    batch_size = micro_rows
    if local:
        x = {key: local_rows(value, micro_rows) for key, value in x.items()}
        y = local_rows(y, micro_rows)
        batch_size = micro_rows // PROCESSES  # Per process: Keras assembles the global batch.
    with scope():
        model = make_model()
        model.set_weights(initial)
        compile_model(model, config, strategy=strategy)
        model.fit(x, y, batch_size=batch_size, shuffle=False, verbose=0)
    iterations = int(to_numpy(model.optimizer.iterations))
    weights = {v.path: to_numpy(v) for v in model.weights}
    return iterations, weights


keras.utils.set_random_seed(0)  # the same initial weights in every run and process
initial = [keras.ops.convert_to_numpy(v.value) for v in make_model().weights]
iterations, distributed = run(context.scope, initial, ACCUMULATE, context.strategy, local=True)
if RANK == 0:
    # One device, no distribution (process-local computation; process 1 waits at exit).
    reference_iterations, reference = run(contextlib.nullcontext, initial, 1, "none", local=False)
    # The attention key biases are left out: their exact gradient is 0 (see test_distribution).
    selected = [path for path in reference if not path.endswith("key/bias")]
    initial_by_path = dict(zip(reference, initial, strict=True))
    results = {
        "strategy": context.strategy,
        "replicas": context.num_replicas,
        "processes": context.num_processes,
        "iterations": [iterations, reference_iterations],
        "weight_diff": max(float(np.max(np.abs(distributed[p] - reference[p]))) for p in selected),
        "weight_change": max(
            float(np.max(np.abs(reference[p] - initial_by_path[p]))) for p in selected
        ),
    }
    print("RESULT " + json.dumps(results), flush=True)
print("DONE", RANK, flush=True)
