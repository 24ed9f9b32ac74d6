"""The test-split evaluation of a training run: translations scored against references."""

import time

from keras_transformer.training.bleu import corpus_bleu, exact_match


def evaluate_translations(translator, pairs, chunk_size=256, verbose=True):
    """Translates the sources of `pairs` and scores them against the targets.

    Args:
        translator: callable, list of str -> list of str (e.g. a `Translator`).
        pairs: list of `(source, reference)`.
        chunk_size: int. Sentences per call (the progress bar advances per chunk).
            Defaults to `256`.
        verbose: bool. Show a progress bar. Defaults to `True`.

    Returns:
        dict: `test_bleu` (sacrebleu corpus BLEU), `test_exact_match` (fraction),
        `test_seconds`, and `test_examples` (the first 10 `(source, reference, hypothesis)`).
    """
    start = time.monotonic()
    sources = [source for source, _ in pairs]
    references = [reference for _, reference in pairs]
    hypotheses = []
    chunks = range(0, len(sources), chunk_size)
    if verbose:
        from tqdm.auto import tqdm  # An optional dependency: needed only when verbose.

        chunks = tqdm(chunks, desc="translating the test split", unit="chunk")
    for index in chunks:
        hypotheses.extend(translator(sources[index : index + chunk_size]))
    return {
        "test_bleu": corpus_bleu(hypotheses, references),
        "test_exact_match": exact_match(hypotheses, references),
        "test_seconds": round(time.monotonic() - start, 1),
        "test_examples": [
            {"source": s, "reference": r, "hypothesis": h}
            for s, r, h in list(zip(sources, references, hypotheses, strict=True))[:10]
        ],
    }
