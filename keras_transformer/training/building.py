"""What a training run is built from: its data splits, its `Transformer` and how it is
compiled (the paper's optimizer, label-smoothed loss and a masked accuracy)."""

import logging
import os

import keras

from keras_transformer import datasets
from keras_transformer.data import make_dataset, make_streaming_dataset
from keras_transformer.datasets.corpus import open_lines
from keras_transformer.losses import GlobalTokenMeanCrossentropy, LabelSmoothedCrossentropy
from keras_transformer.metrics import MaskedAccuracy
from keras_transformer.models import Transformer
from keras_transformer.models.lora import enable_lora
from keras_transformer.optimizers import transformer_adam
from keras_transformer.training.accumulation import check_strategy
from keras_transformer.training.config import MIXED_PRECISION, ConfigError, corpus_list
from keras_transformer.training.mirrored import enable_replica_jit

STREAMING_BYTES = 1 << 30  # `streaming = "auto"` streams corpora larger than this

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


def load_splits(data, work_dir=None, seed=0, progress=None):
    """The `Splits(train, validation, test)` of `(source, target)` strings of a `DataConfig`.

    Unset held-out sizes (`data.num_validation`, `data.num_test`) are 1000 for the built-in
    datasets and `held_out_size(pairs)` for a corpus. `tsv` and `corpus` pairs go through the
    filters (`keras_transformer.datasets.corpus`); `info["filters"]` holds the summary lines. A
    streamed corpus (`info["streaming"]`) has `train = None`: `info["scan"]` (the
    `CorpusScan`) says where its training pairs are, and its keys files are written under
    `work_dir`.

    Args:
        data: `DataConfig`.
        work_dir: str. Where a streamed corpus's keys files go. Defaults to `None` (no
            streaming).
        seed: int. Seed of the tokenizer sample. Defaults to `0`.
        progress: callable, str -> None, for the lines of a long scan. Defaults to `None`.

    Raises:
        ConfigError: a corpus without pairs, or too small for its held-out splits, or whose
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
    if data.dataset == "corpus":
        return _load_corpus(data, work_dir, seed, progress)
    read = list(datasets.read_tsv(data.path, **options))
    corpus = f"data.path={data.path!r}"
    check_corpus_size(data, len(read), corpus)
    check_lengths(data, read, corpus)
    pairs, removed = datasets.filter_pairs(read, data.max_length_ratio, data.remove_duplicates)
    if removed and sum(removed.values()):
        corpus += (
            f" (the filters removed {sum(removed.values())} of its {len(read)} pairs: "
            "data.remove_duplicates, data.max_length_ratio)"
        )
    num_validation, num_test = check_corpus_size(data, len(pairs), corpus)
    splits = datasets.split_pairs(pairs, num_validation=num_validation, num_test=num_test)
    splits.info["filters"] = datasets.filter_summary(removed, len(read), data.max_length_ratio)
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
    corpora = corpus_list(data)
    num_validation, num_test = data.num_validation, data.num_test
    if num_validation is None or num_test is None:  # sized from the corpus's line count
        num_pairs = sum(_count_pairs(corpus) for corpus in corpora)
        num_validation, num_test = check_corpus_size(
            data, num_pairs, f"data: {len(corpora)} corpus file(s)"
        )
    if streaming:
        os.makedirs(work_dir, exist_ok=True)
    scan = datasets.scan_corpora(
        corpora,
        num_validation,
        num_test,
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
            f"the filters, all held out. Received: data.num_validation={num_validation}, "
            f"data.num_test={num_test}"
        )
    splits = scan.splits
    splits.info.update(
        scan=scan,
        streaming=streaming,
        num_train=sum(scan.num_train),
        filters=scan.summary_lines(data.max_length_ratio),
    )
    warn_small_splits(splits, num_validation, num_test)
    return splits


def make_train_data(
    data, splits, tokenizer, tokens_per_batch, seed, target_tokenizer=None, source_start_token=True
):
    """The training stream of `load_splits`'s splits: `make_dataset` (in memory) or
    `make_streaming_dataset`, repeated and seeded (`target_tokenizer`, `source_start_token`:
    as the translator being fine-tuned encodes its text). Returns a `PipelineResult`."""
    arguments = dict(
        target_tokenizer=target_tokenizer,
        source_start_token=source_start_token,
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


def _count_pairs(corpus):
    """The lines of a corpus (a `datasets.Corpus`): of its TSV, or of its aligned files, which
    must have as many (else a `CorpusFormatError` naming both)."""
    if corpus.path:
        return sum(1 for _ in open_lines(corpus.path))
    counts = [sum(1 for _ in open_lines(path)) for path in (corpus.source, corpus.target)]
    if counts[0] != counts[1]:
        raise datasets.CorpusFormatError(
            f"Aligned files differ in length: {corpus.source} has {counts[0]:,} lines, "
            f"{corpus.target} has {counts[1]:,}."
        )
    return counts[0]


# The CPU flags (as Linux's /proc/cpuinfo names them) of instructions that compute bfloat16
# dot products: AVX-512 BF16 (AMD Zen 4 on, Intel Cooper Lake) and AMX (Intel Sapphire Rapids on).
BFLOAT16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
CPU_BFLOAT16_VARIABLE = "KERAS_TRANSFORMER_CPU_BFLOAT16"


def cpu_flags(path="/proc/cpuinfo"):
    """The CPU's feature flags as Linux lists them in `path` (an empty set where there is no
    such file, as on macOS or Windows)."""
    try:
        with open(path) as file:
            for line in file:
                name, _, value = line.partition(":")
                if name.strip() == "flags":
                    return set(value.split())
    except OSError:
        pass
    return set()


def bfloat16_trains_faster():
    """Whether mixed bfloat16 without XLA trains faster than float32 here: the TensorFlow
    backend on a CPU with bfloat16 dot-product instructions (`BFLOAT16_CPU_FLAGS`), no GPU.

    Measured on an AMD EPYC with AVX-512 BF16 (docs/training.md, "Small corpus"): TensorFlow's
    oneDNN kernels multiply bfloat16 at ~2x float32's rate (270-350 against 135-170 GFLOP/s)
    while XLA's CPU kernels do not (106-147), and a step of the small row's Bible model took
    0.49-0.63 s against 0.75-0.78 s for float32 with XLA on one core, with the same
    validation loss at equal steps. Not measured on the JAX or PyTorch backends, nor on
    GPUs, where the config's `mixed_precision` stays the user's choice.

    `KERAS_TRANSFORMER_CPU_BFLOAT16=0` in the environment says no whatever the CPU (the test
    suite sets it: its numbers are float32's), as a config's `mixed_precision = "none"` does.
    """
    if os.environ.get(CPU_BFLOAT16_VARIABLE) == "0":
        return False
    if keras.backend.backend() != "tensorflow" or not cpu_flags() & set(BFLOAT16_CPU_FLAGS):
        return False
    return not has_accelerator()


def has_accelerator():
    """Whether the Keras backend computes on a GPU or TPU rather than the CPU."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf  # The TensorFlow backend: loaded already.

        return bool(tf.config.list_physical_devices("GPU") or tf.config.list_physical_devices("TPU"))
    if backend == "jax":
        import jax

        return jax.default_backend() != "cpu"
    if backend == "torch":
        import torch

        return torch.cuda.is_available()
    return False


def decodes_in_float32(config):
    """Whether the run decodes (validation BLEU, test, the saved translator and SavedModel) with
    a float32 copy of its mixed-precision model: on a CPU, where a 16-bit search is slower than
    a float32 one (XLA's CPU kernels compute bfloat16 through float32; measured: the Bible's
    1,000 test verses in 60.5 s in bf16, 23.5 s in float32, the same BLEU). On a GPU the run
    decodes in its training precision. A LoRA fine-tune (`lora_rank`) keeps its one model."""
    return (
        bool(MIXED_PRECISION[config.training.mixed_precision])
        and not config.training.lora_rank
        and not has_accelerator()
    )


def build_model(config, vocabulary_size):
    """The `Transformer` of `config.model` (preset plus overrides), in the mixed-precision
    policy of `config.training`, with LoRA enabled when `training.lora_rank` says so."""
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
    if config.training.lora_rank:
        # Before `compile_model`: the optimizer then holds state for the LoRA weights only.
        training = config.training
        enable_lora(model, training.lora_rank, training.lora_targets, seed=training.seed)
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
        decay=optimizer_config.decay,
        total_steps=config.training.train_steps,
        # A time budget's end is re-planned while training (`time_limit.DecayPlan`).
        movable_end=bool(config.training.minutes),
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
