"""The encoder-decoder Transformer as a functional Keras model, with encode/decode steps."""

import copy
import os
import warnings

import keras
from keras import ops

from keras_transformer import _checks, _keras_compat
from keras_transformer.hyperparameters import PRESETS, validate_transformer_args
from keras_transformer.layers.decoder_block import DecoderBlock
from keras_transformer.layers.encoder_block import EncoderBlock
from keras_transformer.layers.positional_embedding import PositionalEmbedding, sinusoidal_encoding
from keras_transformer.layers.sublayer_calls import call_sublayer, direct_sublayer_calls
from keras_transformer.layers.token_ids import check_token_ids
from keras_transformer.models import lora
from keras_transformer.saving import preset as preset_files
from keras_transformer.saving.checks import check_dtype_config, check_policy_paths


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(keras.Model):
    """The encoder-decoder Transformer of "Attention Is All You Need".

    A functional `keras.Model` taking `{"encoder_inputs": (batch, source_length),
    "decoder_inputs": (batch, target_length)}` int token ids (0 = padding) and returning
    float32 logits `(batch, target_length, target_vocabulary_size)` for the next token at each
    target position. The encoder's padding mask is used by the encoder and by every
    cross-attention; the decoder's self-attention is causal.

    Decoding code uses the model through `encode`, `init_cache` and `decode_step`
    (cached, one token at a time) or `decode` (whole prefix).

    Token ids must be integers in `[0, vocabulary_size)` (`[0, target_vocabulary_size)` for the
    decoder). Calling the model, `encode` or `decode` on concrete inputs (NumPy arrays,
    eager tensors) raises a `ValueError` naming the first bad id, its position and the
    vocabulary size, and float ids raise naming their dtype. Inside compiled functions
    (`model.fit`, `evaluate` and `predict` on TensorFlow and JAX, `tf.function`, `jax.jit`,
    `torch.compile`) nothing is checked: float inputs are cast to int32 (Keras' data adapters
    may feed integer data as floats), and an out-of-range id
    gives whatever the backend's gather gives: NaN embeddings on JAX, the last row (clamped)
    under XLA, an error from TensorFlow's CPU gather without XLA and from PyTorch (a device
    assert on CUDA), while negative ids wrap to the end of the vocabulary. `decode_step` is
    not checked: the searches feed it the ids they produce.

    Args:
        vocabulary_size: int. Source vocabulary size (the shared one when
            `share_embeddings`).
        target_vocabulary_size: int. Target vocabulary size. Defaults to `vocabulary_size`.
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
        sinusoid_layout: str. Position encodings with sines and cosines `"interleaved"` (the
            paper's) or in `"halves"` (Hugging Face's Marian / OPUS-MT models); see
            `keras_transformer.layers.sinusoidal_encoding`. Defaults to `"interleaved"`.
        output_bias: bool. A bias on the output logits (Marian's `final_logits_bias`).
            Defaults to `False`: the paper's tied projection without bias.
        sinusoid_frequencies: str. The paper's sinusoid frequencies (`"paper"`) or Marian
            NMT C++'s (`"marian"`: `10000^(-i/(d_model/2 - 1))`, what Marian `.npz` models
            were trained with); see `keras_transformer.layers.sinusoidal_encoding`.
            Defaults to `"paper"`.
        projection_dtype: str or None. Dtype of the pre-softmax projection's product: `None`
            is the compute dtype (bfloat16 under `mixed_bfloat16`), `"float32"` keeps it in
            float32 under any policy; the logits are float32 either way (see
            `keras_transformer.layers.PositionalEmbedding`). Defaults to `None`.
        **kwargs: `keras.Model` arguments (`name`, `dtype`).

    Example:

    >>> import numpy as np
    >>> model = Transformer.from_preset("tiny", vocabulary_size=100)
    >>> batch = {"encoder_inputs": np.array([[5, 6, 7, 0]]),
    ...          "decoder_inputs": np.array([[2, 5, 6]])}
    >>> tuple(model(batch).shape)
    (1, 3, 100)

    References:
        Vaswani et al., "Attention Is All You Need", 2017.
    """

    def __init__(
        self,
        vocabulary_size,
        target_vocabulary_size=None,
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
        sinusoid_layout="interleaved",
        output_bias=False,
        sinusoid_frequencies="paper",
        projection_dtype=None,
        **kwargs,
    ):
        target_vocabulary_size = vocabulary_size if target_vocabulary_size is None else target_vocabulary_size
        num_decoder_layers = num_layers if num_decoder_layers is None else num_decoder_layers
        sizes = dict(
            vocabulary_size=vocabulary_size,
            target_vocabulary_size=target_vocabulary_size,
            num_layers=num_layers,
            num_decoder_layers=num_decoder_layers,
            d_model=d_model,
            num_heads=num_heads,
            ff_dim=ff_dim,
        )
        validate_transformer_args(
            **sizes,
            dropout=dropout,
            attention_dropout=attention_dropout,
            activation=activation,
            norm_first=norm_first,
            share_embeddings=share_embeddings,
            layer_norm_epsilon=layer_norm_epsilon,
            sinusoid_layout=sinusoid_layout,
            output_bias=output_bias,
            sinusoid_frequencies=sinusoid_frequencies,
            projection_dtype=projection_dtype,
        )
        dtype = kwargs.pop("dtype", None)
        if isinstance(dtype, dict):
            # A quantized model's configuration: one `DTypePolicyMap` for every layer, each
            # looking up the policy of its own path (its quantized kernels are built by it).
            # Checked by names first: Keras would import whatever `module` a file names.
            check_dtype_config(dtype)
            dtype = keras.dtype_policies.deserialize(dtype)
        _check_weight_memory(dtype, norm_first, share_embeddings, **sizes)
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
        def embedding(vocab, name, bias):
            return PositionalEmbedding(
                vocab,
                d_model,
                dropout=dropout,
                seed=seed,
                sinusoid_layout=sinusoid_layout,
                output_bias=bias,
                sinusoid_frequencies=sinusoid_frequencies,
                projection_dtype=projection_dtype,
                dtype=dtype,
                name=name,
            )

        if share_embeddings:
            source_embedding = target_embedding = embedding(
                vocabulary_size, "shared_embedding", output_bias
            )
        else:
            source_embedding = embedding(vocabulary_size, "source_embedding", False)
            target_embedding = embedding(target_vocabulary_size, "target_embedding", output_bias)
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
        encoder_outputs, encoder_mask = _encoder_stack(
            source_embedding, encoder_blocks, encoder_norm, encoder_inputs
        )
        logits, _, _ = _decoder_stack(
            target_embedding,
            decoder_blocks,
            decoder_norm,
            decoder_inputs,
            encoder_outputs,
            encoder_mask,
        )  # (batch, target_length, vocab) float32
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
        if isinstance(dtype, keras.dtype_policies.DTypePolicyMap):
            check_policy_paths(self, dtype)  # before a file's weights are read
            _resolve_policies(self)

        self.source_embedding = source_embedding
        self.target_embedding = target_embedding
        self.encoder_blocks = encoder_blocks
        self.decoder_blocks = decoder_blocks
        self.encoder_norm = encoder_norm
        self.decoder_norm = decoder_norm

        # === Config ===
        self.vocabulary_size = vocabulary_size
        self.target_vocabulary_size = target_vocabulary_size
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
        self.sinusoid_layout = sinusoid_layout
        self.sinusoid_frequencies = sinusoid_frequencies
        self.output_bias = bool(output_bias)
        self.projection_dtype = projection_dtype
        self._dtype_argument = dtype

    @classmethod
    def from_preset(cls, preset, vocabulary_size=None, **kwargs):
        """Builds a model from `"tiny"`, `"base"` or `"big"` (paper Table 3) hyper-parameters,
        or loads one from a preset directory (`save_to_preset`, `Translator.save_to_preset`).

        Args:
            preset: str. One of `"tiny"`, `"base"`, `"big"`, or a preset directory.
            vocabulary_size: int. Shared vocabulary size (for an architecture name). Defaults to
                `None`: the directory's.
            **kwargs: overrides of any constructor argument (for a directory also
                `load_weights=False`: fresh weights).
        """
        if isinstance(preset, str) and preset in PRESETS:
            if vocabulary_size is None:
                raise ValueError(
                    f"`vocabulary_size` is needed to build {preset!r}. Received: vocabulary_size=None"
                )
            return cls(vocabulary_size=vocabulary_size, **{**PRESETS[preset], **kwargs})
        if isinstance(preset, (str, os.PathLike)) and os.path.isdir(preset):
            if vocabulary_size is not None:
                kwargs["vocabulary_size"] = vocabulary_size
            return preset_files.load_transformer(preset, Transformer, **kwargs)
        raise ValueError(
            f"`preset` must be one of {sorted(PRESETS)} or a preset directory. "
            f"Received: preset={preset!r}"
        )

    def save_to_preset(self, directory):
        """Writes `config.json`, `model.weights.h5` and `metadata.json` to `directory` (see
        `keras_transformer.saving.preset`). Returns `directory`. A model with LoRA enabled
        is written merged (`keras_transformer.models.lora.merge_lora`), a plain model, as
        Keras' `save` writes it."""
        return preset_files.save_transformer(lora.merge_lora(self), directory, Transformer)

    def quantize(self, mode="int8", **kwargs):
        """Quantizes the weights of every attention and feed-forward projection to int8 (Keras'
        `Dense.quantize`: one scale per output unit, activations quantized per row at each
        call), and the shared embedding and pre-softmax projection (one scale per token, see
        `PositionalEmbedding.quantize`). LayerNorms and biases stay as they are.

        The quantized model saves and loads like any other (`.keras`, `save_to_preset`,
        `Translator.save`, SavedModel export): its configuration holds a
        `keras.dtype_policies.DTypePolicyMap` naming the policy of each quantized layer by its
        path, so loading needs no extra argument. Quantizing drops a compiled model's
        optimizer: int8 kernels are not trained.

        Args:
            mode: str. `"int8"` (the one mode tested here). Defaults to `"int8"`.
            **kwargs: `keras.Model.quantize` arguments (`config`).
        """
        if mode != "int8":
            raise ValueError(f"`mode` must be 'int8'. Received: mode={mode!r}")
        if self.quantization is not None:
            raise ValueError(
                f"This model is already quantized ({self.quantization}). Received: mode={mode!r}"
            )
        with warnings.catch_warnings(), _keras_compat.deferred_collection():
            # NumPy 2's note on JAX arrays, once per kernel Keras quantizes on the host.
            warnings.filterwarnings("ignore", message="__array__ implementation doesn't accept")
            # Only the Dense layers: Keras warns once for every other leaf, and skips the
            # embeddings (not a leaf: they hold their dropout), quantized below.
            super().quantize(
                mode, filters=lambda layer: isinstance(layer, keras.layers.Dense), **kwargs
            )
            for embedding in {id(e): e for e in (self.source_embedding, self.target_embedding)}.values():
                embedding.quantize(mode)
        policies = keras.dtype_policies.DTypePolicyMap(
            default_policy=_float_policy(self.dtype_policy)
        )
        for layer in _keras_compat.flatten_layers(self):
            if layer.quantization_mode is not None:
                policies[layer.path] = layer.dtype_policy
        self._dtype_argument = policies
        if self.compiled:
            # The optimizer's slots were made for the float kernels, now gone: a quantized
            # model is for decoding, saved without a training state.
            self.optimizer = None
            self.compiled = False

    @property
    def quantization(self):
        """`"int8"` when `quantize` (or a quantized file) made this model's layers int8, else
        `None`."""
        if isinstance(self._dtype_argument, keras.dtype_policies.DTypePolicyMap):
            return "int8"
        return None

    def enable_lora(self, rank, targets=lora.DEFAULT_TARGETS, alpha=None, seed=None):
        """Low-rank adaptation (Hu et al., 2021) of the attention projections (query and value
        by default) and, with `targets`, the feed-forward layers; every other weight is
        frozen. See `keras_transformer.models.lora.enable_lora` (its arguments and return
        value) and docs/lora.md; `keras_transformer.models.lora.merge_lora` gives the plain
        model to serve or export."""
        return lora.enable_lora(self, rank, targets=targets, alpha=alpha, seed=seed)

    def call(self, inputs, training=None, mask=None, **kwargs):
        # Before the functional graph casts the inputs to int32 (which truncates floats).
        if isinstance(inputs, dict):
            check_token_ids(inputs.get("encoder_inputs"), self.vocabulary_size, "encoder_inputs")
            check_token_ids(
                inputs.get("decoder_inputs"), self.target_vocabulary_size, "decoder_inputs"
            )
        return super().call(inputs, training=training, mask=mask, **kwargs)

    # === Steps used by decoding ===
    def encode(self, encoder_inputs, training=False):
        """Runs the encoder.

        Args:
            encoder_inputs: int `(batch, source_length)` token ids, 0 = padding.
            training: bool.

        Returns:
            `(encoder_outputs (batch, source_length, d_model), padding_mask (batch, source_length))`.
        """
        check_token_ids(encoder_inputs, self.vocabulary_size, "encoder_inputs")
        return _encoder_stack(
            self.source_embedding,
            self.encoder_blocks,
            self.encoder_norm,
            encoder_inputs,
            training=training,
        )

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
            float32 logits `(batch, target_length, target_vocabulary_size)` [, scores].
        """
        check_token_ids(decoder_inputs, self.target_vocabulary_size, "decoder_inputs")
        logits, _, scores = _decoder_stack(
            self.target_embedding,
            self.decoder_blocks,
            self.decoder_norm,
            decoder_inputs,
            encoder_outputs,
            encoder_padding_mask,
            training=training,
            return_attention_scores=return_attention_scores,
        )
        return (logits, scores) if return_attention_scores else logits

    def init_cache(self, encoder_outputs, max_length, encoder_padding_mask=None, group=None):
        """Decoding cache: per decoder layer, empty self-attention keys/values of
        `max_length` positions and the cross-attention keys/values, computed once; with
        `encoder_padding_mask` (from `encode`), also the cross-attention mask, built once
        instead of at every `decode_step`. With `group` (an int), the layout steps read
        without a transpose, `group` consecutive decoder rows per source
        (`DecoderBlock.init_cache`); the searches of `keras_transformer.generation` use it."""
        return [
            block.init_cache(encoder_outputs, max_length, encoder_padding_mask, group=group)
            for block in self.decoder_blocks
        ]

    def decode_step(
        self,
        tokens,
        cache,
        index,
        encoder_padding_mask,
        self_attention_mask=None,
        encoding_table=None,
    ):
        """One cached decoder step.

        Args:
            tokens: int `(batch, 1)`, the tokens at position `index`.
            cache: from `init_cache` (or a previous `decode_step`).
            index: int or scalar int tensor, the position of `tokens`.
            encoder_padding_mask: `(batch, source_length)` from `encode`.
            self_attention_mask: optional bool `(batch, 1, group * max_length)`: which cached
                positions of its group of `group` consecutive rows each row attends to (see
                `MultiHeadAttention`; beam search reads its hypotheses' ancestors in place).
                Defaults to `None`: its own row's positions up to `index`.
            encoding_table: optional `(max_length, d_model)` position encodings computed
                once per search (`decoding_encodings`); the step reads its row instead of
                computing it. Defaults to `None`.

        Returns:
            `(logits float32 (batch, target_vocabulary_size) for position index + 1, new_cache)`.
        """
        # The step is ~40 small sub-layer calls: they skip `Layer.__call__`'s bookkeeping
        # (the dtype policy's casts and autocast scope are kept).
        with direct_sublayer_calls():
            logits, new_cache, _ = _decoder_stack(
                self.target_embedding,
                self.decoder_blocks,
                self.decoder_norm,
                tokens,
                None,  # the cache holds the cross-attention keys and values
                encoder_padding_mask,
                cache=cache,
                cache_index=index,
                self_attention_mask=self_attention_mask,
                encoding_table=encoding_table,
            )
        return logits[:, 0], new_cache

    def decoding_encodings(self, max_length):
        """The target position encodings of positions `0 .. max_length - 1`, computed once
        for `decode_step(..., encoding_table=...)`: `(max_length, d_model)`."""
        dtype = self.target_embedding.compute_dtype
        return sinusoidal_encoding(
            max_length,
            self.d_model,
            dtype=dtype,
            layout=self.sinusoid_layout,
            frequencies=self.sinusoid_frequencies,
        )

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "vocabulary_size": self.vocabulary_size,
            "target_vocabulary_size": self.target_vocabulary_size,
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
            "sinusoid_layout": self.sinusoid_layout,
            "output_bias": self.output_bias,
            "sinusoid_frequencies": self.sinusoid_frequencies,
            "projection_dtype": self.projection_dtype,
            **({} if self._dtype_argument is None else {"dtype": self._serialized_dtype()}),
        }

    def _serialized_dtype(self):
        if isinstance(self._dtype_argument, keras.dtype_policies.DTypePolicyMap):
            return keras.dtype_policies.serialize(self._dtype_argument)
        return self._dtype_argument

    @classmethod
    def from_config(cls, config):
        config = copy.deepcopy(config)
        # Files saved before 0.2.0 spell the sizes `vocab_size` and `target_vocab_size`.
        for old, new in (("vocab_size", "vocabulary_size"), ("target_vocab_size", "target_vocabulary_size")):
            if old in config and new not in config:
                config[new] = config.pop(old)
        return cls(**config)


def _check_weight_memory(dtype, norm_first, share_embeddings, **sizes):
    """Refuses sizes (from a constructor call or a `.keras` file's configuration) whose weights
    could not fit in this machine's memory, before anything is allocated. The sizes are
    already checked (`validate_transformer_args`): positive ints.

    Args:
        dtype: the model's `dtype` argument (`None`: the global policy).
        norm_first: bool. Two final LayerNorms.
        share_embeddings: bool. One embedding matrix instead of two.
        **sizes: `vocabulary_size`, `target_vocabulary_size`, `num_layers`, `num_decoder_layers`,
            `d_model`, `num_heads` and `ff_dim`.
    """
    d_model, ff_dim = sizes["d_model"], sizes["ff_dim"]
    attention = 4 * d_model * d_model + 4 * d_model  # query, key, value, output (+ biases)
    feed_forward = 2 * d_model * ff_dim + ff_dim + d_model
    norm = 2 * d_model  # gamma and beta
    count = (
        sizes["vocabulary_size"] * d_model
        + (0 if share_embeddings else sizes["target_vocabulary_size"] * d_model)
        + sizes["num_layers"] * (attention + feed_forward + 2 * norm)
        + sizes["num_decoder_layers"] * (2 * attention + feed_forward + 3 * norm)
        + (2 * norm if norm_first else 0)
    )
    policy = keras.dtype_policies.get(dtype) if dtype is not None else keras.config.dtype_policy()
    bytes_per_weight = {"float16": 2, "bfloat16": 2, "float64": 8}.get(policy.variable_dtype, 4)
    needed = count * bytes_per_weight
    available = _checks.physical_memory_bytes()
    if needed > available:
        received = ", ".join(f"{arg}={val}" for arg, val in sizes.items() if arg != "num_heads")
        raise ValueError(
            f"These sizes make {count} weights ({needed} bytes of {policy.variable_dtype}), "
            f"more than this machine's {available} bytes of memory. Received: {received}"
        )


def _resolve_policies(model):
    """Gives each built layer of a loaded quantized model its own policy from the model's
    `DTypePolicyMap`. The layers were built from the map (each kernel int8 or float by its
    path), but parts of Keras read `layer.dtype_policy.quantization_mode`, which a map
    answers with its default: a quantized `Dense` would call and save as a float one."""
    for layer in _keras_compat.flatten_layers(model):
        if isinstance(layer.dtype_policy, keras.dtype_policies.DTypePolicyMap) and layer.path:
            _keras_compat.set_layer_policy(layer, layer.dtype_policy[layer.path])


def _float_policy(policy):
    """The float policy a model had before quantizing (`policy` may be a `DTypePolicyMap`)."""
    if isinstance(policy, keras.dtype_policies.DTypePolicyMap):
        policy = policy.default_policy
    return keras.dtype_policies.get(policy.name.split("_from_")[-1])


# === The two stacks, wired once for the functional graph and the decoding steps ===
def _encoder_stack(embedding, blocks, norm, encoder_inputs, training=None):
    """Embedding, encoder blocks and (pre-LN) final norm.

    Returns:
        `(encoder_outputs (batch, source_length, d_model), padding_mask (batch, source_length))`.
    """
    padding_mask = ops.not_equal(encoder_inputs, 0)  # (batch, source_length)
    x = embedding(encoder_inputs, training=training)
    for block in blocks:
        x = block(x, padding_mask=padding_mask, training=training)
    if norm is not None:
        x = norm(x)
    return x, padding_mask


def _decoder_stack(
    embedding,
    blocks,
    norm,
    decoder_inputs,
    encoder_outputs,
    encoder_padding_mask,
    training=None,
    return_attention_scores=False,
    cache=None,
    cache_index=None,
    self_attention_mask=None,
    encoding_table=None,
):
    """Embedding, decoder blocks, (pre-LN) final norm and the tied output projection.

    Without `cache`, runs over the whole prefix `decoder_inputs` (0 = padding). With
    `cache` (one entry per block, from `DecoderBlock.init_cache`), runs the tokens at
    position `cache_index` against the cached keys and values; `encoder_outputs` is then
    unused (the cache holds the cross-attention keys and values).

    Returns:
        `(logits float32 (batch, length, vocab), new_cache or None, scores)`: `scores` is
        the list (one per block) of cross-attention probabilities when
        `return_attention_scores`, else empty.
    """
    if cache is None:
        padding_mask = ops.not_equal(decoder_inputs, 0)  # (batch, target_length)
        y = embedding(decoder_inputs, training=training)
    else:
        padding_mask, encoder_outputs = None, None
        y = call_sublayer(
            embedding,
            decoder_inputs,
            start_index=cache_index,
            training=training,
            encoding_table=encoding_table,
        )
    new_cache, all_scores = ([] if cache is not None else None), []
    for i, block in enumerate(blocks):
        y = call_sublayer(
            block,
            y,
            encoder_outputs,
            padding_mask=padding_mask,
            context_padding_mask=encoder_padding_mask,
            training=training,
            return_attention_scores=return_attention_scores,
            cache=None if cache is None else cache[i],
            cache_index=cache_index,
            self_attention_mask=self_attention_mask,
        )
        if return_attention_scores or cache is not None:
            y, *extras = y  # the block returns (y[, scores][, layer_cache])
            if return_attention_scores:
                all_scores.append(extras[0])
            if cache is not None:
                new_cache.append(extras[-1])
    if norm is not None:
        y = call_sublayer(norm, y)
    return call_sublayer(embedding, y, reverse=True), new_cache, all_scores
