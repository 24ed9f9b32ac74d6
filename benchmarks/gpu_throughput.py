"""Training throughput and MFU of the paper's base model on one GPU (JAX and PyTorch backends).

The base preset (N=6, d_model 512, d_ff 2048, h 8, shared vocabulary 37,000, dropout 0.1),
batches of `--batch-size` pairs of `--length` source and target tokens (random ids), trained
with `fit` (`transformer_adam`, label smoothing 0.1), in float32 and in `mixed_bfloat16`, and
in bf16 with Keras' flash attention turned off (`keras.config.disable_flash_attention()`) to
show what the fused kernel gives. Each (backend, setting) runs in its own process. MFU is the
analytic training FLOPs (`train_throughput.training_flops`: 3 x forward, multiply-add = 2)
per second over the GPU's dense bf16 peak (H100 SXM: 989 TFLOP/s; H200 the same chip
rate), and over an 8192^3 matrix product of the same dtype timed by the same backend.

No TensorFlow is needed (the GPU machines of this project have none). Usage:

    KERAS_BACKEND=jax python benchmarks/gpu_throughput.py --out results.json
"""

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from train_throughput import training_flops  # noqa: E402

VOCABULARY = 37000  # the paper's shared English-German vocabulary
PEAK_BF16 = 989e12  # dense bf16 tensor-core FLOP/s of an H100 / H200 (SXM)
SETTINGS = ("float32", "mixed_bfloat16", "mixed_bfloat16-no-flash")


def matmul_rate(dtype, n=8192, repeats=10):
    """FLOP/s of an n^3 matrix product in `dtype` on the current backend's GPU."""
    import keras
    import numpy as np

    a = keras.ops.convert_to_tensor(np.random.rand(n, n).astype("float32"), dtype=dtype)
    product = keras.ops.matmul
    if keras.backend.backend() == "jax":
        import jax

        product = jax.jit(keras.ops.matmul)
    np.asarray(keras.ops.convert_to_numpy(product(a, a)[0, 0]))
    start = time.perf_counter()
    for _ in range(repeats):
        c = product(a, a)
    np.asarray(keras.ops.convert_to_numpy(c[0, 0]))
    return 2 * n**3 * repeats / (time.perf_counter() - start)


def worker(setting, batch_size, length, steps, warmup, matmul_size=8192, jit_compile=True):
    import keras
    import numpy as np

    import keras_transformer as kt

    policy = setting.replace("-no-flash", "")
    keras.config.set_dtype_policy(policy)
    if setting.endswith("-no-flash"):
        keras.config.disable_flash_attention()
    keras.utils.set_random_seed(0)
    model = kt.Transformer.from_preset("base", vocabulary_size=VOCABULARY)
    model.compile(
        optimizer=kt.transformer_adam(model.d_model), loss=kt.LabelSmoothedCrossentropy(0.1),
        jit_compile=jit_compile,
    )
    rng = np.random.default_rng(0)
    rows = batch_size * (warmup + steps)
    encoder = rng.integers(4, VOCABULARY, (rows, length)).astype("int32")
    decoder = rng.integers(4, VOCABULARY, (rows, length)).astype("int32")
    labels = rng.integers(4, VOCABULARY, (rows, length)).astype("int32")
    times = []

    class Timer(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            float(keras.ops.convert_to_numpy(logs["loss"]))  # waits for the step
            times.append(time.perf_counter() - self.start)

    start = time.perf_counter()
    model.fit(
        {"encoder_inputs": encoder, "decoder_inputs": decoder}, labels, batch_size=batch_size,
        epochs=1, shuffle=False, verbose=0, callbacks=[Timer()],
    )
    total = time.perf_counter() - start
    timed = sorted(times[warmup:])
    step = timed[len(timed) // 2]
    config = dict(
        vocabulary_size=model.vocabulary_size, d_model=model.d_model, ff_dim=model.ff_dim,
        num_layers=model.num_layers, batch_size=batch_size, source_length=length,
        target_length=length,
    )  # the sizes the preset built, for the FLOP count
    flops = training_flops(config)
    matmul_dtype = "bfloat16" if "bfloat16" in policy else "float32"
    rate = matmul_rate(matmul_dtype, matmul_size)
    return {
        "backend": keras.backend.backend(),
        "setting": setting,
        "jit_compile": jit_compile,
        "parameters": model.count_params(),
        "batch": f"{batch_size} x ({length} + {length}) tokens",
        "first_steps_s": round(sum(times[:warmup]), 2),
        "median_step_ms": round(step * 1000, 2),
        "tokens_per_s": round(batch_size * 2 * length / step),
        "model_tflops": round(flops / step / 1e12, 1),
        "mfu_vs_bf16_peak": round(flops / step / PEAK_BF16, 3),
        f"matmul_{matmul_dtype}_tflops": round(rate / 1e12, 1),
        "fraction_of_matmul": round(flops / step / rate, 3),
        "fit_seconds": round(total, 1),
        "steps": len(times),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--matmul-size", type=int, default=8192)
    parser.add_argument("--no-jit", action="store_true",
                        help="fit with jit_compile=False (PyTorch: eager instead of torch.compile)")
    parser.add_argument("--timeout", type=int, default=240, help="seconds per setting")
    parser.add_argument("--out", default=None, help="append one JSON line per setting")
    args = parser.parse_args()
    if args.worker:
        result = worker(
            args.worker, args.batch_size, args.length, args.steps, args.warmup, args.matmul_size,
            not args.no_jit,
        )
        print("RESULT " + json.dumps(result), flush=True)
        return
    for setting in args.settings:
        command = [sys.executable, __file__, "--worker", setting, "--batch-size",
                   str(args.batch_size), "--length", str(args.length), "--steps",
                   str(args.steps), "--warmup", str(args.warmup),
                   "--matmul-size", str(args.matmul_size)] + ["--no-jit"] * args.no_jit  # fmt: skip
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
            lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
            result = json.loads(lines[-1][7:]) if lines else {
                "setting": setting, "error": (done.stderr or done.stdout)[-1500:]}  # fmt: skip
        except subprocess.TimeoutExpired:
            result = {"setting": setting, "error": f"timed out after {args.timeout} s"}
        result.setdefault("backend", os.environ.get("KERAS_BACKEND"))
        print(json.dumps(result), flush=True)
        if args.out:
            with open(args.out, "a") as file:
                file.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
