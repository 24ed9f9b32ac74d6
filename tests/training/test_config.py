"""The training config: paper defaults, TOML/YAML files, validation, command-line overrides."""

import argparse
import glob
import inspect
import json
import os
import re

import pytest

from keras_transformer.cli.train import add_train_arguments, config_from_args
from keras_transformer.training.config import (
    ConfigError,
    TrainingConfig,
    load_config,
    parse_value,
)
from tests.training.training_helpers import REPO

# Pure-Python configuration: one_backend.
pytestmark = pytest.mark.one_backend


def test_defaults_are_the_paper_recipe():
    config = TrainingConfig()
    assert (config.optimizer.beta_1, config.optimizer.beta_2, config.optimizer.epsilon) == (
        0.9,
        0.98,
        1e-9,
    )
    assert config.optimizer.warmup_steps == 4000
    assert config.training.label_smoothing == 0.1
    # The small preset (runnable on a CPU; "base" is the paper's), nothing overridden.
    assert config.model.preset == "tiny" and config.model.overrides() == {}
    assert (config.data.num_validation, config.data.num_test) == (None, None)  # sized by data
    assert config.training.average_checkpoints == 5
    assert (config.evaluation.beam_size, config.evaluation.alpha) == (4, 0.6)
    assert config.evaluation.extra_length == 50
    assert config.data.tokens_per_batch == 25000
    assert config.training.train_steps == 100000


def test_toml_and_yaml_files_give_the_same_config(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text(
        'output_dir = "out"\n[model]\npreset = "tiny"\ndropout = 0.2\n'
        "[training]\nminutes = 1.5\n[distribution]\ndevices = []\n"
    )
    yaml = tmp_path / "run.yaml"
    yaml.write_text(
        "output_dir: out\nmodel:\n  preset: tiny\n  dropout: 0.2\ntraining:\n  minutes: 1.5\n"
    )
    assert load_config(toml) == load_config(yaml)
    config = load_config(toml, overrides={"training.mixed_precision": "bf16"})
    assert config.model.overrides() == {"dropout": 0.2}
    assert config.training.mixed_precision == "bf16"


@pytest.mark.parametrize(
    "values, message",
    [
        ({"model": {"presett": "tiny"}}, "presett"),
        ({"trainin": {}}, "trainin"),
        ({"model": {"preset": "huge"}}, "model.preset='huge'"),
        ({"training": {"mixed_precision": "int8"}}, "training.mixed_precision='int8'"),
        ({"training": {"train_steps": 0}}, "training.train_steps=0"),
        ({"training": {"label_smoothing": 1.0}}, "training.label_smoothing=1.0"),
        ({"distribution": {"num_processes": 2}}, "coordinator_address"),
        ({"distribution": {"num_processes": 2, "process_id": 2, "coordinator_address": "a:1"}},
         "distribution.process_id=2"),
        ({"data": {"dataset": "tsv"}}, "data.path"),
        ({"data": {"tokenizer": "bpe"}}, "data.tokenizer='bpe'"),
        ({"data": {"sentencepiece_model": "a.model"}}, "data.tokenizer='wordpiece'"),
        # Every section is checked, types first: no TypeError from a comparison.
        ({"model": {"dropout": "high"}}, "model.dropout='high'"),
        ({"model": {"dropout": -0.1}}, "model.dropout=-0.1"),
        ({"model": {"preset": "tiny", "d_model": 30}}, "model.d_model=30, model.num_heads=4"),
        ({"model": {"preset": "", "num_heads": 5}}, "model.d_model=512, model.num_heads=5"),
        ({"model": {"activation": 3}}, "model.activation=3"),
        ({"model": {"norm_first": "yes"}}, "model.norm_first='yes'"),
        ({"model": {"layer_norm_epsilon": 0}}, "model.layer_norm_epsilon=0"),
        ({"model": {"seed": 1}}, "training.seed"),
        ({"optimizer": {"beta_1": "x"}}, "optimizer.beta_1='x'"),
        ({"optimizer": {"beta_2": 1.0}}, "optimizer.beta_2=1.0"),
        ({"optimizer": {"epsilon": 0}}, "optimizer.epsilon=0"),
        ({"optimizer": {"decay": "cosine"}}, "optimizer.decay='cosine'"),
        ({"optimizer": {"decay": "linear", "warmup_steps": 400}, "training": {"train_steps": 400}},
         "optimizer.warmup_steps=400, training.train_steps=400"),
        ({"distribution": {"devices": "gpu"}}, "distribution.devices='gpu'"),
        ({"distribution": {"devices": [0]}}, "distribution.devices=[0]"),
        ({"data": {"options": {"num_trains": 5}}}, "num_trains"),
        ({"data": {"options": {"num_train": "5"}}}, "data.options.num_train='5'"),
        ({"data": {"options": {"num_validation": 5}}}, "num_validation"),  # data.num_validation
        ({"data": {"dataset": "tsv", "path": "a.tsv", "options": {"lenient": 1}}},
         "data.options.lenient=1"),
        ({"data": {"bucket_boundaries": [16, 8]}}, "data.bucket_boundaries=[16, 8]"),
        ({"data": {"bucket_boundaries": [8.5]}}, "data.bucket_boundaries=[8.5]"),
        ({"data": {"max_length": "32"}}, "data.max_length='32'"),
        ({"training": {"jit_compile": "yes"}}, "training.jit_compile='yes'"),
        ({"export": {"translator": 1}}, "export.translator=1"),
        ({"evaluation": {"alphas": 0.6}}, "evaluation.alphas=0.6"),
        ({"evaluation": {"alphas": [0.6, -1]}}, "evaluation.alphas=[0.6, -1]"),
        ({"evaluation": {"alphas": [True]}}, "evaluation.alphas=[True]"),
    ],
)
def test_invalid_settings_raise_naming_them(values, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as error_info:
        TrainingConfig.from_dict(values)
    assert "\n" not in str(error_info.value)


def test_an_empty_preset_is_checked_with_the_transformer_defaults():
    # The config checks `preset = ""` with the base preset's sizes: they are the defaults.
    from keras_transformer.hyperparameters import PRESETS
    from keras_transformer.models import Transformer

    parameters = inspect.signature(Transformer).parameters
    assert {name: parameters[name].default for name in PRESETS["base"]} == PRESETS["base"]


def test_every_transformer_argument_is_a_model_setting():
    # One source of truth: `[model]` takes `Transformer`'s arguments with no list of its own,
    # except those a run sets from another setting, which are refused naming that setting.
    from keras_transformer.models import Transformer
    from keras_transformer.training.config import MODEL_ARGUMENTS_SET_ELSEWHERE

    parameters = dict(inspect.signature(Transformer).parameters)
    del parameters["kwargs"]
    assert set(MODEL_ARGUMENTS_SET_ELSEWHERE) < set(parameters)
    for name, parameter in parameters.items():
        if name in MODEL_ARGUMENTS_SET_ELSEWHERE:
            with pytest.raises(ConfigError, match=re.escape(MODEL_ARGUMENTS_SET_ELSEWHERE[name])):
                TrainingConfig.from_dict({"model": {name: 10}})
            continue
        # A valid value: the default, or for a `None` default an int (sizes) or a dtype name.
        value = {"projection_dtype": "float32"}.get(
            name, 3 if parameter.default is None else parameter.default
        )
        config = TrainingConfig.from_dict({"model": {"preset": "", name: value}})
        assert config.model.overrides() == {name: value}, name


def test_an_unknown_model_setting_is_named_with_the_accepted_ones():
    with pytest.raises(ConfigError) as error_info:
        TrainingConfig.from_dict({"model": {"preset": "tiny", "d_modle": 32}})
    message = str(error_info.value)
    assert "['d_modle'] in [model]" in message
    for name in ("preset", "d_model", "layer_norm_epsilon", "share_embeddings"):
        assert repr(name) in message.split("known:")[1], name


def test_the_model_section_round_trips_through_the_runs_json():
    # `train_config.json` (to_dict as JSON) is what a resumed run reads back.
    config = TrainingConfig.from_dict(
        {"model": {"preset": "tiny", "d_model": 32, "layer_norm_epsilon": 1e-5, "norm_first": True}}
    )
    again = TrainingConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config
    assert again.model.overrides() == {"d_model": 32, "norm_first": True, "layer_norm_epsilon": 1e-5}


def test_the_model_section_is_checked_by_the_transformers_own_checks():
    # One rule: the config reports what the constructor would raise, with `model.` names.
    from keras_transformer.models import Transformer

    with pytest.raises(ValueError, match=re.escape("Received: d_model=30, num_heads=4")):
        Transformer.from_preset("tiny", vocabulary_size=10, d_model=30)
    with pytest.raises(ValueError, match=re.escape("Received: dropout='high'")):
        Transformer.from_preset("tiny", vocabulary_size=10, dropout="high")


def test_valid_model_and_data_settings_pass():
    config = TrainingConfig.from_dict(
        {
            "model": {"preset": "tiny", "d_model": 32, "num_heads": 8, "activation": "gelu"},
            "data": {"options": {"num_train": 500, "max_number": 5000}, "bucket_boundaries": [8]},
            "optimizer": {"beta_1": 0, "epsilon": 1e-8},
            "distribution": {"devices": ["/cpu:0"]},
        }
    )
    assert config.model.overrides()["d_model"] == 32


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("syntax.toml", b'[model\npreset = "tiny"\n', "invalid TOML: Expected ']'"),
        ("syntax.yaml", b"model: [tiny\n", "invalid YAML: "),
        ("syntax.json", b'{"model": }', "invalid JSON: Expecting value"),
        ("latin1.toml", b'output_dir = "caf\xe9"\n', "invalid"),
        ("value.toml", b'[model]\ndropout = "high"\n', "`model.dropout` must be a number"),
        ("missing.toml", None, "cannot read the config file: No such file or directory"),
    ],
)
def test_file_errors_name_the_file(tmp_path, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError, match=re.escape(message)) as error_info:
        load_config(path)
    text = str(error_info.value)
    assert text.startswith(f"{path}: ") and "\n" not in text


def test_shipped_configs_load():
    paths = sorted(glob.glob(os.path.join(REPO, "configs", "*.toml")))
    assert paths
    for path in paths:
        load_config(path)


def test_command_line_overrides():
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    args = parser.parse_args(
        [
            "--config", os.path.join(REPO, "configs", "demo.toml"),
            "--minutes", "3",
            "--mixed-precision", "fp16",
            "--coordinator-address", "127.0.0.1:1234",
            "--num-processes", "2",
            "--process-id", "1",
            "--set", "model.d_model=32",
            "--set", "evaluation.samples=['uno', 'dos']",
        ]
    )
    config = config_from_args(args)
    assert config.training.minutes == 3.0
    assert config.training.mixed_precision == "fp16"
    assert config.distribution.coordinator_address == "127.0.0.1:1234"
    assert (config.distribution.num_processes, config.distribution.process_id) == (2, 1)
    assert config.model.d_model == 32
    assert config.evaluation.samples == ["uno", "dos"]
    assert config.model.preset == "tiny"  # from the file


def test_parse_value():
    assert parse_value("3") == 3
    assert parse_value("0.5") == 0.5
    assert parse_value("false") is False
    assert parse_value("runs/x") == "runs/x"
