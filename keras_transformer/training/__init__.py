"""Training: `train(config)`, its config, and the callbacks and helpers it is made of.

- `train`, `TrainingConfig`, `load_config`: the training entry point and its TOML/YAML config
  (`keras-transformer train --config FILE`).
- `ResumableBackupAndRestore`: atomic, step-exact `BackupAndRestore` (`kill -9` recovery).
- `PeriodicCheckpoint`, `average_checkpoints`: checkpoints and their average (paper §6.1).
- `BleuCallback`, `corpus_bleu`, `exact_match`: validation BLEU during training.
- `TimeLimit`: stop cleanly when a time budget is spent.
- `KeepBest`: export the best-by-validation translator, and stop early (`keep_best`).
- `TensorBoardLogger`: TensorBoard scalars without the `tensorboard` package.
- `PerUpdate`: shows a callback one batch per optimizer update (gradient accumulation).
- `setup_distribution`, `GlobalTokenMeanCrossentropy`, `enable_replica_jit`:
  `MirroredStrategy` (TensorFlow) and `DataParallel` (JAX, one or more processes).

The names load on first use: importing the package (or the pure-Python `training.config`)
loads no framework.
"""

from typing import TYPE_CHECKING

from keras_transformer._lazy import lazy_attributes

_EXPORTS = {
    "PerUpdate": "accumulation",
    "average_checkpoints": "averaging",
    "average_last_checkpoints": "averaging",
    "ResumableBackupAndRestore": "backup",
    "KeepBest": "best",
    "BleuCallback": "bleu",
    "corpus_bleu": "bleu",
    "exact_match": "bleu",
    "PeriodicCheckpoint": "checkpoints",
    "list_checkpoints": "checkpoints",
    "save_weights_atomically": "checkpoints",
    "DataConfig": "config",
    "DistributionConfig": "config",
    "EvaluationConfig": "config",
    "ExportConfig": "config",
    "ModelConfig": "config",
    "OptimizerConfig": "config",
    "TrainingConfig": "config",
    "TrainingSection": "config",
    "load_config": "config",
    "GlobalTokenMeanCrossentropy": "mirrored",
    "enable_replica_jit": "mirrored",
    "DistributionContext": "strategy",
    "setup_distribution": "strategy",
    "TensorBoardLogger": "tensorboard",
    "TimeLimit": "time_limit",
    "TrainingResult": "run",
    "plan_fits": "trainer",
    "train": "trainer",
}

__all__ = [
    "BleuCallback",
    "DataConfig",
    "DistributionConfig",
    "DistributionContext",
    "EvaluationConfig",
    "ExportConfig",
    "GlobalTokenMeanCrossentropy",
    "KeepBest",
    "ModelConfig",
    "OptimizerConfig",
    "PerUpdate",
    "PeriodicCheckpoint",
    "ResumableBackupAndRestore",
    "TensorBoardLogger",
    "TimeLimit",
    "TrainingConfig",
    "TrainingResult",
    "TrainingSection",
    "average_checkpoints",
    "average_last_checkpoints",
    "corpus_bleu",
    "enable_replica_jit",
    "exact_match",
    "list_checkpoints",
    "load_config",
    "plan_fits",
    "save_weights_atomically",
    "setup_distribution",
    "train",
]

__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS)

if TYPE_CHECKING:  # For static analysis and the API reference.
    from keras_transformer.training.accumulation import PerUpdate
    from keras_transformer.training.averaging import average_checkpoints, average_last_checkpoints
    from keras_transformer.training.backup import ResumableBackupAndRestore
    from keras_transformer.training.best import KeepBest
    from keras_transformer.training.bleu import BleuCallback, corpus_bleu, exact_match
    from keras_transformer.training.checkpoints import (
        PeriodicCheckpoint,
        list_checkpoints,
        save_weights_atomically,
    )
    from keras_transformer.training.config import (
        DataConfig,
        DistributionConfig,
        EvaluationConfig,
        ExportConfig,
        ModelConfig,
        OptimizerConfig,
        TrainingConfig,
        TrainingSection,
        load_config,
    )
    from keras_transformer.training.mirrored import GlobalTokenMeanCrossentropy, enable_replica_jit
    from keras_transformer.training.run import TrainingResult
    from keras_transformer.training.strategy import DistributionContext, setup_distribution
    from keras_transformer.training.tensorboard import TensorBoardLogger
    from keras_transformer.training.time_limit import TimeLimit
    from keras_transformer.training.trainer import plan_fits, train
