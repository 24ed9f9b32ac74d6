"""docs/training.md's recipe table ("Small corpus") against `recipe.RECIPE`, the rows as data:
corpus sizes, budget, model, vocabulary, batch, warm-up and peak learning rate."""

import re

import pytest

from keras_transformer.training.recipe import RECIPE
from tests.training.training_helpers import REPO

# Pure Python: one backend.
pytestmark = pytest.mark.one_backend

HEADER = (
    "| training pairs | model | vocabulary | tokens per batch | warm-up (most) | "
    "peak learning rate | rows from |"
)


def table_rows():
    with open(f"{REPO}/docs/training.md", encoding="utf-8") as file:
        lines = file.read().splitlines()
    start = lines.index(HEADER) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip()[1:-1].split(" | ")])
    return rows


def number(text):
    return int(text.replace(",", ""))


def test_the_docs_table_is_the_recipe():
    rows = table_rows()
    assert len(rows) == len(RECIPE)
    for cells, row in zip(rows, RECIPE, strict=True):
        pairs, model, vocabulary, tokens, warmup, peak = cells[:6]
        # "up to 5,000", "5,000 to 100,000, where its curve forecasts more", "more".
        bound = re.match(r"(?:up to|[\d,]+ to) ([\d,]+)", pairs)
        assert (number(bound.group(1)) if bound else None) == row.max_pairs, pairs
        assert ("where its curve forecasts more" in pairs) == bool(row.bleu_by_steps), pairs
        assert model == f"`{row.name}`: {row.model_text()}"
        assert number(vocabulary) == row.vocabulary_size
        assert number(tokens) == row.tokens_per_batch
        assert number(warmup) == row.warmup_steps
        assert peak == f"{row.peak_learning_rate:.4f}", row.name
    # "5,000 to ...": the lower bound is the largest corpus of a smaller row above.
    for index, (cells, row) in enumerate(zip(rows, RECIPE, strict=True)):
        lower = re.match(r"([\d,]+) to", cells[0])
        if lower:
            smaller = [above.max_pairs for above in RECIPE[:index] if above.max_pairs < row.max_pairs]
            assert number(lower.group(1)) == max(smaller), cells[0]
