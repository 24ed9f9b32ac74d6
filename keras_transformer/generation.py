"""Compiled, bucketed generation with a `Transformer`: cached greedy and beam search, and an
uncached greedy reference.

`Generator` turns a model into a function `encoder_inputs (batch, source_length) int32 ->
(sequences, scores)` and compiles it once per input shape, in the way each backend compiles:

- TensorFlow: `tf.function(jit_compile=True)` (XLA). The variables are captured by reference,
  so later weight updates are seen without retracing.
- JAX: `jax.jit` of a pure function of the variable values and the inputs: the model runs
  inside `keras.StatelessScope(state_mapping=...)`, so the weights are arguments of the compiled
  function, never constants baked into it.
- PyTorch: eager, under `torch.no_grad()`.

A second call with the same shapes and options reuses the compiled function
(`Generator.trace_count` counts the traces). To keep the number of shapes bounded, callers pad
source lengths to `bucket_length(length, boundaries)` and batch sizes to
`padded_batch_size(batch_size)` (see `keras_transformer.Translator`).

The paper (§6.1) sets the maximum output length to the input length + 50; here it is the
(padded) source length + `extra_length`.
"""

import functools

import keras
from keras import ops

from keras_transformer.decoding import beam_search, greedy_search

SEARCHES = ("greedy", "beam", "uncached_greedy")


def bucket_length(length, boundaries):
    """The smallest bucket boundary `>= length`.

    Args:
        length: int. An unpadded sequence length.
        boundaries: ascending sequence of int, the padded lengths.

    Returns:
        int, the padded length.

    Example:

    >>> bucket_length(10, (8, 16, 24))
    16
    """
    for boundary in boundaries:
        if length <= boundary:
            return int(boundary)
    raise ValueError(
        f"`length` is longer than the largest bucket {boundaries[-1]}. Received: length={length}"
    )


def padded_batch_size(batch_size):
    """The smallest power of two `>= batch_size` (and `>= 1`): the padded batch size.

    Example:

    >>> [padded_batch_size(n) for n in (0, 1, 3, 8, 9)]
    [1, 1, 4, 8, 16]
    """
    padded = 1
    while padded < batch_size:
        padded *= 2
    return padded


def generate(
    model,
    encoder_inputs,
    start_id,
    end_id,
    max_length,
    search="beam",
    beam_size=4,
    alpha=0.6,
    pad_id=0,
):
    """Encodes `encoder_inputs` and searches for their translations (not compiled).

    The building block that `Generator` compiles. Every argument but `model` and
    `encoder_inputs` must be a Python value.

    Args:
        model: `keras_transformer.Transformer`.
        encoder_inputs: int32 `(batch, source_length)`, 0 = padding.
        start_id: int. Decoder start token.
        end_id: int. End token.
        max_length: int. Most tokens to generate, the end token included.
        search: str. `"greedy"` (cached `greedy_search`), `"beam"` (cached `beam_search`), or
            `"uncached_greedy"`: greedy search that re-runs `model.decode` over the whole
            prefix (a static `(batch, max_length)` buffer) at every step, the slow reference
            the cached searches are tested against. Defaults to `"beam"`.
        beam_size: int. Beams, for `search="beam"`. Defaults to `4`.
        alpha: float. Length penalty, for `search="beam"`. Defaults to `0.6`.
        pad_id: int. Defaults to `0`.

    Returns:
        `(sequences, scores)`: for greedy searches int32 `(batch, max_length)` and float32
        `(batch,)`, the sum of the token log probabilities; for beam search int32
        `(batch, beam_size, max_length)` and float32 `(batch, beam_size)`, best first, the log
        probability divided by the length penalty. Sequences hold no start token; they end with
        `end_id` followed by `pad_id` (unless cut at `max_length`).
    """
    _check_search(search)
    encoder_outputs, padding_mask = model.encode(encoder_inputs, training=False)
    batch_size = ops.shape(encoder_inputs)[0]
    start_tokens = ops.full((batch_size,), start_id, dtype="int32")

    if search == "uncached_greedy":

        def next_logits(tokens, cache, index):
            buffer = ops.slice_update(
                cache["tokens"], [ops.zeros((), "int32"), index], tokens
            )  # (batch, max_length), tokens 0 .. index written
            logits = model.decode(
                buffer, cache["encoder_outputs"], cache["padding_mask"], training=False
            )  # (batch, max_length, vocab)
            logits = ops.take(logits, index, axis=1)  # (batch, vocab)
            return logits, {**cache, "tokens": buffer}

        cache = {
            "tokens": ops.full((batch_size, max_length), pad_id, dtype="int32"),
            "encoder_outputs": encoder_outputs,
            "padding_mask": padding_mask,
        }
        return greedy_search(next_logits, cache, start_tokens, max_length, end_id, pad_id)

    def next_logits(tokens, cache, index):
        logits, layers = model.decode_step(tokens, cache["layers"], index, cache["padding_mask"])
        return logits, {"layers": layers, "padding_mask": cache["padding_mask"]}

    # Cross-attention keys/values are computed here, once; self-attention K/V fill step by step.
    cache = {"layers": model.init_cache(encoder_outputs, max_length), "padding_mask": padding_mask}
    if search == "greedy":
        return greedy_search(next_logits, cache, start_tokens, max_length, end_id, pad_id)
    return beam_search(
        next_logits,
        cache,
        start_tokens,
        max_length,
        end_id,
        beam_size=beam_size,
        alpha=alpha,
        pad_id=pad_id,
    )


class Generator:
    """Compiled batched generation with a `Transformer`, one compiled function per shape.

    Compiles `generate` for the current Keras backend (`tf.function(jit_compile=True)` on
    TensorFlow, `jax.jit` with the variable values passed as arguments on JAX, eager under
    `torch.no_grad()` on PyTorch) and caches the compiled function by search options; each
    backend then caches one trace per input shape. A call with a shape and options already
    seen does not retrace (`trace_count` stays put).

    Args:
        model: `keras_transformer.Transformer`.
        start_id: int. Decoder start token id.
        end_id: int. End token id.
        pad_id: int. Padding id. Defaults to `0`.
        extra_length: int. With `max_length=None`, generate at most `source_length +
            extra_length` tokens (paper §6.1: input length + 50). Defaults to `50`.
        jit_compile: bool. Compile (TensorFlow, JAX). `False` runs eagerly. Defaults to `True`.

    Call arguments:
        encoder_inputs: int `(batch, source_length)` NumPy array or tensor, 0 = padding.
            Pad lengths and batch sizes to a few values (`bucket_length`,
            `padded_batch_size`) to bound the number of compiled shapes.
        search: str. `"beam"`, `"greedy"` or `"uncached_greedy"` (see `generate`). Defaults to
            `"beam"`.
        beam_size: int. Defaults to `4`.
        alpha: float. Defaults to `0.6`.
        max_length: int. Defaults to `None`: `source_length + extra_length`.

    Returns:
        `(sequences, scores)` NumPy arrays, as from `generate`.

    Example:

    >>> import numpy as np
    >>> from keras_transformer import Transformer
    >>> model = Transformer.from_preset("tiny", vocab_size=20)
    >>> generator = Generator(model, start_id=1, end_id=2, extra_length=4)
    >>> sequences, scores = generator(np.array([[5, 6, 7, 0]], "int32"), search="greedy")
    >>> sequences.shape
    (1, 8)

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762), section 6.1.
    """

    def __init__(self, model, start_id, end_id, pad_id=0, extra_length=50, jit_compile=True):
        if not isinstance(extra_length, int) or isinstance(extra_length, bool) or extra_length < 1:
            raise ValueError(
                f"`extra_length` must be an int >= 1. Received: extra_length={extra_length!r}"
            )
        self.model = model
        self.start_id = int(start_id)
        self.end_id = int(end_id)
        self.pad_id = int(pad_id)
        self.extra_length = extra_length
        self.jit_compile = bool(jit_compile)
        self.trace_count = 0
        self._functions = {}

    def __call__(self, encoder_inputs, search="beam", beam_size=4, alpha=0.6, max_length=None):
        _check_search(search)
        if len(encoder_inputs.shape) != 2:
            raise ValueError(
                "`encoder_inputs` must have shape (batch, source_length). "
                f"Received: encoder_inputs.shape={tuple(encoder_inputs.shape)}"
            )
        if max_length is None:
            max_length = int(encoder_inputs.shape[1]) + self.extra_length
        function = self.function(search, max_length, beam_size, alpha)
        sequences, scores = function(encoder_inputs)
        return ops.convert_to_numpy(sequences), ops.convert_to_numpy(scores)

    def function(self, search="beam", max_length=64, beam_size=4, alpha=0.6):
        """The compiled `encoder_inputs -> (sequences, scores)` function for these options.

        On TensorFlow it is a `tf.function` that can also be called inside another
        `tf.function` (the SavedModel export does).
        """
        _check_search(search)
        if search != "beam":
            beam_size, alpha = 1, 0.0
        key = (search, int(max_length), int(beam_size), float(alpha))
        if key not in self._functions:
            self._functions[key] = self._compile(key)
        return self._functions[key]

    def _compile(self, key):
        search, max_length, beam_size, alpha = key
        model = self.model

        def run(encoder_inputs):
            return generate(
                model,
                ops.cast(encoder_inputs, "int32"),
                self.start_id,
                self.end_id,
                max_length,
                search=search,
                beam_size=beam_size,
                alpha=alpha,
                pad_id=self.pad_id,
            )

        def traced(encoder_inputs):
            self.trace_count += 1  # A Python side effect: runs once per trace.
            return run(encoder_inputs)

        backend = keras.backend.backend()
        if backend == "tensorflow":
            import tensorflow as tf

            # One function per search length, each tracing once per input shape: by design.
            # TensorFlow counts traces per Python code object, so these functions (all of
            # `traced`) would add up to its "N out of the last N calls ... triggered
            # tf.function retracing" warning; a `partial` gives each its own count.
            return tf.function(
                functools.partial(traced), jit_compile=self.jit_compile, autograph=False
            )
        if backend == "jax":
            if not self.jit_compile:
                return run
            import jax

            variables = model.variables

            def pure(values, encoder_inputs):
                with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                    return traced(encoder_inputs)

            jitted = jax.jit(pure)

            def call(encoder_inputs):
                return jitted([variable.value for variable in variables], encoder_inputs)

            return call
        if backend == "torch":
            import torch

            def call(encoder_inputs):
                with torch.no_grad():
                    return run(ops.convert_to_tensor(encoder_inputs, "int32"))

            return call
        return run


def _check_search(search):
    if search not in SEARCHES:
        raise ValueError(f"`search` must be one of {SEARCHES}. Received: search={search!r}")
