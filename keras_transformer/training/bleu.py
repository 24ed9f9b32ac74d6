"""Corpus BLEU (sacrebleu) of translations, and a callback that tracks it during training."""

import logging
import os
import time

import keras

from keras_transformer._checks import check_int
from keras_transformer.training.scores import SCORE_DECIMALS
from keras_transformer.training.state import sync_model_state
from keras_transformer.training.tensorboard import create_writer, write_scalar

logger = logging.getLogger("keras_transformer")


def corpus_bleu(hypotheses, references):
    """Corpus BLEU with sacreBLEU's default settings, on a 0-100 scale: 13a tokenization,
    mixed case, and `exp` smoothing (sacreBLEU's default, on: an n-gram order without a match
    counts as 1 / 2^k matches instead of zeroing the score); the signature is
    `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp`. `keras_transformer.training.scores` also
    gives chrF, TER and the signatures.

    Args:
        hypotheses: list of str.
        references: list of str, one reference per hypothesis.

    Returns:
        float, with 6 decimals.

    Example:

    >>> corpus_bleu(["the cat sat on the mat"], ["the cat sat on the mat"])
    100.0
    """
    import sacrebleu  # An optional dependency (the `training` extra): loaded when scoring.

    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(
            "`hypotheses` and `references` must have the same length. Received: "
            f"{len(hypotheses)} hypotheses and {len(references)} references"
        )
    return round(float(sacrebleu.corpus_bleu(hypotheses, [references]).score), SCORE_DECIMALS)


def exact_match(hypotheses, references):
    """Fraction of hypotheses equal to their reference (whitespace-normalized).

    Example:

    >>> exact_match(["forty-two", "one  hundred"], ["forty-two", "one hundred and one"])
    0.5
    """
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(
            "`hypotheses` and `references` must have the same length. Received: "
            f"{len(hypotheses)} hypotheses and {len(references)} references"
        )
    if not references:
        return 0.0
    hits = sum(
        " ".join(hypothesis.split()) == " ".join(reference.split())
        for hypothesis, reference in zip(hypotheses, references, strict=True)
    )
    return hits / len(references)


class BleuCallback(keras.callbacks.Callback):
    """Translates a validation set during training and logs its corpus BLEU.

    At the end of each epoch (or every `every_steps` steps) it calls
    `translate_fn(sources)` (for example a `keras_transformer.Translator` running beam
    search on the model being trained), computes sacrebleu's corpus BLEU against
    `references` and

    - adds it to the epoch logs as `name` (default `"val_bleu"`), so it lands in
      `History.history`, in the progress bar, and in TensorBoard when a `TensorBoardLogger`
      (or `keras.callbacks.TensorBoard`) comes after this callback (as `epoch_bleu` in the
      validation run);
    - with `log_dir`, also writes it as the scalar `bleu` at the optimizer step to
      `log_dir/validation` (every evaluation, step-based ones included);
    - keeps `(step, bleu)` pairs in `self.history`.

    Args:
        translate_fn: callable, list of str -> list of str.
        sources: list of str. Source sentences.
        references: list of str. One reference translation per source.
        every_steps: int. Evaluate every this many steps instead of at the end of each
            epoch; `0` is the end of each epoch. Defaults to `0`.
        name: str. Log key. Defaults to `"val_bleu"`.
        log_dir: str. TensorBoard log directory. Defaults to `None`.
        is_chief: bool. Whether this process evaluates (process 0 in multi-process
            training). Defaults to `True`.

    Example:

    >>> callback = BleuCallback(lambda sources: sources, ["a b c d"], ["a b c d"])
    >>> round(callback.evaluate(), 2)
    100.0
    """

    def __init__(
        self,
        translate_fn,
        sources,
        references,
        every_steps=0,
        name="val_bleu",
        log_dir=None,
        is_chief=True,
    ):
        super().__init__()
        if not callable(translate_fn):
            raise ValueError(
                f"`translate_fn` must be callable. Received: translate_fn={translate_fn!r}"
            )
        sources, references = list(sources), list(references)
        if not sources or len(sources) != len(references):
            raise ValueError(
                "`sources` and `references` must be non-empty and of the same length. "
                f"Received: {len(sources)} sources and {len(references)} references"
            )
        check_int("every_steps", every_steps, minimum=0)
        self.translate_fn = translate_fn
        self.sources = sources
        self.references = references
        self.every_steps = every_steps
        self.name = name
        self.log_dir = log_dir
        self.is_chief = is_chief
        self.history = []
        self._step = 0
        self._writer = None

    def evaluate(self):
        """Translates the sources now and returns the corpus BLEU."""
        start = time.perf_counter()
        hypotheses = self.translate_fn(self.sources)
        bleu = corpus_bleu(hypotheses, self.references)
        logger.info(
            "%s = %.2f on %d sentences (%.1f s).",
            self.name,
            bleu,
            len(self.sources),
            time.perf_counter() - start,
        )
        return bleu

    def on_train_begin(self, logs=None):
        sync_model_state(self.model)
        self._step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

    def on_train_batch_end(self, batch, logs=None):
        self._step += 1
        if self.every_steps and self._step % self.every_steps == 0:
            sync_model_state(self.model)  # On every process: a collective in multi-process JAX.
            if self.is_chief:
                self._record(self.evaluate())

    def on_epoch_end(self, epoch, logs=None):
        if self.every_steps or not self.is_chief:
            return
        bleu = self.evaluate()
        self._record(bleu)
        if logs is not None:
            logs[self.name] = bleu

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _record(self, bleu):
        self.history.append((self._step, bleu))
        if self.log_dir:
            if self._writer is None:
                self._writer = create_writer(os.path.join(self.log_dir, "validation"))
            write_scalar(self._writer, "bleu", bleu, self._step)
            self._writer.flush()
