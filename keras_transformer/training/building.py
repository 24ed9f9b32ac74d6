"""What a training run is built from: its data splits, its `Transformer` and how it is
compiled (the paper's optimizer, label-smoothed loss and a masked accuracy)."""

import os

import keras

from keras_transformer import datasets
from keras_transformer.data import make_dataset, make_streaming_dataset
from keras_transformer.losses import GlobalTokenMeanCrossentropy, LabelSmoothedCrossentropy
from keras_transformer.metrics import MaskedAccuracy
from keras_transformer.models import Transformer
from keras_transformer.optimizers import transformer_adam
from keras_transformer.training.accumulation import check_strategy
from keras_transformer.training.config import MIXED_PRECISION, ConfigError, corpus_list
from keras_transformer.training.mirrored import enable_replica_jit

STREAMING_BYTES = 1 << 30  # `streaming = "auto"` streams corpora larger than this


def load_splits(data, work_dir=None, seed=0, progress=None):
    """The `Splits(train, validation, test)` of `(source, target)` strings of a `DataConfig`.

    `tsv` and `corpus` pairs go through the filters (`keras_transformer.datasets.corpus`);
    `info["filters"]` holds the summary lines. A streamed corpus (`info["streaming"]`) has
    `train = None`: `info["scan"]` (the `CorpusScan`) says where its training pairs are, and
    its keys files are written under `work_dir`.

    Args:
        data: `DataConfig`.
        work_dir: str. Where a streamed corpus's keys files go. Defaults to `None` (no
            streaming).
        seed: int. Seed of the tokenizer sample. Defaults to `0`.
        progress: callable, str -> None, for the lines of a long scan. Defaults to `None`.
    """
    options = dict(data.options)
    if data.dataset == "corpus":
        return _load_corpus(data, work_dir, seed, progress)
    if data.dataset == "number_words":
        return datasets.number_words(
            num_validation=data.num_validation, num_test=data.num_test, **options
        )
    if data.dataset == "sword_bible":
        return datasets.sword_bible(
            num_validation=data.num_validation, num_test=data.num_test, **options
        )
    pairs = datasets.read_tsv(data.path, **options)
    pairs, removed = datasets.filter_pairs(pairs, data.max_length_ratio, data.remove_duplicates)
    splits = datasets.split_pairs(pairs, num_validation=data.num_validation, num_test=data.num_test)
    splits.info["filters"] = datasets.filter_summary(
        removed, len(pairs) + sum(removed.values()), data.max_length_ratio
    )
    return splits


def is_streaming(data):
    """Whether a `DataConfig` trains from a stream (`data.streaming`, or `"auto"`)."""
    if data.dataset != "corpus" or data.streaming is False:
        return False
    if data.streaming is True or len(data.corpora) > 1:
        return True
    files = [path for corpus in corpus_list(data) for path in corpus.files]
    return sum(os.path.getsize(path) for path in files if os.path.exists(path)) > STREAMING_BYTES


def _load_corpus(data, work_dir, seed, progress):
    streaming = is_streaming(data)
    if streaming and work_dir is None:
        raise ValueError("Streaming a corpus needs `work_dir`. Received: work_dir=None")
    if streaming:
        os.makedirs(work_dir, exist_ok=True)
    scan = datasets.scan_corpora(
        corpus_list(data),
        data.num_validation,
        data.num_test,
        max_length_ratio=data.max_length_ratio,
        remove_duplicates=data.remove_duplicates,
        sample_size=data.tokenizer_sample,
        seed=seed,
        keep_train=not streaming,
        keys_dir=work_dir if streaming else None,
        progress=progress,
    )
    if not sum(scan.num_train):
        raise ConfigError(
            f"No training pairs left: the corpus has {scan.splits.info['num_pairs']} pairs after "
            f"the filters, all held out. Received: data.num_validation={data.num_validation}, "
            f"data.num_test={data.num_test}"
        )
    splits = scan.splits
    splits.info.update(
        scan=scan,
        streaming=streaming,
        num_train=sum(scan.num_train),
        filters=scan.summary_lines(data.max_length_ratio),
    )
    return splits


def make_train_data(data, splits, tokenizer, tokens_per_batch, seed):
    """The training stream of `load_splits`'s splits: `make_dataset` (in memory) or
    `make_streaming_dataset`, repeated and seeded. Returns a `PipelineResult`."""
    arguments = dict(
        tokens_per_batch=tokens_per_batch,
        max_length=data.max_length,
        seed=seed,
        bucket_boundaries=data.bucket_boundaries or None,
        repeat=True,
    )
    if not splits.info.get("streaming"):
        return make_dataset(splits.train, tokenizer, shuffle=True, **arguments)
    scan = splits.info["scan"]
    return make_streaming_dataset(
        corpus_list(data),
        scan.keys_paths,
        scan.threshold,
        tokenizer,
        shuffle_buffer=data.shuffle_buffer,
        num_examples=sum(scan.num_train),
        sample=scan.tokenizer_sample,
        **arguments,
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
        model = Transformer.from_preset(
            config.model.preset, vocabulary_size=vocabulary_size, **arguments
        )
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
