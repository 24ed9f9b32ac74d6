"""Models: the encoder-decoder Transformer."""

from keras_transformer.models.transformer import PRESETS, Transformer

__all__ = ["PRESETS", "Transformer"]
