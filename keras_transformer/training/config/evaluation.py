"""`[evaluation]`: BLEU during training, the final test, and the sample translations."""

import dataclasses

from keras_transformer.training.config.fields import has_type


def _numbers_at_least_zero(alphas):
    return all(has_type(alpha, float) and alpha >= 0 for alpha in alphas)


def _strings(samples):
    return all(isinstance(sample, str) for sample in samples)


def _string_table(references):
    return all(
        isinstance(source, str) and isinstance(reference, str)
        for source, reference in references.items()
    )


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

    beam_size: int = dataclasses.field(default=4, metadata={"min": 1})
    alpha: float = dataclasses.field(default=0.6, metadata={"min": 0})
    alphas: list = dataclasses.field(
        default_factory=list, metadata={"check": (_numbers_at_least_zero, "a list of numbers >= 0")}
    )
    extra_length: int = dataclasses.field(default=50, metadata={"min": 1})
    bleu_every: int = dataclasses.field(default=0, metadata={"min": -1})
    bleu_sentences: int = dataclasses.field(default=0, metadata={"min": 0})
    batch_size: int = dataclasses.field(default=64, metadata={"min": 1})
    test: bool = True
    samples: list = dataclasses.field(
        default_factory=list, metadata={"check": (_strings, "a list of strings")}
    )
    sample_references: dict = dataclasses.field(
        default_factory=dict,
        metadata={"check": (_string_table, "a table of strings, a reference by source")},
    )
    num_samples: int = dataclasses.field(default=5, metadata={"min": 0})
    target_exact_match: float = dataclasses.field(default=0.0, metadata={"min": 0, "max": 1})
