"""`[model]`: the Transformer, as a preset and any of its constructor arguments, checked by
the `Transformer`'s own checks."""

import dataclasses

from keras_transformer.hyperparameters import PRESETS as MODEL_PRESETS
from keras_transformer.hyperparameters import TRANSFORMER_ARGUMENTS, validate_transformer_args
from keras_transformer.training.config.fields import ConfigError

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

    preset: str = dataclasses.field(default="tiny", metadata={"choices": ("", *MODEL_PRESETS)})

    def overrides(self):
        """The constructor arguments of `Transformer` set in this section (`None`s left out)."""
        return {
            field.name: getattr(self, field.name)
            for field in dataclasses.fields(self)
            if field.name != "preset" and getattr(self, field.name) is not None
        }


def check_model(model):
    """The `[model]` arguments, preset values included, by the `Transformer`'s own checks."""
    # preset = "": the Transformer's defaults, which are the base model's.
    arguments = {**MODEL_PRESETS[model.preset or "base"], **model.overrides()}
    try:
        validate_transformer_args(**arguments, prefix="model.")
    except ValueError as error:
        raise ConfigError(str(error)) from None


def check_arguments_set_elsewhere(section_values):
    """Refuses a `[model]` key that the run sets from another setting, naming that one."""
    for key in section_values:
        if key in MODEL_ARGUMENTS_SET_ELSEWHERE:
            raise ConfigError(
                f"`model.{key}` is not a [model] setting: the run sets it from "
                f"`{MODEL_ARGUMENTS_SET_ELSEWHERE[key]}`. Received: model.{key}={section_values[key]!r}"
            )
