"""`tf.data` input pipelines: tokenized, length-bucketed, token-budgeted batches.

Importing this package does not import TensorFlow: it is imported lazily, when a dataset is
built. The datasets feed `model.fit` on the TensorFlow, JAX and PyTorch backends.
"""

from keras_transformer.buckets import default_bucket_boundaries
from keras_transformer.data.pipeline import (
    PipelineResult,
    encode_source,
    encode_target,
    make_dataset,
)
from keras_transformer.data.streaming import make_streaming_dataset, stream_pairs

__all__ = [
    "PipelineResult",
    "default_bucket_boundaries",
    "encode_source",
    "encode_target",
    "make_dataset",
    "make_streaming_dataset",
    "stream_pairs",
]
