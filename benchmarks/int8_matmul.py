"""int8 against float32 matrix products on this CPU, per framework: why an int8 `Translator`
gains what it gains.

The shapes are those of a decoding step of an OPUS-MT-sized model (d_model 512, d_ff 2048,
a 32,000-piece vocabulary) for 32 rows (8 sentences x beam 4) and 256 rows: a projection
(512 -> 2048), the feed-forward output (2048 -> 512) and the pre-softmax projection
(512 -> 32,000). For each, the microseconds (wall and process CPU) of one product:

- TensorFlow `tf.matmul` float32, int8 x int8 -> int32 (`output_type`), and int8 weights cast
  to float32 at each call (weight-only), each eager and under XLA (`jit_compile=True`);
- JAX (XLA) float32 and int8 x int8 -> int32 (`preferred_element_type`);
- PyTorch float32, `torch._int_mm` (int8 x int8 -> int32 through oneDNN on CPU; Keras' PyTorch
  backend uses it on CUDA only), and `torch.ao.quantization.quantize_dynamic`'s `Linear`.

```
python benchmarks/int8_matmul.py            # about a minute
python benchmarks/int8_matmul.py --isa avx2 --results int8_matmul_avx2
```

`--isa avx2` emulates a CPU without int8 dot-product instructions (AVX-512 VNNI, AVX-VNNI,
AMX) on one that has them: it caps oneDNN (TensorFlow's eager kernels, PyTorch's
`_int_mm`: `ONEDNN_MAX_CPU_ISA=AVX2`), PyTorch's own kernels (`ATEN_CPU_CAPABILITY=avx2`)
and XLA's code generation (`--xla_cpu_max_isa=AVX2`) before any framework is imported.
Libraries that read the CPU themselves (fbgemm, under `quantize_dynamic`; XLA's XNNPACK-
family kernels) are not capped: those rows may still use the newer instructions.

The table is printed and written to `benchmarks/results/int8_matmul.md` (and `.json`).
"""

import argparse
import os
import time
import warnings

import numpy as np

SHAPES = ((32, 512, 2048), (32, 2048, 512), (32, 512, 32000), (256, 512, 2048))


def timed(function, *arguments, rounds=100, sync=lambda result: result):
    """`(wall µs, CPU µs)` of one call, the mean of `rounds` after one warm call."""
    sync(function(*arguments))
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(rounds):
        result = function(*arguments)
    sync(result)
    return (
        (time.perf_counter() - start) / rounds * 1e6,
        (time.process_time() - cpu) / rounds * 1e6,
    )


def operands(rows, depth, units):
    generator = np.random.default_rng(0)
    x = generator.standard_normal((rows, depth), dtype=np.float32)
    w = generator.standard_normal((depth, units), dtype=np.float32)
    xq = generator.integers(-127, 128, (rows, depth)).astype(np.int8)
    wq = generator.integers(-127, 128, (depth, units)).astype(np.int8)
    return x, w, xq, wq


def tensorflow_rows(shape, threads):
    import tensorflow as tf

    x, w, xq, wq = (tf.constant(a) for a in operands(*shape))
    rows = []
    for jit in (False, True):
        where = "XLA" if jit else "eager"
        f32 = tf.function(lambda a, b: tf.matmul(a, b), jit_compile=jit)
        i8 = tf.function(lambda a, b: tf.matmul(a, b, output_type=tf.int32), jit_compile=jit)
        wo = tf.function(lambda a, b: tf.matmul(a, tf.cast(b, tf.float32)), jit_compile=jit)
        sync = lambda result: result.numpy()  # noqa: E731
        rows.append((f"TensorFlow {where}", "float32", timed(f32, x, w, sync=sync)))
        rows.append((f"TensorFlow {where}", "int8 x int8", timed(i8, xq, wq, sync=sync)))
        rows.append((f"TensorFlow {where}", "int8 weights only", timed(wo, x, wq, sync=sync)))
    return rows


def jax_rows(shape, threads):
    import jax
    import jax.numpy as jnp

    x, w, xq, wq = (jnp.asarray(a) for a in operands(*shape))
    f32 = jax.jit(lambda a, b: a @ b)
    i8 = jax.jit(lambda a, b: jax.lax.dot(a, b, preferred_element_type=jnp.int32))
    sync = lambda result: result.block_until_ready()  # noqa: E731
    return [
        ("JAX (XLA)", "float32", timed(f32, x, w, sync=sync)),
        ("JAX (XLA)", "int8 x int8", timed(i8, xq, wq, sync=sync)),
    ]


def torch_rows(shape, threads):
    import torch

    torch.set_num_threads(threads)
    x, w, xq, wq = (torch.from_numpy(a) for a in operands(*shape))
    rows = [
        ("PyTorch", "float32", timed(torch.matmul, x, w)),
        ("PyTorch", "int8 x int8 (torch._int_mm)", timed(torch._int_mm, xq, wq)),
    ]
    linear = torch.nn.Linear(shape[1], shape[2])
    linear.weight.data = w.T.contiguous()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's note that it moves to torchao
        dynamic = torch.ao.quantization.quantize_dynamic(
            torch.nn.Sequential(linear), {torch.nn.Linear}, dtype=torch.qint8
        )
    with torch.no_grad():
        rows.append(("PyTorch", "quantize_dynamic Linear", timed(dynamic, x)))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--results", default="int8_matmul")
    parser.add_argument(
        "--isa", choices=("native", "avx2"), default="native",
        help="avx2: cap oneDNN, ATen and XLA at AVX2 (no int8 dot-product instructions)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.isa == "avx2":  # Before any framework is imported.
        os.environ["ONEDNN_MAX_CPU_ISA"] = "AVX2"
        os.environ["ATEN_CPU_CAPABILITY"] = "avx2"
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "") + " --xla_cpu_max_isa=AVX2"
        ).strip()
    from train_throughput import machine_description, matmul_timer  # benchmarks/ on sys.path

    matmul = matmul_timer("tensorflow")
    before = matmul()
    found = []
    for shape in SHAPES:
        for measure in (tensorflow_rows, jax_rows, torch_rows):
            for framework, kind, (wall, cpu) in measure(shape, args.threads):
                found.append(dict(shape=list(shape), framework=framework, kind=kind,
                                  wall_us=wall, cpu_us=cpu))  # fmt: skip
                print(found[-1], flush=True)
    after = matmul()
    for row in found:
        base = next(
            other for other in found
            if other["shape"] == row["shape"] and other["framework"] == row["framework"]
            and other["kind"] == "float32"
        )  # fmt: skip
        row["speed_vs_float32"] = base["wall_us"] / row["wall_us"]
    header = [
        f"One matrix product (rows x depth -> units), {args.threads} threads. "
        f"{machine_description()}. fp32 matmul (TensorFlow, 1024x1024) {before:.0f} GFLOP/s "
        f"before, {after:.0f} after. Speed: the same framework's float32 time / this time."
        + (
            " Instruction sets capped at AVX2 (`--isa avx2`: oneDNN, ATen, XLA)."
            if args.isa == "avx2"
            else ""
        ),
        "",
        "| Shape | Framework | Product | Wall (µs) | CPU (µs) | Speed vs float32 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    from translate_throughput import write_table  # benchmarks/ is on sys.path when run

    write_table(args.results, header, found, format_row)


def format_row(row):
    return (
        f"| {'x'.join(map(str, row['shape']))} | {row['framework']} | {row['kind']} | "
        f"{row['wall_us']:.0f} | {row['cpu_us']:.0f} | {row['speed_vs_float32']:.2f}x |"
    )

if __name__ == "__main__":
    main()
