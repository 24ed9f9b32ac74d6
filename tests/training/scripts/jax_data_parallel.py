"""Trains the same tiny model with `train()` on the JAX backend and dumps its final weights.

Usage: `python jax_data_parallel.py OUT_DIR PORT RANK` for RANK 0 and 1, at the same time.
The two processes, each with 2 CPU devices, train with `DataParallel` over the 4 devices and
write OUT_DIR/rank<RANK>.npz; then process 0 trains the same model on one device, on the same
global batches, and writes OUT_DIR/single.npz (weights by path, `logits` on a fixed batch,
`history_loss`).
"""

import os
import sys

os.environ["KERAS_BACKEND"] = "jax"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

from keras_transformer.training import TrainingConfig, train  # noqa: E402
from keras_transformer.training.state import to_numpy  # noqa: E402

OUT, PORT, RANK = sys.argv[1], sys.argv[2], int(sys.argv[3])


def config(name, distribution):
    return TrainingConfig.from_dict(
        {
            "output_dir": os.path.join(OUT, name),
            "data": {
                "dataset": "number_words",
                "options": {"num_train": 400, "max_number": 2000},
                "num_validation": 16,
                "num_test": 16,
                "vocabulary_size": 200,
                "max_length": 16,
                "tokens_per_batch": 256,
            },
            "model": {
                "preset": "",
                "num_layers": 1,
                "d_model": 32,
                "num_heads": 2,
                "ff_dim": 64,
                "dropout": 0.0,
            },
            # A small learning rate: Adam's first steps move every weight by about lr * sign(gradient),
            # so at large rates float round-off in near-zero gradients would dominate the comparison.
            "optimizer": {"warmup_steps": 4, "learning_rate_scale": 0.01},
            "training": {
                "train_steps": 6,
                "steps_per_epoch": 3,
                "average_checkpoints": 1,
                "backup_every": 100,
                "tensorboard": False,
            },
            "evaluation": {"bleu_every": -1, "test": False},
            "export": {"translator": False, "saved_model": False},
            "distribution": distribution,
        }
    )


def dump(name, result):
    model = result.model
    arrays = {variable.path: to_numpy(variable) for variable in model.weights}
    batch = {
        "encoder_inputs": np.array([[2, 5, 6, 7, 3, 0]], "int32"),
        "decoder_inputs": np.array([[2, 8, 9, 0, 0, 0]], "int32"),
    }
    from keras_transformer.training.state import local_copy

    arrays["logits"] = to_numpy(local_copy(model)(batch, training=False))
    arrays["history_loss"] = np.array(result.history["loss"])
    np.savez(os.path.join(OUT, f"{name}.npz"), **arrays)


distribution = {
    "strategy": "data_parallel",
    "cpu_devices": 2,
    "coordinator_address": f"127.0.0.1:{PORT}",
    "num_processes": 2,
    "process_id": RANK,
    "initialization_timeout": 60,
}
dump(f"rank{RANK}", train(config("multi", distribution), verbose=0))
if RANK == 0:
    # One device, no distribution (process-local computation; process 1 waits at exit).
    dump("single", train(config("single", {"strategy": "none"}), verbose=0))
print("DONE", RANK, flush=True)
