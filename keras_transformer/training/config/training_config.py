"""`TrainingConfig`: the whole configuration, one section per table, and the rules between
sections."""

import dataclasses

from keras_transformer.hyperparameters import lora_targets
from keras_transformer.training.config.data import CORPUS_SETTINGS, DataConfig, check_data
from keras_transformer.training.config.distribution import DistributionConfig
from keras_transformer.training.config.evaluation import EvaluationConfig
from keras_transformer.training.config.export import ExportConfig
from keras_transformer.training.config.fields import ConfigError, check_fields, set_dotted
from keras_transformer.training.config.model import (
    ModelConfig,
    check_arguments_set_elsewhere,
    check_model,
)
from keras_transformer.training.config.optimizer import OptimizerConfig
from keras_transformer.training.config.training import TrainingSection

SECTIONS = {
    "data": DataConfig,
    "model": ModelConfig,
    "optimizer": OptimizerConfig,
    "training": TrainingSection,
    "evaluation": EvaluationConfig,
    "export": ExportConfig,
    "distribution": DistributionConfig,
}
# What a run records in `train_config.json` beside its settings, and a config read back from
# that file ignores: "recipe", the recipe's line and the step times it measured
# (`training.speed`).
RECORD_KEYS = ("recipe",)


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
        for key in RECORD_KEYS:  # what a run recorded beside its settings
            values.pop(key, None)
        sections, named = {}, set()
        for name, section_class in SECTIONS.items():
            section_values = values.pop(name, None) or {}
            if not isinstance(section_values, dict):
                raise ConfigError(
                    f"`{name}` must be a table of settings. Received: {name}={section_values!r}"
                )
            known = {field.name for field in dataclasses.fields(section_class)}
            if name == "model":
                check_arguments_set_elsewhere(section_values)
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

        Every setting is checked against its type, then its value (the rules its field
        declares: `fields.check_fields`); then the rules between settings: `[data]`'s own
        (`data.check_data`, with `data.options` against the dataset function's signature),
        `[model]` with the checks of the `Transformer` constructor (preset values included),
        and those across sections, here. Nothing is built and no framework is imported: only
        a Keras activation name is left for Keras to check.
        """
        check_fields("", self)
        data, training, optimizer, distribution = (
            self.data, self.training, self.optimizer, self.distribution
        )
        check_data(data)
        if optimizer.decay == "linear" and optimizer.warmup_steps >= training.train_steps:
            raise ConfigError(
                "`optimizer.decay = 'linear'` falls to zero at the run's last step, after the "
                "warm-up: `optimizer.warmup_steps` must be < `training.train_steps`. Received: "
                f"optimizer.warmup_steps={optimizer.warmup_steps}, "
                f"training.train_steps={training.train_steps}"
            )
        if data.tokens_per_batch // training.accumulate_steps < data.max_length:
            raise ConfigError(
                "`data.tokens_per_batch` / `training.accumulate_steps` (the micro-batch) must "
                f"be >= data.max_length ({data.max_length}). Received: "
                f"data.tokens_per_batch={data.tokens_per_batch}, "
                f"training.accumulate_steps={training.accumulate_steps}"
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
        check_model(self.model)


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


def _check_keep_best(config):
    """`training.keep_best` and `training.early_stopping_patience` need a validation metric
    that the run logs."""
    training = config.training
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
