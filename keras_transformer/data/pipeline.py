"""`tf.data` input pipeline: string pairs to length-bucketed, token-budgeted batches.

TensorFlow is imported lazily, inside the functions: importing this module does not import it.
The datasets it builds feed `model.fit` on every Keras backend (TensorFlow, JAX, PyTorch).

Each element is `({"encoder_inputs": (B, L), "decoder_inputs": (B, L)}, targets (B, L))`,
int32 and 0-padded, with

    encoder_inputs = [START] x_1 ... x_n [END]
    decoder_inputs = [START] y_1 ... y_m
    targets        =         y_1 ... y_m [END]

so the targets are the decoder inputs shifted left by one ("teacher forcing"). Both sides of a
batch share one padded length `L`, the smallest bucket length that holds the longer side, and
the batch size is `B = tokens_per_batch // L`, so every batch has at most `tokens_per_batch`
positions per side (the paper batches ~25,000 source + ~25,000 target tokens). The last, partial
batch of each bucket is padded with all-`[PAD]` rows (which a masked loss ignores), so the
dataset has exactly one padded shape per bucket and `jit_compile` compiles that many times.
"""

import dataclasses
import logging
import math

from keras_transformer.buckets import check_bucket_boundaries

logger = logging.getLogger("keras_transformer")


@dataclasses.dataclass(frozen=True)
class PipelineResult:
    """What `make_dataset` built, and what it dropped.

    Attributes:
        dataset: `tf.data.Dataset` of `({"encoder_inputs", "decoder_inputs"}, targets)`.
        num_examples: int. Pairs in the dataset (per epoch).
        num_dropped: int. Pairs removed because a side was longer than `max_length`.
        num_batches: int or None. Batches per epoch (`None` when `repeat=True`).
        bucket_boundaries: tuple of int. The padded lengths, ascending; the last is `max_length`.
        batch_sizes: tuple of int. Batch size of each bucket (`tokens_per_batch // length`).
        bucket_counts: tuple of int. Pairs in each bucket.
        max_length: int. Longest kept sequence, special tokens included.
        tokens_per_batch: int. Padded positions per side and batch, at most.
        num_tokens: tuple of int. Real (non-pad) `(encoder, decoder)` tokens per epoch.
    """

    dataset: object
    num_examples: int
    num_dropped: int
    num_batches: int | None
    bucket_boundaries: tuple
    batch_sizes: tuple
    bucket_counts: tuple
    max_length: int
    tokens_per_batch: int
    num_tokens: tuple

    @property
    def padded_shapes(self):
        """The `(batch, length)` shapes the dataset can produce (one per non-empty bucket)."""
        return tuple(
            (size, length)
            for size, length, count in zip(
                self.batch_sizes, self.bucket_boundaries, self.bucket_counts, strict=True
            )
            if count
        )

    @property
    def padding_fraction(self):
        """Fraction of the padded encoder + decoder positions per epoch that are `[PAD]`."""
        if not self.num_batches:
            return None
        padded = sum(
            2 * size * length * math.ceil(count / size)
            for size, length, count in zip(
                self.batch_sizes, self.bucket_boundaries, self.bucket_counts, strict=True
            )
        )
        return 1.0 - sum(self.num_tokens) / padded


def encode_source(tokenizer, strings):
    """Tokenizes source strings into encoder inputs: `[START] ids [END]`, not truncated.

    `keras_transformer.text.TranslationPreprocessor.encode_source` (which can also truncate)
    with `tokenizer`'s special tokens. Works eagerly and inside `tf.function`.

    Args:
        tokenizer: `keras_transformer.text.Tokenizer`.
        strings: string `tf.Tensor` of shape `(batch,)`, or a list of str.

    Returns:
        `tf.RaggedTensor` int32 of shape `(batch, None)`.
    """
    from keras_transformer.text.preprocessor import source_ids

    return source_ids(tokenizer.tokenize(strings), tokenizer.start_id, tokenizer.end_id)[0]


def encode_target(tokenizer, strings):
    """Tokenizes target strings into `(decoder_inputs, targets)`: `[START] ids`, `ids [END]`.

    Args:
        tokenizer: `keras_transformer.text.Tokenizer`.
        strings: string `tf.Tensor` of shape `(batch,)`, or a list of str.

    Returns:
        Two `tf.RaggedTensor`s int32 of shape `(batch, None)`, row lengths equal.
    """
    from keras_transformer.text.preprocessor import target_ids

    return target_ids(tokenizer.tokenize(strings), tokenizer.start_id, tokenizer.end_id)


def make_dataset(
    pairs,
    tokenizer,
    target_tokenizer=None,
    tokens_per_batch=4096,
    max_length=128,
    shuffle=True,
    seed=0,
    bucket_boundaries=None,
    repeat=False,
    pad_remainder=True,
    start_id=None,
    end_id=None,
    tokenize_batch_size=8192,
    vocabulary_size=None,
    target_vocabulary_size=None,
    source_start_token=True,
):
    """Builds a bucketed, token-budgeted `tf.data.Dataset` from `(source, target)` pairs.

    Pairs are tokenized once, eagerly and vectorized; pairs whose encoder or decoder sequence
    (special tokens included) is longer than `max_length` are dropped, counted in
    `PipelineResult.num_dropped` and logged with a warning. Examples are then shuffled (seeded,
    reshuffled every epoch), grouped into buckets by length and batched so that
    `batch * padded_length <= tokens_per_batch` on each side.

    Args:
        pairs: sequence of `(source, target)` string pairs; or, with `tokenizer=None`, of
            `(source_ids, target_ids)` int sequences (e.g. the copy task), then `start_id` and
            `end_id` are required.
        tokenizer: `keras_transformer.text.Tokenizer` for the sources (and the targets unless
            `target_tokenizer` is given), or `None` for pre-tokenized pairs.
        target_tokenizer: `Tokenizer` for the targets. Defaults to `None` (shared vocabulary).
        tokens_per_batch: int. Padded positions per side and batch, at most. Must be at least
            `max_length`. Defaults to `4096`.
        max_length: int. Longest kept sequence, `[START]`/`[END]` included. Defaults to `128`.
        shuffle: bool. Shuffle the examples (seeded, new order every epoch). Defaults to `True`.
        seed: int. Shuffle seed; the same seed gives the same batches. Defaults to `0`.
        bucket_boundaries: sequence of int. Ascending padded lengths; `max_length` is appended
            when larger than the last. Defaults to `None`, which uses
            `default_bucket_boundaries(max_length)`.
        repeat: bool. Repeat forever (then pass `steps_per_epoch` to `fit`). Defaults to `False`.
        pad_remainder: bool. Pad the last, partial batch of each bucket to the full batch size
            with all-`[PAD]` rows, so there is one padded shape per bucket. Defaults to `True`.
        start_id: int. `[START]` id for pre-tokenized pairs. Defaults to the tokenizer's.
        end_id: int. `[END]` id for pre-tokenized pairs. Defaults to the tokenizer's.
        tokenize_batch_size: int. Strings tokenized per TensorFlow call. Defaults to `8192`.
        vocabulary_size: int. The model's source vocabulary size: every source id and the special
            ids must be below it. Pre-tokenized ids are always checked to be non-negative
            integers (floats are not truncated, negative ids not wrapped); a `ValueError`
            names the first bad pair, position and id. Checked here, eagerly, because a
            compiled `fit` does not check ids. Defaults to `None` (no upper bound).
        target_vocabulary_size: int. The same bound for target ids. Defaults to `vocabulary_size`.
        source_start_token: bool. Sources start with `[START]` (`pieces [END]` without it,
            as a translator imported from Marian encodes them). Defaults to `True`.

    Returns:
        A `PipelineResult`; its `dataset` yields
        `({"encoder_inputs": int32 (B, L), "decoder_inputs": int32 (B, L)}, int32 (B, L))`.

    Example:

    >>> from keras_transformer.text import train_tokenizer
    >>> pairs = [("hola mundo", "hello world"), ("adiós", "goodbye")]
    >>> tokenizer = train_tokenizer([s for pair in pairs for s in pair], vocabulary_size=64)
    >>> result = make_dataset(pairs, tokenizer, tokens_per_batch=64, max_length=16)
    >>> inputs, targets = next(iter(result.dataset))
    >>> tuple(inputs["decoder_inputs"].shape) == tuple(targets.shape)
    True
    """
    import numpy as np
    import tensorflow as tf

    # Keras layers: imported here so that `import keras_transformer.data` loads no framework.
    from keras_transformer.layers.token_ids import check_token_ids
    from keras_transformer.text.preprocessor import source_ids, target_ids

    if not isinstance(max_length, int) or max_length < 2:
        raise ValueError(f"`max_length` must be an int >= 2. Received: max_length={max_length}")
    if not isinstance(tokens_per_batch, int) or tokens_per_batch < max_length:
        raise ValueError(
            "`tokens_per_batch` must be an int >= max_length "
            f"({max_length}), so that the longest pair fits in a batch. "
            f"Received: tokens_per_batch={tokens_per_batch}"
        )
    boundaries = check_bucket_boundaries(bucket_boundaries, max_length)
    pairs = list(pairs)
    if not pairs:
        raise ValueError("`pairs` is empty. Received: pairs=[]")
    if any(len(pair) != 2 for pair in pairs):
        raise ValueError("Every element of `pairs` must be a `(source, target)` pair.")
    sources = [pair[0] for pair in pairs]
    targets = [pair[1] for pair in pairs]

    if tokenizer is None:
        if start_id is None or end_id is None:
            raise ValueError(
                "Pre-tokenized pairs (tokenizer=None) need `start_id` and `end_id`. "
                f"Received: start_id={start_id}, end_id={end_id}"
            )
        source_rows = [np.asarray(ids).reshape(-1) for ids in sources]
        target_rows = [np.asarray(ids).reshape(-1) for ids in targets]
    else:
        target_tokenizer = target_tokenizer or tokenizer
        start_id = tokenizer.start_id if start_id is None else start_id
        end_id = tokenizer.end_id if end_id is None else end_id
        source_rows = _rows(_tokenize(tokenizer, sources, tokenize_batch_size))
        target_rows = _rows(_tokenize(target_tokenizer, targets, tokenize_batch_size))
    target_vocabulary_size = vocabulary_size if target_vocabulary_size is None else target_vocabulary_size
    source_pieces = _ragged(_checked_ids(source_rows, vocabulary_size, "pairs[{}][0]"))
    target_pieces = _ragged(_checked_ids(target_rows, target_vocabulary_size, "pairs[{}][1]"))
    for size in (vocabulary_size, target_vocabulary_size):
        check_token_ids(start_id, size or _INT32_LIMIT, "start_id")
        check_token_ids(end_id, size or _INT32_LIMIT, "end_id")

    # [START] pieces [END] (or pieces [END]), as the translator's preprocessor encodes sources.
    encoder_inputs, _ = source_ids(source_pieces, start_id if source_start_token else None, end_id)
    decoder_inputs, decoder_targets = target_ids(target_pieces, start_id, end_id)
    source_lengths = encoder_inputs.row_lengths().numpy()
    target_lengths = decoder_inputs.row_lengths().numpy()
    lengths = np.maximum(source_lengths, target_lengths)
    keep = lengths <= max_length
    num_dropped = int((~keep).sum())
    kept = np.flatnonzero(keep)
    if num_dropped:
        logger.warning(
            "make_dataset: dropped %d of %d pairs longer than max_length=%d tokens "
            "(special tokens included).",
            num_dropped,
            len(pairs),
            max_length,
        )
    if not len(kept):
        raise ValueError(
            f"Every pair is longer than `max_length`. Received: max_length={max_length}"
        )
    encoder_inputs, decoder_inputs, decoder_targets = (
        tf.gather(ids, kept) for ids in (encoder_inputs, decoder_inputs, decoder_targets)
    )
    kept_lengths = lengths[kept]

    batch_sizes = tuple(max(1, tokens_per_batch // length) for length in boundaries)
    bucket_index = np.searchsorted(np.array(boundaries), kept_lengths, side="left")
    bucket_counts = tuple(int((bucket_index == i).sum()) for i in range(len(boundaries)))
    num_batches = sum(
        math.ceil(count / size) for count, size in zip(bucket_counts, batch_sizes, strict=True)
    )
    num_tokens = (
        int(source_lengths[kept].sum()),
        int(target_lengths[kept].sum()),
    )

    dataset = tf.data.Dataset.from_tensor_slices(
        ({"encoder_inputs": encoder_inputs, "decoder_inputs": decoder_inputs}, decoder_targets)
    )
    # Slices of a ragged tensor are ragged-rank-0 "ragged" tensors: make them plain tensors.
    dataset = dataset.map(to_dense, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if shuffle:
        dataset = dataset.shuffle(len(kept), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()

    dataset = bucket_batches(dataset, boundaries, batch_sizes, tokens_per_batch, pad_remainder)
    if not repeat:
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(num_batches))
    dataset = dataset.prefetch(tf.data.AUTOTUNE)

    result = PipelineResult(
        dataset=dataset,
        num_examples=int(len(kept)),
        num_dropped=num_dropped,
        num_batches=None if repeat else num_batches,
        bucket_boundaries=boundaries,
        batch_sizes=batch_sizes,
        bucket_counts=bucket_counts,
        max_length=max_length,
        tokens_per_batch=tokens_per_batch,
        num_tokens=num_tokens,
    )
    logger.info(
        "make_dataset: %d pairs (%d dropped), %d batches per epoch, padded shapes %s.",
        result.num_examples,
        result.num_dropped,
        num_batches,
        list(result.padded_shapes),
    )
    return result


def _tokenize(tokenizer, strings, batch_size):
    """Tokenizes a list of str in chunks; returns an int32 `tf.RaggedTensor` `(batch, None)`."""
    import tensorflow as tf

    chunks = [
        tokenizer.tokenize(list(strings[index : index + batch_size]))
        for index in range(0, len(strings), batch_size)
    ]
    return tf.cast(tf.concat(chunks, axis=0), tf.int32)


def _rows(ragged):
    """An int32 `tf.RaggedTensor` `(batch, None)` as a list of NumPy arrays, one per row."""
    import numpy as np

    return np.split(ragged.flat_values.numpy(), ragged.row_splits.numpy()[1:-1])


def _ragged(rows):
    import numpy as np
    import tensorflow as tf

    values = np.concatenate(rows) if rows else np.zeros((0,), "int32")
    return tf.RaggedTensor.from_row_lengths(values, [len(row) for row in rows], validate=False)


_INT32_LIMIT = 2**31  # ids above it would wrap in the cast to int32


def _checked_ids(rows, vocabulary_size, name):
    """Id sequences as int32 arrays, once every id is an integer in `[0, vocabulary_size)`."""
    import numpy as np

    from keras_transformer.layers.token_ids import check_token_ids

    limit = vocabulary_size or _INT32_LIMIT
    flat = np.concatenate(rows) if rows else np.zeros(0, "int32")
    if flat.size and not (flat.dtype.kind in "iu" and flat.min() >= 0 and flat.max() < limit):
        # Rare: find the first offending sequence, for an error that names it.
        for index, ids in enumerate(rows):
            if ids.size:  # an empty list is a float64 array, and holds no bad id
                check_token_ids(ids, limit, name.format(index))
    return [ids.astype("int32") for ids in rows]


def to_dense(inputs, targets):
    """An example whose sequences are ragged-rank-0 `tf.RaggedTensor`s, as plain tensors."""
    import tensorflow as tf

    def dense(tensor):
        return tensor.to_tensor() if isinstance(tensor, tf.RaggedTensor) else tensor

    return {key: dense(value) for key, value in inputs.items()}, dense(targets)


def bucket_batches(dataset, boundaries, batch_sizes, tokens_per_batch, pad_remainder=True):
    """Batches `({"encoder_inputs", "decoder_inputs"}, targets)` examples by length.

    Bucket `i` holds the examples whose longer side is in `(boundaries[i-1], boundaries[i]]`,
    padded to `boundaries[i]`, in batches of `batch_sizes[i]`; with `pad_remainder`, a
    partial batch is padded with all-`[PAD]` rows to `tokens_per_batch // length` rows.
    """
    import tensorflow as tf

    def element_length(inputs, targets):
        return tf.maximum(
            tf.shape(inputs["encoder_inputs"])[0], tf.shape(inputs["decoder_inputs"])[0]
        )

    dataset = dataset.bucket_by_sequence_length(
        element_length,
        bucket_boundaries=[length + 1 for length in boundaries],
        bucket_batch_sizes=list(batch_sizes) + [1],
        padded_shapes=({"encoder_inputs": [None], "decoder_inputs": [None]}, [None]),
        padding_values=0,
        pad_to_bucket_boundary=True,
    )
    if pad_remainder:
        dataset = dataset.map(
            lambda inputs, targets: pad_batch(inputs, targets, tokens_per_batch),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
    return dataset


def pad_batch(inputs, targets, tokens_per_batch):
    """Pads a batch with all-[PAD] rows up to `tokens_per_batch // length` rows."""
    import tensorflow as tf

    length = tf.shape(targets)[1]
    rows = tf.maximum(1, tokens_per_batch // length)
    paddings = [[0, rows - tf.shape(targets)[0]], [0, 0]]
    inputs = {key: tf.pad(value, paddings) for key, value in inputs.items()}
    return inputs, tf.pad(targets, paddings)
