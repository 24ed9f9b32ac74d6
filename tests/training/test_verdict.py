"""The end of a run: its samples checked against their references, and the last line saying
whether it reached its goal or how to continue (issue 60)."""

import pytest

from keras_transformer.datasets.splits import Splits
from keras_transformer.training.config import ConfigError, EvaluationConfig, TrainingConfig
from keras_transformer.training.evaluation import checked_samples, sample_pairs, samples_summary
from keras_transformer.training.trainer import continue_command, run_verdict

pytestmark = pytest.mark.one_backend  # Strings and dicts: no backend involved.

SPLITS = Splits([("uno", "one")], [("dos", "two")], [("tres", "three"), ("cuatro", "four")])


def test_samples_take_their_references_from_the_config_or_the_splits():
    assert sample_pairs(EvaluationConfig(num_samples=1), SPLITS) == (["tres"], ["three"])
    named = EvaluationConfig(samples=["uno", "dos", "cinco"])
    assert sample_pairs(named, SPLITS) == (["uno", "dos", "cinco"], ["one", "two", None])
    # The config's references win over the splits'; a sample they lack keeps the splits'.
    given = EvaluationConfig(samples=["uno", "cinco", "dos"],
                             sample_references={"uno": "ONE", "cinco": "five", "nueve": "nine"})
    assert sample_pairs(given, SPLITS) == (["uno", "cinco", "dos"], ["ONE", "five", "two"])


def test_samples_are_right_when_equal_but_for_whitespace():
    checked = checked_samples(["a", "b", "c"], ["forty - two", "three", "x"],
                              ["forty -  two", "four", None])
    assert [sample.get("right") for sample in checked] == [True, False, None]
    assert samples_summary(checked) == "samples: 1 of 2 right (1 without a reference)"
    assert samples_summary(checked[2:]) is None


def test_config_checks_the_references_and_the_goal():
    TrainingConfig.from_dict({"evaluation": {"samples": ["a"], "sample_references": {"a": "b"},
                                             "target_exact_match": 0.995}}).validate()
    for evaluation in ({"sample_references": ["x"]}, {"sample_references": {"a": 1}},
                       {"target_exact_match": 1.5}, {"target_exact_match": "high"}):
        with pytest.raises(ConfigError, match="evaluation"):
            TrainingConfig.from_dict({"evaluation": evaluation}).validate()


def verdict(exact, steps, stopped, target=0.995, command="keras-transformer train --config d.toml"):
    config = TrainingConfig().replace(**{"training.minutes": 5, "training.train_steps": 600,
                                         "evaluation.target_exact_match": target})
    metrics = {"steps": steps, "train_steps": 600, "stopped_by_time_limit": stopped,
               "test_exact_match": exact}
    return run_verdict(metrics, config, command)


def test_the_last_line_says_goal_reached_or_how_to_continue():
    assert verdict(1.0, 600, False).startswith("goal reached: test exact match 100.00 %")
    # Stopped by the budget at its goal: no warning, no "run again".
    line = verdict(0.997, 480, True)
    assert line.startswith("goal reached") and "480 of 600 steps" in line
    assert "again" not in line
    # Stopped short of its goal: said plainly, with the command that continues it.
    line = verdict(0.987, 480, True)
    assert line.startswith("not converged: test exact match 98.70 % is below the goal of 99.50 %")
    assert line.endswith("To train the other 120 steps, run the same command again: "
                         "keras-transformer train --config d.toml")
    assert verdict(0.987, 600, False).startswith("not converged")
    # No goal: a budget stop says how to continue; a finished run says nothing more.
    assert verdict(0.9, 480, True, target=0.0).startswith("not finished: the 5-minute time budget")
    assert verdict(0.9, 600, False, target=0.0) is None


def test_the_continue_command_is_the_command_line_as_given():
    assert continue_command(["/x/.venv/bin/keras-transformer", "train", "--config", "a b.toml"]) == (
        "keras-transformer train --config 'a b.toml'")
    assert continue_command(["/x/keras_transformer/cli/__main__.py", "train"]) == (
        "keras-transformer train")
    assert continue_command(["pytest", "-q"]) is None
    assert continue_command(["/x/pytest/__main__.py", "-q"]) is None
