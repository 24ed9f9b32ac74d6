"""Defaults that fit the data: held-out sizes from the corpus, one-line refusals of a corpus a
run cannot use (before anything is written), a warning for a held-out split smaller than
asked, the small default model, and the step-rate forecast."""

import logging

import pytest

from keras_transformer import cli
from keras_transformer.training.building import held_out_size, load_splits
from keras_transformer.training.config import DataConfig, TrainingConfig
from keras_transformer.training.time_limit import StepRateForecast

pytestmark = pytest.mark.one_backend  # Config and data checks: no backend involved.


def _pairs(count, words=3):
    return "".join(
        f"{' '.join(f'w{i}x{k}' for k in range(words))}\t{' '.join(f'v{i}y{k}' for k in range(words))}\n"
        for i in range(count)
    )


def test_held_out_sizes_scale_with_the_corpus(tmp_path):
    assert [held_out_size(count) for count in (10, 700, 2000, 20_000, 10**6)] == [
        1,
        35,
        100,
        1000,
        1000,
    ]
    path = tmp_path / "pairs.tsv"
    path.write_text(_pairs(700))
    splits = load_splits(DataConfig(dataset="tsv", path=str(path)))
    assert (len(splits.train), len(splits.validation), len(splits.test)) == (630, 35, 35)
    # Set sizes are kept; the built-in datasets keep their 1000 when unset.
    splits = load_splits(DataConfig(dataset="tsv", path=str(path), num_validation=7, num_test=0))
    assert (len(splits.validation), len(splits.test)) == (7, 0)
    config = TrainingConfig()
    assert config.model.preset == "tiny"  # a runnable size on a CPU; "base" is the paper's


def test_a_held_out_split_smaller_than_asked_is_a_warning(tmp_path, caplog):
    # 500 lines of 5 distinct pairs, duplicates kept: pairs sharing a source stay in one split,
    # so no group of 100 fits the 25 asked (issue 29, defect 11: this gave 0 and 0 silently).
    path = tmp_path / "repeated.tsv"
    path.write_text(_pairs(5) * 100)
    with caplog.at_level(logging.WARNING, logger="keras_transformer"):
        splits = load_splits(DataConfig(dataset="tsv", path=str(path), remove_duplicates=False))
    assert (len(splits.train), len(splits.validation), len(splits.test)) == (500, 0, 0)
    messages = [record.getMessage() for record in caplog.records]
    assert any("validation split holds 0 pairs, not the 25 asked" in m for m in messages)
    assert any(
        "test split holds 0 pairs, not the 25 asked" in m and "5 distinct" in m for m in messages
    )


@pytest.mark.parametrize(
    "content, settings, message",
    [
        ("", "", "The corpus holds no pairs"),
        ("\n  \n\n", "", "The corpus holds no pairs"),
        (_pairs(5), "", "The corpus holds 5 pairs: a run needs at least 10"),
        # With duplicates removed (the default) 500 lines of 5 pairs are 5 pairs.
        (_pairs(5) * 100, "", "The corpus holds 5 pairs: a run needs at least 10"),
        (
            _pairs(600),
            "num_validation = 1000\nnum_test = 1000\n",
            "data.num_validation + data.num_test = 2000 leaves no training pair of the corpus's "
            "600 pairs: lower them (e.g. --set data.num_validation=30 --set data.num_test=30)",
        ),
        (
            _pairs(20, words=200),
            "",
            "Every pair is longer than data.max_length = 128 tokens (the shortest has 200 words",
        ),
    ],
)
def test_a_corpus_the_run_cannot_use_is_one_line_before_anything_is_written(
    tmp_path, capsys, content, settings, message
):
    corpus = tmp_path / "corpus.tsv"
    corpus.write_text(content)
    config = tmp_path / "run.toml"
    output = tmp_path / "run"
    config.write_text(
        f'output_dir = "{output}"\n[data]\ndataset = "tsv"\npath = "{corpus}"\n{settings}'
    )
    status = cli.main(["train", "--config", str(config)])
    errors = capsys.readouterr().err
    assert status == 2
    assert errors.startswith("keras-transformer: error: ") and errors.count("\n") == 1, errors
    assert message in errors and "corpus.tsv" in errors
    assert not output.exists()  # refused before the run directory (and tokenizer.json)


class _Counter:
    step = 23


class _Budget:
    minutes = 10

    def remaining_seconds(self):
        return 540.0


def test_step_rate_forecast_says_when_the_steps_overrun_the_budget():
    lines = []
    forecast = StepRateForecast(100_000, _Counter(), lines.append, time_limit=_Budget())
    forecast.forecast(seconds_per_step=0.2, step=23)
    assert lines == [
        "note: at the measured 0.20 s per step, the 99,977 steps left take about 5.6 h; the "
        "time budget (training.minutes = 10) stops the run near step 2,723 of 100,000: that "
        "is fine if intended; otherwise lower training.train_steps (the learning-rate schedule "
        "and checkpoint averaging count on reaching it) or raise training.minutes"
    ]
    # A config of minutes only trains until the time is spent: a forecast, no advice.
    lines = []
    StepRateForecast(100_000, _Counter(), lines.append, time_limit=_Budget(),
                     steps_named=False).forecast(seconds_per_step=0.2, step=23)
    assert lines == ["forecast: the time budget (training.minutes = 10) stops the run near "
                     "step 2,723, at the measured 0.20 s per step"]
    # Within the budget, or under an hour without one: nothing to say.
    quiet = []
    StepRateForecast(2000, _Counter(), quiet.append, time_limit=_Budget()).forecast(0.2, 23)
    StepRateForecast(2000, _Counter(), quiet.append).forecast(0.2, 23)
    assert quiet == []
    StepRateForecast(100_000, _Counter(), quiet.append).forecast(0.2, 23)
    assert quiet[0].endswith(
        "set a time budget (training.minutes, --minutes) or fewer "
        "training.train_steps, or use a GPU"
    )
