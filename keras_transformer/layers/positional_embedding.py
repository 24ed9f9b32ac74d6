"""Token embedding × √d_model plus sinusoidal position encoding (paper §3.4, §3.5)."""

import math

import keras
from keras import ops

from keras_transformer import _backend
from keras_transformer.hyperparameters import (
    PROJECTION_DTYPES,
    SINUSOID_FREQUENCIES,
    SINUSOID_LAYOUTS,
)
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.sublayer_calls import call_sublayer


def sinusoidal_encoding(
    length, d_model, start_index=0, dtype="float32", layout="interleaved", frequencies="paper"
):
    """The paper's position encodings for positions `start_index .. start_index+length-1`.

    `PE(pos, 2i) = sin(pos / 10000^(2i/d_model))`, `PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))`.
    With `layout="halves"` the same values are laid out as all sines (dimensions
    `0 .. d_model/2 - 1`) then all cosines, as Hugging Face's Marian models (OPUS-MT) do.
    With `frequencies="marian"` the `i`-th frequency is `10000^(-i/(d_model/2 - 1))` instead of
    `10000^(-i/(d_model/2))`: what Marian NMT's C++ computes (`SinusoidalPositionEmbeddings`
    in `src/tensors/cpu/tensor_operators.cpp`, with the halves layout), so the lowest
    frequency is exactly `1/10000`.

    Args:
        length: int or scalar tensor. Number of positions.
        d_model: int. Even model width.
        start_index: int or scalar tensor. First position. Defaults to `0`.
        dtype: output dtype. Defaults to `"float32"`.
        layout: str. `"interleaved"` (the paper's) or `"halves"`. Defaults to `"interleaved"`.
        frequencies: str. `"paper"` or `"marian"`. Defaults to `"paper"`.

    Returns:
        `(length, d_model)` tensor.
    """
    positions = ops.cast(ops.arange(length), "float32") + ops.cast(start_index, "float32")
    i = ops.cast(ops.arange(d_model // 2), "float32")  # (d_model/2,)
    # The paper's 1 / 10000^(i/(d/2)); Marian's 1 / 10000^(i/(d/2 - 1)).
    steps = d_model // 2 - (1 if frequencies == "marian" else 0)
    inverse_freq = ops.exp(i * (-math.log(10000.0) / max(steps, 1)))
    angles = positions[:, None] * inverse_freq[None, :]  # (length, d_model/2)
    if layout == "halves":
        encoding = ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)
        return ops.cast(encoding, dtype)  # (length, d_model)
    # Interleave: sin on even dimensions, cos on odd ones.
    encoding = ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1)  # (length, d/2, 2)
    return ops.cast(ops.reshape(encoding, (-1, d_model)), dtype)


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionalEmbedding(keras.layers.Layer):
    """Token embedding scaled by √d_model plus sinusoidal encodings, then dropout.

    The same matrix can also produce the pre-softmax logits `x · Eᵀ` (paper §3.4:
    weights shared between the embeddings and the output projection): call with
    `reverse=True`.

    Args:
        vocabulary_size: int. Number of token ids.
        d_model: int. Even embedding width (paper: 512).
        dropout: float. Dropout on the sum of embedding and encoding. Defaults to `0.1`.
        mask_zero: bool. Token id 0 is padding: the output carries a Keras mask.
            Defaults to `True`.
        scale: bool. Multiply token embeddings by √d_model. Defaults to `True`.
        sinusoid_layout: str. `"interleaved"` (the paper's: sine and cosine alternate) or
            `"halves"` (all sines, then all cosines: Hugging Face's Marian), see
            `sinusoidal_encoding`. Defaults to `"interleaved"`.
        output_bias: bool. Add a learned bias (initially zero) to the `reverse=True` logits
            (Marian's `final_logits_bias`). Defaults to `False`.
        sinusoid_frequencies: str. `"paper"` or `"marian"` (Marian NMT's C++, for its `.npz`
            models), see `sinusoidal_encoding`. Defaults to `"paper"`.
        projection_dtype: str or None. Dtype of the `reverse=True` product `x · Eᵀ`. `None`
            computes it in the layer's compute dtype (float32 under a float32 policy,
            bfloat16 under `mixed_bfloat16`: the 37,000-wide product in a GPU's bf16 units,
            see docs/benchmarks.md "GPU"), `"float32"` in float32 whatever the policy (the
            behaviour of 0.3.0 and before). The logits are float32 either way. Defaults to `None`.
        embeddings_initializer: initializer of the embedding matrix. Defaults to a
            normal with stddev d_model^-0.5, so that scaled embeddings have unit
            variance like the encodings they are added to.
        seed: int. Dropout seed. Defaults to `None`.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: int `(batch, length)` token ids; with `reverse=True`, float
            `(batch, length, d_model)` hidden states.
        start_index: int or scalar tensor. Position of the first token (decoding one
            step at a time). Defaults to `0`.
        encoding_table: optional `(max_positions, d_model)` tensor,
            `sinusoidal_encoding(max_positions, d_model, dtype=...)` computed once: the
            encodings of positions `start_index ..` are then read from it instead of
            computed (a cached decoding step's sin/cos are a dozen small operations).
            Defaults to `None`.
        reverse: bool. Return float32 logits `(batch, length, vocabulary_size)` = `inputs · Eᵀ`
            (`+ output_bias` when the layer has one), the product in `projection_dtype`.
        training: bool. Enables dropout.

    Returns:
        `(batch, length, d_model)` embeddings carrying a padding mask when
        `mask_zero`, or float32 logits when `reverse=True`.

    Example:

    >>> import numpy as np
    >>> layer = PositionalEmbedding(vocabulary_size=100, d_model=8)
    >>> x = layer(np.array([[5, 6, 0]]))
    >>> tuple(x.shape)
    (1, 3, 8)

    References:
        Vaswani et al., "Attention Is All You Need", 2017, §3.4 and §3.5.
    """

    def __init__(
        self,
        vocabulary_size,
        d_model,
        dropout=0.1,
        mask_zero=True,
        scale=True,
        embeddings_initializer=None,
        seed=None,
        sinusoid_layout="interleaved",
        output_bias=False,
        sinusoid_frequencies="paper",
        projection_dtype=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not isinstance(vocabulary_size, int) or vocabulary_size < 1:
            raise ValueError(f"`vocabulary_size` must be a positive int. Received: vocabulary_size={vocabulary_size}")
        if not isinstance(d_model, int) or d_model < 2 or d_model % 2:
            raise ValueError(
                f"`d_model` must be a positive even int (sin/cos pairs). Received: d_model={d_model}"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"`dropout` must be in [0, 1). Received: dropout={dropout}")
        if sinusoid_layout not in SINUSOID_LAYOUTS:
            raise ValueError(
                f"`sinusoid_layout` must be one of {SINUSOID_LAYOUTS}. "
                f"Received: sinusoid_layout={sinusoid_layout!r}"
            )
        if sinusoid_frequencies not in SINUSOID_FREQUENCIES:
            raise ValueError(
                f"`sinusoid_frequencies` must be one of {SINUSOID_FREQUENCIES}. "
                f"Received: sinusoid_frequencies={sinusoid_frequencies!r}"
            )
        if projection_dtype not in PROJECTION_DTYPES:
            raise ValueError(
                f"`projection_dtype` must be one of {PROJECTION_DTYPES}. "
                f"Received: projection_dtype={projection_dtype!r}"
            )
        self.sinusoid_layout = sinusoid_layout
        self.sinusoid_frequencies = sinusoid_frequencies
        self.projection_dtype = projection_dtype
        self.output_bias = bool(output_bias)
        self.vocabulary_size = vocabulary_size
        self.d_model = d_model
        self.dropout = dropout
        self.mask_zero = mask_zero
        self.scale = scale
        if embeddings_initializer is None:
            embeddings_initializer = keras.initializers.RandomNormal(stddev=d_model**-0.5)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.seed = seed
        self.supports_masking = mask_zero

    def build(self, inputs_shape=None):
        if self.quantization_mode == "int8":  # a quantized model being loaded
            self._int8_build()
        else:
            self.embeddings = self.add_weight(
                name="embeddings",
                shape=(self.vocabulary_size, self.d_model),
                initializer=self.embeddings_initializer,
                trainable=True,
            )
        if self.output_bias:
            self.logits_bias = self.add_weight(
                name="logits_bias", shape=(self.vocabulary_size,), initializer="zeros"
            )
        self.dropout_layer = Dropout(
            self.dropout, seed=self.seed, dtype=self.dtype_policy, name="embedding_dropout"
        )
        self.built = True

    def call(self, inputs, start_index=0, reverse=False, training=None, encoding_table=None):
        if reverse:
            # Pre-softmax projection with the shared matrix, float32 logits.
            if self.quantization_mode == "int8":
                logits = self._int8_logits(ops.cast(inputs, "float32"))
            else:
                dtype = self.projection_dtype or self.compute_dtype
                logits = ops.matmul(
                    ops.cast(inputs, dtype), ops.transpose(ops.cast(self.embeddings, dtype))
                )
                logits = ops.cast(logits, "float32")
            if self.output_bias:
                logits = logits + ops.cast(self.logits_bias, "float32")
            return logits
        inputs = ops.cast(inputs, "int32")
        x = ops.take(self.embeddings, inputs, axis=0)  # (batch, length, d_model)
        x = ops.cast(x, self.compute_dtype)
        if self.quantization_mode == "int8":
            scale = ops.take(self.embeddings_scale, inputs, axis=0)  # (batch, length)
            x = x / ops.cast(scale, self.compute_dtype)[..., None]
        if self.scale:
            x = x * ops.cast(math.sqrt(self.d_model), self.compute_dtype)
        length = _backend.dims(inputs)[1]
        if encoding_table is None:
            encoding = sinusoidal_encoding(
                length,
                self.d_model,
                start_index,
                self.compute_dtype,
                self.sinusoid_layout,
                self.sinusoid_frequencies,
            )
        else:
            positions = ops.arange(length, dtype="int32") + ops.cast(start_index, "int32")
            encoding = ops.take(_backend.cast_like(encoding_table, x), positions, axis=0)
        x = x + encoding[None]
        return call_sublayer(self.dropout_layer, x, training=training)

    # === int8 (`quantize`) ===
    def quantize(self, mode=None, type_check=True, config=None):
        """Stores the embedding matrix as int8 with one float32 scale per token (the largest
        absolute value of its row maps to 127), for `Transformer.quantize`. The lookup
        de-scales the rows it reads; the pre-softmax projection quantizes each hidden state
        the same way and multiplies in int8 (int32 sums), then de-scales the logits.

        Args:
            mode: str. `"int8"`.
            type_check: bool. Unused (Keras' signature).
            config: Unused (Keras' signature): one scale per token, always.
        """
        del type_check, config
        if mode != "int8":
            raise NotImplementedError(
                f"PositionalEmbedding quantizes to 'int8' only. Received: mode={mode!r}"
            )
        values, scale = keras.quantizers.abs_max_quantize(self.embeddings, axis=-1, to_numpy=True)
        del self.embeddings
        self._int8_build()
        self.embeddings.assign(values)
        self.embeddings_scale.assign(ops.squeeze(scale, axis=-1))
        self.dtype_policy = keras.dtype_policies.get(f"int8_from_{self.dtype_policy.name}")

    def _int8_build(self):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocabulary_size, self.d_model),
            initializer="zeros",
            dtype="int8",
            trainable=False,
        )
        self.embeddings_scale = self.add_weight(
            name="embeddings_scale", shape=(self.vocabulary_size,), initializer="ones",
            trainable=False,
        )
        self._is_quantized = True

    def _int8_logits(self, hidden):
        # (..., d_model) float32 -> per-row int8 and scale (..., 1); int32 sums over d_model.
        values, hidden_scale = keras.quantizers.abs_max_quantize(hidden, axis=-1)
        sums = ops.matmul(values, ops.transpose(self.embeddings))  # (..., vocabulary) int32
        return ops.cast(sums, "float32") / (hidden_scale * self.embeddings_scale)

    def _int8_call(self, *args, **kwargs):
        return self.call(*args, **kwargs)  # `call` reads the int8 matrix itself

    def compute_mask(self, inputs, mask=None):
        if not self.mask_zero or "int" not in str(inputs.dtype):
            return None  # no mask on float (reverse) inputs: logits carry none.
        return ops.not_equal(inputs, 0)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "d_model": self.d_model,
                "dropout": self.dropout,
                "mask_zero": self.mask_zero,
                "scale": self.scale,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
                "seed": self.seed,
                "sinusoid_layout": self.sinusoid_layout,
                "output_bias": self.output_bias,
                "sinusoid_frequencies": self.sinusoid_frequencies,
                "projection_dtype": self.projection_dtype,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if "vocab_size" in config and "vocabulary_size" not in config:  # files before 0.2.0
            config["vocabulary_size"] = config.pop("vocab_size")
        return super().from_config(config)

    def compute_output_shape(
        self, inputs_shape, start_index=0, reverse=False, encoding_table=None
    ):
        if reverse:
            return tuple(inputs_shape[:-1]) + (self.vocabulary_size,)
        return tuple(inputs_shape) + (self.d_model,)

    def compute_output_spec(
        self, inputs, start_index=0, reverse=False, training=None, encoding_table=None
    ):
        shape = self.compute_output_shape(inputs.shape, reverse=reverse)
        dtype = "float32" if reverse else self.compute_dtype
        return keras.KerasTensor(shape, dtype=dtype)
