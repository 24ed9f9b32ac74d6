"""The data and the model of a run (`prepare_run`'s two jobs): the tokenizer, the training
stream, the validation data and the epoch size; the compiled model, the model that decodes,
and its `Translator`."""

import logging
import math

from keras_transformer.data import make_dataset
from keras_transformer.training import fine_tune, lora_state
from keras_transformer.training.accumulation import micro_batch_tokens
from keras_transformer.training.building import (
    build_model,
    compile_model,
    decodes_in_float32,
    make_train_data,
)
from keras_transformer.training.config import ConfigError
from keras_transformer.training.state import local_copy
from keras_transformer.translator import Translator

logger = logging.getLogger("keras_transformer")

# The fewest steps of an epoch (the end-of-epoch validation, BLEU and checkpoint) when
# `training.steps_per_epoch` is unset.
MIN_EPOCH_STEPS = 100


def prepare_data(config, context, paths, report, splits, initial=None):
    """The tokenizer (and the translator of `init_from`), the training stream, the validation
    data and the epoch size of the `splits`."""
    streaming = splits.info.get("streaming", False)
    num_train = splits.info["num_train"] if streaming else len(splits.train)
    report(f"data: {config.data.dataset}: {num_train} train, {len(splits.validation)} "
           f"validation, {len(splits.test)} test pairs" + (" (streamed)" if streaming else ""))
    for line in splits.info.get("filters", ()):
        report(f"data: {line}")
    tokenizer_pairs = splits.info["scan"].tokenizer_sample if streaming else splits.train
    tokenizer, initial = fine_tune.load_run_tokenizer(
        config, paths, tokenizer_pairs, context.is_chief, initial
    )
    report(f"tokenizer: {tokenizer.vocabulary_size()} word pieces"
           + (f" (from {config.training.init_from})" if initial is not None else "")
           + (f", learned from {len(tokenizer_pairs)} pairs" if streaming else ""))
    accumulate = config.training.accumulate_steps  # fit batches per optimizer step
    max_length = config.data.max_length
    text = fine_tune.text_settings(initial)  # a fine-tuned translator's own encoding
    try:
        train_data = make_train_data(
            config.data,
            splits,
            tokenizer,
            micro_batch_tokens(config.data.tokens_per_batch, accumulate),
            config.training.seed,
            **text,
        )
    except ValueError as error:
        if not _all_too_long(error):
            raise
        raise ConfigError(
            f"Every training pair is longer than data.max_length = {max_length} tokens once "
            f"tokenized, so none is left to train on: raise data.max_length. "
            f"Received: data.max_length={max_length}"
        ) from None
    if streaming:
        report(f"data: about {train_data.num_dropped} training pairs longer than "
               f"max_length={config.data.max_length} tokens are dropped as they stream "
               "(estimated from the tokenizer's sample)")
    one_pass = sum(
        math.ceil(count / size)
        for count, size in zip(train_data.bucket_counts, train_data.batch_sizes, strict=True)
    )
    # Unset: one pass over the data, but at least MIN_EPOCH_STEPS steps (or all the steps of
    # a shorter run), so that a small corpus does not validate after every few steps.
    steps_per_epoch = config.training.steps_per_epoch or max(
        min(MIN_EPOCH_STEPS, config.training.train_steps), math.ceil(one_pass / accumulate)
    )
    report(f"batches: {one_pass} per pass over the data, shapes {list(train_data.padded_shapes)}, "
           f"{steps_per_epoch} steps per epoch, {config.training.train_steps} steps"
           + (f", {accumulate} batches per step" if accumulate > 1 else ""))
    validation_data = None
    if splits.validation:
        try:
            validation_data = make_dataset(
                splits.validation,
                tokenizer,
                tokens_per_batch=config.data.tokens_per_batch,
                max_length=max_length,
                bucket_boundaries=config.data.bucket_boundaries or None,
                shuffle=False,
                **text,
            ).dataset
        except ValueError as error:
            if not _all_too_long(error):
                raise
            logger.warning(
                "data: every validation pair is longer than data.max_length = %d tokens: "
                "training runs without a validation loss",
                max_length,
            )
        else:
            validation_data = context.prepare_dataset(validation_data)
    return tokenizer, initial, train_data, validation_data, steps_per_epoch


def _all_too_long(error):
    """Whether `make_dataset` refused its pairs for being all longer than `max_length`."""
    return str(error).startswith("Every pair is longer than `max_length`")


def prepare_model(config, context, tokenizer, report, initial=None):
    """The compiled model (in the strategy's scope), the model that decodes, its Translator."""
    with context.scope():
        model = build_model(config, tokenizer.vocabulary_size())
        if config.training.lora_rank:  # One base file for the run's state files.
            lora_state.use_base_path(model, config.output_dir)
        compile_model(model, config, strategy=context.strategy)
        model.optimizer.build(model.trainable_variables)
        if initial is not None:
            fine_tune.check_architecture(model, initial.model, config.training.init_from)
    report(f"model: {model.count_params():,} parameters, d_model {model.d_model}, "
           f"{model.num_layers} layers, {model.num_heads} heads, ff_dim {model.ff_dim}, "
           f"dtype policy {model.dtype_policy.name}")
    evaluation = config.evaluation
    if decodes_in_float32(config):
        # Mixed precision on a CPU: the run validates, tests and saves a float32 copy (same
        # weights, synchronised before each decoding). Measured on the Bible: 1,000 test
        # verses in 23.5 s against 60.5 s with the bf16 model, BLEU 32.01 against 32.02.
        eval_model = local_copy(model, dtype="float32")
    else:
        eval_model = local_copy(model) if context.is_distributed else model
    translator = Translator(
        eval_model,
        tokenizer,
        beam_size=evaluation.beam_size,
        alpha=evaluation.alpha,
        max_source_length=config.data.max_length,
        extra_length=evaluation.extra_length,
        batch_size=evaluation.batch_size,
        **fine_tune.text_settings(initial),
    )
    return model, eval_model, translator
