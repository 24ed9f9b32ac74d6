"""`MirroredStrategy` training (TensorFlow): the global-token-mean loss and the per-replica XLA step.

The loss is the mean over the real tokens of the *global* batch, so a step under
`tf.distribute.MirroredStrategy` computes the same update as a single-device step on the same
global batch. TensorFlow is imported inside the functions that run under `tf.distribute` only:
this module is loaded (to register the loss with Keras) on every backend.
"""

import threading
import types

import keras
from keras import ops

from keras_transformer import _backend
from keras_transformer.losses import LabelSmoothedCrossentropy

# Set by the per-replica XLA train step: the global token count, computed outside XLA.
_REPLICA_STATE = threading.local()


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


def enable_replica_jit(model):
    """Makes a model compiled under `MirroredStrategy` train with XLA, one program per replica.

    Keras compiles the whole train step with XLA (`jit_compile=True`): forward, backward,
    gradient all-reduce and update. Under `MirroredStrategy` that fails (one trace is shared by
    all replicas, so XLA reads replica 1's variables from replica 0's device, and XLA cannot
    compile the cross-device all-reduce), which is why Keras turns `jit_compile="auto"` off
    under `tf.distribute`. This replaces the model's `train_step` (on this instance only) with
    one that compiles the forward and backward pass with XLA separately on each replica's
    device, and leaves the token count all-reduce, the gradient all-reduce and the optimizer
    update to `tf.distribute`. Compile the model with `jit_compile=False` and a
    `GlobalTokenMeanCrossentropy` loss first.

    Args:
        model: a compiled `keras.Model` (TensorFlow backend).
    """
    if not isinstance(getattr(model, "loss", None), GlobalTokenMeanCrossentropy):
        raise ValueError(
            "enable_replica_jit needs a model compiled with GlobalTokenMeanCrossentropy. "
            f"Received: loss={getattr(model, 'loss', None)!r}"
        )
    model.jit_compile = False
    model.train_step = types.MethodType(_replica_jit_train_step, model)
    model.train_function = None


def _replica_jit_train_step(self, data):
    """`train_step` with the forward and backward pass XLA-compiled on the replica's device."""
    import tensorflow as tf

    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    context = tf.distribute.get_replica_context()
    global_weight = context.all_reduce(
        tf.distribute.ReduceOp.SUM, self.loss.token_weight(y, sample_weight)
    )
    trainable_weights = self.trainable_weights

    def forward_backward(x, y, sample_weight, global_weight):
        _REPLICA_STATE.global_weight = global_weight
        try:
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self._compute_loss(
                    x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True
                )
                scaled_loss = self.optimizer.scale_loss(loss)
        finally:
            _REPLICA_STATE.global_weight = None
        return loss, y_pred, tape.gradient(scaled_loss, trainable_weights)

    # A new function at each trace of the step, i.e. once per replica, traced under that
    # replica's device scope.
    compiled = tf.function(forward_backward, jit_compile=True, autograph=False)
    loss, y_pred, gradients = compiled(x, y, sample_weight, global_weight)
    rows = tf.shape(next(value for value in tf.nest.flatten(x) if value is not None))[0]
    # Keras' loss tracker convention: it averages `replicas * loss` over the replicas.
    self._loss_tracker.update_state(loss * context.num_replicas_in_sync, sample_weight=rows)
    self.optimizer.apply_gradients(zip(gradients, trainable_weights))
    return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)


def _expand_weight(sample_weight, like):
    sample_weight = ops.cast(sample_weight, "float32")
    while len(sample_weight.shape) < len(like.shape):
        sample_weight = sample_weight[..., None]
    return sample_weight
