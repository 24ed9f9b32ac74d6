"""keras-transformer: the Transformer of "Attention Is All You Need" for Keras 3.

Backend-agnostic (TensorFlow, JAX, PyTorch). The TensorFlow-only parts
(`keras_transformer.text`, `keras_transformer.data`, `keras_transformer.export`)
import TensorFlow lazily, so `import keras_transformer` needs only keras and numpy.
"""

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

__version__ = "0.2.0"

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
