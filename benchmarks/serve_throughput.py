"""Serving throughput: `keras-transformer serve` under 1, 8 and 32 concurrent clients against
the offline engine on the same sentences.

Two models, built into `--work` (reused when already there):

- `number`: the number-words translator of the tests (`tests/export_helpers.py`'s
  `train_number_translator` recipe, copied here with 256 held-out test pairs instead of 100;
  `number.keras`; `--number-jit-compile`: the same translator searching with XLA,
  `number_xla.keras`, as translators written by `train` do). Sentences: the 256 held-out
  number sentences.
- `opus`: an OPUS-MT-sized random import: a random Hugging Face `MarianMTModel` (d_model 512,
  6 + 6 layers, 8 heads, ffn 2048, swish, `num_beams` 4) over one SentencePiece unigram model
  trained on the Spanish and English Bible text (`sword_bible().train`; `--opus-pieces`,
  default 32,000, used as both `source.spm` and `target.spm`, as `tests/export/test_marian.py`'s
  `write_marian_directory` lays out a directory), imported with
  `keras-transformer import --from marian`. Its translations are garbage (random weights: they
  run to the length limit) but the cost of each step is real. The imported preset's
  `translator.json` is then edited: `max_source_length` 128, `bucket_boundaries` (32, 64, 128),
  `extra_length` (`--opus-extra-length`, default 8: each output is its padded source bucket +
  8 tokens long) and `jit_compile` false (a `tf.function` graph per shape: the warm-up of 3
  buckets x 6 batch sizes of an XLA beam search would take longer than the benchmark).
  Sentences: the first 128 Bible test verses.
- `bible`: a translator a user trained (`--bible`, a `make bible` run directory: its
  `translator.keras`, searching with XLA as `train` writes it); sentences: the first
  `--bible-sentences` (default 256) lines of its `test.src`. Not built here: `make bible`
  takes an hour.

For each model and engine (`--engines`: `keras`, the `Translator` on TensorFlow, and
`ctranslate2`, exported with `keras-transformer export --format ctranslate2`):

- offline: a child process opens the model with `engines.load_translator`, warms it with
  `serving.models.warm(engine, --max-batch)` as the server does, translates all sentences
  once untimed (a call of all of them batches by the translator's `batch_size`, which may
  exceed `--max-batch`), and times a second call (wall and process CPU seconds), both through
  `documents.texts.translate_texts(engine, sentences, language="es")`: each text cut into
  sentences as the server cuts a request's (a Bible verse may hold two), so that both
  translate the same sentences;
- server: `keras-transformer serve --model PATH --port 0 --max-batch-sentences N` in a
  subprocess; once it prints `ready`, rounds of 1, 8 and 32 client threads (`--clients`; in
  this process, one keep-alive `http.client.HTTPConnection` each) send one sentence per
  `POST /translate` from the shared list until it is done. Each round reports the wall time,
  sentences/s and its ratio to the offline rate, the p50/p99 request latency, the server
  process's CPU seconds (`/proc/PID/stat`), the engine calls of the round and their mean
  size and seconds (the server's `/metrics` histograms), and how many answers equal the
  offline translation. The 1-client round of the `opus` model sends the first
  `--opus-single` sentences only (a verse alone takes seconds).
- on the `number` model, also the one-by-one latency of a short sentence ("tres", 50
  requests after 5 untimed ones).

CTranslate2 rows run with `OMP_WAIT_POLICY=PASSIVE` (`--omp-wait-policy`) in the environment
of the offline and the server processes; the table records it per row.

```
python benchmarks/serve_throughput.py --work runs/serve_throughput
python benchmarks/serve_throughput.py --models number --engines keras --results serve_number
python benchmarks/serve_throughput.py --models bible --bible runs/bible --results serve_bible
```

The table is printed and written to `benchmarks/results/serve_throughput.md` (and `.json`;
`--results NAME` for another name).
"""

import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
SCRIPT = os.path.join(os.path.dirname(sys.executable), "keras-transformer")
MODELS = ("number", "opus", "bible")
ENGINES = ("keras", "ctranslate2")
SHORT_SENTENCE = "tres"
SOURCE_LANGUAGE = "es"
OPUS_BUCKETS = (32, 64, 128)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# --- The models --------------------------------------------------------------------------


def build_number(work, jit_compile=False):
    """`(path of number.keras, 256 held-out sentences)`: `train_number_translator`'s recipe
    (tests/export_helpers.py), with 256 test pairs; with `jit_compile`, the same translator
    searching with XLA (`number_xla.keras`), as a translator written by `train` does."""
    path = os.path.join(work, "number.keras")
    if jit_compile:
        path, sentences = build_number(work)
        xla_path = os.path.join(work, "number_xla.keras")
        if not os.path.exists(xla_path):
            from keras_transformer.translator import Translator

            translator = Translator.load(path)
            translator.jit_compile = True
            translator.save(xla_path)
        return xla_path, sentences
    sentences_path = os.path.join(work, "number_sentences.json")
    if os.path.exists(path) and os.path.exists(sentences_path):
        with open(sentences_path, encoding="utf-8") as file:
            return path, json.load(file)
    import keras

    from keras_transformer import LabelSmoothedCrossentropy, Transformer, transformer_adam
    from keras_transformer.data import make_dataset
    from keras_transformer.datasets import number_words
    from keras_transformer.text import train_tokenizer
    from keras_transformer.translator import Translator

    keras.utils.set_random_seed(0)
    splits = number_words(num_train=2000, num_validation=0, num_test=256, max_number=5000)
    tokenizer = train_tokenizer([text for pair in splits.train for text in pair], 400)
    data = make_dataset(
        splits.train, tokenizer, tokens_per_batch=768, max_length=24, bucket_boundaries=[24]
    )
    model = Transformer.from_preset(
        "tiny", vocabulary_size=tokenizer.vocabulary_size(), dropout=0.0
    )
    model.compile(
        optimizer=transformer_adam(64, warmup_steps=400), loss=LabelSmoothedCrossentropy(0.1)
    )
    model.fit(data.dataset, epochs=4, verbose=0)
    translator = Translator(
        model, tokenizer, max_source_length=32, bucket_boundaries=(16,), jit_compile=False
    )
    translator.save(path)
    sentences = [source for source, _ in splits.test]
    with open(sentences_path, "w", encoding="utf-8") as file:
        json.dump(sentences, file)
    return path, sentences


def build_opus(work, pieces, extra_length, count=128):
    """`(preset directory, the first `count` Bible test verses)`: a random OPUS-MT-sized
    `MarianMTModel` imported with `keras-transformer import --from marian`."""
    preset = os.path.join(work, "opus_preset")
    sentences_path = os.path.join(work, "opus_sentences.json")
    from keras_transformer.datasets import sword_bible

    bible = sword_bible()
    sentences = [source for source, _ in list(bible.test)[:count]]
    with open(sentences_path, "w", encoding="utf-8") as file:
        json.dump(sentences, file)
    if not os.path.isdir(preset):
        directory = _write_marian(os.path.join(work, "opus_marian"), bible.train, pieces)
        subprocess.run(
            [SCRIPT, "import", "--from", "marian", directory, preset, "--max-source-length",
             str(max(OPUS_BUCKETS))],
            check=True,
        )  # fmt: skip
    config_path = os.path.join(preset, "translator.json")  # The Translator's settings.
    with open(config_path, encoding="utf-8") as file:
        config = json.load(file)
    config["config"].update(
        max_source_length=max(OPUS_BUCKETS),
        bucket_boundaries=list(OPUS_BUCKETS),
        extra_length=extra_length,
        jit_compile=False,
    )
    with open(config_path, "w", encoding="utf-8") as file:
        json.dump(config, file, indent=2)
    return preset, sentences


def bible_model(run, count):
    """`(path of the run's translator.keras, the first count lines of its test.src)`."""
    path, source = os.path.join(run, "translator.keras"), os.path.join(run, "test.src")
    if not os.path.exists(path) or not os.path.exists(source):
        raise SystemExit(f"--bible {run!r}: no translator.keras or test.src there")
    with open(source, encoding="utf-8") as file:
        sentences = [line.rstrip("\n") for line in file][:count]
    if not sentences:
        raise SystemExit(f"--bible {run!r}: its test.src is empty")
    return path, sentences


def _write_marian(directory, pairs, pieces):
    """A random OPUS-MT-sized Hugging Face `MarianMTModel` directory (see
    tests/export/test_marian.py's `write_marian_directory`, at full size)."""
    if os.path.isfile(os.path.join(directory, "config.json")):
        return directory
    import sentencepiece as spm
    import torch
    import transformers

    os.makedirs(directory, exist_ok=True)
    prefix = os.path.join(directory, "joint")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([text for pair in pairs for text in pair]),
        model_prefix=prefix,
        vocab_size=pieces,
        model_type="unigram",
        character_coverage=1.0,
        bos_id=-1,
        eos_id=0,
        unk_id=1,
        pad_id=-1,
        normalization_rule_name="nmt_nfkc",
        minloglevel=2,
        hard_vocab_limit=False,
        num_threads=os.cpu_count(),
    )
    processor = spm.SentencePieceProcessor(model_file=prefix + ".model")
    vocabulary_pieces = ["</s>", "<unk>"]
    for index in range(processor.get_piece_size()):
        piece = processor.id_to_piece(index)
        if not (processor.is_control(index) or processor.is_unknown(index)):
            vocabulary_pieces.append(piece)
    vocabulary_pieces.append("<pad>")
    vocabulary = {piece: index for index, piece in enumerate(vocabulary_pieces)}
    with open(os.path.join(directory, "vocab.json"), "w", encoding="utf-8") as file:
        json.dump(vocabulary, file)
    with open(prefix + ".model", "rb") as file:
        proto = file.read()
    for name in ("source.spm", "target.spm"):
        with open(os.path.join(directory, name), "wb") as file:
            file.write(proto)
    pad = len(vocabulary_pieces) - 1
    config = transformers.MarianConfig(
        vocab_size=len(vocabulary_pieces),
        d_model=512,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
        activation_function="swish",
        max_position_embeddings=512,
        scale_embedding=True,
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=0,
        bad_words_ids=[[pad]],
        num_beams=4,
        dropout=0.0,
    )
    torch.manual_seed(0)
    model = transformers.MarianMTModel(config)
    tokenizer = transformers.MarianTokenizer(
        *(os.path.join(directory, name) for name in ("source.spm", "target.spm", "vocab.json"))
    )
    with torch.no_grad():  # As in every OPUS-MT model: the decoder starts from a zero embedding.
        model.model.shared.weight[pad] = 0.0
    model.eval().save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def export_ctranslate2(model_path, work, name):
    output = os.path.join(work, f"{name}_ct2")
    if not os.path.isdir(output):
        subprocess.run(
            [SCRIPT, "export", "--format", "ctranslate2", model_path, output], check=True
        )
    return output


# --- Offline (child process) ---------------------------------------------------------------


def child(args):
    from keras_transformer.documents.texts import translate_texts
    from keras_transformer.engines import load_translator
    from keras_transformer.serving.models import warm

    with open(args.sentences, encoding="utf-8") as file:
        sentences = json.load(file)
    engine = load_translator(args.model, args.engine)
    started = time.perf_counter()
    calls = warm(engine, args.max_batch)
    warm_s = time.perf_counter() - started

    # The server's work: each text cut into sentences (its `--segment` default, the
    # requests' source language), the sentences translated in one call.
    def translate():
        return translate_texts(engine, sentences, language=SOURCE_LANGUAGE)

    # An untimed call first: one call of all sentences may batch them beyond the warm-up's
    # `max_batch` (the translator's own `batch_size`), shapes the server never runs.
    translate()
    start, cpu = time.perf_counter(), time.process_time()
    outputs = translate()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    with open(args.output, "w", encoding="utf-8") as file:
        json.dump(
            {
                "wall_s": wall,
                "cpu_s": cpu,
                "warm_s": warm_s,
                "warm_calls": calls,
                "outputs": [translation.text for translation in outputs],
            },
            file,
        )


def offline(model_path, engine, sentences, max_batch, env, work):
    sentences_path = os.path.join(work, "sentences.json")
    output = os.path.join(work, "offline.json")
    with open(sentences_path, "w", encoding="utf-8") as file:
        json.dump(sentences, file)
    command = [
        sys.executable, os.path.abspath(__file__), "--child", "--model", model_path,
        "--engine", engine, "--sentences", sentences_path, "--output", output,
        "--max-batch", str(max_batch),
    ]  # fmt: skip
    subprocess.run(command, env=env, check=True)
    with open(output, encoding="utf-8") as file:
        return json.load(file)


# --- The server and its clients ------------------------------------------------------------


class ServerProcess:
    """A `keras-transformer serve` subprocess (as tests/serving/test_server.py starts one)."""

    def __init__(self, model_path, engine, max_batch, batch_wait_ms, env, announced_wait_ms=0):
        command = [
            SCRIPT, "serve", "--model", model_path, "--engine", engine, "--port", "0",
            "--max-batch-sentences", str(max_batch), "--batch-wait-ms", str(batch_wait_ms),
            "--announced-wait-ms", str(announced_wait_ms), "--poll-seconds", "0",
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(env, PYTHONUNBUFFERED="1"),
        )
        self.lines = []
        self.ready = threading.Event()
        self.url = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stderr:
            line = line.rstrip("\n")
            if " 200 " in line and "POST /translate" in line:
                continue  # The access log: one line per request.
            self.lines.append(line)
            if match := re.search(r"ready: (http://\S+)", line):
                self.url = match.group(1)
                self.ready.set()
        self.ready.set()

    def wait_ready(self, timeout=1800):
        started = time.perf_counter()
        if not self.ready.wait(timeout) or self.url is None:
            raise RuntimeError("the server did not get ready:\n" + "\n".join(self.lines[-30:]))
        return time.perf_counter() - started

    def cpu_seconds(self):
        """User + system CPU seconds of the server process so far (/proc/PID/stat)."""
        with open(f"/proc/{self.process.pid}/stat", encoding="utf-8") as file:
            fields = file.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def metrics(self):
        """`{name: value}` of the batch histograms' sums and counts in `/metrics`."""
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        connection = http.client.HTTPConnection(host, int(port), timeout=60)
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
        connection.close()
        found = {}
        for name in ("batch_sentences", "batch_seconds"):
            for kind in ("sum", "count"):
                match = re.search(rf"keras_transformer_{name}_{kind}\{{[^}}]*\}} (\S+)", text)
                found[f"{name}_{kind}"] = float(match.group(1)) if match else 0.0
        return found

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)


def client_round(url, sentences, clients):
    """Sends each sentence in its own request from `clients` threads; returns `(wall seconds,
    latencies in seconds, answers)` in the order of `sentences`."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    latencies, answers = [None] * len(sentences), [None] * len(sentences)
    lock, next_index, errors = threading.Lock(), [0], []

    def run():
        connection = http.client.HTTPConnection(host, int(port), timeout=600)
        try:
            while True:
                with lock:
                    index = next_index[0]
                    next_index[0] += 1
                if index >= len(sentences):
                    return
                body = json.dumps(
                    {"q": sentences[index], "source": SOURCE_LANGUAGE, "target": "en"}
                )
                start = time.perf_counter()
                connection.request("POST", "/translate", body, {"Content-Type": "application/json"})
                response = connection.getresponse()
                data = response.read()
                latencies[index] = time.perf_counter() - start
                if response.status != 200:
                    errors.append(f"{response.status}: {data[:200]!r}")
                    continue
                answers[index] = json.loads(data)["translatedText"]
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"{len(errors)} failed requests, the first: {errors[0]}")
    return wall, latencies, answers


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


# --- The benchmark -------------------------------------------------------------------------


def benchmark(args, name, model_path, sentences, engine, env, work):
    """The rows of one model and engine: offline, then the server's rounds."""
    policy = env.get("OMP_WAIT_POLICY", "-")
    base = {"model": name, "engine": engine, "omp_wait_policy": policy}
    print(f"{name} / {engine}: offline, {len(sentences)} sentences ...", flush=True)
    found = offline(model_path, engine, sentences, args.max_batch, env, work)
    reference = found["outputs"]
    offline_rate = len(sentences) / found["wall_s"]
    rows = [
        dict(
            base,
            mode="offline",
            clients="-",
            sentences=len(sentences),
            wall_s=found["wall_s"],
            sentences_per_s=offline_rate,
            ratio=1.0,
            cpu_s=found["cpu_s"],
            warm_s=found["warm_s"],
        )
    ]
    print(format_row(rows[-1]), flush=True)
    server = ServerProcess(
        model_path, engine, args.max_batch, args.batch_wait_ms, env, args.announced_wait_ms
    )
    try:
        ready_s = server.wait_ready()
        print(f"{name} / {engine}: server ready after {ready_s:.1f} s", flush=True)
        for clients in args.clients:
            chosen = sentences
            if name == "opus" and clients == 1 and args.opus_single:
                chosen = sentences[: args.opus_single]
            before, cpu = server.metrics(), server.cpu_seconds()
            wall, latencies, answers = client_round(server.url, chosen, clients)
            cpu, after = server.cpu_seconds() - cpu, server.metrics()
            batches = after["batch_sentences_count"] - before["batch_sentences_count"]
            batch_sentences = after["batch_sentences_sum"] - before["batch_sentences_sum"]
            engine_s = after["batch_seconds_sum"] - before["batch_seconds_sum"]
            rate = len(chosen) / wall
            rows.append(
                dict(
                    base,
                    mode="server",
                    clients=clients,
                    sentences=len(chosen),
                    wall_s=wall,
                    sentences_per_s=rate,
                    ratio=rate / offline_rate,
                    p50_ms=1000 * percentile(latencies, 0.5),
                    p99_ms=1000 * percentile(latencies, 0.99),
                    cpu_s=cpu,
                    same=sum(a == b for a, b in zip(answers, reference, strict=False)),
                    batches=int(batches),
                    mean_batch=batch_sentences / max(batches, 1),
                    engine_s=engine_s,
                )
            )
            print(format_row(rows[-1]), flush=True)
        if name == "number":
            short = [SHORT_SENTENCE] * (args.short_requests + 5)
            before, cpu = server.metrics(), server.cpu_seconds()
            wall, latencies, _ = client_round(server.url, short, 1)
            cpu, after = server.cpu_seconds() - cpu, server.metrics()
            latencies = latencies[5:]  # The first 5: untimed.
            rows.append(
                dict(
                    base,
                    mode=f"one by one, {SHORT_SENTENCE!r}",
                    clients=1,
                    sentences=len(latencies),
                    wall_s=sum(latencies),
                    sentences_per_s=len(latencies) / sum(latencies),
                    p50_ms=1000 * percentile(latencies, 0.5),
                    p99_ms=1000 * percentile(latencies, 0.99),
                    cpu_s=cpu,
                    batches=int(after["batch_sentences_count"] - before["batch_sentences_count"]),
                    mean_batch=1.0,
                    engine_s=after["batch_seconds_sum"] - before["batch_seconds_sum"],
                )
            )
            print(format_row(rows[-1]), flush=True)
    finally:
        server.stop()
    return rows


def format_row(row):
    def value(key, pattern):
        return pattern.format(row[key]) if row.get(key) is not None else "-"

    same = f"{row['same']}/{row['sentences']}" if "same" in row else "-"
    engine_calls = (
        f"{row['batches']} x {row['mean_batch']:.1f}, {row['engine_s']:.1f} s"
        if "batches" in row
        else (f"warm-up {row['warm_s']:.0f} s" if "warm_s" in row else "-")
    )
    return (
        f"| {row['model']} | {row['engine']} | {row['omp_wait_policy']} | {row['mode']} | "
        f"{row['clients']} | {row['sentences']} | {row['wall_s']:.2f} | "
        f"{row['sentences_per_s']:.1f} | {value('ratio', '{:.2f}')} | {value('p50_ms', '{:.0f}')} | "
        f"{value('p99_ms', '{:.0f}')} | {row['cpu_s']:.1f} | {same} | {engine_calls} |"
    )


def write_results(args, rows):
    from train_throughput import machine_description  # benchmarks/ is on sys.path when run

    header = [
        f"Serving throughput, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. {machine_description()}. "
        f"fp32 matmul (TensorFlow, 1024x1024) {args.matmul_gflops[0]:.0f} GFLOP/s before, "
        f"{args.matmul_gflops[1]:.0f} after. keras_transformer {args.package}. "
        "KERAS_BACKEND=tensorflow; "
        f"OMP_WAIT_POLICY={args.omp_wait_policy} for the CTranslate2 rows (column OMP), unset "
        f"for the Keras rows. Server: `keras-transformer serve --max-batch-sentences "
        f"{args.max_batch} --batch-wait-ms {args.batch_wait_ms:g} --announced-wait-ms "
        f"{args.announced_wait_ms:g}`; each client thread sends "
        "one sentence per request (keep-alive). Offline: `engines.load_translator`, "
        f"`serving.models.warm(engine, {args.max_batch})`, one untimed and one timed "
        "`translate_texts(engine, all sentences, language='es')` (the server's segmentation). Ratio: sentences/s over the offline rate. CPU: "
        "the offline process's, or the server process's during the round. Same: answers "
        "equal to the offline translation. Engine calls: the server's batches in the round "
        "(count x mean sentences, seconds inside the engine; `/metrics`). Models: number = "
        "the tests' number-words translator, 256 held-out sentences; opus = a random "
        f"OPUS-MT-sized Marian import ({args.opus_description}), the first 128 Bible test "
        "verses (the 1-client round: the first "
        f"{args.opus_single or 128}); bible = {args.bible_description}.",
        "",
        "| Model | Engine | OMP | Mode | Clients | Sentences | Wall (s) | Sentences/s "
        "| Ratio | p50 (ms) | p99 (ms) | CPU (s) | Same | Engine calls |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    from translate_throughput import write_table  # benchmarks/ is on sys.path when run

    write_table(args.results, header, rows, format_row)


def parent(args):
    from train_throughput import matmul_timer  # benchmarks/ is on sys.path when run

    os.makedirs(args.work, exist_ok=True)
    env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("OMP_WAIT_POLICY", None)
    import keras_transformer

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    args.package = f"from {os.path.dirname(keras_transformer.__file__)} (repository HEAD {commit})"
    matmul = matmul_timer("tensorflow")
    args.matmul_gflops = [matmul()]
    args.opus_description = "-"
    args.bible_description = "-"
    rows = []
    for name in args.models:
        if name == "number":
            model_path, sentences = build_number(args.work, args.number_jit_compile)
        elif name == "bible":
            if not args.bible:
                raise SystemExit("--models bible needs --bible RUN (a `make bible` directory)")
            model_path, sentences = bible_model(args.bible, args.bible_sentences)
            args.bible_description = (
                f"the translator of `{args.bible}` (`make bible`), the first {len(sentences)} "
                "lines of its test.src"
            )
        else:
            model_path, sentences = build_opus(args.work, args.opus_pieces, args.opus_extra_length)
            with open(os.path.join(model_path, "translator.json"), encoding="utf-8") as file:
                config = json.load(file)["config"]
            with open(os.path.join(model_path, "config.json"), encoding="utf-8") as file:
                vocabulary = json.load(file)["config"].get("vocabulary_size", "?")
            args.opus_description = (
                f"vocabulary {vocabulary}, beam {config['beam_size']}, max_source_length "
                f"{config['max_source_length']}, buckets {tuple(config['bucket_boundaries'])}, "
                f"extra_length {config['extra_length']}, jit_compile false"
            )
        for engine in args.engines:
            path, engine_env = model_path, env
            if engine == "ctranslate2":
                path = export_ctranslate2(model_path, args.work, name)
                engine_env = dict(env, OMP_WAIT_POLICY=args.omp_wait_policy)
            rows += benchmark(args, name, path, sentences, engine, engine_env, args.work)
    args.matmul_gflops.append(matmul())
    write_results(args, rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", default="runs/serve_throughput", help="models (reused)")
    parser.add_argument("--models", nargs="+", default=list(MODELS[:2]), choices=MODELS)
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    parser.add_argument("--clients", nargs="+", type=int, default=[1, 8, 32])
    parser.add_argument("--max-batch", type=int, default=32, help="the server's batch")
    parser.add_argument("--batch-wait-ms", type=float, default=0.0)
    parser.add_argument("--announced-wait-ms", type=float, default=0.0)
    parser.add_argument("--short-requests", type=int, default=50)
    parser.add_argument("--opus-pieces", type=int, default=32000)
    parser.add_argument("--opus-extra-length", type=int, default=8)
    parser.add_argument(
        "--opus-single", type=int, default=32, help="sentences of the 1-client opus round"
    )
    parser.add_argument("--bible", help="a `make bible` run directory (the `bible` model)")
    parser.add_argument("--bible-sentences", type=int, default=256)
    parser.add_argument("--omp-wait-policy", default="PASSIVE")
    parser.add_argument(
        "--number-jit-compile",
        action="store_true",
        help="the number translator searches with XLA (as `train` writes translators); by "
        "default as the tests' (a tf.function graph without XLA)",
    )
    parser.add_argument(
        "--results",
        default="serve_throughput",
        help="file name (no extension) of the table written to benchmarks/results/",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--engine", help=argparse.SUPPRESS)
    parser.add_argument("--sentences", help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.max_batch < 1 or any(clients < 1 for clients in args.clients):
        parser.error("--max-batch and --clients must be >= 1")
    if args.child:
        child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
