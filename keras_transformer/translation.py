"""The translation loop every engine shares (the Keras `Translator`, the SavedModel and
CTranslate2 engines): the translation contract on the way in and out, batching across buckets,
n-best lists, and the `Translation` each engine returns. An engine brings only its search.
"""

import dataclasses
from concurrent.futures import ThreadPoolExecutor

from keras_transformer._checks import check_alpha, check_positive_int
from keras_transformer.buckets import bucket_batches, bucket_length, padded_batch_size
from keras_transformer.text.preprocessor import as_byte_strings


@dataclasses.dataclass
class Translation:
    """One translation (or one hypothesis of an n-best list) with its details, as returned by
    `Translator.translate` and the engines of `keras_transformer.engines` (whose
    `SavedModelTranslator` returns strings only: its `tokens`, `source_tokens` and
    `target_tokens` are `None`).

    Attributes:
        text: str. The translation (`""` for an input without any token).
        score: float. Beam search: log probability divided by the length penalty; greedy
            search (`beam_size=1`): sum of the log probabilities. `0.0` for an empty input.
        tokens: list of int. The generated ids, the end token included when generated.
        truncated: bool. The input was longer than `max_source_length` and was truncated.
        source_tokens: list of str. The encoder input tokens, `[START]` and `[END]` included.
        target_tokens: list of str. The generated tokens (`tokens` as strings).
        attention: float32 NumPy array `(num_decoder_layers, num_heads, len(target_tokens),
            len(source_tokens))`, the cross-attention probabilities with which each target
            token was produced, or `None` unless asked for.
    """

    text: str
    score: float
    tokens: list
    truncated: bool
    source_tokens: list
    target_tokens: list
    attention: object = None


def check_search_options(beam_size, alpha, num_hypotheses):
    """Checks the search options of a `translate` call (any engine)."""
    check_positive_int("beam_size", beam_size)
    check_alpha(alpha)
    if num_hypotheses is not None and (
        isinstance(num_hypotheses, bool)
        or not isinstance(num_hypotheses, int)
        or not 1 <= num_hypotheses <= beam_size
    ):
        raise ValueError(
            f"`num_hypotheses` must be an int from 1 to the beam size ({beam_size}). "
            f"Received: num_hypotheses={num_hypotheses!r}"
        )


def run_translation(
    preprocessor,
    sentences,
    search,
    batch_size,
    extra_length,
    num_hypotheses,
    attention=None,
    workers=1,
):
    """The steps every translation engine shares, around its own search.

    Sentences go through `preprocessor.generate_preprocess` (the translation contract); the
    non-empty ones are cut, in length order, into batches of `batch_size`, each padded to the
    bucket of its longest source (`keras_transformer.buckets.bucket_batches`: one batch
    shape per bucket, and one more at most) and handed to `search`, `workers`
    batches at a time; the hypotheses are detokenized with
    `preprocessor.generate_postprocess`. An empty sentence translates to `""` with score `0.0`
    without any search.

    Args:
        preprocessor: `keras_transformer.text.TranslationPreprocessor`.
        sentences: a `str` (or `bytes`), or a list / NumPy array of them.
        search: callable `(source_ids, bucket, max_lengths) -> hypotheses`: `source_ids` a
            list of lists of int (`[START] pieces [END]`, unpadded), `bucket` their padded
            length, `max_lengths` the most tokens of each one's translation (the bucket of that
            source alone + `extra_length`: the same whatever it is batched with); for each
            source, a list of `(tokens, score)`, best first, `tokens` trimmed after the end
            token.
        batch_size: int. Most sources per `search` call.
        extra_length: int. A translation has at most its source's bucket length +
            `extra_length` tokens.
        num_hypotheses: int or `None`, as in `Translator.translate`.
        attention: callable `(source_ids, tokens) -> array`, to fill `Translation.attention`.
            Defaults to `None`.
        workers: int. Batches searched at once, each by its own thread (`search` must then be
            thread-safe). The results do not depend on it. Defaults to `1`.

    Returns:
        As `Translator.translate`.
    """
    single = isinstance(sentences, (str, bytes))
    strings = as_byte_strings([sentences] if single else sentences)
    if not strings:
        return []
    if attention is None and not all(strings):
        # An empty line has no token: `""` without the preprocessor (a TensorFlow call per
        # request: 100,000 empty lines took minutes) or a search.
        rest = [string for string in strings if string]
        options = (search, batch_size, extra_length, num_hypotheses, None, workers)
        found = iter(run_translation(preprocessor, rest, *options) if rest else [])
        results = []
        for string in strings:
            if string:
                results.append(next(found))
                continue
            empty = _empty_translation(preprocessor)
            results.append([empty] if num_hypotheses is not None else empty)
        return results[0] if single else results
    features = preprocessor.generate_preprocess(strings)
    source_ids = features["encoder_inputs"].to_list()
    empty, truncated = features["empty"].numpy(), features["truncated"].numpy()
    lengths = {index: len(ids) for index, ids in enumerate(source_ids) if not empty[index]}
    found = {}  # index -> [(tokens, score)], best first

    def run(batch):
        bucket, indices = batch
        max_lengths = [
            bucket_length(lengths[index], preprocessor.bucket_boundaries) + extra_length
            for index in indices
        ]
        return indices, search([source_ids[index] for index in indices], bucket, max_lengths)

    batches = _search_order(bucket_batches(lengths, preprocessor.bucket_boundaries, batch_size))
    for indices, hypotheses in _map(run, batches, workers):
        for index, options in zip(indices, hypotheses, strict=True):
            found[index] = options[: num_hypotheses or 1]
    texts = _detokenize(
        preprocessor, [tokens for index in sorted(found) for tokens, _ in found[index]]
    )
    targets, results = preprocessor.targets, []
    for index, ids in enumerate(source_ids):
        source_tokens = [preprocessor.tokenizer.id_to_token(i) for i in ids]
        hypotheses = []
        for tokens, score in found.get(index, [([], 0.0)]):
            hypotheses.append(
                Translation(
                    text=next(texts) if index in found else "",
                    score=float(score),
                    tokens=tokens,
                    truncated=bool(truncated[index]),
                    source_tokens=list(source_tokens),
                    target_tokens=[targets.id_to_token(i) for i in tokens],
                    attention=attention(ids, tokens) if attention else None,
                )
            )
        results.append(hypotheses if num_hypotheses is not None else hypotheses[0])
    return results[0] if single else results


def _empty_translation(preprocessor):
    """The translation of an empty sentence, as the preprocessor and a search would give it:
    `""`, score `0.0`, source tokens `[START] [END]`."""
    tokenizer = preprocessor.tokenizer
    source_tokens = [tokenizer.id_to_token(tokenizer.start_id), tokenizer.id_to_token(tokenizer.end_id)]
    return Translation("", 0.0, [], False, source_tokens, [], None)


def _search_order(batches):
    """`batches` (`(bucket, indices)`) in the order to search them: the first batch of each
    shape, then the others, each part longest bucket first.

    A shape's first batch traces and compiles it (XLA, `jax.jit`): started early, the
    compiles overlap with searches of shapes already compiled, instead of each making the
    other worker wait on the way up the buckets; the short batches last fill the end.
    Measured on 1,000 Bible verses (TensorFlow, two workers): first call 49-59 s instead of
    61 s, the second unchanged (29 s).
    """
    seen, firsts, others = set(), [], []
    for bucket, indices in sorted(batches, key=lambda batch: -batch[0]):
        shape = (bucket, padded_batch_size(len(indices)))
        (others if shape in seen else firsts).append((bucket, indices))
        seen.add(shape)
    return firsts + others


def _map(function, items, workers):
    """`map(function, items)`, in order, run by `workers` threads when that is more than one.

    The compiled searches (XLA, `jax.jit`) release the GIL and use about one core each on a
    CPU, so two batches at once keep two cores busy."""
    if workers <= 1 or len(items) <= 1:
        return map(function, items)

    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as executor:
        return list(executor.map(function, items))


def _detokenize(preprocessor, sequences):
    """An iterator over the texts of `sequences` (lists of ids), in order."""
    if not sequences:
        return iter(())
    pad_id = preprocessor.targets.pad_id
    longest = max(1, max(len(tokens) for tokens in sequences))
    rows = [tokens + [pad_id] * (longest - len(tokens)) for tokens in sequences]
    texts = preprocessor.generate_postprocess(rows).numpy()
    return iter(text.decode("utf-8", "replace") for text in texts)
