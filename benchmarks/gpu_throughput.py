"""Training throughput and MFU of the paper's base model on one GPU (JAX and PyTorch backends).

The base preset (N=6, d_model 512, d_ff 2048, h 8, shared vocabulary 37,000, dropout 0.1),
batches of `--batch-size` pairs of `--length` source and target tokens (random ids), trained
with `fit` (`transformer_adam`, label smoothing 0.1), in float32 and in `mixed_bfloat16`, and
in bf16 with Keras' flash attention turned off (`keras.config.disable_flash_attention()`) to
show what the fused kernel gives. Each (backend, setting) runs in its own process. MFU is the
analytic training FLOPs (`train_throughput.training_flops`: 3 x forward, multiply-add = 2)
per second over the GPU's dense bf16 peak (H100 SXM: 989 TFLOP/s; H200 the same chip
rate), and over an 8192^3 matrix product of the same dtype timed by the same backend.

Two step times: `median_step_ms`, each step waited for (a callback with a batch-end hook:
Keras then reads the logs back after every step, as the first figures were taken), and
`pipelined_step_ms`, steps dispatched back to back by a `fit` with no such hook (the
difference of a `fit` over 5 + `--steps` batches and one over 5). `--profile K` then traces
a hook-free `fit` of K steps: on JAX with `jax.profiler` (GPU kernel time per
step by kind: matrix products, attention, other fusions, copies, and the busiest kernels),
on PyTorch with `torch.profiler` (device and CPU time per operator) and `cProfile` (where
the Python time of a step goes). Summaries go to stdout and, with `--trace-dir`, to files.

No TensorFlow is needed (the GPU machines of this project have none). Usage:

    KERAS_BACKEND=jax python benchmarks/gpu_throughput.py --out results.json
    KERAS_BACKEND=jax python benchmarks/gpu_throughput.py --settings mixed_bfloat16 \
        --batch-size 200 --profile 5 --trace-dir /tmp/traces
"""

import argparse
import collections
import cProfile
import glob
import gzip
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
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


# === Profile summaries ===
def kernel_kind(name):
    """A GPU kernel's kind, from its name: matmul, attention, copy or other (fusions)."""
    lower = name.lower()
    if any(key in lower for key in ("flash", "fmha", "attention", "cudnn")):
        return "attention"
    if any(key in lower for key in ("gemm", "xmma", "cutlass", "cublas", "nvjet", "wgmma")):
        return "matmul"
    if any(key in lower for key in ("memcpy", "memset", "copy")):
        return "copy"
    return "other"


def summarize_kernels(durations, counts, steps, wall_seconds, top=15):
    """Per-step GPU time by kind and the `top` busiest kernels, from total ns per name."""
    busy = sum(durations.values())
    kinds = collections.Counter()
    for name, ns in durations.items():
        kinds[kernel_kind(name)] += ns
    return {
        "profiled_steps": steps,
        "wall_ms_per_step": round(wall_seconds * 1000 / steps, 2),
        "gpu_busy_ms_per_step": round(busy / 1e6 / steps, 2),
        "ms_per_step_by_kind": {k: round(v / 1e6 / steps, 2) for k, v in kinds.most_common()},
        "top_kernels": [
            {
                "name": name[:140],
                "ms_per_step": round(ns / 1e6 / steps, 3),
                "calls_per_step": round(counts[name] / steps, 1),
                "kind": kernel_kind(name),
            }
            for name, ns in durations.most_common(top)
        ],  # fmt: skip
    }


def jax_trace_summary(trace_dir, steps, wall_seconds):
    """Kernel time per step from the `jax.profiler` trace in `trace_dir` (its GPU planes)."""
    from jax.profiler import ProfileData

    paths = sorted(glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True))
    if not paths:
        return {"error": f"no .xplane.pb under {trace_dir}"}
    data = ProfileData.from_file(paths[-1])
    durations, counts, lines = collections.Counter(), collections.Counter(), []
    for plane in data.planes:
        if not plane.name.startswith("/device:GPU"):
            continue
        for line in plane.lines:
            events = list(line.events)
            lines.append((plane.name, line.name, len(events),
                          round(sum(e.duration_ns for e in events) / 1e6, 2)))  # fmt: skip
            # Kernels appear once per stream line; "XLA Ops" / "XLA Modules" repeat them.
            if line.name.lower().startswith("stream"):
                for event in events:
                    durations[event.name] += event.duration_ns
                    counts[event.name] += 1
    summary = summarize_kernels(durations, counts, steps, wall_seconds)
    summary["gpu_lines"] = [
        {"plane": p, "line": n, "events": c, "total_ms": t} for p, n, c, t in lines
    ]
    summary["trace_file"] = paths[-1]
    return summary


def torch_profile_summary(profiler, steps, wall_seconds, trace_dir=None):
    """Device time per step by kernel, and the operators that cost the most CPU time."""
    import torch

    durations, counts = collections.Counter(), collections.Counter()
    for event in profiler.events():
        device_type = getattr(event, "device_type", None)
        if device_type is not None and device_type == torch.autograd.DeviceType.CUDA:
            durations[event.name] += int(event.device_time * 1000)  # us -> ns
            counts[event.name] += 1
    summary = summarize_kernels(durations, counts, steps, wall_seconds)
    averages = profiler.key_averages()
    summary["cpu_ops"] = averages.table(sort_by="self_cpu_time_total", row_limit=25)
    summary["device_ops"] = averages.table(sort_by="device_time_total", row_limit=15)
    summary["cpu_ops_per_step"] = round(sum(a.count for a in averages) / steps)
    if trace_dir:
        with tempfile.NamedTemporaryFile(suffix=".json") as raw:
            profiler.export_chrome_trace(raw.name)
            with open(raw.name, "rb") as source:
                with gzip.open(os.path.join(trace_dir, "torch_trace.json.gz"), "wb") as target:
                    target.write(source.read())
    return summary


def python_profile_summary(profile, steps, top=30):
    """The functions with the most own Python time in `steps` steps (`cProfile`)."""
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return {"profiled_steps": steps, "pstats": text.getvalue()}


# === Worker: one (backend, setting) per process ===
def worker(
    setting,
    batch_size,
    length,
    steps,
    warmup,
    matmul_size=8192,
    jit_compile=True,
    dropout=None,
    profile_steps=0,
    trace_dir=None,
    projection_dtype=None,
):
    import keras
    import numpy as np

    import keras_transformer as kt

    policy = setting.replace("-no-flash", "")
    keras.config.set_dtype_policy(policy)
    if setting.endswith("-no-flash"):
        keras.config.disable_flash_attention()
    keras.utils.set_random_seed(0)
    options = {} if dropout is None else {"dropout": dropout}
    if projection_dtype:
        options["projection_dtype"] = projection_dtype
    model = kt.Transformer.from_preset("base", vocabulary_size=VOCABULARY, **options)
    model.compile(
        optimizer=kt.transformer_adam(model.d_model),
        loss=kt.LabelSmoothedCrossentropy(0.1),
        jit_compile=jit_compile,
    )
    backend = keras.backend.backend()
    rng = np.random.default_rng(0)
    rows = batch_size * max(warmup + steps, 5 + steps, profile_steps)
    encoder = rng.integers(4, VOCABULARY, (rows, length)).astype("int32")
    decoder = rng.integers(4, VOCABULARY, (rows, length)).astype("int32")
    labels = rng.integers(4, VOCABULARY, (rows, length)).astype("int32")
    times = []

    def fit(batches, callbacks=()):
        """`fit` over the first `batches` batches; seconds until its last loss is read."""
        rows = batch_size * batches
        start = time.perf_counter()
        history = model.fit(
            {"encoder_inputs": encoder[:rows], "decoder_inputs": decoder[:rows]},
            labels[:rows],
            batch_size=batch_size,
            epochs=1,
            shuffle=False,
            verbose=0,
            callbacks=list(callbacks),
        )
        float(history.history["loss"][-1])
        return time.perf_counter() - start

    class Timer(keras.callbacks.Callback):
        # A batch-end hook: Keras reads the logs back after every step (`pythonify_logs`),
        # so each step is waited for, as in a `fit` with any such callback.
        def on_train_batch_begin(self, batch, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            float(keras.ops.convert_to_numpy(logs["loss"]))
            times.append(time.perf_counter() - self.start)

    total = fit(warmup + steps, [Timer()])
    timed = sorted(times[warmup:])
    step = timed[len(timed) // 2]
    # No batch-end hook: steps are dispatched back to back. Two lengths, so that what a
    # `fit` call costs besides its steps cancels out.
    pipelined = (fit(5 + steps) - fit(5)) / steps
    profiles = {}
    if profile_steps:
        fit(profile_steps)  # the same call, warm
        if backend == "jax":
            import jax

            profiles["jax_dir"] = os.path.join(
                trace_dir or "/tmp", f"jax_{setting}_{batch_size}_{projection_dtype or 'compute'}"
            )
            jax.profiler.start_trace(profiles["jax_dir"])
            profiles["wall"] = fit(profile_steps)
            jax.profiler.stop_trace()
        elif backend == "torch":
            import torch

            activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
            with torch.profiler.profile(activities=activities) as profiler:
                profiles["wall"] = fit(profile_steps)
            profiles["torch"] = profiler
    config = dict(
        vocabulary_size=model.vocabulary_size,
        d_model=model.d_model,
        ff_dim=model.ff_dim,
        num_layers=model.num_layers,
        batch_size=batch_size,
        source_length=length,
        target_length=length,
    )  # the sizes the preset built, for the FLOP count
    flops = training_flops(config)
    matmul_dtype = "bfloat16" if "bfloat16" in policy else "float32"
    rate = matmul_rate(matmul_dtype, matmul_size)
    result = {
        "backend": backend,
        "setting": setting,
        "jit_compile": jit_compile,
        "dropout": model.dropout,
        "projection_dtype": model.projection_dtype,
        "parameters": model.count_params(),
        "device": device_name(backend),
        "batch": f"{batch_size} x ({length} + {length}) tokens",
        "tokens_per_step": batch_size * 2 * length,
        "first_steps_s": round(sum(times[:warmup]), 2),
        "median_step_ms": round(step * 1000, 2),
        "pipelined_step_ms": round(pipelined * 1000, 2),
        "tokens_per_s": round(batch_size * 2 * length / min(step, pipelined)),
        "model_tflops": round(flops / min(step, pipelined) / 1e12, 1),
        "mfu_vs_bf16_peak": round(flops / min(step, pipelined) / PEAK_BF16, 3),
        f"matmul_{matmul_dtype}_tflops": round(rate / 1e12, 1),
        "fraction_of_matmul": round(flops / min(step, pipelined) / rate, 3),
        "fit_seconds": round(total, 1),
        "steps": len(times),
    }
    if profile_steps:
        wall = profiles["wall"]
        if backend == "jax":
            result["profile"] = jax_trace_summary(profiles["jax_dir"], profile_steps, wall)
        elif backend == "torch":
            result["profile"] = torch_profile_summary(
                profiles["torch"], profile_steps, wall, trace_dir
            )
            result["python_profile"] = python_steps_profile(model, encoder, decoder, labels,
                                                            batch_size, profile_steps)  # fmt: skip
    return result


def device_name(backend):
    if backend == "jax":
        import jax

        return jax.devices()[0].device_kind
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def report(result, trace_dir):
    """One JSON line without the profiles; the profiles to `trace_dir` and a short summary."""
    profiles = {key: result.pop(key) for key in ("profile", "python_profile") if key in result}
    print(json.dumps(result), flush=True)
    if not profiles:
        return result
    batch = result.get("tokens_per_step", "")
    projection = result.get("projection_dtype") or "compute"
    name = (
        f"profile_{result.get('backend')}_{result.get('setting')}_{batch}tokens_{projection}.json"
    )
    path = os.path.join(trace_dir or "/tmp", name)
    with open(path, "w") as file:
        json.dump(profiles, file, indent=1)
    result["profile_file"] = path
    kernels = profiles.get("profile", {})
    if "ms_per_step_by_kind" in kernels:
        print(
            f"  profile: wall {kernels['wall_ms_per_step']} ms/step, GPU busy "
            f"{kernels['gpu_busy_ms_per_step']} ms/step, by kind {kernels['ms_per_step_by_kind']}"
        )
        for row in kernels["top_kernels"][:8]:
            print(
                f"    {row['ms_per_step']:8.3f} ms x{row['calls_per_step']:<6} {row['kind']:9} "
                f"{row['name'][:90]}"
            )
    if "cpu_ops_per_step" in kernels:
        print(f"  operators per step: {kernels['cpu_ops_per_step']}")
    if "python_profile" in profiles:
        text = profiles["python_profile"]["pstats"]
        print("\n".join(text.splitlines()[:40]))
    print(f"  full profile: {path}", flush=True)
    return result


def python_steps_profile(model, encoder, decoder, labels, batch_size, steps):
    """`cProfile` of `steps` more eager `fit` steps (the Python time of a PyTorch step)."""
    import keras

    rows = batch_size * steps
    data = ({"encoder_inputs": encoder[:rows], "decoder_inputs": decoder[:rows]}, labels[:rows])
    model.fit(data[0], data[1], batch_size=batch_size, epochs=1, shuffle=False, verbose=0)
    profile = cProfile.Profile()
    profile.enable()
    history = model.fit(data[0], data[1], batch_size=batch_size, epochs=1, shuffle=False,
                        verbose=0)  # fmt: skip
    float(keras.ops.convert_to_numpy(history.history["loss"][-1]))
    profile.disable()
    return python_profile_summary(profile, steps)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--dropout",
        type=float,
        default=None,
        help="the model's dropout (default: the base preset's 0.1)",
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="K",
        help="trace K steps after the timed ones (see the module docstring)",
    )
    parser.add_argument(
        "--trace-dir",
        default=None,
        help="folder for the traces and profile summaries (default: /tmp)",
    )
    parser.add_argument(
        "--projection-dtype",
        default=None,
        help="the model's projection_dtype (default: the compute dtype; float32: 0.3.0's)",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--matmul-size", type=int, default=8192)
    parser.add_argument(
        "--no-jit",
        action="store_true",
        help="fit with jit_compile=False (PyTorch: eager instead of torch.compile)",
    )
    parser.add_argument("--timeout", type=int, default=240, help="seconds per setting")
    parser.add_argument("--out", default=None, help="append one JSON line per setting")
    args = parser.parse_args()
    if args.worker:
        result = worker(
            args.worker,
            args.batch_size,
            args.length,
            args.steps,
            args.warmup,
            args.matmul_size,
            not args.no_jit,
            args.dropout,
            args.profile,
            args.trace_dir,
            args.projection_dtype,
        )
        print("RESULT " + json.dumps(result), flush=True)
        return
    for setting in args.settings:
        command = [
            sys.executable,
            __file__,
            "--worker",
            setting,
            "--batch-size",
            str(args.batch_size),
            "--length",
            str(args.length),
            "--steps",
            str(args.steps),
            "--warmup",
            str(args.warmup),
            "--matmul-size",
            str(args.matmul_size),
            "--profile",
            str(args.profile),
        ]
        command += ["--no-jit"] * args.no_jit  # fmt: skip
        command += ["--dropout", str(args.dropout)] if args.dropout is not None else []
        command += ["--trace-dir", args.trace_dir] if args.trace_dir else []
        if args.projection_dtype:
            command += ["--projection-dtype", args.projection_dtype]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
            if done.returncode:
                print(done.stderr[-3000:], file=sys.stderr)
            lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
            result = json.loads(lines[-1][7:]) if lines else {
                "setting": setting, "error": (done.stderr or done.stdout)[-1500:]}  # fmt: skip
        except subprocess.TimeoutExpired:
            result = {"setting": setting, "error": f"timed out after {args.timeout} s"}
        result.setdefault("backend", os.environ.get("KERAS_BACKEND"))
        result = report(result, args.trace_dir)
        if args.out:
            with open(args.out, "a") as file:
                file.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
