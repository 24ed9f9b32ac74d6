"""Backend-specific kernels and checks, in one place (private).

Layers, losses and decoding are written with `keras.ops`. Where one backend has a faster
kernel, or a check only one backend needs, they call one function of this module; the
kernels return `None` where they do not apply, and the caller then runs its portable
`keras.ops` code. Each function imports only the active backend's module, which Keras has
already loaded. What the kernels buy is measured in
`benchmarks/results/train_throughput_history.md`.
"""

import contextlib
import functools
import os

import keras
import numpy as np

# The autocast scope of `layers/sublayer_calls.py` (private Keras API: see `_keras_compat`).
from keras_transformer._keras_compat import (  # noqa: F401
    AutocastScope,
    get_autocast_scope,
    is_float_dtype,
)

_FUSED_ATTENTION = {}
_TORCH_CROSS_ENTROPY = None


def in_xla_context():
    """Whether TensorFlow is tracing a function for XLA (`jit_compile=True`).

    Always `False` on the other backends (JAX compiles everything with XLA and is handled
    by its own kernels).
    """
    if keras.backend.backend() != "tensorflow":
        return False
    import tensorflow as tf

    if tf.executing_eagerly():
        return False
    try:
        # Private module: TensorFlow has no public "inside an XLA context" check.
        from tensorflow.python.ops import control_flow_util

        return bool(control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()))
    except (ImportError, AttributeError):  # pragma: no cover - private API moved
        return False


def use_fused_attention():
    """Whether `keras.ops.dot_product_attention` is used when it can be (no attention
    dropout, no scores requested). Same math either way.

    PyTorch and GPUs have real fused kernels. On CPU, Keras' TensorFlow and JAX versions
    compose the same einsum / mask / softmax / einsum as the explicit path, with more
    transposes, and measure slower.
    """
    backend = keras.backend.backend()
    if backend not in _FUSED_ATTENTION:
        if backend == "jax":
            import jax

            _FUSED_ATTENTION[backend] = jax.default_backend() != "cpu"
        elif backend == "tensorflow":
            import tensorflow as tf

            _FUSED_ATTENTION[backend] = bool(tf.config.list_logical_devices("GPU"))
        else:
            _FUSED_ATTENTION[backend] = True
    return _FUSED_ATTENTION[backend]


# === Dropout ===
def dropout(inputs, rate, seed_generator, seeded):
    """Inverted dropout with the backend's fastest bit generator, or `None`.

    Keeps each element with probability `1 - rate` and scales it by `1 / (1 - rate)`,
    the seed drawn from `seed_generator`:
    - TensorFlow inside XLA: ThreeFry bits (Keras uses Philox, which XLA expands on CPU
      into 64-bit multiplies);
    - JAX: XLA's own ThreeFry generator (`jax.lax.rng_bit_generator`) instead of
      `jax.random.bernoulli`, which builds ThreeFry from generic HLO operations;
    - PyTorch, when the layer was given a seed (`seeded`): one seeded in-place Bernoulli
      draw instead of Keras' filled probability tensor, draw and select.
    The ThreeFry paths compare 32 random bits with `rate · 2³²`.

    Args:
        inputs: float tensor.
        rate: float in (0, 1).
        seed_generator: `keras.random.SeedGenerator`.
        seeded: bool. Whether the layer was given a seed.

    Returns:
        The tensor, or `None` where Keras' own dropout is used (eager and graph
        TensorFlow, whose CPU kernels lack ThreeFry; unseeded PyTorch layers).
    """
    backend = keras.backend.backend()
    if backend == "jax":
        return _jax_dropout(inputs, rate, seed_generator)
    if backend == "torch" and seeded:
        return _torch_dropout(inputs, rate, seed_generator)
    if backend == "tensorflow" and in_xla_context():
        return _tf_xla_dropout(inputs, rate, seed_generator)
    return None


def _keep_threshold(rate):
    """Keep an element when its 32 random bits are >= this: P(keep) = 1 - rate (to 2⁻³²)."""
    return min(round(rate * 2**32), 2**32 - 1)


def _tf_xla_dropout(inputs, rate, seed_generator):
    import tensorflow as tf

    # The seed Keras' TF backend draws (`_cast_seed`), ThreeFry bits.
    seed = seed_generator.next()
    seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), "int32")
    bits = tf.random.stateless_uniform(
        tf.shape(inputs), seed=seed, minval=None, maxval=None, dtype=tf.uint32, alg="threefry"
    )
    keep = tf.greater_equal(bits, tf.constant(_keep_threshold(rate), tf.uint32))
    return tf.where(keep, inputs / (1.0 - rate), tf.zeros_like(inputs))


def _jax_dropout(inputs, rate, seed_generator):
    import jax
    import jax.numpy as jnp

    seed = jnp.asarray(seed_generator.next(), jnp.uint32)
    key = jnp.concatenate([seed, jnp.zeros((2,), jnp.uint32)])
    _, bits = jax.lax.rng_bit_generator(
        key, inputs.shape, dtype=jnp.uint32, algorithm=jax.lax.RandomAlgorithm.RNG_THREE_FRY
    )
    keep = bits >= jnp.uint32(_keep_threshold(rate))
    return jax.lax.select(keep, inputs / (1.0 - rate), jnp.zeros_like(inputs))


def _torch_dropout(inputs, rate, seed_generator):
    import torch

    if inputs.device.type == "meta":  # Keras' symbolic shape inference
        return None
    first, second = seed_generator.next()
    generator = torch.Generator(device=inputs.device)
    generator.manual_seed(int(first + second) & 0xFFFFFFFF)  # Keras' own folding
    keep = 1.0 - rate
    mask = torch.empty_like(inputs).bernoulli_(keep, generator=generator)
    return inputs.div(keep).mul_(mask)


# === Decoding ===
def dims(x):
    """The shape of `x`: a tuple of ints, or `keras.ops.shape(x)` (a scalar tensor for each
    size unknown while tracing) when some size is unknown.

    A cached decoding step reads about forty shapes; on eager PyTorch, `keras.ops.shape`'s
    dispatch costs about as much as a small operation, and reading `x.shape` nearly nothing.
    """
    shape = tuple(x.shape)
    if any(size is None for size in shape):
        return keras.ops.shape(x)
    return shape


def cast_like(x, like):
    """`x` in the dtype of `like`: `x` itself when it already is (no operation dispatched)."""
    if x.dtype == like.dtype:
        return x
    return keras.ops.cast(x, keras.backend.standardize_dtype(like.dtype))


def reshape(x, shape):
    """`keras.ops.reshape(x, shape)`; on PyTorch `torch.reshape` itself.

    The same operation: Keras' PyTorch `reshape` is `torch.reshape` after a conversion, but
    its dispatch flattens `shape` as a nested structure, about 60 µs a call against 2 µs
    (measured on the 2-core CI machine); a cached decoding step reshapes about 17 times.
    """
    if keras.backend.backend() == "torch" and isinstance(x, _torch_tensor_type()):
        return x.reshape(shape)
    return keras.ops.reshape(x, shape)


def dense(layer, inputs):
    """`layer.call(inputs)` of a plain `keras.layers.Dense` on PyTorch, without Keras'
    dispatch, or `None` where that does not apply (the caller then calls `layer.call`).

    Keras' `Dense.call` is `ops.matmul`, `ops.add` and the activation. For float inputs of
    the kernel's (autocast) dtype, Keras' PyTorch `matmul` and `add` are `torch.matmul` and
    `torch.add` on those tensors, so this is the same arithmetic, bit for bit: about 25 µs a
    call instead of 145 µs (16 calls per cached decoding step of a 2-layer decoder). Not
    used for float16 on CPU (Keras multiplies in float32 there), LoRA or quantized layers, or
    subclasses of `Dense`. Call it inside the layer's autocast scope, as `call_sublayer`
    does: the kernel is read in the compute dtype there.
    """
    if keras.backend.backend() != "torch" or type(layer) is not keras.layers.Dense:
        return None
    if layer.lora_enabled or layer.quantization_mode is not None:
        return None
    if not isinstance(inputs, _torch_tensor_type()):
        return None
    kernel = layer.kernel.value
    if inputs.dtype != kernel.dtype or not inputs.dtype.is_floating_point:
        return None
    if inputs.dtype == _torch_module().float16 and inputs.device.type == "cpu":
        return None
    bias = None if layer.bias is None else layer.bias.value
    if bias is not None and bias.dtype != kernel.dtype:
        return None
    outputs = _torch_module().matmul(inputs, kernel)
    if bias is not None:
        outputs = outputs + bias
    if layer.activation is not None:
        outputs = layer.activation(outputs)
    return outputs


def layer_norm(layer, inputs):
    """`layer.call(inputs)` of a plain `keras.layers.LayerNormalization` over the last axis on
    PyTorch, without Keras' dispatch, or `None` where that does not apply.

    The steps of Keras' PyTorch path, on the same tensors: the input in float32 (or wider),
    `torch.nn.functional.layer_norm` with the float32 `gamma`/`beta`, the result cast back to
    the input's dtype, then to the layer's compute dtype. About 20 µs a call instead of 100.
    """
    if keras.backend.backend() != "torch" or type(layer) is not keras.layers.LayerNormalization:
        return None
    if layer.rms_scaling or not isinstance(inputs, _torch_tensor_type()):
        return None
    axes = layer.axis if isinstance(layer.axis, (list, tuple)) else [layer.axis]
    if [axis % inputs.ndim for axis in axes] != [inputs.ndim - 1]:
        return None
    if not inputs.dtype.is_floating_point:
        return None
    torch = _torch_module()
    x = inputs if inputs.dtype in (torch.float32, torch.float64) else inputs.float()
    weights = []
    for variable in (layer.gamma, layer.beta):
        value = None if variable is None else variable.value
        if value is not None and value.dtype != x.dtype:
            value = value.to(x.dtype)
        weights.append(value)
    outputs = torch.nn.functional.layer_norm(x, (x.shape[-1],), *weights, layer.epsilon)
    outputs = outputs.to(inputs.dtype)
    return outputs.to(to_torch_dtype(layer.compute_dtype))


def to_torch_dtype(dtype):
    """The `torch.dtype` of a Keras dtype name."""
    return getattr(_torch_module(), keras.backend.standardize_dtype(dtype))


def _torch_module():
    import torch

    return torch


def _torch_tensor_type():
    import torch

    return torch.Tensor


def update_cache(cache, index, updates, axis=1):
    """`cache` with `updates` written along `axis` from position `index`, or `None`.

    PyTorch: one out-of-place `index_copy` (Keras' `slice_update` with a tensor start builds
    index grids and scatters: about ten small operations per cache and step).

    Args:
        cache: tensor, `max_length` positions on `axis`.
        index: int32 scalar tensor, the first position written.
        updates: tensor of the cache's dtype and shape, but `length` positions on `axis`.
        axis: int. The positions' axis. Defaults to `1`.

    Returns:
        A new tensor on PyTorch (the input cache is left as it was); `None` elsewhere, where
        the caller uses `keras.ops.slice_update` (XLA updates in place).
    """
    if keras.backend.backend() != "torch":
        return None
    import torch

    positions = torch.arange(updates.shape[axis], device=cache.device) + index
    return cache.index_copy(axis, positions, updates)


def write_group_positions(caches, index, max_length, updates):
    """The by-head decoding caches of `MultiHeadAttention` with a step's keys and values
    written, in one `index_copy` each on PyTorch; `None` elsewhere (XLA updates in place,
    one slice per row of the group).

    Args:
        caches: `(keys (h, b, dk, group * max_length), values (h, b, group * max_length, dv))`.
        index: int32 scalar tensor, the first position written.
        max_length: int. Positions per row of a group.
        updates: `(keys (b, group, q, h, dk), values (b, group, q, h, dv))`, the step's
            rows (transposed here, on PyTorch only).

    Returns:
        The two new caches, or `None`.
    """
    if keras.backend.backend() != "torch":
        return None
    import torch

    keys, values = caches
    new_keys = updates[0].permute(3, 0, 4, 1, 2)  # (h, b, dk, group, q)
    new_values = updates[1].permute(3, 0, 1, 2, 4)  # (h, b, group, q, dv)
    group, q_len = new_values.shape[2], new_values.shape[3]
    offsets = torch.arange(group, device=keys.device)[:, None] * max_length
    positions = (offsets + torch.arange(q_len, device=keys.device)[None] + index).reshape(-1)
    new_keys = new_keys.reshape(*new_keys.shape[:3], group * q_len).to(keys.dtype)
    new_values = new_values.reshape(*new_values.shape[:2], group * q_len, -1).to(values.dtype)
    return keys.index_copy(3, positions, new_keys), values.index_copy(2, positions, new_values)


# === Cross-entropy ===
def take_last_axis(x, indices):
    """`x[..., indices]` per position: `(..., vocab)` and int `(...)` give `(...)`.

    On TensorFlow one `tf.gather` with batch dimensions. Keras' `ops.take_along_axis`
    reshapes `x` there, and a reshape of the float32 cast of bfloat16 logits makes Grappler
    cast all of them a second time for that consumer. The loss (`smoothed_cross_entropy`)
    and `MaskedAccuracy` both gather with this, so TensorFlow gathers once: a mixed bfloat16
    Bible step (64 x 64 tokens, one core) took 466 ms with `ops.take_along_axis` in the
    metric, 436 ms with this.
    """
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.gather(x, indices[..., None], axis=-1, batch_dims=len(indices.shape))[..., 0]
    return keras.ops.take_along_axis(x, indices[..., None], axis=-1)[..., 0]


def smoothed_cross_entropy(logits, labels, label_smoothing):
    """Fused label-smoothed cross-entropy from logits, or `None`.

    The same value as `logsumexp(z) - (1-ε)·z_label - ε·mean(z)`, computed from the
    backend's fused softmax kernel, run once: the log-sum-exp is
    `max(z) - log(max(softmax(z)))` (the largest probability is at least 1/V, so its
    logarithm is exact to round-off) and the kept softmax gives the gradient
    `softmax(z) - q` in one pass plus a scatter at the labels. One exponential per logit
    instead of the two of `logsumexp` and its gradient.

    Args:
        logits: float32 `(..., vocab)`.
        labels: int32 `(...)`, valid ids.
        label_smoothing: float ε.

    Returns:
        float32 `(...)` on PyTorch and TensorFlow outside XLA; `None` under XLA (JAX,
        TensorFlow with `jit_compile`), where autodiff of the plain formula is fused.
    """
    backend = keras.backend.backend()
    if backend == "torch":
        return _torch_smoothed_cross_entropy(logits, labels, label_smoothing)
    if backend == "tensorflow" and not in_xla_context():
        return _tf_smoothed_cross_entropy(logits, labels, label_smoothing)
    return None


def _tf_smoothed_cross_entropy(logits, labels, label_smoothing):
    import tensorflow as tf

    vocab = tf.shape(logits)[-1]
    flat_labels = tf.reshape(labels, (-1,))

    @tf.custom_gradient
    def forward(z):
        # `z` keeps its shape, and the maximum and the gather are the ones `MaskedAccuracy`
        # takes, so TensorFlow computes them once for both (its common subexpressions).
        probabilities = tf.nn.softmax(z)
        lse = tf.reduce_max(z, axis=-1) - tf.math.log(tf.reduce_max(probabilities, axis=-1))
        loss = lse - (1.0 - label_smoothing) * take_last_axis(z, labels)
        if label_smoothing:
            loss -= label_smoothing * tf.reduce_mean(z, axis=-1)

        def grad(upstream):
            upstream = tf.reshape(upstream, (-1,))
            flat = tf.reshape(probabilities, (-1, vocab))  # (positions, vocab)
            uniform = label_smoothing / tf.cast(vocab, flat.dtype)
            dz = (flat - uniform) * upstream[:, None]
            positions = tf.range(tf.shape(flat)[0], dtype=flat_labels.dtype)
            indices = tf.stack([positions, flat_labels], axis=1)
            dz = tf.tensor_scatter_nd_sub(dz, indices, (1.0 - label_smoothing) * upstream)
            return tf.reshape(dz, tf.shape(z))

        return loss, grad

    return forward(logits)


def _torch_smoothed_cross_entropy(logits, labels, label_smoothing):
    global _TORCH_CROSS_ENTROPY
    if _TORCH_CROSS_ENTROPY is None:
        import torch

        class SmoothedCrossEntropy(torch.autograd.Function):
            @staticmethod
            def forward(ctx, z, labels, smoothing):
                probabilities = torch.softmax(z, dim=-1)
                lse = z.amax(dim=-1) - torch.log(probabilities.amax(dim=-1))
                true_logit = torch.gather(z, -1, labels[..., None].long())[..., 0]
                loss = lse - (1.0 - smoothing) * true_logit
                if smoothing:
                    loss = loss - smoothing * z.mean(dim=-1)
                ctx.save_for_backward(probabilities, labels)
                ctx.smoothing = smoothing
                return loss

            @staticmethod
            def backward(ctx, upstream):
                probabilities, labels = ctx.saved_tensors
                smoothing = ctx.smoothing
                upstream = upstream[..., None]
                if smoothing:  # (softmax - ε/V)·upstream in one pass
                    uniform = smoothing / probabilities.shape[-1]
                    dz = torch.addcmul(-uniform * upstream, probabilities, upstream)
                else:
                    dz = probabilities * upstream
                dz.scatter_add_(-1, labels[..., None].long(), -(1.0 - smoothing) * upstream)
                return dz, None, None

        _TORCH_CROSS_ENTROPY = SmoothedCrossEntropy
    return _TORCH_CROSS_ENTROPY.apply(logits, labels, label_smoothing)


# === Distribution and compilation ===
def replica_context():
    """The replica context of a `tf.distribute` strategy with several replicas, else `None`.

    Only TensorFlow runs a loss once per replica and sums the replicas' gradients.
    """
    if keras.backend.backend() != "tensorflow":
        return None
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync <= 1:
        return None
    return context


def compile_inference(function, variables, jit_compile, on_trace=None):
    """`function` compiled for inference on the active backend.

    TensorFlow: a `tf.function` (XLA when `jit_compile`). JAX: `jax.jit` over the
    variables' values when `jit_compile`, else eager. PyTorch: eager under
    `torch.no_grad()`.

    Args:
        function: callable on tensors, reading `variables`.
        variables: list of `keras.Variable` that `function` reads (JAX passes their
            values to the jitted function explicitly).
        jit_compile: bool. Compile with XLA where the backend can.
        on_trace: optional callable run once per trace (TensorFlow and jitted JAX).

    Returns:
        A callable with the signature of `function`.
    """

    def traced(*args):
        if on_trace is not None:
            on_trace()  # A Python side effect: runs once per trace.
        return function(*args)

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        # Callers make one function per input signature, each tracing once per shape, by
        # design. TensorFlow counts traces per Python code object, so all of them (all of
        # `traced`) would add up to its "N out of the last N calls ... triggered tf.function
        # retracing" warning; a `partial` gives each function its own count.
        return tf.function(
            functools.partial(traced),
            jit_compile=jit_compile,
            autograph=False,
        )
    if backend == "jax":
        if not jit_compile:
            return function
        import jax

        def pure(values, *args):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return traced(*args)

        jitted = jax.jit(pure)
        return lambda *args: jitted([variable.value for variable in variables], *args)
    if backend == "torch":

        def call(*args):
            with no_grad():
                return function(*args)

        return call
    return function


def compiles_shapes(jit_compile):
    """Whether a search with this `jit_compile` compiles one program per input shape
    (XLA on TensorFlow, `jax.jit`), as opposed to PyTorch's or an uncompiled eager search."""
    return bool(jit_compile) and keras.backend.backend() in ("tensorflow", "jax")


def concurrent_searches(jit_compile):
    """How many compiled searches a `Translator` runs at once by default.

    A search compiled by XLA (TensorFlow) or `jax.jit` runs its small per-step operations on
    about one CPU core, and releases the GIL: two at once keep two cores busy. PyTorch's eager
    search already spreads each operation over `torch.get_num_threads()` threads, and an
    uncompiled search holds the GIL between operations, so both run one at a time.
    """
    if compiles_shapes(jit_compile):
        return max(1, min(2, os.cpu_count() or 1))
    return 1


def no_grad():
    """A context without gradient recording: `torch.no_grad()` on PyTorch (the only
    backend that records by default), else a null context."""
    if keras.backend.backend() != "torch":
        return contextlib.nullcontext()
    import torch

    return torch.no_grad()


def is_concrete(x):
    """Whether the values of `x` can be read now, without a trace or a graph."""
    if isinstance(x, np.ndarray):
        return True
    if isinstance(x, keras.KerasTensor):
        return False
    # Tensors of the running backend; a tensor of another framework (a `tf.Tensor` fed to
    # JAX or PyTorch) is eager by the time it reaches Python.
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.executing_eagerly() and not isinstance(x, (tf.RaggedTensor, tf.SparseTensor))
    if backend == "jax":
        import jax

        return not isinstance(x, jax.core.Tracer)
    if backend == "torch":
        import torch

        return not (torch.compiler.is_compiling() or torch.jit.is_tracing())
    return True


def is_tensorflow():
    """Whether Keras runs on TensorFlow (a SavedModel is traced there, and only there)."""
    return keras.backend.backend() == "tensorflow"


def sync_trainer_state(model):
    """Writes the JAX trainer's in-flight state back into `model`'s variables (a no-op on the
    other backends, whose variables are always current)."""
    if keras.backend.backend() == "jax" and hasattr(model, "jax_state_sync"):
        model.jax_state_sync()


def local_value(value):
    """`value` (a tensor or a variable's value) as this process can read it: on JAX, the
    local copy of an array replicated across processes."""
    if keras.backend.backend() == "jax":
        import jax

        if isinstance(value, jax.Array) and not value.is_fully_addressable:
            return value.addressable_data(0)
    return value
