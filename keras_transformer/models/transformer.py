"""The encoder-decoder Transformer as a functional Keras model, with encode/decode steps."""

import copy

import keras
from keras import ops

from keras_transformer.hyperparameters import PRESETS, validate_transformer_args
from keras_transformer.layers.decoder_block import DecoderBlock
from keras_transformer.layers.encoder_block import EncoderBlock
from keras_transformer.layers.positional_embedding import PositionalEmbedding


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(keras.Model):
    """The encoder-decoder Transformer of "Attention Is All You Need".

    A functional `keras.Model` taking `{"encoder_inputs": (batch, source_length),
    "decoder_inputs": (batch, target_length)}` int token ids (0 = padding) and returning
    float32 logits `(batch, target_length, target_vocab_size)` for the next token at each
    target position. The encoder's padding mask is used by the encoder and by every
    cross-attention; the decoder's self-attention is causal.

    Decoding code uses the model through `encode`, `init_cache` and `decode_step`
    (cached, one token at a time) or `decode` (whole prefix).

    Args:
        vocab_size: int. Source vocabulary size (the shared one when
            `share_embeddings`).
        target_vocab_size: int. Target vocabulary size. Defaults to `vocab_size`.
        num_layers: int. Encoder layers, N (paper: 6).
        num_decoder_layers: int. Decoder layers. Defaults to `num_layers`.
        d_model: int. Model width (paper: 512).
        num_heads: int. Attention heads, h (paper: 8).
        ff_dim: int. Inner FFN width, d_ff (paper: 2048).
        dropout: float. Dropout on sub-layer outputs and embedding sums (paper: 0.1).
        attention_dropout: float. Dropout on attention probabilities. Defaults to `0.0`.
        activation: str. FFN activation. Defaults to `"relu"`.
        norm_first: bool. Pre-LN blocks plus a final LayerNorm after each stack,
            instead of the paper's post-LN. Defaults to `False`.
        share_embeddings: bool. One matrix for the source embedding, the target
            embedding and the pre-softmax projection (paper §3.4; needs one shared
            vocabulary). When `False`, the source has its own embedding and the target
            embedding stays tied to the output projection. Defaults to `True`.
        layer_norm_epsilon: float. Defaults to `1e-6`.
        seed: int. Dropout seed. Defaults to `None`.
        **kwargs: `keras.Model` arguments (`name`, `dtype`).

    Example:

    >>> import numpy as np
    >>> model = Transformer.from_preset("tiny", vocab_size=100)
    >>> batch = {"encoder_inputs": np.array([[5, 6, 7, 0]]),
    ...          "decoder_inputs": np.array([[2, 5, 6]])}
    >>> tuple(model(batch).shape)
    (1, 3, 100)

    References:
        Vaswani et al., "Attention Is All You Need", 2017.
    """

    def __init__(
        self,
        vocab_size,
        target_vocab_size=None,
        num_layers=6,
        num_decoder_layers=None,
        d_model=512,
        num_heads=8,
        ff_dim=2048,
        dropout=0.1,
        attention_dropout=0.0,
        activation="relu",
        norm_first=False,
        share_embeddings=True,
        layer_norm_epsilon=1e-6,
        seed=None,
        **kwargs,
    ):
        target_vocab_size = vocab_size if target_vocab_size is None else target_vocab_size
        num_decoder_layers = num_layers if num_decoder_layers is None else num_decoder_layers
        validate_transformer_args(
            vocab_size=vocab_size,
            target_vocab_size=target_vocab_size,
            num_layers=num_layers,
            num_decoder_layers=num_decoder_layers,
            d_model=d_model,
            num_heads=num_heads,
            ff_dim=ff_dim,
            dropout=dropout,
            attention_dropout=attention_dropout,
            activation=activation,
            norm_first=norm_first,
            share_embeddings=share_embeddings,
            layer_norm_epsilon=layer_norm_epsilon,
        )
        dtype = kwargs.pop("dtype", None)
        block_args = dict(
            num_heads=num_heads,
            ff_dim=ff_dim,
            dropout=dropout,
            attention_dropout=attention_dropout,
            activation=activation,
            norm_first=norm_first,
            layer_norm_epsilon=layer_norm_epsilon,
            seed=seed,
            dtype=dtype,
        )

        # === Layers ===
        def embedding(vocab, name):
            return PositionalEmbedding(
                vocab, d_model, dropout=dropout, seed=seed, dtype=dtype, name=name
            )

        if share_embeddings:
            source_embedding = target_embedding = embedding(vocab_size, "shared_embedding")
        else:
            source_embedding = embedding(vocab_size, "source_embedding")
            target_embedding = embedding(target_vocab_size, "target_embedding")
        encoder_blocks = [
            EncoderBlock(**block_args, name=f"encoder_block_{i}") for i in range(num_layers)
        ]
        decoder_blocks = [
            DecoderBlock(**block_args, name=f"decoder_block_{i}")
            for i in range(num_decoder_layers)
        ]
        encoder_norm = decoder_norm = None
        if norm_first:
            norm_args = dict(epsilon=layer_norm_epsilon, dtype=dtype)
            encoder_norm = keras.layers.LayerNormalization(name="encoder_norm", **norm_args)
            decoder_norm = keras.layers.LayerNormalization(name="decoder_norm", **norm_args)

        # === Functional model ===
        encoder_inputs = keras.Input(shape=(None,), dtype="int32", name="encoder_inputs")
        decoder_inputs = keras.Input(shape=(None,), dtype="int32", name="decoder_inputs")
        encoder_mask = ops.not_equal(encoder_inputs, 0)  # (batch, source_length)
        decoder_mask = ops.not_equal(decoder_inputs, 0)  # (batch, target_length)
        x = source_embedding(encoder_inputs)
        for block in encoder_blocks:
            x = block(x, padding_mask=encoder_mask)
        if encoder_norm is not None:
            x = encoder_norm(x)
        y = target_embedding(decoder_inputs)
        for block in decoder_blocks:
            y = block(y, x, padding_mask=decoder_mask, context_padding_mask=encoder_mask)
        if decoder_norm is not None:
            y = decoder_norm(y)
        logits = target_embedding(y, reverse=True)  # (batch, target_length, vocab) float32
        super().__init__(
            inputs={"encoder_inputs": encoder_inputs, "decoder_inputs": decoder_inputs},
            outputs=logits,
            dtype=dtype,
            **kwargs,
        )
        if dtype is not None:
            # The functional constructor drops `dtype`; compile() reads the model's own
            # policy (e.g. to add loss scaling for mixed_float16).
            self.dtype_policy = keras.dtype_policies.get(dtype)

        self.source_embedding = source_embedding
        self.target_embedding = target_embedding
        self.encoder_blocks = encoder_blocks
        self.decoder_blocks = decoder_blocks
        self.encoder_norm = encoder_norm
        self.decoder_norm = decoder_norm

        # === Config ===
        self.vocab_size = vocab_size
        self.target_vocab_size = target_vocab_size
        self.num_layers = num_layers
        self.num_decoder_layers = num_decoder_layers
        self.d_model = d_model
        self.num_heads = num_heads
        self.ff_dim = ff_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation = activation
        self.norm_first = norm_first
        self.share_embeddings = share_embeddings
        self.layer_norm_epsilon = layer_norm_epsilon
        self.seed = seed
        self._dtype_argument = dtype

    @classmethod
    def from_preset(cls, preset, vocab_size, **kwargs):
        """Builds a model from `"tiny"`, `"base"` or `"big"` (paper Table 3) hyper-parameters.

        Args:
            preset: str. One of `"tiny"`, `"base"`, `"big"`.
            vocab_size: int. Shared vocabulary size.
            **kwargs: overrides of any constructor argument.
        """
        if preset not in PRESETS:
            raise ValueError(f"`preset` must be one of {sorted(PRESETS)}. Received: preset={preset!r}")
        return cls(vocab_size=vocab_size, **{**PRESETS[preset], **kwargs})

    # === Steps used by decoding ===
    def encode(self, encoder_inputs, training=False):
        """Runs the encoder.

        Args:
            encoder_inputs: int `(batch, source_length)` token ids, 0 = padding.
            training: bool.

        Returns:
            `(encoder_outputs (batch, source_length, d_model), padding_mask (batch, source_length))`.
        """
        padding_mask = ops.not_equal(encoder_inputs, 0)
        x = self.source_embedding(encoder_inputs, training=training)
        for block in self.encoder_blocks:
            x = block(x, padding_mask=padding_mask, training=training)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return x, padding_mask

    def decode(
        self,
        decoder_inputs,
        encoder_outputs,
        encoder_padding_mask,
        training=False,
        return_attention_scores=False,
    ):
        """Runs the decoder over a whole prefix (no cache).

        Args:
            decoder_inputs: int `(batch, target_length)`, 0 = padding.
            encoder_outputs: `(batch, source_length, d_model)` from `encode`.
            encoder_padding_mask: `(batch, source_length)` from `encode`.
            training: bool.
            return_attention_scores: bool. Also return the list (one per decoder
                layer) of cross-attention probabilities `(batch, heads, target, source)`.

        Returns:
            float32 logits `(batch, target_length, target_vocab_size)` [, scores].
        """
        padding_mask = ops.not_equal(decoder_inputs, 0)
        y = self.target_embedding(decoder_inputs, training=training)
        all_scores = []
        for block in self.decoder_blocks:
            y = block(
                y,
                encoder_outputs,
                padding_mask=padding_mask,
                context_padding_mask=encoder_padding_mask,
                training=training,
                return_attention_scores=return_attention_scores,
            )
            if return_attention_scores:
                y, scores = y
                all_scores.append(scores)
        logits = self._project(y)
        return (logits, all_scores) if return_attention_scores else logits

    def init_cache(self, encoder_outputs, max_length):
        """Decoding cache: per decoder layer, empty self-attention keys/values of
        `max_length` positions and the cross-attention keys/values, computed once."""
        return [block.init_cache(encoder_outputs, max_length) for block in self.decoder_blocks]

    def decode_step(self, tokens, cache, index, encoder_padding_mask):
        """One cached decoder step.

        Args:
            tokens: int `(batch, 1)`, the tokens at position `index`.
            cache: from `init_cache` (or a previous `decode_step`).
            index: int or scalar int tensor, the position of `tokens`.
            encoder_padding_mask: `(batch, source_length)` from `encode`.

        Returns:
            `(logits float32 (batch, target_vocab_size) for position index + 1, new_cache)`.
        """
        y = self.target_embedding(tokens, start_index=index)
        new_cache = []
        for block, layer_cache in zip(self.decoder_blocks, cache):
            y, layer_cache = block(
                y,
                None,
                context_padding_mask=encoder_padding_mask,
                cache=layer_cache,
                cache_index=index,
            )
            new_cache.append(layer_cache)
        return self._project(y)[:, 0], new_cache

    def _project(self, y):
        if self.decoder_norm is not None:
            y = self.decoder_norm(y)
        return self.target_embedding(y, reverse=True)

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "vocab_size": self.vocab_size,
            "target_vocab_size": self.target_vocab_size,
            "num_layers": self.num_layers,
            "num_decoder_layers": self.num_decoder_layers,
            "d_model": self.d_model,
            "num_heads": self.num_heads,
            "ff_dim": self.ff_dim,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "activation": self.activation,
            "norm_first": self.norm_first,
            "share_embeddings": self.share_embeddings,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "seed": self.seed,
            **({} if self._dtype_argument is None else {"dtype": self._dtype_argument}),
        }

    @classmethod
    def from_config(cls, config):
        return cls(**copy.deepcopy(config))
