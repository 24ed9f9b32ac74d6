"""Transformer layers: attention, embeddings, encoder and decoder blocks, masks."""

from keras_transformer.layers.decoder_block import DecoderBlock
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.encoder_block import EncoderBlock
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.masking import causal_mask, padding_mask
from keras_transformer.layers.multi_head_attention import MultiHeadAttention
from keras_transformer.layers.positional_embedding import PositionalEmbedding, sinusoidal_encoding
from keras_transformer.layers.token_ids import check_token_ids

__all__ = [
    "DecoderBlock",
    "Dropout",
    "EncoderBlock",
    "FeedForward",
    "MultiHeadAttention",
    "PositionalEmbedding",
    "causal_mask",
    "check_token_ids",
    "padding_mask",
    "sinusoidal_encoding",
]
