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

One module per section (`data`, `model`, `optimizer`, `training`, `evaluation`, `export`,
`distribution`), each declaring its fields with their defaults and bounds
(`dataclasses.field(default=..., metadata={"min": ...})`, checked by `fields.check_fields`);
`training_config` holds `TrainingConfig` and the rules between settings, `files` reads config
files. Every name is importable from here.

Pure Python: importing this package imports neither Keras nor TensorFlow.
"""

from keras_transformer.training.config.data import (
    CORPUS_SETTINGS,
    DATASET_ARGUMENTS,
    DATASETS,
    TOKENIZERS,
    DataConfig,
    corpus_list,
)
from keras_transformer.training.config.distribution import STRATEGIES, DistributionConfig
from keras_transformer.training.config.evaluation import EvaluationConfig
from keras_transformer.training.config.export import ExportConfig
from keras_transformer.training.config.fields import ConfigError, parse_value, set_dotted
from keras_transformer.training.config.files import load_config
from keras_transformer.training.config.model import MODEL_ARGUMENTS_SET_ELSEWHERE, ModelConfig
from keras_transformer.training.config.optimizer import DECAYS, OptimizerConfig
from keras_transformer.training.config.training import (
    BEST_MONITORS,
    MIXED_PRECISION,
    TrainingSection,
)
from keras_transformer.training.config.training_config import (
    RECORD_KEYS,
    SECTIONS,
    TrainingConfig,
    warmup_note,
)

__all__ = [
    "BEST_MONITORS",
    "CORPUS_SETTINGS",
    "ConfigError",
    "DATASETS",
    "DATASET_ARGUMENTS",
    "DECAYS",
    "DataConfig",
    "DistributionConfig",
    "EvaluationConfig",
    "ExportConfig",
    "MIXED_PRECISION",
    "MODEL_ARGUMENTS_SET_ELSEWHERE",
    "ModelConfig",
    "OptimizerConfig",
    "RECORD_KEYS",
    "SECTIONS",
    "STRATEGIES",
    "TOKENIZERS",
    "TrainingConfig",
    "TrainingSection",
    "corpus_list",
    "load_config",
    "parse_value",
    "set_dotted",
    "warmup_note",
]
