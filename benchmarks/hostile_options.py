"""A plain client's latency and the server's memory while hostile clients cycle search options.

Starts `keras-transformer serve` on a model (default: the committed v0.1 fixture), waits for
ready, then measures a plain client (one sentence at a time, the default search) alone, and
again while two hostile connections send 100 distinct option sets (`beam_size` 2..39,
sampling temperatures, top-k/top-p cuts). Prints the hostile answers' status codes, the
server's resident memory (VmRSS) after warm-up and after the hostile requests, the plain
client's p50/p99 latency alone and under attack, and the server's CPU seconds.

```
python benchmarks/hostile_options.py                           # this checkout's server
python benchmarks/hostile_options.py --server-args "--sampling --beam-sizes 1"
python benchmarks/hostile_options.py --checkout /tmp/old       # another checkout (before)
```

Rows are appended to `benchmarks/results/hostile_options.jsonl`.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results", "hostile_options.jsonl")
SENTENCE = "dos mil trescientos"


def hostile_options(count=100):
    """`count` distinct option sets a hostile client might send."""
    options = [{"beam_size": size} for size in range(2, 40)]
    options += [{"sampling_temperature": 0.2 + step / 20, "seed": step} for step in range(31)]
    options += [
        {"sampling_topk": 1 + step, "sampling_topp": 0.5 + step / 100, "seed": step}
        for step in range(31)
    ]
    return options[:count]


def post(url, fields, timeout=120):
    body = json.dumps({"q": SENTENCE, "source": "es", "target": "en", **fields}).encode()
    request = urllib.request.Request(
        url + "/translate", body, {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            answer.read()
            return answer.status
    except urllib.error.HTTPError as error:
        error.read()
        return error.code


def plain_latencies(url, count):
    times = []
    for _ in range(count):
        start = time.perf_counter()
        status = post(url, {})
        times.append(time.perf_counter() - start)
        if status != 200:
            raise RuntimeError(f"a plain request answered {status}")
    return times


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def process_stats(pid):
    with open(f"/proc/{pid}/status", encoding="ascii") as file:
        rss = next(int(line.split()[1]) for line in file if line.startswith("VmRSS:"))
    with open(f"/proc/{pid}/stat", encoding="ascii") as file:
        fields = file.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return rss / 1024, (int(fields[11]) + int(fields[12])) / ticks


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=os.path.join(ROOT, "tests/fixtures/translator_v0_1.keras"))
    parser.add_argument("--checkout", default=ROOT, help="the checkout whose server runs")
    parser.add_argument("--server-args", default="", help="more `serve` options")
    parser.add_argument("--port", type=int, default=18431)
    parser.add_argument("--plain", type=int, default=40, help="plain requests per round")
    parser.add_argument("--label", default="", help="a name for the row")
    args = parser.parse_args()
    url = f"http://127.0.0.1:{args.port}"
    command = [
        sys.executable,
        "-c",
        "import sys; from keras_transformer.cli import main; sys.exit(main())",
        "serve",
        "--model",
        args.model,
        "--port",
        str(args.port),
        *shlex.split(args.server_args),
    ]
    env = dict(os.environ, PYTHONPATH=args.checkout, KERAS_BACKEND="tensorflow")
    started = time.perf_counter()
    server = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL, cwd=args.checkout)
    try:
        while True:
            try:
                with urllib.request.urlopen(url + "/health/ready", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            if server.poll() is not None or time.perf_counter() - started > 900:
                raise RuntimeError("the server did not become ready")
            time.sleep(0.5)
        ready_seconds = time.perf_counter() - started
        plain_latencies(url, 5)  # Anything lazy, loaded.
        rss_ready, cpu_ready = process_stats(server.pid)
        alone = plain_latencies(url, args.plain)
        statuses = []
        options = hostile_options()

        def hostile(part):
            for fields in part:
                statuses.append(post(url, fields))

        threads = [
            threading.Thread(target=hostile, args=(options[index::2],)) for index in range(2)
        ]
        attack_start = time.perf_counter()
        for thread in threads:
            thread.start()
        attacked = []
        while any(thread.is_alive() for thread in threads):
            attacked += plain_latencies(url, 1)
        for thread in threads:
            thread.join()
        attack_seconds = time.perf_counter() - attack_start
        rss_after, cpu_after = process_stats(server.pid)
    finally:
        server.terminate()
        server.wait(60)
    row = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "label": args.label,
        "checkout": args.checkout,
        "server_args": args.server_args,
        "model": os.path.basename(args.model),
        "ready_seconds": round(ready_seconds, 1),
        "statuses": {str(code): statuses.count(code) for code in sorted(set(statuses))},
        "rss_ready_mb": round(rss_ready),
        "rss_after_mb": round(rss_after),
        "rss_growth_percent": round(100 * (rss_after / rss_ready - 1), 1),
        "plain_alone_p50_ms": round(1000 * percentile(alone, 0.5), 1),
        "plain_alone_p99_ms": round(1000 * percentile(alone, 0.99), 1),
        "plain_attacked_p50_ms": round(1000 * percentile(attacked, 0.5), 1),
        "plain_attacked_p99_ms": round(1000 * percentile(attacked, 0.99), 1),
        "plain_attacked_requests": len(attacked),
        "attack_seconds": round(attack_seconds, 1),
        "server_cpu_seconds_during_attack": round(cpu_after - cpu_ready, 1),
        "cpus": os.cpu_count(),
    }
    print(json.dumps(row, indent=1))
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "a", encoding="utf-8") as file:
        file.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
