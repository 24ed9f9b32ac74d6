"""Fine-tuning: a run that starts from a trained translator (`[training] init_from`).

The run takes the translator's tokenizer (no tokenizer is trained) and, on a fresh start, its
weights; the optimizer is new (Adam's moments at zero, the warm-up schedule from step 0), so
`[optimizer]` sets the fine-tuning learning rate (a smaller `learning_rate_scale` and a
short `warmup_steps` are usual). The model is built from `[model]` as in any run, so
`[model]` must describe the loaded architecture (the dropout rates may differ: they are
training settings, not weights); a mismatch is a `ConfigError` that names both sides. A run
resumed from its backup continues from the backup, never from `init_from` again.

With `[training] lora_rank`, `keras_transformer.training.building.build_model` enables LoRA
(`keras_transformer.models.lora`) before the model is compiled: only the LoRA weights train
and have optimizer state, the loaded weights stay as they are, and the translator the run
writes (`translator.keras`, `preset/`, `best/`, the SavedModel) is the merged plain model.
"""

import os

from keras_transformer.engines import load_translator
from keras_transformer.files import read_json
from keras_transformer.models.lora import base_weights, merged_translator
from keras_transformer.training.backup import STATE_FILENAME
from keras_transformer.training.config import ConfigError
from keras_transformer.training.tokenizers import (
    load_or_train_tokenizer,
    load_sentencepiece_model,
    save_tokenizer,
)

# The constructor arguments of `Transformer` that shape its weights or their meaning.
ARCHITECTURE = (
    "vocabulary_size",
    "target_vocabulary_size",
    "num_layers",
    "num_decoder_layers",
    "d_model",
    "num_heads",
    "ff_dim",
    "activation",
    "norm_first",
    "share_embeddings",
    "layer_norm_epsilon",
    "sinusoid_layout",
    "sinusoid_frequencies",
    "output_bias",
)


def load_initial_translator(path):
    """The `Translator` of `training.init_from`: a `translator.keras` file, a directory holding
    one (a run's output directory, or its `best/`), or a preset directory
    (`keras_transformer.engines.load_translator` with the Keras engine).

    Args:
        path: str. The file or directory.

    Returns:
        A `keras_transformer.Translator`.

    Raises:
        ConfigError: nothing loadable at `path` (naming `training.init_from` and why).
    """
    path = os.fspath(path)
    name = "training.init_from"
    if not os.path.exists(path):
        raise ConfigError(f"`{name}` names no file or directory. Received: {name}={path!r}")
    try:
        return load_translator(path, engine="keras")
    except (OSError, ValueError) as error:
        raise ConfigError(f"`{name}` cannot be loaded: {error}") from None


def check_run_inputs(config):
    """Opens the model and tokenizer files a run's configuration names, before the run writes
    anything: `training.init_from` (a translator fit to fine-tune) and
    `data.sentencepiece_model`. A broken file is a `ConfigError` naming the setting.

    Returns:
        The translator of `training.init_from`, or `None`.
    """
    if config.data.sentencepiece_model:
        load_sentencepiece_model(config.data)
    if not config.training.init_from:
        return None
    translator = load_initial_translator(config.training.init_from)
    initial_tokenizer(translator)
    return translator


def load_run_tokenizer(config, paths, pairs, is_chief=True, initial=None):
    """The run's tokenizer, and the translator of `training.init_from` (or `None`).

    Without `init_from`, `keras_transformer.training.tokenizers.load_or_train_tokenizer`. With
    it, the loaded translator's tokenizer, written to the run's `tokenizer.json` (so that the
    run directory says which vocabulary its checkpoints use); a backup made with another
    vocabulary is a `ConfigError` naming both.

    Args:
        config: `TrainingConfig`.
        paths: the run's `RunPaths`.
        pairs: list of `(source, target)` training pairs (to train a tokenizer on).
        is_chief: bool. Whether this process writes. Defaults to `True`.

    Returns:
        `(tokenizer, translator)`.
    """
    init_from = config.training.init_from
    if not init_from:
        return load_or_train_tokenizer(paths.tokenizer, pairs, config.data, is_chief), None
    translator = initial if initial is not None else load_initial_translator(init_from)
    tokenizer = initial_tokenizer(translator)
    saved = read_json(paths.tokenizer)
    resuming = read_json(os.path.join(paths.backup, STATE_FILENAME)) is not None
    if resuming and saved and saved.get("vocabulary") != tokenizer.get_vocabulary():
        raise ConfigError(
            f"The backup in {paths.backup!r} was trained with the vocabulary of "
            f"{paths.tokenizer!r} ({len(saved.get('vocabulary') or [])} pieces), not with "
            f"the one of `training.init_from` ({tokenizer.vocabulary_size()} pieces). Use "
            f"another output_dir or delete the backup. Received: training.init_from={init_from!r}"
        )
    if is_chief:
        save_tokenizer(tokenizer, paths.tokenizer)
    return tokenizer, translator


def initial_tokenizer(translator):
    """The tokenizer a run fine-tuning `translator` trains with: its (source) tokenizer.

    A translator with a target tokenizer of its own (one imported from Marian: two
    SentencePiece models over one vocabulary) fine-tunes with both (`text_settings`), as
    long as they share the model's one vocabulary; a `ConfigError` otherwise.
    """
    target = translator.target_tokenizer
    if target is not None and target.get_vocabulary() != translator.tokenizer.get_vocabulary():
        raise ConfigError(
            "`training.init_from` holds a translator whose source and target tokenizers have "
            "different vocabularies; training runs use one vocabulary of ids for both. "
            f"Received: source vocabulary of {translator.tokenizer.vocabulary_size()} and "
            f"target vocabulary of {target.vocabulary_size()} pieces"
        )
    return translator.tokenizer


def text_settings(translator):
    """How a run fine-tuning `translator` (or `None`: a new model) encodes its text:
    `{"target_tokenizer": Tokenizer or None, "source_start_token": bool}`, the translator's
    own, so that training sees the ids that translation will."""
    if translator is None:
        return {"target_tokenizer": None, "source_start_token": True}
    return {
        "target_tokenizer": translator.target_tokenizer,
        "source_start_token": translator.source_start_token,
    }


def check_architecture(model, loaded, init_from):
    """Raises `ConfigError` naming both sides when the `[model]` section built `model` with
    another architecture (or vocabulary) than the loaded `Transformer`."""
    built, saved = model.get_config(), loaded.get_config()
    differences = [key for key in ARCHITECTURE if built.get(key) != saved.get(key)]
    if differences:
        config_side = ", ".join(f"{key}={built.get(key)!r}" for key in differences)
        loaded_side = ", ".join(f"{key}={saved.get(key)!r}" for key in differences)
        raise ConfigError(
            f"The [model] section does not match the model of `training.init_from` "
            f"({init_from!r}): [model] builds {config_side}; the loaded model has "
            f"{loaded_side}. Set them in [model] (vocabulary sizes come from the loaded "
            f"tokenizer). Received: training.init_from={init_from!r}"
        )


def initialize_weights(model, loaded):
    """Copies the weights of the loaded `Transformer` into `model` (same architecture); with
    LoRA enabled on `model` (`training.lora_rank`), into its base weights, the LoRA ones left
    as `enable_lora` made them."""
    variables = base_weights(model)
    values = loaded.get_weights()
    if len(variables) != len(values):
        raise ValueError(
            f"{model.name!r} has {len(variables)} weights besides LoRA's; the loaded model has "
            f"{len(values)}. Received: loaded={loaded.name!r}"
        )
    for variable, value in zip(variables, values, strict=True):
        variable.assign(value)


def written_translator(translator):
    """The translator a run evaluates and writes once training is over: `translator`, its
    LoRA (`training.lora_rank`) merged into a plain model (`merged_translator`)."""
    return merged_translator(translator)
