"""`MirroredStrategy` training (TensorFlow): the per-replica XLA train step.

The loss it needs, `keras_transformer.losses.GlobalTokenMeanCrossentropy` (the mean over the
real tokens of the *global* batch), lives with the other losses and is re-exported here for
the callers of 0.2.0. TensorFlow is imported inside the functions that run under
`tf.distribute` only.
"""

import types

import keras

from keras_transformer.losses import GlobalTokenMeanCrossentropy, global_token_weight

__all__ = ["GlobalTokenMeanCrossentropy", "enable_replica_jit"]


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
        with global_token_weight(global_weight), tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self._compute_loss(
                x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True
            )
            scaled_loss = self.optimizer.scale_loss(loss)
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
