"""Whole paragraphs against single verses: what sentence segmentation buys a user who sends a
text instead of a sentence.

The Bible test verses (`keras_transformer.datasets.sword_bible().test`, 1,000 verses) are
grouped into paragraphs of 2-10 consecutive verses (lengths drawn with `--seed`), joined by
spaces, sources and references alike. One trained translator (the `translator.keras` of a
`make bible` run) then translates

- (a) `verses`: verse by verse, as the test split is scored (its BLEU also computed on the
  outputs joined into the same paragraphs, `verses-joined`, to compare at one granularity);
- (b) `paragraphs-whole`: each paragraph as one sentence (`translate --no-segment`: the model
  keeps its first `max_source_length` pieces and the rest is lost: `truncated`);
- (c) `paragraphs-segmented`: each paragraph through `keras_transformer.documents.texts.
  translate_texts` (sentences, long ones cut, joined back in the paragraph's layout);

and prints, for each, the corpus BLEU and chrF (sacrebleu) against the references at that
granularity, the outputs' length against the references', how many inputs were truncated,
the segments sent to the engine, and the wall and CPU time of the call. The segmenter's
boundary precision and recall on the source paragraphs (verse boundaries are the truth) and
its speed are printed too (`benchmarks/segmentation.py` has the full comparison of
segmenters).

```
make bible                                   # writes runs/bible/translator.keras
python benchmarks/paragraphs.py --run runs/bible
```

Rows go to `benchmarks/results/paragraphs.jsonl` (one JSON object per condition and run).
"""

import argparse
import json
import os
import random
import time
from datetime import UTC, datetime

import numpy as np


def paragraphs_of(count, seed, smallest=2, largest=10):
    """`[(start, stop)]` covering `range(count)` with runs of `smallest`..`largest` items."""
    rng = random.Random(seed)
    spans, start = [], 0
    while start < count:
        stop = min(count, start + rng.randint(smallest, largest))
        spans.append((start, stop))
        start = stop
    return spans


def boundary_scores(paragraphs, spans, sources, segmenter):
    """Precision and recall of the segmenter's sentence boundaries against the verse joins, and
    sentences per second."""
    found = truth = hits = 0
    sentences = 0
    started = time.perf_counter()
    for paragraph, (start, stop) in zip(paragraphs, spans, strict=True):
        pieces = segmenter.split(paragraph)
        sentences += len(pieces)
        # Boundaries as word counts before each cut: the verse joins, the segmenter's cuts.
        joins, words = set(), 0
        for verse in sources[start : stop - 1]:
            words += len(verse.split())
            joins.add(words)
        cuts, words = set(), 0
        for piece in pieces[:-1]:
            words += len(piece.split())
            cuts.add(words)
        found, truth, hits = found + len(cuts), truth + len(joins), hits + len(cuts & joins)
    seconds = time.perf_counter() - started
    return {
        "precision": hits / max(found, 1),
        "recall": hits / max(truth, 1),
        "sentences": sentences,
        "sentences_per_second": sentences / max(seconds, 1e-9),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a training run's directory")
    parser.add_argument("--seed", type=int, default=0, help="the paragraph lengths' seed")
    parser.add_argument("--limit", type=int, default=1000, help="test verses used")
    parser.add_argument("--language", default="es", help="the source language")
    parser.add_argument(
        "--results", default=os.path.join(os.path.dirname(__file__), "results", "paragraphs.jsonl")
    )
    args = parser.parse_args()

    import keras
    import sacrebleu

    from keras_transformer.datasets import sword_bible
    from keras_transformer.documents.segmentation import Segmenter
    from keras_transformer.documents.texts import CLAUSE_SHARE, plan_for, translate_texts
    from keras_transformer.engines import load_translator

    test = sword_bible().test[: args.limit]
    sources = [source for source, _ in test]
    references = [reference for _, reference in test]
    spans = paragraphs_of(len(sources), args.seed)
    paragraphs = [" ".join(sources[start:stop]) for start, stop in spans]
    paragraph_refs = [" ".join(references[start:stop]) for start, stop in spans]
    translator = load_translator(args.run)
    translator(sources[:64])  # Compiles the common shapes outside the timed calls.
    rows = []

    def timed(function):
        wall, cpu = time.perf_counter(), time.process_time()
        output = function()
        return output, time.perf_counter() - wall, time.process_time() - cpu

    def row(name, outputs, refs, wall, cpu, truncated, segments):
        bleu = sacrebleu.corpus_bleu(outputs, [refs])
        chrf = sacrebleu.corpus_chrf(outputs, [refs])
        found = {
            "condition": name,
            "bleu": round(bleu.score, 2),
            "chrf": round(chrf.score, 2),
            "length_ratio": round(bleu.sys_len / max(bleu.ref_len, 1), 3),
            "inputs": len(outputs),
            "truncated": truncated,
            "segments": segments,
            "wall_s": round(wall, 1),
            "cpu_s": round(cpu, 1),
        }
        rows.append(found)
        print(
            f"{name:22s} BLEU {found['bleu']:6.2f} chrF {found['chrf']:6.2f} "
            f"len {found['length_ratio']:.3f} inputs {len(outputs):5d} truncated {truncated:4d} "
            f"segments {segments:5d} wall {wall:6.1f} s cpu {cpu:6.1f} s"
        )

    verses, wall, cpu = timed(lambda: translator.translate(sources))
    texts = [verse.text for verse in verses]
    truncated = sum(verse.truncated for verse in verses)
    row("verses", texts, references, wall, cpu, truncated, len(sources))
    joined = [" ".join(texts[start:stop]) for start, stop in spans]
    row("verses-joined", joined, paragraph_refs, wall, cpu, truncated, len(sources))
    whole, wall, cpu = timed(lambda: translator.translate(paragraphs))
    row(
        "paragraphs-whole",
        [result.text for result in whole],
        paragraph_refs,
        wall,
        cpu,
        sum(result.truncated for result in whole),
        len(paragraphs),
    )
    segmenter = Segmenter(args.language)
    scores = boundary_scores(paragraphs, spans, sources, segmenter)
    plan = plan_for(translator, paragraphs, args.language)
    segmented, wall, cpu = timed(
        lambda: translate_texts(translator, paragraphs, language=args.language)
    )
    row(
        "paragraphs-segmented",
        [result.text for result in segmented],
        paragraph_refs,
        wall,
        cpu,
        sum(result.truncated for result in segmented),
        len(plan.sentences),  # Sentences, and clauses of the long ones: the engine's inputs.
    )
    print(
        f"segmenter ({args.language}): boundary precision {scores['precision']:.3f}, recall "
        f"{scores['recall']:.3f}, {scores['sentences_per_second']:.0f} sentences/s; "
        f"{len(paragraphs)} paragraphs of {len(sources)} verses "
        f"(mean {np.mean([stop - start for start, stop in spans]):.1f} verses)"
    )
    stamp = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "run": os.path.abspath(args.run),
        "backend": keras.backend.backend(),
        "seed": args.seed,
        "cpus": os.cpu_count(),
        "segmenter": scores,
        "clause_share": round(CLAUSE_SHARE, 3),
    }
    os.makedirs(os.path.dirname(args.results), exist_ok=True)
    with open(args.results, "a", encoding="utf-8") as file:
        for found in rows:
            file.write(json.dumps({**stamp, **found}) + "\n")


if __name__ == "__main__":
    main()
