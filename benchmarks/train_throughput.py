"""Training throughput and peak memory: our `Transformer` against keras-hub and torch.nn.

One configuration (vocab 8000, d_model 256, ff_dim 1024, 4 heads, 3 + 3 layers, batch 32,
source and target length 64, dropout 0.1), three contenders:

- `ours`: `keras_transformer.Transformer` (sinusoidal positions, one embedding matrix shared
  by source, target and the pre-softmax projection).
- `keras-hub`: the same architecture from `keras_hub.layers.TokenAndPositionEmbedding`,
  `TransformerEncoder` and `TransformerDecoder` plus a `Dense(vocab)` output (learned
  positions, no weight tying, attention dropout = dropout, as keras-hub's blocks do).
- `torch.nn`: `torch.nn.Transformer` with a plain PyTorch loop (measured with the torch
  backend only).

Both Keras models are compiled with `transformer_adam(256)` and `LabelSmoothedCrossentropy()`
on sparse labels and trained with `fit`. Each (backend, contender) runs in its own
subprocess: the backend is fixed per process and the peak RSS (`resource.getrusage`) is per
process. The driver interleaves the contenders (ours, keras-hub, ..., then the reverse order
in the next round), takes medians, and writes a markdown table to `benchmarks/results/`.

Every worker also times a large fp32 matmul with its own backend between its training
repetitions (same threads, same moment's load), so "fraction of peak" compares the model's
achieved FLOP/s with the matmul rate the machine delivered at the same time.

Usage:

    python benchmarks/train_throughput.py                  # full run (about 12 minutes)
    python benchmarks/train_throughput.py --quick          # smoke run
    python benchmarks/train_throughput.py --variants tensorflow-jit --contenders ours keras-hub
"""

import argparse
import json
import os
import platform
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

CONFIG = dict(
    vocabulary_size=8000,
    d_model=256,
    ff_dim=1024,
    num_heads=4,
    num_layers=3,
    batch_size=32,
    source_length=64,
    target_length=64,
    dropout=0.1,
)
# Backend variants: (KERAS_BACKEND, jit_compile argument of `compile`).
VARIANTS = {
    "tensorflow-jit": ("tensorflow", True),
    "tensorflow": ("tensorflow", False),
    "jax": ("jax", True),
    "torch": ("torch", False),
}
CONTENDERS = ("ours", "keras-hub", "torch.nn")
# "baseline": our model from another checkout (`--baseline PATH`), for before/after figures.


# === FLOP count ===
def training_flops(config):
    """Analytic FLOPs of one training step (multiply-add = 2 FLOPs; backward = 2 × forward).

    Per layer, with B = batch, S / T = source / target length, d = d_model, f = ff_dim,
    V = vocabulary:
    encoder: 8·B·S·d² (Q, K, V, output projections) + 4·B·S²·d (scores, weighted sum)
    + 4·B·S·d·f (FFN); decoder: 8·B·T·d² + 4·B·T²·d (causal self-attention, full T×T
    matrix as computed) + 4·B·T·d² + 4·B·S·d² + 4·B·T·S·d (cross-attention) + 4·B·T·d·f;
    output projection 2·B·T·d·V. Training ≈ 3 × forward.
    """
    b, s, t = config["batch_size"], config["source_length"], config["target_length"]
    d, f, v, n = config["d_model"], config["ff_dim"], config["vocabulary_size"], config["num_layers"]
    encoder = 8 * b * s * d * d + 4 * b * s * s * d + 4 * b * s * d * f
    decoder = (
        8 * b * t * d * d + 4 * b * t * t * d
        + 4 * b * t * d * d + 4 * b * s * d * d + 4 * b * t * s * d
        + 4 * b * t * d * f
    )
    output = 2 * b * t * d * v
    return 3 * (n * encoder + n * decoder + output)


def tokens_per_step(config):
    return config["batch_size"] * (config["source_length"] + config["target_length"])


# === Worker: one (backend, contender) per process ===
def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mib():
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def make_data(config, num_batches, seed=0):
    """Random token ids (3..vocab-1), lengths uniform in [length/4, length], 0 = padding."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = num_batches * config["batch_size"]

    def sequences(length):
        ids = rng.integers(3, config["vocabulary_size"], size=(n, length)).astype("int32")
        lengths = rng.integers(length // 4, length + 1, size=n)
        ids[np.arange(length)[None, :] >= lengths[:, None]] = 0
        return ids

    source = sequences(config["source_length"])
    target = sequences(config["target_length"] + 1)
    target[:, 0] = 1  # start token
    inputs = {"encoder_inputs": source, "decoder_inputs": target[:, :-1]}
    return inputs, target[:, 1:]


def keras_hub_model(config):
    import keras
    import keras_hub
    from keras import ops

    def embedding(name):
        return keras_hub.layers.TokenAndPositionEmbedding(
            config["vocabulary_size"], max(config["source_length"], config["target_length"]),
            config["d_model"], mask_zero=True, name=name,
        )

    block_args = dict(
        intermediate_dim=config["ff_dim"], num_heads=config["num_heads"], dropout=config["dropout"]
    )
    encoder_inputs = keras.Input((None,), dtype="int32", name="encoder_inputs")
    decoder_inputs = keras.Input((None,), dtype="int32", name="decoder_inputs")
    encoder_mask = ops.not_equal(encoder_inputs, 0)
    decoder_mask = ops.not_equal(decoder_inputs, 0)
    x = keras.layers.Dropout(config["dropout"])(embedding("source_embedding")(encoder_inputs))
    for i in range(config["num_layers"]):
        x = keras_hub.layers.TransformerEncoder(**block_args, name=f"encoder_{i}")(
            x, padding_mask=encoder_mask
        )
    y = keras.layers.Dropout(config["dropout"])(embedding("target_embedding")(decoder_inputs))
    for i in range(config["num_layers"]):
        y = keras_hub.layers.TransformerDecoder(**block_args, name=f"decoder_{i}")(
            y, x, decoder_padding_mask=decoder_mask, encoder_padding_mask=encoder_mask
        )
    logits = keras.layers.Dense(config["vocabulary_size"], name="logits")(y)
    return keras.Model({"encoder_inputs": encoder_inputs, "decoder_inputs": decoder_inputs}, logits)


def set_threads(backend, threads):
    """Explicit thread counts, identical for every contender of a backend."""
    if backend == "tensorflow":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
        return f"TF intra-op {threads}, inter-op {threads}"
    if backend == "torch":
        import torch

        torch.set_num_threads(threads)
        return f"torch.set_num_threads({threads})"
    return f"XLA CPU default (one Eigen pool of {os.cpu_count()} threads)"


def matmul_timer(backend, n=1024, seconds=0.25):
    """A callable returning the sustained fp32 matmul rate (GFLOP/s) of the backend.

    Back-to-back `(n, n) @ (n, n)` products (2·n³ FLOPs each) for about `seconds`, on
    the threads the training uses: the same kind of sustained figure as tokens/s.
    """
    import numpy as np

    a = np.random.default_rng(0).normal(size=(n, n)).astype("float32")
    if backend == "tensorflow":
        import tensorflow as tf

        x = tf.constant(a)
        run = lambda: tf.linalg.matmul(x, x).numpy()  # noqa: E731
    elif backend == "jax":
        import jax

        x = jax.device_put(a)
        product = jax.jit(lambda m: m @ m)
        run = lambda: product(x).block_until_ready()  # noqa: E731
    else:
        import torch

        x = torch.from_numpy(a)
        run = lambda: torch.mm(x, x)  # noqa: E731
    run()

    def rate():
        count, start = 0, time.perf_counter()
        while True:
            run()
            count += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                return 2 * n**3 * count / elapsed / 1e9

    return rate


class _Lockstep:
    """Worker side of the driver protocol: wait for "go", run one step, report it."""

    def __init__(self, matmul):
        self.matmul = matmul
        self.start = None

    def begin(self):
        if sys.stdin.readline().strip() != "go":
            raise SystemExit("driver went away")
        self.start = time.perf_counter(), time.process_time()

    def end(self, loss):
        loss = float(loss)  # waits for the step on backends that dispatch asynchronously
        step_s = time.perf_counter() - self.start[0]
        cpu_s = time.process_time() - self.start[1]
        emit("STEP", dict(step_s=step_s, cpu_s=cpu_s, loss=loss, matmul_gflops=self.matmul()))


def emit(kind, payload):
    print(f"{kind} {json.dumps(payload)}", flush=True)


def train_torch_nn(config, inputs, labels, steps, lockstep):
    """`torch.nn.Transformer` (sinusoidal positions, tied embeddings) in a plain loop."""
    import math

    import numpy as np
    import torch
    from torch import nn

    d_model, vocab = config["d_model"], config["vocabulary_size"]

    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(vocab, d_model)
            nn.init.normal_(self.embedding.weight, std=d_model**-0.5)
            self.dropout = nn.Dropout(config["dropout"])
            self.transformer = nn.Transformer(
                d_model, config["num_heads"], config["num_layers"], config["num_layers"],
                config["ff_dim"], config["dropout"], batch_first=True,
            )
            length = max(config["source_length"], config["target_length"])
            position = torch.arange(length, dtype=torch.float32)[:, None]
            inverse_freq = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
            angles = position * inverse_freq
            encoding = torch.stack([torch.sin(angles), torch.cos(angles)], -1)
            self.register_buffer("encoding", encoding.reshape(length, d_model))

        def embed(self, ids):
            x = self.embedding(ids) * math.sqrt(d_model) + self.encoding[: ids.shape[1]]
            return self.dropout(x)

        def forward(self, source, target):
            causal = nn.Transformer.generate_square_subsequent_mask(target.shape[1])
            y = self.transformer(
                self.embed(source), self.embed(target), tgt_mask=causal, tgt_is_causal=True,
                src_key_padding_mask=source == 0, tgt_key_padding_mask=target == 0,
                memory_key_padding_mask=source == 0,
            )
            return y @ self.embedding.weight.T  # tied pre-softmax projection

    torch.manual_seed(0)
    model = Seq2Seq()
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    schedule = torch.optim.lr_scheduler.LambdaLR(  # the paper's warm-up schedule
        optimizer, lambda step: d_model**-0.5 * min((step + 1) ** -0.5, (step + 1) * 4000**-1.5)
    )
    batch = config["batch_size"]

    def tensor(array):
        return torch.from_numpy(np.ascontiguousarray(array)).long()

    source, target, gold = (
        tensor(inputs["encoder_inputs"]), tensor(inputs["decoder_inputs"]), tensor(labels)
    )
    model.train()
    for step in range(steps):
        lockstep.begin()
        rows = slice(step * batch, (step + 1) * batch)
        logits = model(source[rows], target[rows])
        loss = nn.functional.cross_entropy(
            logits.reshape(-1, vocab), gold[rows].reshape(-1), ignore_index=0,
            label_smoothing=0.1,
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        lockstep.end(loss.detach())
    return sum(p.numel() for p in model.parameters())


def train_keras(config, contender, jit_compile, inputs, labels, lockstep):
    import keras
    import numpy as np

    import keras_transformer as kt

    keras.utils.set_random_seed(0)
    if contender in ("ours", "baseline"):
        model = kt.Transformer(
            vocabulary_size=config["vocabulary_size"], num_layers=config["num_layers"],
            d_model=config["d_model"], num_heads=config["num_heads"], ff_dim=config["ff_dim"],
            dropout=config["dropout"],
        )
    else:
        model = keras_hub_model(config)
    model.compile(
        optimizer=kt.transformer_adam(config["d_model"]),
        loss=kt.LabelSmoothedCrossentropy(),
        jit_compile=jit_compile,
    )

    class Lockstep(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            lockstep.begin()

        def on_train_batch_end(self, batch, logs=None):
            lockstep.end(np.asarray(keras.ops.convert_to_numpy(logs["loss"])))

    model.fit(
        inputs, labels, batch_size=config["batch_size"], epochs=1, shuffle=False, verbose=0,
        callbacks=[Lockstep()],
    )
    return model.count_params()


def worker(spec):
    config, variant, contender = spec["config"], spec["variant"], spec["contender"]
    backend, jit_compile = VARIANTS[variant]
    os.environ["KERAS_BACKEND"] = backend
    # Same imports in every Keras worker (keras-hub imports TensorFlow), so that the RSS
    # peaks differ only by what the models and their training allocate.
    if contender == "baseline":  # another checkout's keras_transformer, for before/after
        sys.path.insert(0, spec["baseline"])
    if contender == "torch.nn":
        import torch  # noqa: F401
    else:
        import keras  # noqa: F401
        import keras_hub  # noqa: F401

        import keras_transformer  # noqa: F401
    threads = set_threads(backend, spec["torch_threads" if backend == "torch" else "threads"])
    steps = spec["warmup_steps"] + spec["rounds"]
    inputs, labels = make_data(config, steps)
    lockstep = _Lockstep(matmul_timer(backend))
    rss_before = rss_mib()
    emit("READY", dict(threads=threads))
    if contender == "torch.nn":
        params = train_torch_nn(config, inputs, labels, steps, lockstep)
    else:
        params = train_keras(config, contender, jit_compile, inputs, labels, lockstep)
    emit("DONE", dict(params=params, rss_before_mib=rss_before, peak_rss_mib=peak_rss_mib()))


# === Driver ===
class Worker:
    """A worker subprocess and a thread collecting its protocol lines."""

    def __init__(self, spec, log_dir):
        self.name = spec["contender"]
        self.log = open(Path(log_dir) / f"{spec['variant']}-{self.name}.log", "w")
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", json.dumps(spec)], cwd=ROOT, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
        )
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            kind, _, payload = line.partition(" ")
            if kind in ("READY", "STEP", "DONE"):
                self.lines.put((kind, json.loads(payload)))
        self.lines.put(("EXIT", None))

    def expect(self, kind, timeout):
        try:
            got, payload = self.lines.get(timeout=timeout)
        except queue.Empty:
            got, payload = "TIMEOUT", None
        if got != kind:
            self.proc.kill()
            self.log.flush()
            tail = Path(self.log.name).read_text()[-4000:]
            raise RuntimeError(f"{self.name}: expected {kind}, got {got}. Log tail:\n{tail}")
        return payload

    def step(self, timeout):
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return self.expect("STEP", timeout)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()
        self.log.close()


def run_variant(variant, contenders, args, log_dir):
    """Runs the contenders of one backend variant in lockstep; returns one result each."""
    workers = [
        Worker(
            dict(config=CONFIG, variant=variant, contender=c, threads=args.threads,
                 torch_threads=args.torch_threads, warmup_steps=args.warmup_steps,
                 rounds=args.rounds, baseline=args.baseline),
            log_dir,
        )
        for c in contenders
    ]
    results = {
        w.name: dict(variant=variant, contender=w.name, step_s=[], cpu_s=[], matmul_gflops=[])
        for w in workers
    }
    try:
        for w in workers:
            results[w.name].update(w.expect("READY", args.timeout))
        for w in workers:  # warm-up (build, trace, compile), one worker at a time
            start = time.perf_counter()
            for _ in range(args.warmup_steps):
                w.step(args.timeout)
            results[w.name]["warmup_s"] = time.perf_counter() - start
            print(f"  [{variant}] {w.name} warmed up in {results[w.name]['warmup_s']:.0f} s",
                  flush=True)
        for round_index in range(args.rounds):
            order = workers if round_index % 2 == 0 else workers[::-1]
            for w in order:
                step = w.step(args.timeout)
                results[w.name]["step_s"].append(step["step_s"])
                results[w.name]["cpu_s"].append(step["cpu_s"])
                results[w.name]["matmul_gflops"].append(step["matmul_gflops"])
                results[w.name]["loss"] = step["loss"]
            print(f"  [{variant}] round {round_index + 1}/{args.rounds}: " + ", ".join(
                f"{w.name} {results[w.name]['step_s'][-1]:.2f} s "
                f"(CPU {results[w.name]['cpu_s'][-1]:.2f} s)" for w in workers), flush=True)
        for w in workers:
            results[w.name].update(w.expect("DONE", args.timeout))
    finally:
        for w in workers:
            if w.proc.poll() is None and not w.proc.stdin.closed:
                w.close()
            elif w.proc.poll() is None:
                w.proc.kill()
    return list(results.values())


def cpu_model():
    """The CPU's model name from /proc/cpuinfo ("unknown CPU" where it does not say)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def machine_description():
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{cpu_model()}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, {platform.platform()}"


def versions():
    import importlib.metadata as md

    names = ("keras", "keras-hub", "tensorflow", "jax", "torch")
    return ", ".join(f"{n} {md.version(n)}" for n in names)


def summarize(results, config):
    """Per row: median step time, tokens/s, achieved GFLOP/s, fraction of the matmul rate,
    and the median over rounds of the paired step-time ratio to keras-hub."""
    flops = training_flops(config)
    rows = {(r["variant"], r["contender"]): dict(r) for r in results}
    for (variant, _), row in rows.items():
        row["step_median"] = statistics.median(row["step_s"])
        row["cpu_median"] = statistics.median(row["cpu_s"])
        row["tokens_per_s"] = tokens_per_step(config) / row["step_median"]
        row["gflops"] = flops / row["step_median"] / 1e9
        row["matmul_median"] = statistics.median(row["matmul_gflops"])
        row["peak_fraction"] = row["gflops"] / row["matmul_median"]
        for key, other in (("vs_hub", "keras-hub"), ("vs_baseline", "baseline")):
            if (variant, other) in rows:
                for suffix, times in (("", "step_s"), ("_cpu", "cpu_s")):
                    pairs = zip(rows[(variant, other)][times], row[times])
                    row[key + suffix] = statistics.median(r / s for r, s in pairs)
    return rows


def baseline_description(path):
    """`keras_transformer at commit <hash> ("<subject>") in <path>`, or the bare path."""
    try:
        commit = subprocess.run(
            ["git", "-C", path, "log", "-1", "--format=%h (%s)"],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"the keras_transformer found under {path}"
    return f"keras_transformer at commit {commit}, checked out in {path}"


def markdown(rows, config, args, elapsed, load):
    machine_peak = max(row["matmul_median"] for row in rows.values())
    command = " ".join(["python benchmarks/train_throughput.py", *args.argv])
    lines = [
        "# Training throughput and peak memory",
        "",
        f"Recorded {datetime.now(UTC):%Y-%m-%d %H:%M} UTC by `{command}` "
        f"in {elapsed / 60:.1f} min.",
        "",
        f"- Machine: {machine_description()}; load average {load[0]} at the start, "
        f"{load[1]} at the end.",
        f"- Versions: {versions()}.",
        *([f"- `baseline`: {baseline_description(args.baseline)}."] if args.baseline else []),
        "- Configuration: " + ", ".join(f"{k} {v}" for k, v in config.items()) + ".",
        f"- Work: {training_flops(config) / 1e9:.1f} GFLOP per training step (analytic, "
        f"`training_flops`), {tokens_per_step(config)} source + target tokens per step "
        "(padding included).",
        f"- Protocol: per backend, one process per contender, run in lockstep: "
        f"{args.warmup_steps} warm-up steps each, then {args.rounds} rounds of one `fit` step "
        "per contender (order reversed every round). Medians over the rounds; "
        "\"× keras-hub\" is the median of the per-round step-time ratios.",
        f"- fp32 matmul rate: 1024³ products for 0.25 s after every step, same process and "
        f"threads; highest median {machine_peak:.0f} GFLOP/s. \"of matmul\" = achieved "
        "FLOP/s ÷ the matmul rate of the same process.",
        "",
        "| backend | contender | threads | params | tokens/s | × keras-hub | GFLOP/s "
        "| matmul GFLOP/s | of matmul | CPU s/step | × keras-hub (CPU) | peak RSS MiB "
        "| RSS growth MiB |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for variant in VARIANTS:
        for contender in (*CONTENDERS, "baseline"):
            row = rows.get((variant, contender))
            if row is None:
                continue
            ratio = f"{row['vs_hub']:.2f}" if "vs_hub" in row else "–"
            cpu_ratio = f"{row['vs_hub_cpu']:.2f}" if "vs_hub_cpu" in row else "–"
            if "vs_baseline" in row and contender == "ours":
                ratio += f" ({row['vs_baseline']:.2f}× baseline)"
                cpu_ratio += f" ({row['vs_baseline_cpu']:.2f}× baseline)"
            lines.append(
                f"| {variant} | {contender} | {row['threads']} | {row['params'] / 1e6:.1f} M "
                f"| {row['tokens_per_s']:,.0f} | {ratio} | {row['gflops']:.1f} "
                f"| {row['matmul_median']:.0f} | {row['peak_fraction']:.0%} "
                f"| {row['cpu_median']:.2f} | {cpu_ratio} | {row['peak_rss_mib']:,.0f} | {row['peak_rss_mib'] - row['rss_before_mib']:,.0f} |"
            )
    lines += [
        "",
        "tokens/s: source + target positions per second of `fit` steps (or of the plain "
        "PyTorch loop), timed from the start to the end of each step (callback to callback, "
        "after the loss is fetched). Peak RSS: `ru_maxrss` of the process; every Keras "
        "process imports keras, keras-hub and keras_transformer, so they start equal. "
        "RSS growth: peak minus the RSS after imports and data, before the model is built.",
        "",
    ]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--contenders", nargs="+", default=list(CONTENDERS), choices=CONTENDERS)
    parser.add_argument("--rounds", type=int, default=12, help="timed steps per contender")
    parser.add_argument("--warmup-steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="TensorFlow intra- and inter-op threads (default: all cores)")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="torch.set_num_threads for every torch contender (default 1: "
                        "OpenMP's spinning barriers stall 2 threads on a loaded 2-core machine)")
    parser.add_argument("--baseline", metavar="PATH",
                        help="also run the keras_transformer found under PATH (contender 'baseline')")
    parser.add_argument("--quick", action="store_true", help="3 rounds, 1 warm-up step")
    parser.add_argument("--output", default=str(RESULTS / "train_throughput.md"))
    parser.add_argument("--timeout", type=int, default=600, help="seconds per worker reply")
    raw = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(raw)
    if args.worker:
        worker(json.loads(args.worker))
        return
    args.argv = raw
    if args.quick:
        args.rounds, args.warmup_steps = 3, 1
    output = Path(args.output)
    log_dir = tempfile.mkdtemp(prefix="train_throughput_")
    print(f"worker logs in {log_dir}", flush=True)
    load_start = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    results, start = [], time.perf_counter()
    for variant in args.variants:
        contenders = [
            c for c in args.contenders if c != "torch.nn" or VARIANTS[variant][0] == "torch"
        ]
        if args.baseline:
            contenders.insert(1, "baseline")
        print(f"[{time.perf_counter() - start:5.0f} s] {variant}: {', '.join(contenders)}",
              flush=True)
        results += run_variant(variant, contenders, args, log_dir)
    load_end = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    rows = summarize(results, CONFIG)
    text = markdown(rows, CONFIG, args, time.perf_counter() - start, (load_start, load_end))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    output.with_suffix(".json").write_text(json.dumps(results, indent=1))
    print("\n" + text + f"\nWritten to {output}")


if __name__ == "__main__":
    main()
