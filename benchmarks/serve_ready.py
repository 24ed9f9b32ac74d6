"""How long `keras-transformer serve` takes to be ready, with and without a compilation cache.

Starts `keras-transformer serve --model RUN/translator.keras` (the Keras engine) on each Keras
backend asked for, waits until `/health/ready` answers 200 (every compiled shape warm), and
records the wall time from the start of the process, the server process's CPU time at that
moment, and the number of warm-up calls it logged. Three starts per backend, one after the
other (never two servers at once):

- `none`: `--compilation-cache none`, every search compiled;
- `cold`: a new, empty cache directory (compiled, and written to the cache);
- `warm`: the same directory again: a restart, as a rolling update or a second replica on
  the same disk has.

```
make bible                                   # writes runs/bible/translator.keras
python benchmarks/serve_ready.py --run runs/bible --backends jax tensorflow
```

The table is printed and written to `benchmarks/results/serve_ready.md` (`--results NAME`
for another name), with the machine's NumPy float32 matmul rate before and after.
"""

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime

from input_pipeline import matmul_gflops  # benchmarks/ is on sys.path when run

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
MODES = ("none", "cold", "warm")
WARM_LINE = re.compile(r"warm \((\d+) warm-up calls")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def process_cpu_seconds(pid):
    """User + system CPU seconds of `pid` (and of its waited-for children), from /proc."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as file:
        fields = file.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(value) for value in fields[11:15]) / ticks


def start_to_ready(model, backend, cache, timeout, extra):
    """`(ready_s, cpu_s, warmup_calls)` of one server start."""
    port = free_port()
    command = [
        sys.executable, "-m", "keras_transformer.cli", "serve", "--model", model,
        "--engine", "keras", "--port", str(port), "--compilation-cache", cache, *extra,
    ]  # fmt: skip
    log = tempfile.TemporaryFile(mode="w+")
    started = time.perf_counter()
    server = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "KERAS_BACKEND": backend}
    )
    try:
        while True:
            if server.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"serve exited with {server.returncode}:\n{log.read()[-3000:]}")
            if time.perf_counter() - started > timeout:
                raise RuntimeError(f"not ready after {timeout} s")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/ready", timeout=5):
                    break
            except OSError:
                time.sleep(0.25)
        ready = time.perf_counter() - started
        cpu = process_cpu_seconds(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=60)
    log.seek(0)
    calls = WARM_LINE.findall(log.read())
    return ready, cpu, int(calls[-1]) if calls else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", default="runs/bible", help="a `make bible` run directory")
    parser.add_argument("--backends", nargs="+", default=["jax", "tensorflow"])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--results", default="serve_ready")
    parser.add_argument("serve_arguments", nargs="*", help="more `serve` arguments (after --)")
    args = parser.parse_args()
    model = os.path.join(args.run, "translator.keras")
    rates = [matmul_gflops()]
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for backend in args.backends:
            cache = os.path.join(workdir, f"cache-{backend}")
            for mode in args.modes:
                ready, cpu, calls = start_to_ready(
                    model, backend, "none" if mode == "none" else cache, args.timeout,
                    args.serve_arguments,
                )  # fmt: skip
                row = dict(backend=backend, cache=mode, ready_s=ready, cpu_s=cpu, calls=calls)
                print(json.dumps(row), flush=True)
                rows.append(row)
    rates.append(matmul_gflops())
    lines = [
        f"Recorded {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, NumPy fp32 "
        f"matmul {rates[0]:.0f} GFLOP/s before, {rates[1]:.0f} after; model {model}.",
        "",
        "| backend | compilation cache | warm-up calls | ready (s) | server CPU at ready (s) |",
        "| --- | --- | ---: | ---: | ---: |",
        *(
            f"| {row['backend']} | {row['cache']} | {row['calls']} | {row['ready_s']:.1f} "
            f"| {row['cpu_s']:.1f} |"
            for row in rows
        ),
    ]
    print("\n".join(lines))
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, args.results + ".md"), "w", encoding="utf-8") as file:
        file.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
