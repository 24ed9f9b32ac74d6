"""What a training run is built from: its data splits, its `Transformer` and how it is
compiled (the paper's optimizer, label-smoothed loss and a masked accuracy)."""

import keras

from keras_transformer import datasets
from keras_transformer.losses import GlobalTokenMeanCrossentropy, LabelSmoothedCrossentropy
from keras_transformer.metrics import MaskedAccuracy
from keras_transformer.models import Transformer
from keras_transformer.optimizers import transformer_adam
from keras_transformer.training.accumulation import check_strategy
from keras_transformer.training.config import MIXED_PRECISION
from keras_transformer.training.mirrored import enable_replica_jit


def load_splits(data):
    """The `Splits(train, validation, test)` of `(source, target)` strings of a `DataConfig`."""
    options = dict(data.options)
    if data.dataset == "number_words":
        return datasets.number_words(
            num_validation=data.num_validation, num_test=data.num_test, **options
        )
    if data.dataset == "sword_bible":
        return datasets.sword_bible(
            num_validation=data.num_validation, num_test=data.num_test, **options
        )
    pairs = datasets.read_tsv(data.path, **options)
    return datasets.split_pairs(list(pairs), num_validation=data.num_validation, num_test=data.num_test)


def build_model(config, vocabulary_size):
    """The `Transformer` of `config.model` (preset plus overrides), in the mixed-precision
    policy of `config.training`."""
    arguments = config.model.overrides()
    arguments.setdefault("seed", config.training.seed)
    dtype = MIXED_PRECISION[config.training.mixed_precision]
    if dtype:
        arguments["dtype"] = dtype
    if config.model.preset:
        model = Transformer.from_preset(config.model.preset, vocabulary_size=vocabulary_size, **arguments)
    else:
        model = Transformer(vocabulary_size=vocabulary_size, **arguments)
    if dtype and model.dtype_policy.name != dtype:
        # The functional constructor gives the layers the policy but not the model itself,
        # and `compile` looks at the model's to add loss scaling for float16.
        model.dtype_policy = keras.dtype_policies.get(dtype)
    return model


def compile_model(model, config, strategy="none"):
    """Compiles `model` with the paper's optimizer, loss and a masked accuracy metric.

    Under `"mirrored"` the loss is `GlobalTokenMeanCrossentropy` (the mean over the global
    batch's tokens), and `jit_compile=True` compiles each replica's forward and backward pass
    (`enable_replica_jit`) since Keras' whole-step XLA compilation does not work there.

    Args:
        model: `Transformer`.
        config: `TrainingConfig`.
        strategy: str. The `DistributionContext.strategy`. Defaults to `"none"`.
    """
    check_strategy(strategy, config.training.accumulate_steps)
    optimizer_config = config.optimizer
    extra = {"clipnorm": optimizer_config.clipnorm} if optimizer_config.clipnorm else {}
    optimizer = transformer_adam(
        model.d_model,
        warmup_steps=optimizer_config.warmup_steps,
        scale=optimizer_config.learning_rate_scale,
        beta_1=optimizer_config.beta_1,
        beta_2=optimizer_config.beta_2,
        epsilon=optimizer_config.epsilon,
        gradient_accumulation_steps=config.training.accumulate_steps,
        **extra,
    )
    mirrored = strategy == "mirrored"
    loss_class = GlobalTokenMeanCrossentropy if mirrored else LabelSmoothedCrossentropy
    replica_jit = mirrored and config.training.jit_compile is True
    model.compile(
        optimizer=optimizer,
        loss=loss_class(label_smoothing=config.training.label_smoothing),
        metrics=[MaskedAccuracy(name="accuracy")],
        jit_compile=False if replica_jit else config.training.jit_compile,
    )
    if replica_jit:
        enable_replica_jit(model)
