"""The training configuration: one dataclass per section of a TOML or YAML file.

Every field has a default, and the defaults are the paper's recipe (Vaswani et al., 2017, §5)
but for two that fit the data: the model is the small `tiny` preset unless `model.preset`
says `"base"` (the paper's: 6 layers, d_model 512, 8 heads, d_ff 2048, dropout 0.1), and a
TSV's held-out splits are 5 % of its pairs each (at most 1000) unless set. The rest: a
shared source-target vocabulary with tied embeddings, Adam with β1 = 0.9, β2 = 0.98, ε = 1e-9, the warm-up schedule
with 4000 warm-up steps, label smoothing 0.1, batches of about 25,000 source and 25,000 target
tokens, 100,000 steps, the average of the last 5 checkpoints, and beam search with beam size 4
and length penalty 0.6. A file only lists what differs, e.g.:

```toml
output_dir = "runs/demo"

[data]
dataset = "number_words"
vocabulary_size = 1000

[model]
preset = "tiny"

[training]
train_steps = 2000
```

Pure Python: importing this module imports neither Keras nor TensorFlow.
"""

import dataclasses
import inspect
import json
import os
import tomllib
import types

from keras_transformer import datasets
from keras_transformer._checks import is_int, is_number
from keras_transformer.buckets import check_bucket_boundaries
from keras_transformer.hyperparameters import PRESETS as MODEL_PRESETS
from keras_transformer.hyperparameters import (
    TRANSFORMER_ARGUMENTS,
    lora_targets,
    validate_transformer_args,
)

DATASETS = ("number_words", "sword_bible", "tsv", "corpus")
TOKENIZERS = ("wordpiece", "sentencepiece")
MIXED_PRECISION = {"": None, "none": None, "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
STRATEGIES = ("auto", "none", "mirrored", "data_parallel")
# `optimizer.decay`: the learning rate after the warm-up.
DECAYS = ("inverse_sqrt", "linear")
# The validation metrics `training.keep_best` can watch, and whether larger is better.
BEST_MONITORS = {"val_bleu": "max", "val_loss": "min", "val_accuracy": "max"}
# The keyword arguments of each dataset function that the trainer sets itself.
DATASET_ARGUMENTS = {
    "number_words": ("num_validation", "num_test"),
    "sword_bible": ("num_validation", "num_test"),
    "tsv": ("path",),
    "corpus": (),
}
# The `[data]` settings of `dataset = "corpus"`: given without `dataset`, they select it.
CORPUS_SETTINGS = ("source", "target", "corpora")


class ConfigError(ValueError):
    """An invalid training setting or config file.

    The message is one line naming the setting (`section.key`) and the received value, and
    the file when the setting was read from one: the `keras-transformer` command prints it
    as it is, without a traceback.
    """


@dataclasses.dataclass
class DataConfig:
    """`[data]`: the corpus, the tokenizer and the batches.

    Args:
        dataset: str. `"number_words"` (Spanish -> English number names, embedded, see
            `keras_transformer.datasets.number_words`), `"sword_bible"` (the verse-aligned
            Reina-Valera 1909 / World English Bible), `"tsv"` (your own `source<TAB>target`
            file, read in memory and split with `keras_transformer.datasets.split_pairs`),
            `"corpus"` (your own corpora as they come: `source` and `target`, or `corpora`;
            chosen when one of them is set and `dataset` is not). Defaults to
            `"number_words"`.
        path: str. The TSV file, for `dataset = "tsv"`. Defaults to `""`.
        source: str. `dataset = "corpus"`: the source file, one sentence per line, aligned
            line by line with `target` (`.gz` files are decompressed). Defaults to `""`.
        target: str. The target file of `source`. Defaults to `""`.
        corpora: list of tables. `dataset = "corpus"`: several corpora, each
            `{source = "...", target = "...", weight = 1.0}` or `{path = "x.tsv", weight = 1.0}`
            (a `source<TAB>target` file); training draws from them in proportion to their
            weights (streaming). Defaults to `[]`.
        streaming: bool or `"auto"`. `dataset = "corpus"`: stream the training pairs from the
            files through `tf.data` (bounded memory, for corpora larger than memory) instead of
            reading them into memory; `"auto"` streams when `corpora` lists several corpora or
            the files hold more than 1 GiB. Both give the same pairs and held-out splits.
            Defaults to `"auto"`.
        max_length_ratio: float. Filter (`tsv` and `corpus`): remove a pair whose one side has
            more than this many times the words (whitespace-separated) of the other; `0` is
            off (for scripts written without spaces, e.g. Chinese or Japanese, set `0`).
            Pairs with an empty or whitespace-only side are always removed, and each filter's
            count is reported. Defaults to `3.0`.
        remove_duplicates: bool. Filter (`tsv` and `corpus`): remove exact duplicates of an
            earlier pair. Defaults to `True`.
        tokenizer_sample: int. Streaming: the tokenizer learns from a uniform sample of at
            most this many training pairs. Defaults to `200000`.
        shuffle_buffer: int. Streaming: pairs in the shuffle buffer (its memory bound).
            Defaults to `100000`.
        options: dict. Extra keyword arguments of the dataset function (e.g. `num_train`,
            `max_number` or `source_lang` of `number_words`; `source` and `target` module
            names of `sword_bible`; `source_column`, `target_column`, `num_columns` of
            `read_tsv`). Defaults to `{}`.
        num_validation: int. Validation pairs (BLEU during training). Defaults to `None`:
            1000 for the built-in datasets; for a TSV, `held_out_size(pairs)`:
            min(1000, 5 % of the pairs), at least 1 (a 700-pair file holds out 35).
        num_test: int. Test pairs (the final evaluation). Defaults to `None`: as
            `num_validation`.
        tokenizer: str. `"wordpiece"` (`keras_transformer.text.train_tokenizer`) or
            `"sentencepiece"` (`keras_transformer.text.train_sentencepiece`, a unigram model by
            default; needs the `sentencepiece` package). Defaults to `"wordpiece"`.
        sentencepiece_model: str. With `tokenizer = "sentencepiece"`: the path of an existing
            `.model` file to use instead of training one (`vocabulary_size` is then the
            model's). Defaults to `""`.
        sentencepiece_options: dict. Extra keyword arguments of `train_sentencepiece`
            (`model_type = "bpe"`, `max_sentences`, `character_coverage`, ...). Defaults to
            `{}`.
        vocabulary_size: int. Size of the shared vocabulary, trained on both sides of the
            training pairs (paper: a shared vocabulary of about 37,000 tokens).
            Defaults to `37000`.
        lowercase: bool. Lower-case the text before tokenizing. Defaults to `False`.
        max_length: int. Longest kept sequence in tokens, `[START]`/`[END]` included; longer
            training pairs are dropped (and counted). Defaults to `128`.
        tokens_per_batch: int. Padded positions per side and batch (paper: batches of about
            25,000 source and 25,000 target tokens). The global batch: it is split across
            replicas and processes. Defaults to `25000`.
        bucket_boundaries: list of int. Padded lengths of the length buckets; each is one
            batch shape (one compilation). Defaults to `[]`:
            `keras_transformer.data.default_bucket_boundaries(max_length)`.
    """

    dataset: str = "number_words"
    path: str = ""
    source: str = ""
    target: str = ""
    corpora: list = dataclasses.field(default_factory=list)
    streaming: bool | str = "auto"
    max_length_ratio: float = 3.0
    remove_duplicates: bool = True
    tokenizer_sample: int = 200000
    shuffle_buffer: int = 100000
    options: dict = dataclasses.field(default_factory=dict)
    num_validation: int | None = None
    num_test: int | None = None
    tokenizer: str = "wordpiece"
    sentencepiece_model: str = ""
    sentencepiece_options: dict = dataclasses.field(default_factory=dict)
    vocabulary_size: int = 37000
    lowercase: bool = False
    max_length: int = 128
    tokens_per_batch: int = 25000
    bucket_boundaries: list = dataclasses.field(default_factory=list)


# `Transformer` arguments that a run sets from other settings, and where.
MODEL_ARGUMENTS_SET_ELSEWHERE = {
    "vocabulary_size": "data.vocabulary_size",
    "target_vocabulary_size": "data.vocabulary_size",  # One shared vocabulary.
    "seed": "training.seed",
}

# One field per `Transformer` argument that `[model]` sets, unset (`None`) by default: the
# names are the model's own checks' (`hyperparameters.TRANSFORMER_ARGUMENTS`), and so are
# the checks of their values (`validate`); nothing about them is declared here.
_TransformerArguments = dataclasses.make_dataclass(
    "_TransformerArguments",
    [
        (name, object, dataclasses.field(default=None))
        for name in TRANSFORMER_ARGUMENTS
        if name not in MODEL_ARGUMENTS_SET_ELSEWHERE
    ],
)


@dataclasses.dataclass
class ModelConfig(_TransformerArguments):
    """`[model]`: the Transformer, as a preset and any of its constructor arguments.

    Besides `preset`, the keys are the arguments of `keras_transformer.Transformer`, with its
    meanings (`num_layers`, `num_decoder_layers`, `d_model`, `num_heads`, `ff_dim`,
    `dropout`, `attention_dropout`, `activation`, `norm_first`, `share_embeddings`,
    `layer_norm_epsilon`, and any argument it gains), except `vocabulary_size` and
    `target_vocabulary_size` (the trained tokenizer's, see `data.vocabulary_size`) and `seed`
    (`training.seed`). An argument left out takes the preset's value, else the `Transformer`
    default; the values are checked by the `Transformer`'s own checks, preset values
    included.

    Args:
        preset: str. `"tiny"`, `"base"` or `"big"` (paper Table 3), or `""` for the
            `Transformer` defaults (the base model's sizes) and explicit arguments only.
            Defaults to `"tiny"` (2 layers, d_model 64: trains on a CPU in minutes); the
            paper's recipe is `"base"`.
    """

    preset: str = "tiny"

    def overrides(self):
        """The constructor arguments of `Transformer` set in this section (`None`s left out)."""
        return {
            field.name: getattr(self, field.name)
            for field in dataclasses.fields(self)
            if field.name != "preset" and getattr(self, field.name) is not None
        }


@dataclasses.dataclass
class OptimizerConfig:
    """`[optimizer]`: Adam and the learning-rate schedule (paper §5.3).

    `lr = learning_rate_scale · d_model^-0.5 · min(step^-0.5, step · warmup_steps^-1.5)`.

    Args:
        beta_1: float. Defaults to `0.9`.
        beta_2: float. Defaults to `0.98`.
        epsilon: float. Defaults to `1e-9`.
        warmup_steps: int. Defaults to `4000`.
        learning_rate_scale: float. Multiplier of the schedule. Defaults to `1.0`.
        clipnorm: float. Clip each gradient to this norm; `0` does not clip (the paper does
            not). Defaults to `0.0`.
        decay: str. After the warm-up: `"inverse_sqrt"` (the paper's `step^-0.5`) or
            `"linear"`, a straight line from the same peak to zero at the run's last step:
            `training.train_steps`, or with a time budget the step where the time runs out,
            planned again at each epoch's start from the step rate measured
            (`training.time_limit.DecayPlan`). Defaults to `"inverse_sqrt"`.
    """

    beta_1: float = 0.9
    beta_2: float = 0.98
    epsilon: float = 1e-9
    warmup_steps: int = 4000
    learning_rate_scale: float = 1.0
    clipnorm: float = 0.0
    decay: str = "inverse_sqrt"


@dataclasses.dataclass
class TrainingSection:
    """`[training]`: the loop, its budget, checkpoints and fault tolerance.

    Args:
        train_steps: int. Optimizer steps in all (paper base: 100,000). Defaults to `100000`.
        steps_per_epoch: int. Steps between end-of-epoch work (validation loss, BLEU,
            TensorBoard); `0` means one pass over the training data, at least 100 steps. The last epoch is
            shortened so that the total is exactly `train_steps`. Defaults to `0`.
        minutes: float. Time budget in minutes, counted from the start of `train` (data and
            tokenizer included); when it is spent, training stops after the current step and
            the run ends normally (final checkpoint, averaging, evaluation, export), keeping
            the backup so that running the same command again continues. `0` is no limit.
            Defaults to `0`.
        label_smoothing: float. Label smoothing of the loss (paper: 0.1). Defaults to `0.1`.
        mixed_precision: str. `""` (float32), `"bf16"` (`mixed_bfloat16`) or `"fp16"`
            (`mixed_float16`, with dynamic loss scaling). Logits and loss stay float32.
            Defaults to `""`.
        jit_compile: bool or `"auto"`. XLA-compile the train step (`"auto"` is Keras'
            choice: on for JAX, off for TensorFlow on CPU and under `tf.distribute`, off for
            PyTorch). Defaults to `"auto"`.
        seed: int. Seeds weights, dropout and the data order. Defaults to `0`.
        checkpoint_every: int. Steps between kept checkpoints (`checkpoints/ckpt-STEP.weights.h5`);
            `0` writes one at the end of each epoch. A last one is written when training
            stops. Defaults to `0`.
        average_checkpoints: int. Average the weights of the last N checkpoints into the final
            model (paper: 5); `1` keeps the last weights. Older checkpoints are deleted.
            Defaults to `5`.
        backup_every: int. Steps between backups of the whole training state (weights,
            optimizer, step) for `kill -9` recovery; the same command resumes from the last
            one. Defaults to `100`.
        tensorboard: bool. Write TensorBoard logs to `OUTPUT_DIR/logs`. Defaults to `True`.
        init_from: str. Fine-tune: start from this trained translator (a `translator.keras`
            file, a directory holding one, or a preset directory), taking its tokenizer and,
            on a fresh start, its weights; the optimizer starts fresh. `[model]` must
            describe its architecture. See `keras_transformer.training.fine_tune`. Defaults
            to `""` (train from scratch).
        lora_rank: int. With `init_from`: fine-tune with LoRA of this rank on the attention's
            query and value projections, every other weight frozen; checkpoints and backups
            hold the frozen weights too, and the translator the run writes has LoRA merged
            (`keras_transformer.models.lora`). `0` trains every weight. Defaults to `0`.
        lora_targets: str or list of str. With `lora_rank`: the projections LoRA adapts,
            `"qv"` (the attention's query and value), `"all"` (every attention and
            feed-forward projection) or a list of names among `"query"`, `"key"`, `"value"`,
            `"attention_output"`, `"inner"`, `"output"`. Defaults to `"qv"`.
        keep_best: str. Also export the translator at its best validation score to
            `OUTPUT_DIR/best/`: `"val_bleu"`, `"val_loss"` or `"val_accuracy"`. See
            `keras_transformer.training.best`. Defaults to `""` (off).
        early_stopping_patience: int. Stop after this many validations of `keep_best`
            without improvement; the run then ends as if it had made its last step. `0`
            never stops early. Defaults to `0`.
        accumulate_steps: int. Gradient accumulation: each optimizer step averages the
            gradients of this many micro-batches of `data.tokens_per_batch / accumulate_steps`
            positions (the paper's 25,000-token batches on one small accelerator). Every
            count above (`train_steps`, `steps_per_epoch`, `checkpoint_every`,
            `backup_every`, `evaluation.bleu_every`), the learning-rate schedule, the
            checkpoint names and TensorBoard's step are optimizer steps
            (`keras_transformer.training.accumulation`). Defaults to `1`.
    """

    train_steps: int = 100000
    steps_per_epoch: int = 0
    minutes: float = 0.0
    label_smoothing: float = 0.1
    mixed_precision: str = ""
    jit_compile: bool | str = "auto"
    seed: int = 0
    checkpoint_every: int = 0
    average_checkpoints: int = 5
    backup_every: int = 100
    tensorboard: bool = True
    init_from: str = ""
    lora_rank: int = 0
    lora_targets: str | list = "qv"
    keep_best: str = ""
    early_stopping_patience: int = 0
    accumulate_steps: int = 1


@dataclasses.dataclass
class EvaluationConfig:
    """`[evaluation]`: BLEU during training, the final test, and the sample translations.

    Args:
        beam_size: int. Beam size (paper: 4). Defaults to `4`.
        alpha: float. Length penalty (paper: 0.6). Defaults to `0.6`.
        alphas: list of float. Length penalties to try on the validation split once training
            (and checkpoint averaging) ends, as the paper chose its alpha "after
            experimentation on the development set": the one with the highest BLEU there
            becomes the translator's `alpha` (saved with it, used for the test split and the
            exports). Tried in increasing order, stopping after two in a row below the best.
            Costs one beam search of the validation split per length penalty tried. Defaults
            to `[]`: `alpha`, untuned (the recipe sets them, `recipe.ALPHAS`).
        extra_length: int. Translations have at most source length + this many tokens (paper:
            50). Defaults to `50`.
        bleu_every: int. Steps between validation BLEU evaluations; `0` evaluates at the end of
            each epoch; `-1` never. Defaults to `0`.
        bleu_sentences: int. Validation sentences decoded for BLEU during training; `0` is all.
            Defaults to `0`.
        batch_size: int. Sentences decoded together. Defaults to `64`.
        test: bool. At the end, translate the test split and report corpus BLEU (sacrebleu)
            and exact match. Defaults to `True`.
        samples: list of str. Sentences translated at the end, by the exported SavedModel
            (by the trained Translator when `export.saved_model` is off and `test` on), each checked against
            its reference: the run says how many it got right. Defaults to `[]`: the first
            `num_samples` test sources.
        sample_references: dict. The reference translation of a sample, by its source
            (`{"cuarenta y dos": "forty-two"}`; a TOML table `[evaluation.sample_references]`).
            Defaults to `{}`. A sample not in it takes its reference from the run's splits
            (one found in none is translated, not checked).
        num_samples: int. Defaults to `5`.
        target_exact_match: float. The run's goal, a test exact match in [0, 1]: the last line
            says whether the run reached it, and a run the time budget stopped short of it
            says how to continue. Defaults to `0`: no goal.
    """

    beam_size: int = 4
    alpha: float = 0.6
    alphas: list = dataclasses.field(default_factory=list)
    extra_length: int = 50
    bleu_every: int = 0
    bleu_sentences: int = 0
    batch_size: int = 64
    test: bool = True
    samples: list = dataclasses.field(default_factory=list)
    sample_references: dict = dataclasses.field(default_factory=dict)
    num_samples: int = 5
    target_exact_match: float = 0.0


@dataclasses.dataclass
class ExportConfig:
    """`[export]`: what the end of the run writes (atomically) under the output directory.

    Args:
        translator: bool. `translator.keras`, the `Translator` (model, tokenizer, search
            settings) for `Translator.load`. Defaults to `True`.
        saved_model: bool. `saved_model/`, a TensorFlow SavedModel serving strings to strings
            (`keras_transformer.export.export_saved_model`). Defaults to `True`.
    """

    translator: bool = True
    saved_model: bool = True


@dataclasses.dataclass
class DistributionConfig:
    """`[distribution]`: data parallelism (see `docs/training.md`).

    Args:
        strategy: str. `"auto"` (a `MirroredStrategy` on TensorFlow or `DataParallel` on JAX
            when there is more than one device or process, else none), `"none"`,
            `"mirrored"` (TensorFlow `tf.distribute.MirroredStrategy`, one process, several
            devices) or `"data_parallel"` (JAX `keras.distribution.DataParallel`, one or more
            processes). Defaults to `"auto"`.
        devices: list of str. Devices to use (e.g. `["/gpu:0", "/gpu:1"]` or, for JAX,
            `["cpu:0", "cpu:1"]`); `[]` is all of them. Defaults to `[]`.
        cpu_devices: int. Split the CPU into this many logical devices (to try data
            parallelism without accelerators); `0` leaves it alone. Must be set before the
            backend initializes its devices. Defaults to `0`.
        coordinator_address: str. JAX multi-process: `"host:port"` of process 0, as
            `jax.distributed.initialize` expects. Defaults to `""` (one process).
        num_processes: int. JAX multi-process: number of processes. Defaults to `1`.
        process_id: int. JAX multi-process: this process's rank, `0 .. num_processes - 1`.
            Defaults to `0`.
        initialization_timeout: int. Seconds to wait for the other processes. Defaults to
            `300`.
        cpu_collectives: str. JAX CPU collectives between processes (`"gloo"`; `""` leaves
            JAX's default). Defaults to `"gloo"`.
    """

    strategy: str = "auto"
    devices: list = dataclasses.field(default_factory=list)
    cpu_devices: int = 0
    coordinator_address: str = ""
    num_processes: int = 1
    process_id: int = 0
    initialization_timeout: int = 300
    cpu_collectives: str = "gloo"


SECTIONS = {
    "data": DataConfig,
    "model": ModelConfig,
    "optimizer": OptimizerConfig,
    "training": TrainingSection,
    "evaluation": EvaluationConfig,
    "export": ExportConfig,
    "distribution": DistributionConfig,
}


@dataclasses.dataclass
class TrainingConfig:
    """The whole configuration of `keras_transformer.training.train`.

    Top-level fields plus one section per table of the file. Unknown keys raise a
    `ValueError`. A config that gives a budget (`training.minutes` or `training.train_steps`)
    and leaves the model, vocabulary, batch, warm-up or checkpoint spacing unset gets them
    from the corpus size when the run starts (`keras_transformer.training.recipe`); `given`
    holds the keys the file, dict or `replace` named, so that a setting named at its
    default value still counts as set (`is_set`).

    Args:
        output_dir: str. Where the run writes everything (see `docs/training.md`). Defaults to
            `"runs/transformer"`.
        data: `DataConfig`. The `[data]` table.
        model: `ModelConfig`. The `[model]` table.
        optimizer: `OptimizerConfig`. The `[optimizer]` table.
        training: `TrainingSection`. The `[training]` table.
        evaluation: `EvaluationConfig`. The `[evaluation]` table.
        export: `ExportConfig`. The `[export]` table.
        distribution: `DistributionConfig`. The `[distribution]` table.

    Example:

    >>> config = TrainingConfig.from_dict({"model": {"preset": "tiny"}})
    >>> config.model.preset, config.optimizer.beta_2, config.training.label_smoothing
    ('tiny', 0.98, 0.1)
    """

    output_dir: str = "runs/transformer"
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    training: TrainingSection = dataclasses.field(default_factory=TrainingSection)
    evaluation: EvaluationConfig = dataclasses.field(default_factory=EvaluationConfig)
    export: ExportConfig = dataclasses.field(default_factory=ExportConfig)
    distribution: DistributionConfig = dataclasses.field(default_factory=DistributionConfig)

    # The `section.field` (and top-level) keys the file, dict or `replace` named: a setting
    # named there is explicit even when it holds its default (`is_set`). Not a field.
    given = frozenset()

    @classmethod
    def from_dict(cls, values):
        """Builds a validated config from nested dicts (as parsed from TOML or YAML).

        Args:
            values: dict. Top-level keys and one dict per section.

        Returns:
            A `TrainingConfig`.
        """
        if not isinstance(values, dict):
            raise ConfigError(f"A config must be a table of sections. Received: {values!r}")
        values = dict(values)
        sections, named = {}, set()
        for name, section_class in SECTIONS.items():
            section_values = values.pop(name, None) or {}
            if not isinstance(section_values, dict):
                raise ConfigError(
                    f"`{name}` must be a table of settings. Received: {name}={section_values!r}"
                )
            known = {field.name for field in dataclasses.fields(section_class)}
            if name == "model":
                _check_arguments_set_elsewhere(section_values)
            if name == "data" and "dataset" not in section_values and any(
                section_values.get(key) for key in CORPUS_SETTINGS
            ):
                section_values = {**section_values, "dataset": "corpus"}
            unknown = sorted(set(section_values) - known)
            if unknown:
                raise ConfigError(
                    f"Unknown setting(s) {unknown} in [{name}]; known: {sorted(known)}. "
                    f"Received: {name}={section_values!r}"
                )
            sections[name] = section_class(**section_values)
            named.update(f"{name}.{key}" for key in section_values)
        known = {field.name for field in dataclasses.fields(cls)} - set(SECTIONS)
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(
                f"Unknown top-level setting(s) or section(s) {unknown}; known: "
                f"{sorted(known | set(SECTIONS))}. Received: {unknown[0]}={values[unknown[0]]!r}"
            )
        config = cls(**values, **sections)
        config.validate()
        config.given = frozenset(named | set(values))
        return config

    def to_dict(self):
        """The config as nested plain dicts (JSON-serializable)."""
        return dataclasses.asdict(self)

    def replace(self, **changes):
        """A copy with `section.field` (or top-level) values changed, validated.

        Args:
            **changes: `"training.minutes": 5`-style keys (pass them as `**{...}`) or top-level
                names such as `output_dir`.

        Returns:
            A new `TrainingConfig`.
        """
        values = self.to_dict()
        for key, value in changes.items():
            set_dotted(values, key, value)
        config = TrainingConfig.from_dict(values)
        config.given = self.given | set(changes)
        return config

    def is_set(self, key):
        """Whether the setting `key` (`"section.field"`) is explicit: named by the file, dict
        or `replace` this config came from, or holding a value other than its default.

        Example:

        >>> config = TrainingConfig.from_dict({"data": {"vocabulary_size": 37000}})
        >>> config.is_set("data.vocabulary_size"), config.is_set("data.tokens_per_batch")
        (True, False)
        """
        section, _, name = key.rpartition(".")
        owner = getattr(self, section) if section else self
        default = next(field for field in dataclasses.fields(owner) if field.name == name)
        value = default.default_factory() if default.default is dataclasses.MISSING else default.default
        return key in self.given or getattr(owner, name) != value

    def validate(self):
        """Raises `ConfigError` (a `ValueError`) naming the first invalid setting.

        Every setting is checked against its type first, then its value; `[model]` with the
        checks of the `Transformer` constructor (preset values included) and
        `data.options` against the dataset function's signature. Nothing is built and no
        framework is imported: only a Keras activation name is left for Keras to check.
        """
        _check_types("", self)
        data, model, training = self.data, self.model, self.training
        evaluation, distribution = self.evaluation, self.distribution
        _check_choice("data.dataset", data.dataset, DATASETS)
        _check_choice("data.tokenizer", data.tokenizer, TOKENIZERS)
        if (data.sentencepiece_model or data.sentencepiece_options) and data.tokenizer != "sentencepiece":
            raise ConfigError(
                "`data.sentencepiece_model` and `data.sentencepiece_options` need "
                f"`data.tokenizer = 'sentencepiece'`. Received: data.tokenizer={data.tokenizer!r}"
            )
        if data.dataset == "tsv" and not data.path:
            raise ConfigError(f"`data.path` is required with dataset='tsv'. Received: data.path={data.path!r}")
        _check_corpus(data)
        _check_choice("model.preset", model.preset, ("", *MODEL_PRESETS))
        _check_choice("training.mixed_precision", training.mixed_precision, tuple(MIXED_PRECISION))
        _check_choice("distribution.strategy", distribution.strategy, STRATEGIES)
        _check_choice("optimizer.decay", self.optimizer.decay, DECAYS)
        if training.jit_compile not in (True, False, "auto"):
            raise ConfigError(
                "`training.jit_compile` must be true, false or 'auto'. "
                f"Received: training.jit_compile={training.jit_compile!r}"
            )
        for name, value, minimum in (
            ("data.num_validation", data.num_validation, 0),
            ("data.num_test", data.num_test, 0),
            ("data.vocabulary_size", data.vocabulary_size, 8),
            ("data.max_length", data.max_length, 3),
            ("data.tokenizer_sample", data.tokenizer_sample, 1),
            ("data.shuffle_buffer", data.shuffle_buffer, 0),
            ("data.tokens_per_batch", data.tokens_per_batch, data.max_length),
            ("optimizer.warmup_steps", self.optimizer.warmup_steps, 1),
            ("training.train_steps", training.train_steps, 1),
            ("training.steps_per_epoch", training.steps_per_epoch, 0),
            ("training.checkpoint_every", training.checkpoint_every, 0),
            ("training.average_checkpoints", training.average_checkpoints, 1),
            ("training.backup_every", training.backup_every, 1),
            ("training.early_stopping_patience", training.early_stopping_patience, 0),
            ("training.accumulate_steps", training.accumulate_steps, 1),
            ("training.lora_rank", training.lora_rank, 0),
            ("evaluation.beam_size", evaluation.beam_size, 1),
            ("evaluation.extra_length", evaluation.extra_length, 1),
            ("evaluation.batch_size", evaluation.batch_size, 1),
            ("evaluation.bleu_every", evaluation.bleu_every, -1),
            ("evaluation.bleu_sentences", evaluation.bleu_sentences, 0),
            ("evaluation.num_samples", evaluation.num_samples, 0),
            ("distribution.cpu_devices", distribution.cpu_devices, 0),
            ("distribution.num_processes", distribution.num_processes, 1),
            ("distribution.process_id", distribution.process_id, 0),
            ("distribution.initialization_timeout", distribution.initialization_timeout, 1),
        ):
            if value is None and name in ("data.num_validation", "data.num_test"):
                continue  # Unset: sized from the corpus (`held_out_size`).
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ConfigError(f"`{name}` must be an int >= {minimum}. Received: {name}={value!r}")
        if self.optimizer.decay == "linear" and self.optimizer.warmup_steps >= training.train_steps:
            raise ConfigError(
                "`optimizer.decay = 'linear'` falls to zero at the run's last step, after the "
                "warm-up: `optimizer.warmup_steps` must be < `training.train_steps`. Received: "
                f"optimizer.warmup_steps={self.optimizer.warmup_steps}, "
                f"training.train_steps={training.train_steps}"
            )
        if data.tokens_per_batch // training.accumulate_steps < data.max_length:
            raise ConfigError(
                "`data.tokens_per_batch` / `training.accumulate_steps` (the micro-batch) must "
                f"be >= data.max_length ({data.max_length}). Received: "
                f"data.tokens_per_batch={data.tokens_per_batch}, "
                f"training.accumulate_steps={training.accumulate_steps}"
            )
        for name, value in (
            ("training.minutes", training.minutes),
            ("training.label_smoothing", training.label_smoothing),
            ("optimizer.learning_rate_scale", self.optimizer.learning_rate_scale),
            ("optimizer.clipnorm", self.optimizer.clipnorm),
            ("evaluation.alpha", evaluation.alpha),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"`{name}` must be a number >= 0. Received: {name}={value!r}")
        if training.label_smoothing >= 1:
            raise ConfigError(
                "`training.label_smoothing` must be in [0, 1). "
                f"Received: training.label_smoothing={training.label_smoothing}"
            )
        _check_keep_best(self)
        if training.lora_rank and not training.init_from:
            raise ConfigError(
                "`training.lora_rank` fine-tunes the translator of `training.init_from`, which "
                f"is not set. Received: training.lora_rank={training.lora_rank}, "
                "training.init_from=''"
            )
        try:
            lora_targets(training.lora_targets, "training.lora_targets")
        except ValueError as error:
            raise ConfigError(str(error)) from None
        if distribution.process_id >= distribution.num_processes:
            raise ConfigError(
                "`distribution.process_id` must be < distribution.num_processes "
                f"({distribution.num_processes}). Received: "
                f"distribution.process_id={distribution.process_id}"
            )
        if distribution.num_processes > 1 and not distribution.coordinator_address:
            raise ConfigError(
                "`distribution.coordinator_address` ('host:port' of process 0) is required "
                "with num_processes > 1. Received: distribution.coordinator_address=''"
            )
        if not isinstance(evaluation.samples, list) or not all(
            isinstance(sample, str) for sample in evaluation.samples
        ):
            raise ConfigError(
                "`evaluation.samples` must be a list of strings. "
                f"Received: evaluation.samples={evaluation.samples!r}"
            )
        if not _has_type(evaluation.target_exact_match, float) or not (
            0 <= evaluation.target_exact_match <= 1
        ):
            raise ConfigError(
                "`evaluation.target_exact_match` must be a number in [0, 1]. Received: "
                f"evaluation.target_exact_match={evaluation.target_exact_match!r}"
            )
        references = evaluation.sample_references
        if not isinstance(references, dict) or not all(
            isinstance(source, str) and isinstance(reference, str)
            for source, reference in references.items()
        ):
            raise ConfigError(
                "`evaluation.sample_references` must be a table of strings, a reference by "
                f"source. Received: evaluation.sample_references={references!r}"
            )
        if not isinstance(evaluation.alphas, list) or not all(
            _has_type(alpha, float) and alpha >= 0 for alpha in evaluation.alphas
        ):
            raise ConfigError(
                "`evaluation.alphas` must be a list of numbers >= 0. "
                f"Received: evaluation.alphas={evaluation.alphas!r}"
            )
        optimizer = self.optimizer
        for name, value in (("optimizer.beta_1", optimizer.beta_1), ("optimizer.beta_2", optimizer.beta_2)):
            if not 0 <= value < 1:
                raise ConfigError(f"`{name}` must be in [0, 1). Received: {name}={value!r}")
        if optimizer.epsilon <= 0:
            raise ConfigError(
                f"`optimizer.epsilon` must be > 0. Received: optimizer.epsilon={optimizer.epsilon!r}"
            )
        if not all(isinstance(device, str) and device for device in distribution.devices):
            raise ConfigError(
                "`distribution.devices` must be a list of device names (e.g. ['/gpu:0']). "
                f"Received: distribution.devices={distribution.devices!r}"
            )
        if data.bucket_boundaries:
            try:
                if not all(_has_type(length, int) for length in data.bucket_boundaries):
                    raise ValueError("not ints")
                check_bucket_boundaries(data.bucket_boundaries, data.max_length)
            except ValueError:
                raise ConfigError(
                    "`data.bucket_boundaries` must be a strictly increasing list of positive "
                    f"ints. Received: data.bucket_boundaries={data.bucket_boundaries!r}"
                ) from None
        _check_dataset_options(data)
        # preset = "": the Transformer's defaults, which are the base model's.
        arguments = {**MODEL_PRESETS[model.preset or "base"], **model.overrides()}
        try:
            validate_transformer_args(**arguments, prefix="model.")
        except ValueError as error:
            raise ConfigError(str(error)) from None


def load_config(path, overrides=None):
    """Reads a TOML (`.toml`) or YAML (`.yaml`, `.yml`) training config.

    Args:
        path: str or `os.PathLike`. The file.
        overrides: dict of `"section.field": value` applied after reading. Defaults to
            `None`.

    Returns:
        A validated `TrainingConfig`.

    Example:

    >>> config = load_config("configs/demo.toml")  # doctest: +SKIP
    >>> config.model.preset  # doctest: +SKIP
    'tiny'
    """
    path = os.fspath(path)
    try:
        values = _read_config_file(path)
        for key, value in (overrides or {}).items():
            set_dotted(values, key, value)
        return TrainingConfig.from_dict(values)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None


def _read_config_file(path):
    """The nested dicts of a config file; `ConfigError` (one line) when it cannot be read."""
    extension = os.path.splitext(path)[1].lower()
    if extension not in (".toml", ".yaml", ".yml", ".json"):
        raise ConfigError(f"`path` must end in .toml, .yaml, .yml or .json. Received: path={path!r}")
    if extension in (".yaml", ".yml"):
        try:
            import yaml  # An optional dependency: needed for YAML files only.
        except ImportError:
            raise ImportError("YAML configs need PyYAML: pip install pyyaml") from None
        syntax_errors = (yaml.YAMLError,)
    else:
        syntax_errors = (tomllib.TOMLDecodeError, json.JSONDecodeError)
    try:
        with open(path, "rb") as file:
            if extension == ".toml":
                return tomllib.load(file)
            text = file.read().decode("utf-8")
            if extension == ".json":
                return json.loads(text)
            return yaml.safe_load(text) or {}
    except OSError as error:
        raise ConfigError(f"cannot read the config file: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"invalid UTF-8 at byte {error.start}") from None
    except syntax_errors as error:
        raise ConfigError(f"invalid {extension[1:].upper()}: {' '.join(str(error).split())}") from None


def set_dotted(values, key, value):
    """Sets `values["section"]["field"] = value` for `key="section.field"` (in place)."""
    parts = key.split(".")
    if len(parts) > 2 or not all(parts):
        raise ConfigError(f"`key` must be 'field' or 'section.field'. Received: key={key!r}")
    if len(parts) == 2:
        section = values.setdefault(parts[0], {})
        if not isinstance(section, dict):
            raise ConfigError(f"`{parts[0]}` is not a section. Received: key={key!r}")
        section[parts[1]] = value
    else:
        values[parts[0]] = value


def parse_value(text):
    """Parses a command-line `--set` value as a TOML value, else keeps the string.

    Example:

    >>> parse_value("3"), parse_value("true"), parse_value("[1, 2]"), parse_value("tiny")
    (3, True, [1, 2], 'tiny')
    """
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text


def warmup_note(config, reachable_steps=None, seconds_per_step=None):
    """The line naming a learning-rate warm-up that cannot end inside the run's budget, and its
    fix; `None` when it can.

    The budget is `training.train_steps`, or, when a time budget (`training.minutes`) stops
    the run sooner, `reachable_steps`: the step the run reaches in its time, once measured.
    A warm-up longer than the budget keeps the learning rate rising to the end: the schedule
    never reaches its peak nor decays. The fix proposed is a warm-up of a tenth of the budget.

    Args:
        config: `TrainingConfig`.
        reachable_steps: int. The step the time budget stops the run at, or `None` (not
            known, or no time budget). Defaults to `None`.
        seconds_per_step: float. The measured rate `reachable_steps` comes from, for the
            line. Defaults to `None`.

    Example:

    >>> config = TrainingConfig().replace(**{"training.train_steps": 300})
    >>> warmup_note(config).split(":")[0]
    'the learning-rate warm-up cannot end inside the run (optimizer.warmup_steps = 4,000 > 300 steps, training.train_steps)'
    >>> warmup_note(config.replace(**{"optimizer.warmup_steps": 30})) is None
    True
    """
    warmup, train_steps = config.optimizer.warmup_steps, config.training.train_steps
    budget, source = train_steps, "training.train_steps"
    if reachable_steps is not None and reachable_steps < train_steps:
        rate = f", at the measured {seconds_per_step:.2f} s per step" if seconds_per_step else ""
        budget = reachable_steps
        source = f"the steps training.minutes = {config.training.minutes:g} allows{rate}"
    if warmup <= budget:
        return None
    return (
        f"the learning-rate warm-up cannot end inside the run (optimizer.warmup_steps = "
        f"{warmup:,} > {budget:,} steps, {source}): the learning rate rises until the run "
        f"stops and never reaches its peak; set [optimizer] warmup_steps = "
        f"{max(1, budget // 10):,} (a tenth of the steps)"
    )


def _check_types(prefix, instance):
    """Checks every field of a config dataclass (sections recursively) against its annotation."""
    for field in dataclasses.fields(instance):
        value = getattr(instance, field.name)
        name = prefix + field.name
        if dataclasses.is_dataclass(field.type):
            _check_types(name + ".", value)
            continue
        allowed = field.type.__args__ if isinstance(field.type, types.UnionType) else (field.type,)
        if not any(_has_type(value, kind) for kind in allowed):
            expected = " or ".join(_TYPE_NAMES[kind] for kind in allowed)
            raise ConfigError(f"`{name}` must be {expected}. Received: {name}={value!r}")


_TYPE_NAMES = {
    int: "an int",
    float: "a number",
    str: "a string",
    bool: "true or false",
    list: "a list",
    dict: "a table",
    type(None): "unset",
}


def _has_type(value, kind):
    if kind is float:
        return is_number(value)
    if kind is int:
        return is_int(value)
    return isinstance(value, kind)


def _check_dataset_options(data):
    """`data.options` must be keyword arguments of the dataset function, of its defaults' types."""
    if data.dataset == "corpus":
        return  # `_check_corpus`
    function = {
        "number_words": datasets.number_words,
        "sword_bible": datasets.sword_bible,
        "tsv": datasets.read_tsv,
    }[data.dataset]
    parameters = {
        name: parameter
        for name, parameter in inspect.signature(function).parameters.items()
        if name not in DATASET_ARGUMENTS[data.dataset]
    }
    unknown = sorted(set(data.options) - set(parameters))
    if unknown:
        raise ConfigError(
            f"Unknown `data.options` {unknown} for dataset {data.dataset!r}; known: "
            f"{sorted(parameters)}. Received: data.options={data.options!r}"
        )
    for name, value in data.options.items():
        default = parameters[name].default
        kind = type(default)
        if kind in _TYPE_NAMES and default is not None and not _has_type(value, kind):
            raise ConfigError(
                f"`data.options.{name}` must be {_TYPE_NAMES[kind]}. "
                f"Received: data.options.{name}={value!r}"
            )


def corpus_list(data):
    """The `keras_transformer.datasets.Corpus` list of a `dataset = "corpus"` `DataConfig`."""
    if data.corpora:
        return [datasets.Corpus(**entry) for entry in data.corpora]
    return [datasets.Corpus(source=data.source, target=data.target)]


def _check_corpus(data):
    """The `dataset = "corpus"` settings: files given one way, weights, filters, streaming."""
    if data.streaming not in (True, False, "auto"):
        raise ConfigError(
            f"`data.streaming` must be true, false or 'auto'. Received: data.streaming={data.streaming!r}"
        )
    ratio = data.max_length_ratio
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or (ratio and ratio < 1):
        raise ConfigError(
            "`data.max_length_ratio` must be 0 (off) or a number >= 1. "
            f"Received: data.max_length_ratio={ratio!r}"
        )
    given = [key for key in CORPUS_SETTINGS if getattr(data, key)]
    if data.dataset != "corpus":
        if given:
            raise ConfigError(
                f"`data.{given[0]}` needs dataset='corpus'. Received: data.dataset={data.dataset!r}"
            )
        if data.streaming is True:
            raise ConfigError(
                "`data.streaming` needs dataset='corpus' (data.source and data.target, or "
                f"data.corpora). Received: data.dataset={data.dataset!r}"
            )
        return
    if data.corpora and (data.source or data.target):
        raise ConfigError(
            "Give `data.source` and `data.target`, or `data.corpora`, not both. Received: "
            f"data.source={data.source!r}, data.corpora={data.corpora!r}"
        )
    if not data.corpora and not (data.source and data.target):
        raise ConfigError(
            "dataset='corpus' needs `data.source` and `data.target` (aligned files), or "
            f"`data.corpora`. Received: data.source={data.source!r}, data.target={data.target!r}"
        )
    for index, entry in enumerate(data.corpora):
        name = f"data.corpora[{index}]"
        if not isinstance(entry, dict) or set(entry) - {"source", "target", "path", "weight"}:
            raise ConfigError(
                f"`{name}` must be a table of `source` and `target`, or `path`, and an "
                f"optional `weight`. Received: {name}={entry!r}"
            )
        try:
            datasets.Corpus(**entry)
        except ValueError as error:
            raise ConfigError(f"`{name}`: {error}") from None
    weights = {entry.get("weight", 1.0) for entry in data.corpora}
    if data.streaming is False and len(weights) > 1:
        raise ConfigError(
            "Weighted `data.corpora` are mixed while streaming: set data.streaming = true or "
            f"'auto'. Received: data.streaming=false, weights {sorted(weights)}"
        )
    if data.options:
        raise ConfigError(
            f"dataset='corpus' takes no `data.options`. Received: data.options={data.options!r}"
        )


def _check_keep_best(config):
    """`training.keep_best` and `training.early_stopping_patience` need a validation metric
    that the run logs."""
    training = config.training
    _check_choice("training.keep_best", training.keep_best, ("", *BEST_MONITORS))
    if training.early_stopping_patience and not training.keep_best:
        raise ConfigError(
            "`training.early_stopping_patience` watches the metric of `training.keep_best`, "
            "which is unset. Received: training.early_stopping_patience="
            f"{training.early_stopping_patience}, training.keep_best=''"
        )
    if not training.keep_best:
        return
    if config.data.num_validation == 0:
        raise ConfigError(
            "`training.keep_best` needs validation pairs. Received: "
            f"training.keep_best={training.keep_best!r}, data.num_validation=0"
        )
    if training.keep_best == "val_bleu" and config.evaluation.bleu_every < 0:
        raise ConfigError(
            "`training.keep_best = 'val_bleu'` needs validation BLEU. Received: "
            f"evaluation.bleu_every={config.evaluation.bleu_every}"
        )
    if (
        training.keep_best == "val_bleu"
        and training.early_stopping_patience
        and config.distribution.num_processes > 1
    ):
        raise ConfigError(
            "Early stopping on `val_bleu` needs one process (process 0 alone computes BLEU); "
            "watch `val_loss` instead. Received: distribution.num_processes="
            f"{config.distribution.num_processes}"
        )


def _check_arguments_set_elsewhere(section_values):
    for key in section_values:
        if key in MODEL_ARGUMENTS_SET_ELSEWHERE:
            raise ConfigError(
                f"`model.{key}` is not a [model] setting: the run sets it from "
                f"`{MODEL_ARGUMENTS_SET_ELSEWHERE[key]}`. Received: model.{key}={section_values[key]!r}"
            )


def _check_choice(name, value, choices):
    if value not in choices:
        raise ConfigError(f"`{name}` must be one of {list(choices)}. Received: {name}={value!r}")
