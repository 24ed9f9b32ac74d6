"""Sub-layer calls that can skip `Layer.__call__`'s bookkeeping, for the cached decoding step.

A cached decoder step runs about 40 small layer calls on tensors of a few kilobytes. On
PyTorch, where nothing compiles the step, `Layer.__call__` (argument binding, the training
context, implicit masks, name scopes, `torch.nn.Module.__call__`) costs several times the
arithmetic of such a call. Inside `direct_sublayer_calls()` our layers call their sub-layers
through `call_sublayer`, which keeps what changes the numbers (input casting and the
autocast scope of the layer's dtype policy) and skips the rest.
"""

import contextlib
import contextvars

import keras

# Keras' autocast scope is private API: `_backend` holds the one import of it (`None` if it
# moved, and then `Layer.__call__` is kept).
from keras_transformer import _backend
from keras_transformer._backend import AutocastScope, get_autocast_scope, is_float_dtype

_DIRECT = contextvars.ContextVar("keras_transformer_direct_sublayer_calls", default=False)


@contextlib.contextmanager
def direct_sublayer_calls():
    """Within this context, `call_sublayer` calls `layer.call` directly."""
    token = _DIRECT.set(True)
    try:
        yield
    finally:
        _DIRECT.reset(token)


def call_sublayer(layer, *args, **kwargs):
    """`layer(*args, **kwargs)`, or inside `direct_sublayer_calls()` the same computation
    without `Layer.__call__`.

    The direct call does what `Layer.__call__` does that changes the result: floating
    positional inputs are cast as the layer's dtype policy says, and a layer whose compute
    dtype differs from its variable dtype (mixed precision) reads its variables in the
    compute dtype (Keras' autocast scope, entered and left by the same rules). It skips
    building (the layer must be built), implicit Keras masks (masks are passed explicitly),
    the inherited training flag (`training` is passed explicitly), name scopes and input
    spec checks. Keyword arguments are passed as they are.

    Args:
        layer: a built `keras.layers.Layer`.
        *args: positional call arguments (tensors).
        **kwargs: keyword call arguments.

    Returns:
        What `layer.call` returns.
    """
    if AutocastScope is None or not _DIRECT.get():
        return layer(*args, **kwargs)
    policy = layer.dtype_policy
    if isinstance(policy, keras.dtype_policies.DTypePolicyMap) and layer.path:  # quantized models
        policy = policy[layer.path]
    args = tuple(policy.convert_input(x, layer.autocast, layer.input_dtype) for x in args)
    compute_dtype = layer.compute_dtype
    current = get_autocast_scope()
    scope = None
    if current is not None:
        if not layer.autocast or not is_float_dtype(compute_dtype):
            scope = AutocastScope(None)
        elif current.dtype != compute_dtype:
            scope = AutocastScope(compute_dtype)
    elif compute_dtype != layer.variable_dtype:
        scope = AutocastScope(compute_dtype)
    if scope is None:
        return _call(layer, args, kwargs)
    with scope:
        return _call(layer, args, kwargs)


def _call(layer, args, kwargs):
    """`layer.call(*args, **kwargs)`; a plain `Dense` or `LayerNormalization` on PyTorch
    without Keras' op dispatch (`_backend.dense`, `_backend.layer_norm`: the same
    arithmetic); a quantized layer's own quantized call (`Layer.__call__` picks it too)."""
    if layer.quantization_mode is not None:
        return layer.quantized_call(*args, **kwargs)
    if len(args) == 1 and not kwargs:
        for fast in (_backend.dense, _backend.layer_norm):
            outputs = fast(layer, args[0])
            if outputs is not None:
                return outputs
    return layer.call(*args, **kwargs)
