"""Moved to `keras_transformer.buckets` in 0.3.0; this path re-exports it for one release."""

from keras_transformer.buckets import (  # noqa: F401
    BUCKET_GROWTH,
    LENGTH_MULTIPLE,
    MIN_BUCKET_LENGTH,
    bucket_batches,
    bucket_length,
    check_bucket_boundaries,
    default_bucket_boundaries,
    padded_batch_size,
)
