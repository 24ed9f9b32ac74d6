"""Label-smoothed cross-entropy over real (non-padding) tokens (paper §5.4), and its variant
that averages over the tokens of the global batch under `tf.distribute`.

TensorFlow is imported only inside `GlobalTokenMeanCrossentropy` under `tf.distribute`: this
module is loaded (to register the losses with Keras) on every backend.
"""

import contextlib
import threading

import keras
from keras import ops

from keras_transformer import _backend


def smoothed_cross_entropy_from_logits(logits, labels, label_smoothing):
    """Per-position `-Σ_v q_v log softmax(z)_v` with `q = (1-ε)·onehot(label) + ε/V`.

    Computed as `logsumexp(z) - (1-ε)·z_label - ε·mean(z)`: no log-probabilities or
    one-hot tensor is built. On PyTorch and on TensorFlow outside XLA a fused kernel
    computes the same value from one softmax and writes the gradient `softmax(z) - q`
    itself (`keras_transformer._backend.smoothed_cross_entropy`); under XLA (JAX,
    TensorFlow with `jit_compile`), autodiff of the plain formula is already fused.

    Args:
        logits: float32 `(..., vocab)`.
        labels: int32 `(...)`, valid ids (no ignored class).
        label_smoothing: float ε.

    Returns:
        float32 `(...)`.
    """
    fused = _backend.smoothed_cross_entropy(logits, labels, label_smoothing)
    if fused is not None:
        return fused
    true_logit = _backend.take_last_axis(logits, labels)
    loss = ops.logsumexp(logits, axis=-1) - (1.0 - label_smoothing) * true_logit
    if label_smoothing:
        loss = loss - label_smoothing * ops.mean(logits, axis=-1)
    return loss


@keras.saving.register_keras_serializable(package="keras_transformer")
class LabelSmoothedCrossentropy(keras.losses.Loss):
    """Sparse categorical cross-entropy with label smoothing, ignoring padding.

    The target distribution puts `1 - label_smoothing` on the true token and spreads
    `label_smoothing` uniformly over the whole vocabulary (as Keras'
    `CategoricalCrossentropy(label_smoothing=...)` does). Positions whose target is
    `ignore_class` contribute nothing; the reduced loss is the mean over real tokens,
    computed without building one-hot tensors.

    Args:
        label_smoothing: float in [0, 1). Paper: 0.1. Defaults to `0.1`.
        ignore_class: int or None. Target id to ignore (padding). Defaults to `0`.
        from_logits: bool. `y_pred` are logits (else probabilities). Defaults to `True`.
        reduction: `"sum_over_batch_size"` (mean over real tokens), `"sum"` or `"none"`.
        name: str. Defaults to `"label_smoothed_crossentropy"`.

    Call arguments:
        y_true: int `(batch, length)` target ids.
        y_pred: float `(batch, length, vocab)` logits.
        sample_weight: optional `(batch,)` or `(batch, length)` weights.

    Returns:
        A scalar (per-token losses with `reduction="none"`, 0 at ignored positions).

    Example:

    >>> import numpy as np
    >>> loss = LabelSmoothedCrossentropy(label_smoothing=0.0)
    >>> logits = np.log(np.array([[[0.5, 0.25, 0.25], [0.2, 0.4, 0.4]]], "float32"))
    >>> round(float(loss(np.array([[1, 0]]), logits)), 4)  # only the first token counts
    1.3863

    References:
        Vaswani et al., "Attention Is All You Need", 2017, §5.4; Szegedy et al., 2016.
    """

    def __init__(
        self,
        label_smoothing=0.1,
        ignore_class=0,
        from_logits=True,
        reduction="sum_over_batch_size",
        name="label_smoothed_crossentropy",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(
                f"`label_smoothing` must be in [0, 1). Received: label_smoothing={label_smoothing}"
            )
        if reduction not in ("sum_over_batch_size", "sum", "none"):
            raise ValueError(
                "`reduction` must be 'sum_over_batch_size', 'sum' or 'none'. "
                f"Received: reduction={reduction!r}"
            )
        self.label_smoothing = label_smoothing
        self.ignore_class = ignore_class
        self.from_logits = from_logits

    def call(self, y_true, y_pred):
        """Per-token loss `(batch, length)`, 0 at ignored positions."""
        y_true = ops.cast(y_true, "int32")
        y_pred = ops.cast(y_pred, "float32")
        real = self._real(y_true)
        safe_true = y_true if self.ignore_class is None else ops.where(real, y_true, 0)
        smooth = self.label_smoothing

        if self.from_logits:
            loss = smoothed_cross_entropy_from_logits(y_pred, safe_true, smooth)
        else:  # -Σ q log p with q = (1-ε)·onehot + ε/V
            log_probs = ops.log(ops.clip(y_pred, 1e-7, 1.0))
            true = _backend.take_last_axis(log_probs, safe_true)
            loss = -(1.0 - smooth) * true - smooth * ops.mean(log_probs, axis=-1)
        return ops.where(real, loss, ops.zeros_like(loss))

    def __call__(self, y_true, y_pred, sample_weight=None):
        with keras.name_scope(self.name):
            losses = self.call(y_true, y_pred)  # (batch, length)
            weights = ops.cast(self._real(y_true), "float32")
            if sample_weight is not None:
                sample_weight = ops.cast(sample_weight, "float32")
                while len(sample_weight.shape) < len(weights.shape):
                    sample_weight = sample_weight[..., None]
                weights = weights * sample_weight
                losses = losses * sample_weight
            if self.reduction == "none":
                return losses
            total = ops.sum(losses)
            if self.reduction == "sum":
                return _scale_for_replicas(total)
            return _scale_for_replicas(total / ops.maximum(ops.sum(weights), 1e-9))

    def _real(self, y_true):
        if self.ignore_class is None:
            return ops.ones_like(y_true, dtype="bool")
        return ops.not_equal(y_true, self.ignore_class)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "label_smoothing": self.label_smoothing,
                "ignore_class": self.ignore_class,
                "from_logits": self.from_logits,
            }
        )
        return config


def _scale_for_replicas(value):
    """Divides by the number of replicas inside a `tf.distribute` replica context.

    `tf.distribute` sums the replicas' gradients, so each replica's loss is divided by the
    replica count, as Keras' own losses do: the update is then the mean of the replicas'
    per-token means, and Keras' loss tracker reports the mean. (For the exact mean over
    the global batch's tokens use `keras_transformer.training.GlobalTokenMeanCrossentropy`.)
    """
    context = _backend.replica_context()
    return value if context is None else value / context.num_replicas_in_sync


# Set by the per-replica XLA train step (`training.mirrored`): the global token count,
# computed outside XLA.
_REPLICA_STATE = threading.local()


@contextlib.contextmanager
def global_token_weight(weight):
    """Within this context, `GlobalTokenMeanCrossentropy` divides by `weight` (the token
    count of the global batch, all-reduced by the caller) instead of all-reducing its own."""
    _REPLICA_STATE.global_weight = weight
    try:
        yield
    finally:
        _REPLICA_STATE.global_weight = None


@keras.saving.register_keras_serializable(package="keras_transformer")
class GlobalTokenMeanCrossentropy(LabelSmoothedCrossentropy):
    """`LabelSmoothedCrossentropy` that averages over the real tokens of the global batch.

    Under `tf.distribute` each replica sees a slice of the global batch and the gradients of
    the replicas are summed. Dividing each replica's loss sum by its own token count (what
    the base class does) would weight tokens of short slices more and, summed over `R`
    replicas, make the update `R` times too large. This loss divides each replica's sum by
    the token count of the whole global batch (an all-reduce), so the summed gradient is
    exactly the single-device gradient of the global batch, and Keras' loss tracker (which
    multiplies each replica's value by `R` and averages) reports the global mean. Outside
    `tf.distribute` (and on JAX, whose `DataParallel` computes the loss on the global batch)
    it is the base class.

    Args: as `keras_transformer.LabelSmoothedCrossentropy`.

    Example:

    >>> import numpy as np
    >>> loss = GlobalTokenMeanCrossentropy(label_smoothing=0.0)
    >>> logits = np.log(np.array([[[0.5, 0.25, 0.25], [0.2, 0.4, 0.4]]], "float32"))
    >>> round(float(loss(np.array([[1, 0]]), logits)), 4)
    1.3863
    """

    def __init__(self, name="global_token_mean_crossentropy", **kwargs):
        super().__init__(name=name, **kwargs)

    def __call__(self, y_true, y_pred, sample_weight=None):
        global_weight = getattr(_REPLICA_STATE, "global_weight", None)
        context = _backend.replica_context()
        if self.reduction != "sum_over_batch_size" or (context is None and global_weight is None):
            return super().__call__(y_true, y_pred, sample_weight=sample_weight)
        import tensorflow as tf

        with keras.name_scope(self.name):
            losses = self.call(y_true, y_pred)  # (batch, length), 0 at padding
            if sample_weight is not None:
                losses = losses * _expand_weight(sample_weight, losses)
            if global_weight is None:
                global_weight = context.all_reduce(
                    tf.distribute.ReduceOp.SUM, self.token_weight(y_true, sample_weight)
                )
            global_weight = tf.stop_gradient(global_weight)
            return ops.sum(losses) / ops.maximum(global_weight, 1e-9)

    def token_weight(self, y_true, sample_weight=None):
        """The (sample-weighted) number of real target tokens of this replica's batch."""
        weights = ops.cast(self._real(y_true), "float32")
        if sample_weight is not None:
            weights = weights * _expand_weight(sample_weight, weights)
        return ops.sum(weights)


def _expand_weight(sample_weight, like):
    sample_weight = ops.cast(sample_weight, "float32")
    while len(sample_weight.shape) < len(like.shape):
        sample_weight = sample_weight[..., None]
    return sample_weight
