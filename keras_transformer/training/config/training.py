"""`[training]`: the loop, its budget, checkpoints and fault tolerance."""

import dataclasses

MIXED_PRECISION = {"": None, "none": None, "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
# The validation metrics `training.keep_best` can watch, and whether larger is better.
BEST_MONITORS = {"val_bleu": "max", "val_loss": "min", "val_accuracy": "max"}


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
        lora_rank: int. With `init_from`: fine-tune with LoRA of this rank on the
            projections of `lora_targets`, every other weight frozen; checkpoints and backups
            hold the LoRA factors and a checked reference to the frozen base
            (`OUTPUT_DIR/lora_base.weights.h5`, `keras_transformer.training.lora_state`), and
            the translator the run writes has LoRA merged (`keras_transformer.models.lora`).
            `0` trains every weight. Defaults to `0`.
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

    train_steps: int = dataclasses.field(default=100000, metadata={"min": 1})
    steps_per_epoch: int = dataclasses.field(default=0, metadata={"min": 0})
    minutes: float = dataclasses.field(default=0.0, metadata={"min": 0})
    label_smoothing: float = dataclasses.field(default=0.1, metadata={"min": 0, "below": 1})
    mixed_precision: str = dataclasses.field(
        default="", metadata={"choices": tuple(MIXED_PRECISION)}
    )
    jit_compile: bool | str = dataclasses.field(
        default="auto", metadata={"choices": (True, False, "auto")}
    )
    seed: int = 0
    checkpoint_every: int = dataclasses.field(default=0, metadata={"min": 0})
    average_checkpoints: int = dataclasses.field(default=5, metadata={"min": 1})
    backup_every: int = dataclasses.field(default=100, metadata={"min": 1})
    tensorboard: bool = True
    init_from: str = ""
    lora_rank: int = dataclasses.field(default=0, metadata={"min": 0})
    lora_targets: str | list = "qv"
    keep_best: str = dataclasses.field(default="", metadata={"choices": ("", *BEST_MONITORS)})
    early_stopping_patience: int = dataclasses.field(default=0, metadata={"min": 0})
    accumulate_steps: int = dataclasses.field(default=1, metadata={"min": 1})
