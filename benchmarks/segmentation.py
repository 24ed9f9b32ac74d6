"""Sentence segmenters on Bible paragraphs: precision and recall of the verse boundaries, and
speed.

The test split of `keras_transformer.datasets.sword_bible` (the 1,000 test verses of `make
bible`, in canonical order) is cut into paragraphs of 2 to 10 consecutive verses (sizes drawn
with `--seed`) joined by one space, as a user pastes a passage. The verse boundaries are the
truth. A segmenter's boundary (the start of each sentence after the first) counts as correct
when a verse starts there; a verse can hold several sentences, so the boundaries a segmenter
adds inside a verse are reported apart (`inside`): for translation a split inside a verse
costs little, a missed verse boundary leaves two verses in one input, so recall is the figure
that matters; `after .!? found` counts the verses ending in sentence punctuation (the
others end in `,;:` or nothing, which no punctuation rule can split) and how many of those
boundaries were found. Both sides are measured: Spanish (the source of `make bible`) and English.

Segmenters: the libraries as they come (`sentencex`, `pysbd` with `clean=False`), and ours
(`keras_transformer.documents.segmentation.Segmenter`, which keeps only boundaries at
whitespace). Speed: verses (sentences in) per second, the best of `--repeats` passes over all
paragraphs, one process, one thread. One JSON row per (segmenter, language) is appended to
`--output` (default `benchmarks/results/segmentation.jsonl`).

Usage:

    python benchmarks/segmentation.py --about "laptop, 2026-11-29"
"""

import argparse
import datetime
import json
import os
import platform
import random
import re
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
DEFAULT_OUTPUT = os.path.join(REPO, "benchmarks", "results", "segmentation.jsonl")
# A verse that ends a sentence (`.!?…`, closing quotes and brackets after it): the boundaries
# a punctuation-based segmenter can find (the others end in `,;:` or nothing).
SENTENCE_END = re.compile(r"[.!?…][\"'”’»)\]]*$")


def paragraphs(verses, seed, smallest=2, largest=10):
    """Consecutive verses grouped `smallest`..`largest` at a time; the last group keeps the
    rest (at least one verse). Returns `[(text, verse_starts), ...]`, `verse_starts` the
    character offsets where the second and later verses begin."""
    generator = random.Random(seed)
    result = []
    index = 0
    while index < len(verses):
        size = generator.randint(smallest, largest)
        group = verses[index : index + size]
        index += size
        starts = []
        offset = 0
        for number, verse in enumerate(group):
            if number:
                starts.append(offset)
            offset += len(verse) + 1
        result.append((" ".join(group), starts))
    return result


def starts_of(text, sentences):
    """The offsets in `text` where the second and later `sentences` begin (each sentence's first
    non-space character, found left to right, so that libraries returning stripped or
    rewritten strings are measured alike). A sentence not found in order is skipped."""
    starts = []
    cursor = 0
    for number, sentence in enumerate(sentences):
        sentence = sentence.strip()
        if not sentence:
            continue
        found = text.find(sentence, cursor)
        if found < 0:
            continue
        if number:
            starts.append(found)
        cursor = found + len(sentence)
    return starts


def make_segmenters(names, language):
    segmenters = {}
    for name in names:
        if name == "sentencex":
            import sentencex

            segmenters[name] = lambda text, code=language: list(sentencex.segment(code, text))
        elif name == "pysbd":
            import pysbd

            segmenter = pysbd.Segmenter(language=language, clean=False)
            segmenters[name] = segmenter.segment
        elif name == "ours":
            from keras_transformer.documents.segmentation import Segmenter

            segmenters[name] = Segmenter(language).split
        else:
            raise ValueError(f"Unknown segmenter. Received: segmenter={name!r}")
    return segmenters


def measure(split, items, repeats):
    """Boundary counts over `items` (from `paragraphs`) and the best time of `repeats` passes."""
    outputs = [split(text) for text, _ in items]
    correct = predicted = truth = punctuated = punctuated_found = 0
    for (text, verse_starts), sentences in zip(items, outputs, strict=True):
        found = set(starts_of(text, sentences))
        truth += len(verse_starts)
        predicted += len(found)
        correct += len(found & set(verse_starts))
        ends = [start for start in verse_starts if SENTENCE_END.search(text, 0, start - 1)]
        punctuated += len(ends)
        punctuated_found += len(found & set(ends))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for text, _ in items:
            split(text)
        best = min(best, time.perf_counter() - start)
    num_verses = sum(len(starts) + 1 for _, starts in items)
    return {
        "paragraphs": len(items),
        "verses": num_verses,
        "boundaries": truth,
        "predicted": predicted,
        "correct": correct,
        "inside": predicted - correct,
        "punctuated": punctuated,
        "punctuated_found": punctuated_found,
        "precision": correct / predicted if predicted else 0.0,
        "recall": correct / truth if truth else 0.0,
        "seconds": best,
        "verses_per_second": num_verses / best,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--segmenters", nargs="+", default=["sentencex", "pysbd", "ours"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default=DEFAULT_OUTPUT)
    parser.add_argument("--about", default="", help="a note stored with the rows")
    args = parser.parse_args(argv)

    from keras_transformer.datasets import sword_bible

    test = sword_bible().test
    sides = {"es": [pair[0] for pair in test], "en": [pair[1] for pair in test]}
    rows = []
    for language, verses in sides.items():
        items = paragraphs(verses, args.seed)
        for name, split in make_segmenters(args.segmenters, language).items():
            row = {"segmenter": name, "language": language, **measure(split, items, args.repeats)}
            rows.append(row)
    print(
        "| segmenter | language | verse boundaries | found | recall | after .!? found "
        "| precision | added inside verses | verses/s |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['segmenter']} | {row['language']} | {row['boundaries']} | {row['correct']} "
            f"| {row['recall']:.3f} | {row['punctuated_found']} of {row['punctuated']} "
            f"| {row['precision']:.3f} | {row['inside']} | {row['verses_per_second']:,.0f} |"
        )
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    versions = {}
    for package in ("sentencex", "pysbd"):
        try:
            from importlib.metadata import version

            versions[package] = version(package)
        except Exception:  # not installed
            versions[package] = None
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "a", encoding="utf-8") as file:
        for row in rows:
            row.update(
                time=stamp,
                about=args.about,
                seed=args.seed,
                machine=platform.processor() or platform.machine(),
                versions=versions,
            )
            file.write(json.dumps(row) + "\n")
    print(f"{len(rows)} rows appended to {args.output}")


if __name__ == "__main__":
    main()
