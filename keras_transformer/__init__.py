"""keras-transformer: the Transformer of "Attention Is All You Need" for Keras 3.

Backend-agnostic (TensorFlow, JAX, PyTorch). The TensorFlow-only parts
(`keras_transformer.text`, `keras_transformer.data`, `keras_transformer.export`)
import TensorFlow lazily, so the package needs only keras and numpy.

`import keras_transformer` itself loads no framework: the public names below load on first
use (the first one loads them all, which registers every class for `keras.saving.load_model`).
When Keras is already imported, `import keras_transformer` loads them at once, so that
`import keras; import keras_transformer; keras.saving.load_model(path)` works.
"""

import sys
from typing import TYPE_CHECKING

from keras_transformer._lazy import lazy_attributes

__version__ = "0.1.0"

_EXPORTS = {
    "DecoderBlock": "layers",
    "EncoderBlock": "layers",
    "FeedForward": "layers",
    "MultiHeadAttention": "layers",
    "PositionalEmbedding": "layers",
    "LabelSmoothedCrossentropy": "losses",
    "MaskedAccuracy": "metrics",
    "Transformer": "models",
    "transformer_adam": "optimizers",
    "WarmupSchedule": "schedules",
    "Translator": "translator",
    **{module: module for module in ("layers", "losses", "metrics", "models", "optimizers",
                                     "schedules")},
}

__all__ = [
    "DecoderBlock",
    "EncoderBlock",
    "FeedForward",
    "LabelSmoothedCrossentropy",
    "MaskedAccuracy",
    "MultiHeadAttention",
    "PositionalEmbedding",
    "Transformer",
    "Translator",
    "WarmupSchedule",
    "layers",
    "losses",
    "metrics",
    "models",
    "optimizers",
    "schedules",
    "transformer_adam",
]

__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS, load_all=True)

if TYPE_CHECKING:  # For static analysis and the API reference: the names above.
    from keras_transformer import layers, losses, metrics, models, optimizers, schedules
    from keras_transformer.layers import (
        DecoderBlock,
        EncoderBlock,
        FeedForward,
        MultiHeadAttention,
        PositionalEmbedding,
    )
    from keras_transformer.losses import LabelSmoothedCrossentropy
    from keras_transformer.metrics import MaskedAccuracy
    from keras_transformer.models import Transformer
    from keras_transformer.optimizers import transformer_adam
    from keras_transformer.schedules import WarmupSchedule
    from keras_transformer.translator import Translator

if "keras" in sys.modules:
    __getattr__("Transformer")
