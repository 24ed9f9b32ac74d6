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

With `--background`, each server runs with `--background-warmup` (ready once every search is
warm for one sentence per call; the larger batches compile while it serves): from ready until
its log says every batch is warm, `--clients` client threads (keep-alive connections) send one
verse of `RUN/test.src` per `POST /translate`, in turn; then as many requests again once all is
warm. Each window reports its sentences/s and p50/p99 latency: what a client gets while the
server warms in the background, against the warm server.

```
make bible                                   # writes runs/bible/translator.keras
python benchmarks/serve_ready.py --run runs/bible --backends jax tensorflow
python benchmarks/serve_ready.py --run runs/bible --background --results serve_ready_background
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
import threading
import time
import urllib.request
from datetime import UTC, datetime

from input_pipeline import matmul_gflops  # benchmarks/ is on sys.path when run
from serve_throughput import percentile

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
MODES = ("none", "cold", "warm")
WARM_LINE = re.compile(r"warm \((\d+) warm-up calls")
ALL_WARM_LINE = re.compile(r"warm for every batch \((\d+) background warm-up calls")


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


class Clients:
    """`clients` threads sending one sentence per request to a server, in turn, until
    stopped; each request's `(start time, latency)` is kept."""

    def __init__(self, port, sentences, clients):
        self.port, self.sentences = port, sentences
        self.lock, self.next, self.stopping = threading.Lock(), 0, threading.Event()
        self.timings, self.errors = [], []
        self.threads = [threading.Thread(target=self._run) for _ in range(clients)]
        for thread in self.threads:
            thread.start()

    def _run(self):
        import http.client

        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        try:
            while not self.stopping.is_set():
                with self.lock:
                    sentence = self.sentences[self.next % len(self.sentences)]
                    self.next += 1
                body = json.dumps({"q": sentence, "source": "es", "target": "en"})
                start = time.perf_counter()
                connection.request("POST", "/translate", body, {"Content-Type": "application/json"})
                response = connection.getresponse()
                data = response.read()
                if response.status != 200:
                    self.errors.append(f"{response.status}: {data[:200]!r}")
                with self.lock:
                    self.timings.append((start, time.perf_counter() - start))
        finally:
            connection.close()

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join()
        if self.errors:
            raise RuntimeError(f"{len(self.errors)} failed requests, the first: {self.errors[0]}")


def window(timings, start, end):
    """`(requests, sentences/s, p50 s, p99 s)` of the requests started in `[start, end)`."""
    latencies = [latency for began, latency in timings if start <= began < end]
    if not latencies:
        return 0, 0.0, None, None
    last = max(began + latency for began, latency in timings if start <= began < end)
    return (
        len(latencies),
        len(latencies) / (last - start),
        percentile(latencies, 0.5),
        percentile(latencies, 0.99),
    )


def start_to_ready(model, backend, cache, timeout, extra, serve_while=None):
    """`(ready_s, cpu_s, warmup_calls, background)` of one server start; `background` is
    `None`, or with `serve_while` (`(sentences, clients)`, and `--background-warmup` in
    `extra`) a dict: the seconds from start to every batch warm, the background calls, and
    the `window`s of the requests sent while it warmed and of as many after."""
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
        background = None
        if serve_while is not None:
            background = serve_until_warm(server, log, port, started, timeout, *serve_while)
    finally:
        server.terminate()
        server.wait(timeout=60)
    log.seek(0)
    calls = WARM_LINE.findall(log.read())
    return ready, cpu, int(calls[-1]) if calls else None, background


def serve_until_warm(server, log, port, started, timeout, sentences, clients):
    """Clients from ready until the log says every batch is warm, then for as many requests
    again: `serve_until_warm`'s dict (see `start_to_ready`)."""
    load = Clients(port, sentences, clients)
    ready = time.perf_counter()
    try:
        while True:
            log.seek(0)
            found = ALL_WARM_LINE.findall(log.read())
            if found:
                break
            if server.poll() is not None or time.perf_counter() - started > timeout:
                raise RuntimeError("the background warm-up did not end")
            time.sleep(0.1)
        warm = time.perf_counter()
        while True:
            with load.lock:
                after = sum(began >= warm for began, _ in load.timings)
                before = sum(began < warm for began, _ in load.timings)
            if after >= max(before, 4 * clients):
                break
            time.sleep(0.1)
    finally:
        load.stop()
    end = max(began for began, _ in load.timings) + 1e-9
    return dict(
        all_warm_s=warm - started,
        background_calls=int(found[-1]),
        warming=window(load.timings, ready, warm),
        warm=window(load.timings, warm, end),
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", default="runs/bible", help="a `make bible` run directory")
    parser.add_argument("--backends", nargs="+", default=["jax", "tensorflow"])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--results", default="serve_ready")
    parser.add_argument(
        "--background",
        action="store_true",
        help="serve with --background-warmup, with clients from ready until every batch is warm",
    )
    parser.add_argument("--clients", type=int, default=8, help="client threads (--background)")
    parser.add_argument("serve_arguments", nargs="*", help="more `serve` arguments (after --)")
    args = parser.parse_args()
    model = os.path.join(args.run, "translator.keras")
    serve_while, extra = None, list(args.serve_arguments)
    if args.background:
        with open(os.path.join(args.run, "test.src"), encoding="utf-8") as file:
            serve_while = ([line.strip() for line in file if line.strip()], args.clients)
        extra.append("--background-warmup")
    rates = [matmul_gflops()]
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for backend in args.backends:
            cache = os.path.join(workdir, f"cache-{backend}")
            for mode in args.modes:
                ready, cpu, calls, background = start_to_ready(
                    model, backend, "none" if mode == "none" else cache, args.timeout,
                    extra, serve_while,
                )  # fmt: skip
                row = dict(backend=backend, cache=mode, ready_s=ready, cpu_s=cpu, calls=calls)
                row.update(background or {})
                print(json.dumps(row), flush=True)
                rows.append(row)
    rates.append(matmul_gflops())
    lines = [
        f"Recorded {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, NumPy fp32 "
        f"matmul {rates[0]:.0f} GFLOP/s before, {rates[1]:.0f} after; model {model}"
        + (f"; serve {' '.join(extra)}." if extra else "."),
        "",
        "| backend | compilation cache | warm-up calls | ready (s) | server CPU at ready (s) |",
        "| --- | --- | ---: | ---: | ---: |",
        *(
            f"| {row['backend']} | {row['cache']} | {row['calls']} | {row['ready_s']:.1f} "
            f"| {row['cpu_s']:.1f} |"
            for row in rows
        ),
    ]
    if args.background:
        lines += ["", *background_table(rows, args.clients)]
    print("\n".join(lines))
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, args.results + ".md"), "w", encoding="utf-8") as file:
        file.write("\n".join(lines) + "\n")


def background_table(rows, clients):
    def cells(window):
        requests, rate, p50, p99 = window
        if not requests:
            return "0 | | |"
        return f"{requests} | {rate:.1f} | {p50 * 1000:.0f} | {p99 * 1000:.0f}"

    return [
        f"{clients} clients, one verse per request: while the larger batches warm (from ready to "
        "every batch warm), then as many requests once all is warm.",
        "",
        "| backend | compilation cache | ready (s) | every batch warm (s) | background calls "
        "| requests while warming | sentences/s | p50 (ms) | p99 (ms) "
        "| requests once warm | sentences/s | p50 (ms) | p99 (ms) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *(
            f"| {row['backend']} | {row['cache']} | {row['ready_s']:.1f} | "
            f"{row['all_warm_s']:.1f} | {row['background_calls']} | "
            f"{cells(row['warming'])} | {cells(row['warm'])} |"
            for row in rows
        ),
    ]


if __name__ == "__main__":
    main()
