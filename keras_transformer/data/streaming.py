"""A `tf.data` pipeline that streams a corpus larger than memory: lines to batches.

`keras_transformer.datasets.scan_corpora` reads the corpus once and writes each line's key
(`.keys`, one int64 per line; `-1` for a line a filter removed); this pipeline then reads the
corpus files again as they are (`TextLineDataset`, gzip via `compression_type`) beside their
keys, keeps the training lines (key above the held-out threshold), mixes several corpora by
their weights (`sample_from_datasets`), shuffles through a bounded buffer, tokenizes in
batches, drops pairs longer than `max_length` and batches them by length exactly as
`make_dataset` does. Memory does not grow with the corpus.

TensorFlow is imported lazily, inside the functions.
"""

import math

from keras_transformer.buckets import check_bucket_boundaries
from keras_transformer.data.pipeline import PipelineResult, bucket_batches, to_dense

TOKENIZE_BATCH = 1024


def stream_pairs(corpora, keys_paths, threshold, seed=0, repeat=True):
    """The training pairs of `corpora` as a `tf.data.Dataset` of `(source, target)` strings.

    Args:
        corpora: list of `keras_transformer.datasets.Corpus`.
        keys_paths: list of str. Each corpus's `.keys` file (from `scan_corpora`).
        threshold: int. Lines whose key is above it are training pairs.
        seed: int. Seed of the weighted mixing. Defaults to `0`.
        repeat: bool. Repeat each corpus forever (mixing by weight needs it). Defaults to
            `True`; `False` reads each corpus once, one after the other (no mixing).

    Returns:
        `tf.data.Dataset` of two scalar strings.
    """
    import tensorflow as tf

    streams = []
    for corpus, keys_path in zip(corpora, keys_paths, strict=True):
        streams.append(_corpus_pairs(corpus, keys_path, threshold, repeat))
    if not repeat:
        dataset = streams[0]
        for stream in streams[1:]:
            dataset = dataset.concatenate(stream)
        return dataset
    if len(streams) == 1:
        return streams[0]
    total = float(sum(corpus.weight for corpus in corpora))
    return tf.data.Dataset.sample_from_datasets(
        streams, weights=[corpus.weight / total for corpus in corpora], seed=seed
    )


def make_streaming_dataset(
    corpora,
    keys_paths,
    threshold,
    tokenizer,
    tokens_per_batch=4096,
    max_length=128,
    seed=0,
    shuffle_buffer=100_000,
    bucket_boundaries=None,
    num_examples=0,
    sample=(),
    repeat=True,
    target_tokenizer=None,
    source_start_token=True,
):
    """Tokenized, length-bucketed, token-budgeted batches streamed from corpus files.

    The elements are those of `make_dataset`: `({"encoder_inputs", "decoder_inputs"},
    targets)`, int32, 0-padded to a bucket length, `tokens_per_batch // length` rows.

    Args:
        corpora: list of `keras_transformer.datasets.Corpus`.
        keys_paths: list of str, from `scan_corpora`.
        threshold: int, from `scan_corpora`.
        tokenizer: `keras_transformer.text.Tokenizer` (shared vocabulary).
        tokens_per_batch: int. Defaults to `4096`.
        max_length: int. Longer pairs (special tokens included) are dropped. Defaults to `128`.
        seed: int. Mixing and shuffling seed. Defaults to `0`.
        shuffle_buffer: int. Pairs in the shuffle buffer (bounds its memory); `0` does not
            shuffle. Defaults to `100000`.
        bucket_boundaries: sequence of int. Defaults to `None`:
            `default_bucket_boundaries(max_length)`.
        num_examples: int. Training pairs per pass (from the scan), reported. Defaults to `0`.
        sample: list of training pairs (e.g. the tokenizer's sample), tokenized to estimate
            the bucket counts of one pass and the pairs `max_length` drops. Defaults to `()`.
        repeat: bool. Defaults to `True`.
        target_tokenizer: `Tokenizer` for the targets. Defaults to `None` (`tokenizer`).
        source_start_token: bool. As in `make_dataset`. Defaults to `True`.

    Returns:
        A `PipelineResult` whose `bucket_counts`, `num_dropped` and `num_tokens` are estimates
        for one pass, scaled from `sample` (exact counts would need a pass over the corpus);
        `num_batches` is `None` when `repeat`.

    Example:

    >>> from keras_transformer.datasets import Corpus, scan_corpora
    >>> corpora = [Corpus(source="train.es.gz", target="train.en.gz")]  # doctest: +SKIP
    >>> scan = scan_corpora(corpora, 1000, 1000, keep_train=False, keys_dir="keys")  # doctest: +SKIP
    >>> result = make_streaming_dataset(
    ...     corpora, scan.keys_paths, scan.threshold, tokenizer, sample=scan.tokenizer_sample
    ... )  # doctest: +SKIP
    """
    import numpy as np
    import tensorflow as tf

    boundaries = check_bucket_boundaries(bucket_boundaries, max_length)
    batch_sizes = tuple(max(1, tokens_per_batch // length) for length in boundaries)
    start_id, end_id = tokenizer.start_id, tokenizer.end_id
    source_start_id = start_id if source_start_token else None
    target_tokenizer = target_tokenizer or tokenizer
    dataset = stream_pairs(corpora, keys_paths, threshold, seed=seed, repeat=repeat)
    if shuffle_buffer:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)

    def encode(sources, targets):
        from keras_transformer.text.preprocessor import source_ids, target_ids

        encoder_inputs, _ = source_ids(tokenizer.tokenize(sources), source_start_id, end_id)
        decoder_inputs, decoder_targets = target_ids(
            target_tokenizer.tokenize(targets), start_id, end_id
        )
        return encoder_inputs, decoder_inputs, decoder_targets

    def encode_and_filter(sources, targets):
        encoder, decoder, target = encode(sources, targets)
        keep = tf.maximum(encoder.row_lengths(), decoder.row_lengths()) <= max_length
        return (
            {
                "encoder_inputs": tf.ragged.boolean_mask(encoder, keep),
                "decoder_inputs": tf.ragged.boolean_mask(decoder, keep),
            },
            tf.ragged.boolean_mask(target, keep),
        )

    # Per batch of lines, not per line: tf.data's per-element cost is the bottleneck here.
    dataset = dataset.batch(TOKENIZE_BATCH).map(
        encode_and_filter, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
    dataset = dataset.unbatch().map(to_dense)  # a ragged row to a plain tensor
    dataset = bucket_batches(dataset, boundaries, batch_sizes, tokens_per_batch)
    dataset = dataset.prefetch(tf.data.AUTOTUNE)

    # Estimates for one pass, from the sample.
    bucket_counts = (0,) * len(boundaries)
    num_dropped, num_tokens = 0, (0, 0)
    if sample and num_examples:
        sample = list(sample)
        encoder, decoder, _ = encode([s for s, _ in sample], [t for _, t in sample])
        source_lengths = encoder.row_lengths().numpy()
        target_lengths = decoder.row_lengths().numpy()
        lengths = np.maximum(source_lengths, target_lengths)
        keep = lengths <= max_length
        scale = num_examples / len(sample)
        index = np.searchsorted(np.array(boundaries), lengths[keep], side="left")
        bucket_counts = tuple(
            round(scale * int((index == i).sum())) for i in range(len(boundaries))
        )
        num_dropped = round(scale * int((~keep).sum()))
        num_tokens = (
            round(scale * int(source_lengths[keep].sum())),
            round(scale * int(target_lengths[keep].sum())),
        )
    num_batches = None
    if not repeat:
        num_batches = sum(
            math.ceil(count / size) for count, size in zip(bucket_counts, batch_sizes, strict=True)
        )
    return PipelineResult(
        dataset=dataset,
        num_examples=num_examples - num_dropped,
        num_dropped=num_dropped,
        num_batches=num_batches,
        bucket_boundaries=boundaries,
        batch_sizes=batch_sizes,
        bucket_counts=bucket_counts,
        max_length=max_length,
        tokens_per_batch=tokens_per_batch,
        num_tokens=num_tokens,
    )


def _corpus_pairs(corpus, keys_path, threshold, repeat):
    """One corpus's training pairs: its lines zipped with their keys, filtered."""
    import tensorflow as tf

    def lines(path):
        compression = "GZIP" if path.endswith(".gz") else ""
        return tf.data.TextLineDataset(path, compression_type=compression)

    # Batches of lines and of their keys, zipped: no per-line function.
    keys = (
        tf.data.FixedLengthRecordDataset(keys_path, 8)
        .batch(TOKENIZE_BATCH)
        .map(lambda records: tf.io.decode_raw(records, tf.int64, little_endian=True)[:, 0])
    )
    files = [lines(path).batch(TOKENIZE_BATCH) for path in corpus.files]
    dataset = tf.data.Dataset.zip(keys, *files)

    def training_lines(key, *texts):
        keep = key > threshold
        if corpus.path:
            fields = tf.strings.split(tf.boolean_mask(texts[0], keep), "\t", maxsplit=1)
            fields = fields.to_tensor(shape=[None, 2])  # the scan checked: 2 columns
            return fields[:, 0], fields[:, 1]
        return tf.boolean_mask(texts[0], keep), tf.boolean_mask(texts[1], keep)

    dataset = dataset.map(training_lines, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    dataset = dataset.unbatch()
    return dataset.repeat() if repeat else dataset
