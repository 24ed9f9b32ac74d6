"""The recipe (`training.recipe`): settings a budgeted config leaves unset, from the corpus size."""

import dataclasses
import json
import math
import os

import numpy as np
import pytest

from keras_transformer.training.config import TrainingConfig, load_config
from keras_transformer.training.recipe import ALPHAS as RECIPE_ALPHAS
from keras_transformer.training.recipe import RECIPE, estimated_steps, recipe_row, resolve_recipe


def resolved(values, num_pairs):
    return resolve_recipe(TrainingConfig.from_dict(values), num_pairs)


def peak(config):
    """The warm-up schedule's peak learning rate of `config`'s model."""
    d_model = {"tiny": 64, "base": 512}.get(config.model.preset) or config.model.d_model
    scale = config.optimizer.learning_rate_scale
    return scale / math.sqrt(d_model * config.optimizer.warmup_steps)


@pytest.mark.parametrize(
    "num_pairs, training, expected",
    [
        # Up to 5,000 pairs: configs/demo.toml's sizes; 3 minutes at 0.16 s per step (an
        # estimated 900 steps): a warm-up of two fifths of them.
        (700, {"minutes": 3}, ("tiny", None, 1000, 4096, 360)),
        (5000, {"train_steps": 1000}, ("tiny", None, 1000, 4096, 400)),
        (5000, {"train_steps": 500}, ("tiny", None, 1000, 4096, 200)),
        # A long budget: the row's own warm-up (demo.toml's 400), not a tenth of it.
        (700, {"minutes": 600}, ("tiny", None, 1000, 4096, 400)),
        # 5,000-100,000 pairs: the small and the wide rows, by their curves at the steps the
        # budget buys each (no step time measured here: the rows' quiet 2-core figures).
        # 60 minutes: wide ~6,857 steps at 0.42 s (42.4 validation BLEU) against small
        # ~9,931 at 0.29 s (39.8); two fifths of 6,857 are more than the row's 800.
        (31_000, {"minutes": 60}, ("", 192, 8000, 4096, 800)),
        # 30 minutes: wide ~3,428 (38.3) against small ~4,965 (37.9).
        (31_000, {"minutes": 30}, ("", 192, 8000, 4096, 800)),
        # A step budget: equal steps, where the wide row's curve is ahead at every count.
        (31_000, {"train_steps": 4000}, ("", 192, 8000, 4096, 800)),
        (31_000, {"train_steps": 1000}, ("", 192, 8000, 4096, 400)),
        # 5 minutes: wide ~571 steps (8.1) against small ~827 (11.5).
        (31_000, {"minutes": 5}, ("", 128, 8000, 4096, 330)),
        # More: the paper's base.
        (4_500_000, {"train_steps": 100_000}, ("base", None, 37000, 25000, 4000)),
    ],
)
def test_the_row_and_the_warmup_follow_the_corpus_and_the_budget(num_pairs, training, expected):
    config, line = resolved({"training": training}, num_pairs)
    model, data, optimizer = config.model, config.data, config.optimizer
    assert (model.preset, model.d_model, data.vocabulary_size, data.tokens_per_batch,
            optimizer.warmup_steps) == expected
    assert model.dropout == 0.1
    # A shorter warm-up keeps the source config's peak learning rate.
    row = recipe_row(num_pairs, config)
    assert peak(config) == pytest.approx(row.peak_learning_rate, rel=1e-3)
    # The averaged checkpoints span the last tenth of the (estimated) steps.
    steps, _ = estimated_steps(config, row)
    assert config.training.checkpoint_every == steps // 50
    assert line.startswith(f"recipe for {num_pairs:,} training pairs and training.")
    assert f"warm-up {optimizer.warmup_steps:,} steps" in line
    assert line.endswith("set any of them to override")


def test_a_time_budget_is_an_estimate_at_most_train_steps():
    tiny = RECIPE[0]
    config = TrainingConfig.from_dict({"training": {"minutes": 3}})
    assert estimated_steps(config, tiny) == (900, True)  # 3 × 60 × 0.8 / 0.16
    config = TrainingConfig.from_dict({"training": {"minutes": 3, "train_steps": 100}})
    assert estimated_steps(config, tiny) == (100, False)
    config, line = resolve_recipe(config, 700)
    assert config.optimizer.warmup_steps == 40
    assert "40% of the 100 steps" in line


def test_explicit_settings_win():
    # Named in the file, even at the default value (37,000 is the default).
    config, line = resolved(
        {"data": {"vocabulary_size": 37000}, "optimizer": {"warmup_steps": 4000},
         "training": {"minutes": 3}},
        700,
    )
    assert config.data.vocabulary_size == 37000 and config.optimizer.warmup_steps == 4000
    assert config.data.tokens_per_batch == 4096 and config.model.preset == "tiny"
    assert "vocabulary" not in line and "warm-up" not in line
    # A model named (any size) leaves the recipe's model and learning rate out; dropout still
    # comes from the recipe unless named.
    config, line = resolved({"model": {"d_model": 32}, "training": {"train_steps": 500}}, 700)
    assert config.model.d_model == 32 and config.model.preset == "tiny"
    assert config.optimizer.learning_rate_scale == 1.0
    assert "model" not in line.split(":", 1)[1] and "dropout 0.1" in line
    config, _ = resolved({"model": {"dropout": 0.3}, "training": {"train_steps": 500}}, 700)
    assert config.model.dropout == 0.3 and config.model.preset == "tiny"
    # Everything named: nothing chosen, no line.
    values = {
        "model": {"preset": "tiny", "dropout": 0.1},
        "data": {"vocabulary_size": 500, "tokens_per_batch": 1024},
        "optimizer": {"warmup_steps": 50},
        "training": {"train_steps": 500, "checkpoint_every": 100},
        "evaluation": {"alpha": 0.6},
    }
    config, line = resolved(values, 700)
    assert line is None and config.to_dict() == TrainingConfig.from_dict(values).to_dict()


def test_the_length_penalty_is_tuned_unless_one_is_named():
    config, line = resolved({"training": {"minutes": 60}}, 31_000)
    assert config.evaluation.alphas == RECIPE_ALPHAS and config.evaluation.alpha == 0.6
    assert ("the length penalty tuned on the validation split once trained (alpha 0.6, 0.8, "
            "1, ... 2 in turn, until 2 in a row do worse than the best)") in line
    for evaluation in ({"alpha": 1.0}, {"alphas": [0.6, 1.0]}, {"alphas": []}):
        config, line = resolved({"training": {"minutes": 60}, "evaluation": evaluation}, 31_000)
        assert (config.evaluation.alpha, config.evaluation.alphas) == (
            evaluation.get("alpha", 0.6), evaluation.get("alphas", [])
        )
        assert "length penalty" not in line
    config, line = resolved({"evaluation": {"alpha": 1.0}}, 31_000)  # no budget: no recipe
    assert config.evaluation.alphas == [] and line is None
    # Tuned on 200 validation pairs or more, not on fewer (`MIN_TUNING_PAIRS`).
    budget = TrainingConfig.from_dict({"training": {"minutes": 60}})
    config, line = resolve_recipe(budget, 31_000, num_validation=200)
    assert config.evaluation.alphas == RECIPE_ALPHAS
    config, line = resolve_recipe(budget, 700, num_validation=35)
    assert config.evaluation.alphas == [] and config.evaluation.alpha == 0.6
    assert "the length penalty untuned (35 validation pairs, fewer than the 200" in line


def test_the_line_names_the_row_only_for_what_the_row_chose():
    # configs/demo.toml's kind: its own model, vocabulary, batch and warm-up; the recipe
    # chooses the checkpoints and the length penalty, which owe nothing to the row's source.
    values = {
        "model": {"preset": "tiny", "dropout": 0.1},
        "data": {"vocabulary_size": 1000, "tokens_per_batch": 4096},
        "optimizer": {"warmup_steps": 200, "learning_rate_scale": 1.4},
        "training": {"train_steps": 600},
    }
    config, line = resolved(values, 20_000)
    assert line.startswith("recipe for 20,000 training pairs and training.train_steps = 600: "
                           "a checkpoint every 12 steps")
    assert "the small row" not in line and "Bible" not in line and "8,000" not in line
    assert config.data.vocabulary_size == 1000 and config.model.preset == "tiny"
    # Leave the vocabulary out: the row chose it, and the line says which row and why.
    del values["data"]["vocabulary_size"]
    _, line = resolved(values, 20_000)
    assert "(the small row: " in line and "vocabulary 8,000" in line


def test_no_budget_or_a_fine_tune_keeps_the_defaults():
    for values in ({"data": {"dataset": "number_words"}},
                   {"training": {"minutes": 3, "init_from": "runs/demo/translator.keras"}}):
        config, line = resolved(values, 700)
        assert line is None
        assert config.data.vocabulary_size == 37000 and config.optimizer.warmup_steps == 4000


def test_named_settings_survive_replace_and_files(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[data]\ndataset = "tsv"\npath = "x.tsv"\ntokens_per_batch = 25000\n'
                    "[training]\nminutes = 3\n")
    config = load_config(path, {"optimizer.warmup_steps": 4000})
    assert config.is_set("data.tokens_per_batch") and config.is_set("optimizer.warmup_steps")
    assert not config.is_set("data.vocabulary_size")
    config = config.replace(**{"data.vocabulary_size": 37000})
    assert config.is_set("data.vocabulary_size") and config.is_set("data.tokens_per_batch")
    # Built from the dataclasses: a value other than the default counts as set.
    assert not TrainingConfig().is_set("data.tokens_per_batch")


def test_a_run_prints_the_line_and_writes_the_chosen_settings(tiny_run, capsys):
    from keras_transformer.training import train

    # The tiny run without its sizes, vocabulary, batch, warm-up and checkpoints: 4 steps on
    # 400 pairs.
    values = tiny_run(training={"train_steps": 4})
    for section, key in (("data", "vocabulary_size"), ("data", "tokens_per_batch"),
                         ("optimizer", "warmup_steps"), ("model", "preset"),
                         ("training", "checkpoint_every"), ("training", "average_checkpoints"),
                         ("evaluation", "alphas")):
        del values[section][key]
    result = train(values, verbose=2)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("recipe")]
    assert len(lines) == 1
    assert lines[0].startswith("recipe for 400 training pairs and training.train_steps = 4 "
                               "(the tiny row: configs/demo.toml's sizes, the peak learning "
                               "rate measured on 630 Bible pairs): tiny model")
    with open(os.path.join(result.output_dir, "train_config.json")) as file:
        written = json.load(file)
    assert written["data"]["vocabulary_size"] == 1000
    assert written["data"]["tokens_per_batch"] == 4096
    assert written["optimizer"]["warmup_steps"] == 1  # two fifths of 4 steps, at least 1
    assert written["optimizer"]["learning_rate_scale"] == 0.035  # the row's peak, 0.0044
    assert written["training"]["checkpoint_every"] == 1
    assert result.metrics["averaged_checkpoints"] == [1, 2, 3, 4]
    assert written["model"]["preset"] == "tiny" and written["model"]["dropout"] == 0.1
    # 16 validation pairs: too few to tune the length penalty on.
    assert written["evaluation"]["alphas"] == [] and "alpha" not in result.metrics
    assert ("the length penalty untuned (16 validation pairs, fewer than the 200 it is tuned "
            "on)") in lines[0]
    assert result.config.to_dict() == written
    assert result.metrics["steps"] == 4


def test_a_cpu_with_bfloat16_instructions_gets_mixed_bfloat16_without_xla():
    config, line = resolve_recipe(
        TrainingConfig.from_dict({"training": {"minutes": 60}}), 31_000, bfloat16_cpu=True
    )
    assert config.training.mixed_precision == "bf16" and config.training.jit_compile is False
    assert "mixed bfloat16 without XLA (this CPU multiplies bfloat16" in line
    # Elsewhere, or with either setting named (even at its default), the config's stand.
    config, line = resolved({"training": {"minutes": 60}}, 31_000)
    assert config.training.mixed_precision == "" and config.training.jit_compile == "auto"
    assert "bfloat16" not in line
    for named in ({"mixed_precision": "none"}, {"jit_compile": "auto"}, {"jit_compile": True}):
        config, line = resolve_recipe(
            TrainingConfig.from_dict({"training": {"minutes": 60, **named}}), 31_000,
            bfloat16_cpu=True,
        )
        assert config.training.mixed_precision in ("", "none"), named
        assert config.training.jit_compile == named.get("jit_compile", "auto")
        assert "bfloat16" not in line
    # The tiny row's model: measured no faster in bf16.
    config, line = resolve_recipe(
        TrainingConfig.from_dict({"training": {"minutes": 3}}), 700, bfloat16_cpu=True
    )
    assert config.training.mixed_precision == "" and "bfloat16" not in line
    # A config that names its own model (configs/demo.toml's tiny one, 20,000 pairs: the
    # small row): bf16 was measured for the row's model, not for this one.
    config, line = resolve_recipe(
        TrainingConfig.from_dict({"model": {"preset": "tiny"}, "training": {"minutes": 5}}),
        20_000, bfloat16_cpu=True,
    )
    assert config.training.mixed_precision == "" and "bfloat16" not in line
    # No budget, or a fine-tune: no recipe, so float32 as before.
    config, line = resolve_recipe(TrainingConfig(), 31_000, bfloat16_cpu=True)
    assert line is None and config.training.mixed_precision == ""


def test_bfloat16_trains_faster_only_on_tensorflow_on_a_bfloat16_cpu(tmp_path, monkeypatch):
    import keras

    from keras_transformer.training import building

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 fma\n"
                       "processor\t: 1\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 fma\n")
    assert "avx512_bf16" in building.cpu_flags(cpuinfo)
    assert building.cpu_flags(tmp_path / "missing") == set()
    cpuinfo.write_text("flagsless line\nflags\n")  # no colon anywhere: no flags, no error
    assert building.cpu_flags(cpuinfo) == set()
    monkeypatch.delenv(building.CPU_BFLOAT16_VARIABLE, raising=False)
    monkeypatch.setattr(building, "cpu_flags", lambda: {"avx2", "avx512_bf16"})
    assert building.bfloat16_trains_faster() == (keras.backend.backend() == "tensorflow")
    monkeypatch.setattr(building, "cpu_flags", lambda: {"avx2", "amx_bf16"})
    assert building.bfloat16_trains_faster() == (keras.backend.backend() == "tensorflow")
    monkeypatch.setattr(building, "cpu_flags", lambda: {"avx2", "avx512f"})
    assert not building.bfloat16_trains_faster()
    monkeypatch.setattr(building, "cpu_flags", lambda: {"avx512_bf16"})
    monkeypatch.setenv(building.CPU_BFLOAT16_VARIABLE, "0")
    assert not building.bfloat16_trains_faster()


@pytest.mark.one_backend
def test_a_recipe_run_on_a_bfloat16_cpu_trains_in_bfloat16(tiny_run, monkeypatch, capsys):
    from keras_transformer.training import recipe, train, trainer

    monkeypatch.setattr(trainer, "bfloat16_trains_faster", lambda: True)
    # The tiny run's 400 pairs are the tiny row's, whose model bf16 does not speed up.
    tiny = dataclasses.replace(recipe.RECIPE[0], cpu_bfloat16=True)
    monkeypatch.setattr(recipe, "RECIPE", (tiny, *recipe.RECIPE[1:]))
    values = tiny_run(training={"train_steps": 4}, export={"translator": True})
    # The row's own model (bf16 is measured per row's model: a config's own one stays float32).
    del values["model"]["preset"]
    result = train(values, verbose=2)
    out = capsys.readouterr().out
    assert "mixed bfloat16 without XLA" in next(
        line for line in out.splitlines() if line.startswith("recipe")
    )
    assert "dtype policy mixed_bfloat16" in out
    with open(os.path.join(result.output_dir, "train_config.json")) as file:
        written = json.load(file)
    assert written["training"]["mixed_precision"] == "bf16"
    assert written["training"]["jit_compile"] is False
    assert result.model.dtype_policy.name == "mixed_bfloat16"
    assert result.model.jit_compile is False
    assert result.metrics["steps"] == 4
    # On a CPU it decodes with a float32 copy holding the trained weights, which it saves.
    from keras_transformer import Translator

    assert result.translator.model is not result.model
    assert result.translator.model.dtype_policy.name == "float32"
    for trained, decoding in zip(result.model.weights, result.translator.model.weights,
                                 strict=True):
        assert trained.path == decoding.path
        np.testing.assert_array_equal(np.asarray(trained), np.asarray(decoding))
    saved = Translator.load(os.path.join(result.output_dir, "translator.keras"))
    assert saved.model.dtype_policy.name == "float32"
    sources = ["one hundred", "seven"]
    assert saved(sources) == result.translator(sources)


@pytest.mark.parametrize(
    "training, share",
    [
        # A time budget and the recipe's spacing: spaced again from the measured step time.
        ({"minutes": 60}, 0.1),
        # The spacing named, or a step budget (its steps are known, not estimated): kept.
        ({"minutes": 60, "checkpoint_every": 4}, None),
        ({"minutes": 60, "average_checkpoints": 2}, None),
        ({}, None),
    ],
)
def test_a_time_budget_plans_the_recipes_checkpoint_spacing_again(tiny_run, training, share):
    from keras_transformer.files import unlock_directory
    from keras_transformer.training.trainer import prepare_run

    values = tiny_run()
    del values["training"]["checkpoint_every"], values["training"]["average_checkpoints"]
    values["training"].update(training)
    run = prepare_run(values, verbose=0)
    unlock_directory(run.paths.output_dir)
    assert run.checkpoint_share == share
    if share:  # The recipe's first spacing, from its estimate of the steps.
        assert run.config.training.checkpoint_every >= 1
