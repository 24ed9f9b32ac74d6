"""Synthetic copy task: the target is the source (a first sanity check, as in the
annotated Transformer). Pure NumPy."""

import numpy as np

from keras_transformer.datasets.splits import Splits

PAD_ID, START_ID, END_ID = 0, 1, 2
FIRST_TOKEN_ID = 3


def copy_task(
    num_train=2000,
    num_validation=200,
    num_test=200,
    vocabulary_size=20,
    min_length=3,
    max_length=10,
    seed=0,
):
    """Random token sequences paired with themselves.

    Ids 0, 1, 2 are reserved for padding, `[START]` and `[END]`; sequences use ids
    `3 .. vocabulary_size - 1`. Every sequence is drawn once, so test and validation sequences never
    occur in training.

    Args:
        num_train: int. Training pairs. Defaults to `2000`.
        num_validation: int. Validation pairs. Defaults to `200`.
        num_test: int. Test pairs. Defaults to `200`.
        vocabulary_size: int. Total vocabulary including the 3 reserved ids. Defaults to `20`.
        min_length: int. Shortest sequence. Defaults to `3`.
        max_length: int. Longest sequence. Defaults to `10`.
        seed: int. Defaults to `0`.

    Returns:
        `Splits(train, validation, test)`, each a list of `(source, target)` pairs of
        int32 NumPy arrays (without `[START]`/`[END]`).

    Example:

    >>> splits = copy_task(num_train=10, num_validation=2, num_test=2)
    >>> source, target = splits.train[0]
    >>> bool((source == target).all())
    True
    """
    if vocabulary_size <= FIRST_TOKEN_ID + 1:
        raise ValueError(f"`vocabulary_size` must be > {FIRST_TOKEN_ID + 1}. Received: vocabulary_size={vocabulary_size}")
    if not 1 <= min_length <= max_length:
        raise ValueError(
            "Need 1 <= min_length <= max_length. Received: "
            f"min_length={min_length}, max_length={max_length}"
        )
    rng = np.random.default_rng(seed)
    seen = set()
    sequences = []
    total = num_train + num_validation + num_test
    attempts = 0
    while len(sequences) < total:
        attempts += 1
        if attempts > 100 * total:
            raise ValueError(
                f"Cannot draw {total} distinct sequences with vocabulary_size={vocabulary_size}, "
                f"max_length={max_length}."
            )
        length = int(rng.integers(min_length, max_length + 1))
        sequence = rng.integers(FIRST_TOKEN_ID, vocabulary_size, size=length).astype("int32")
        key = sequence.tobytes()
        if key in seen:
            continue
        seen.add(key)
        sequences.append(sequence)
    pairs = [(s, s.copy()) for s in sequences]
    return Splits(
        train=pairs[:num_train],
        validation=pairs[num_train : num_train + num_validation],
        test=pairs[num_train + num_validation :],
    )


def to_model_inputs(pairs, start_id=START_ID, end_id=END_ID, pad_id=PAD_ID):
    """Pads id pairs into `({"encoder_inputs", "decoder_inputs"}, targets)` arrays.

    Targets are the decoder inputs shifted by one: decoder inputs are
    `[START] y1 .. yn` and targets `y1 .. yn [END]`.

    Args:
        pairs: list of `(source_ids, target_ids)`.
        start_id: int. Defaults to `1`.
        end_id: int. Defaults to `2`.
        pad_id: int. Defaults to `0`.

    Returns:
        `(inputs dict of int32 arrays, targets int32 array)`.
    """
    source_len = max(len(s) for s, _ in pairs)
    target_len = max(len(t) for _, t in pairs) + 1
    encoder_inputs = np.full((len(pairs), source_len), pad_id, "int32")
    decoder_inputs = np.full((len(pairs), target_len), pad_id, "int32")
    targets = np.full((len(pairs), target_len), pad_id, "int32")
    for row, (source, target) in enumerate(pairs):
        encoder_inputs[row, : len(source)] = source
        decoder_inputs[row, : len(target) + 1] = np.concatenate([[start_id], target])
        targets[row, : len(target) + 1] = np.concatenate([target, [end_id]])
    return {"encoder_inputs": encoder_inputs, "decoder_inputs": decoder_inputs}, targets
