"""keras-transformer: the Transformer of "Attention Is All You Need" for Keras 3.

Backend-agnostic (TensorFlow, JAX, PyTorch). The TensorFlow-only parts
(`keras_transformer.text`, `keras_transformer.data`, `keras_transformer.export`)
import TensorFlow lazily, so the package needs only keras and numpy.

`import keras_transformer` itself loads no framework: the public names below load on first
use. Still, `import keras_transformer` is all that `keras.saving.load_model(path)` needs, in
either order with `import keras`: the submodules that register the package's Keras classes
load when Keras is imported (at once if it already is, else right after `import keras`, by
anyone), or at the first use of a public name, whichever comes first.
"""

from typing import TYPE_CHECKING

from keras_transformer._lazy import after_keras_import, lazy_attributes
from keras_transformer.version import __version__  # noqa: F401 (the public version)

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
    "AccumulatedSchedule": "schedules",
    "WarmupLinearDecaySchedule": "schedules",
    "WarmupSchedule": "schedules",
    "Translator": "translator",
    **{module: module for module in ("layers", "losses", "metrics", "models", "optimizers",
                                     "schedules")},
}

__all__ = [
    "AccumulatedSchedule",
    "DecoderBlock",
    "EncoderBlock",
    "FeedForward",
    "LabelSmoothedCrossentropy",
    "MaskedAccuracy",
    "MultiHeadAttention",
    "PositionalEmbedding",
    "Transformer",
    "Translator",
    "WarmupLinearDecaySchedule",
    "WarmupSchedule",
    "layers",
    "losses",
    "metrics",
    "models",
    "optimizers",
    "schedules",
    "transformer_adam",
]

# The submodules that register Keras serializables: every exported one (the losses module
# holds the loss that `keras_transformer.training` compiles models with under `tf.distribute`).
_REGISTERING = tuple(sorted(set(_EXPORTS.values())))

__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS, load_all=_REGISTERING)

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
    from keras_transformer.schedules import (
        AccumulatedSchedule,
        WarmupLinearDecaySchedule,
        WarmupSchedule,
    )
    from keras_transformer.translator import Translator

after_keras_import(__name__, _REGISTERING)
