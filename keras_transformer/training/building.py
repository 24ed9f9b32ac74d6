"""What a training run is built from: its data splits, its `Transformer` and how it is
compiled (the paper's optimizer, label-smoothed loss and a masked accuracy)."""

import logging

import keras

from keras_transformer import datasets
from keras_transformer.losses import GlobalTokenMeanCrossentropy, LabelSmoothedCrossentropy
from keras_transformer.metrics import MaskedAccuracy
from keras_transformer.models import Transformer
from keras_transformer.optimizers import transformer_adam
from keras_transformer.training.accumulation import check_strategy
from keras_transformer.training.config import MIXED_PRECISION, ConfigError
from keras_transformer.training.mirrored import enable_replica_jit

logger = logging.getLogger("keras_transformer")

# The held-out splits of a corpus when `data.num_validation` / `data.num_test` are unset:
# 5 % of the pairs each, at most the built-in datasets' 1000, at least 1 (`held_out_size`).
HELD_OUT_FRACTION = 0.05
MAX_HELD_OUT = 1000
# The fewest pairs a corpus with unset held-out sizes may have: 1 validation, 1 test and 8
# training pairs.
MIN_PAIRS = 10


def held_out_size(num_pairs):
    """The validation (and test) size of a corpus of `num_pairs` pairs when the config leaves
    it unset: min(1000, 5 % of the pairs), at least 1.

    Example:

    >>> held_out_size(700), held_out_size(2000), held_out_size(100_000), held_out_size(12)
    (35, 100, 1000, 1)
    """
    return min(MAX_HELD_OUT, max(1, int(num_pairs * HELD_OUT_FRACTION)))


def load_splits(data):
    """The `Splits(train, validation, test)` of `(source, target)` strings of a `DataConfig`.

    Raises:
        ConfigError: a TSV without pairs, or too small for its held-out splits, or whose
            every pair is longer than `data.max_length` (one line naming the settings).
    """
    options = dict(data.options)
    if data.dataset in ("number_words", "sword_bible"):
        dataset = datasets.number_words if data.dataset == "number_words" else datasets.sword_bible
        sizes = {
            "num_validation": MAX_HELD_OUT if data.num_validation is None else data.num_validation,
            "num_test": MAX_HELD_OUT if data.num_test is None else data.num_test,
        }
        return dataset(**sizes, **options)
    pairs = list(datasets.read_tsv(data.path, **options))
    num_validation, num_test = check_corpus_size(data, len(pairs), f"data.path={data.path!r}")
    check_lengths(data, pairs, f"data.path={data.path!r}")
    splits = datasets.split_pairs(pairs, num_validation=num_validation, num_test=num_test)
    warn_small_splits(splits, num_validation, num_test)
    if not splits.train:
        raise ConfigError(
            f"No training pairs are left: the {len(pairs)} pairs of {data.path!r} all went to "
            f"validation ({len(splits.validation)}) and test ({len(splits.test)}); lower "
            f"data.num_validation or data.num_test. Received: data.num_validation="
            f"{num_validation}, data.num_test={num_test}"
        )
    return splits


def check_corpus_size(data, num_pairs, corpus):
    """The held-out sizes of a corpus of `num_pairs` pairs (unset ones from `held_out_size`).

    Raises:
        ConfigError: no pairs, fewer than `MIN_PAIRS` with unset sizes, or set sizes that
            leave no training pair; the message names `corpus` and the settings.
    """
    if num_pairs == 0:
        raise ConfigError(
            f"The corpus holds no pairs (an empty file, or only blank lines): give it "
            f"'source<TAB>target' lines. Received: {corpus}"
        )
    unset = data.num_validation is None or data.num_test is None
    if unset and num_pairs < MIN_PAIRS:
        raise ConfigError(
            f"The corpus holds {num_pairs} pairs: a run needs at least {MIN_PAIRS} (a training "
            "split, and data.num_validation and data.num_test held out), or set "
            f"data.num_validation and data.num_test yourself. Received: {corpus}"
        )
    num_validation = held_out_size(num_pairs) if data.num_validation is None else data.num_validation
    num_test = held_out_size(num_pairs) if data.num_test is None else data.num_test
    if num_validation + num_test >= num_pairs:
        suggestion = held_out_size(num_pairs)
        raise ConfigError(
            f"data.num_validation + data.num_test = {num_validation + num_test} leaves no "
            f"training pair of the corpus's {num_pairs} pairs: lower them (e.g. --set "
            f"data.num_validation={suggestion} --set data.num_test={suggestion}), or leave them "
            f"out for min(1000, 5 %) each. Received: data.num_validation={num_validation}, "
            f"data.num_test={num_test}, {corpus}"
        )
    return num_validation, num_test


def check_lengths(data, pairs, corpus):
    """Raises a `ConfigError` when no pair can fit in `data.max_length` tokens.

    Checked before a tokenizer is trained (nothing is written yet), with a bound every
    tokenizer respects: each whitespace-separated word is at least one token, plus
    `[START]` and `[END]`.
    """
    shortest = min(max(len(source.split()), len(target.split())) for source, target in pairs)
    if shortest + 2 > data.max_length:
        raise ConfigError(
            f"Every pair is longer than data.max_length = {data.max_length} tokens (the "
            f"shortest has {shortest} words on one side, i.e. at least {shortest + 2} tokens "
            "with [START] and [END]), so training would drop them all: raise data.max_length. "
            f"Received: data.max_length={data.max_length}, {corpus}"
        )


def warn_small_splits(splits, num_validation, num_test):
    """Logs a warning for each held-out split smaller than asked (pairs sharing a source stay
    in one split, so a corpus of few distinct sources cannot fill them)."""
    for name, asked, split in (
        ("validation", num_validation, splits.validation),
        ("test", num_test, splits.test),
    ):
        if len(split) < asked:
            groups = splits.info.get("num_groups") if splits.info else None
            logger.warning(
                "data: the %s split holds %d pairs, not the %d asked (data.num_%s): pairs "
                "with the same source sentence stay in one split, and the corpus has %s "
                "distinct sources",
                name,
                len(split),
                asked,
                name,
                groups if groups is not None else "few",
            )


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
