"""A LoRA fine-tune (`training.lora_rank`) trained data-parallel, then on one device.

Usage: `python lora_distributed.py OUT_DIR STRATEGY [PORT RANK]`.
- `mirrored` (TensorFlow): `MirroredStrategy` over 2 logical CPU devices, one process.
- `data_parallel` (JAX): `DataParallel` over 2 CPU devices per process; with PORT and RANK,
  2 processes on loopback (run RANK 0 and 1 at the same time), else one.

Process 0 then trains the same fine-tune on one device. Each run writes OUT_DIR/NAME.npz
(`distributed.npz`, or `distributed0.npz` and `distributed1.npz`; `single.npz`): the LoRA
weights by path, the logits of the trained model and (process 0) of the translator the run
wrote (`preset/`, merged) on a fixed batch, `history_loss`. `LORA_RANK=0` in the
environment fine-tunes every weight instead (all weights written), for comparison.
"""

import os
import pathlib
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

from keras_transformer import Translator  # noqa: E402
from keras_transformer.models import lora  # noqa: E402
from keras_transformer.training import train  # noqa: E402
from keras_transformer.training.state import local_copy, to_numpy  # noqa: E402
from tests.training.test_fine_tune import fine_tune_config  # noqa: E402

OUT, STRATEGY = pathlib.Path(sys.argv[1]), sys.argv[2]
OUT.mkdir(parents=True, exist_ok=True)
PORT, RANK = (sys.argv[3], int(sys.argv[4])) if len(sys.argv) > 4 else (None, 0)
BATCH = {
    "encoder_inputs": np.array([[1, 40, 41, 42, 2, 0]], "int32"),
    "decoder_inputs": np.array([[1, 50, 51, 52]], "int32"),
}


def config(name, distribution):
    result = fine_tune_config(
        OUT, "", train_steps=4, steps_per_epoch=4, checkpoint_every=2, backup_every=2,
        average_checkpoints=1, lora_rank=int(os.environ.get("LORA_RANK", 4)), lora_targets="all",
    )
    # The data of tests/training/scripts/jax_data_parallel.py (whose runs agree).
    result["data"] = {
        "dataset": "number_words",
        "options": {"num_train": 400, "max_number": 2000},
        "num_validation": 16,
        "num_test": 16,
        "max_length": 16,
        "tokens_per_batch": 256,
    }
    result["output_dir"] = str(OUT / name)
    result["model"] = {**result["model"], "dropout": 0.0}  # the replicas draw other masks
    result["optimizer"]["learning_rate_scale"] = 1.0
    result["evaluation"]["beam_size"] = 1
    result["distribution"] = distribution
    return result


def dump(name, result):
    model = result.model
    arrays = {v.path: to_numpy(v) for v in lora.lora_weights(model) or model.weights}
    arrays["logits"] = to_numpy(local_copy(model)(BATCH, training=False))
    if RANK == 0:
        written = Translator.from_preset(OUT / name / "preset").model
        arrays["written_logits"] = to_numpy(written(BATCH, training=False))
    arrays["history_loss"] = np.array(result.history["loss"])
    np.savez(OUT / f"{name}{RANK if PORT and name == 'distributed' else ''}.npz", **arrays)


distribution = {"strategy": STRATEGY, "cpu_devices": 2}
if PORT:
    distribution.update(
        coordinator_address=f"127.0.0.1:{PORT}", num_processes=2, process_id=RANK,
        initialization_timeout=60,
    )
dump("distributed", train(config("distributed", distribution), verbose=0))
if RANK == 0:
    dump("single", train(config("single", {"strategy": "none"}), verbose=0))
print("DONE", RANK, flush=True)
