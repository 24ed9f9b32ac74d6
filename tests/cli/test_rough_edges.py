"""The command's rough edges a new user hit (issue 24, item 5): one meaning of `--verbose`,
progress without escape codes off a terminal, errors in the command's spellings, a training
run's directory where a model is expected."""

import argparse

import pytest

from keras_transformer import cli
from keras_transformer.cli.common import cli_spelling
from keras_transformer.cli.export import run_translator
from keras_transformer.cli.train import progress_mode
from keras_transformer.training.config import ConfigError

pytestmark = pytest.mark.one_backend  # Argument handling only.


def test_verbose_means_framework_logs_everywhere_and_progress_is_its_own_option(monkeypatch):
    parser = cli.build_parser()
    args = parser.parse_args(["train", "--verbose", "--print-config"])
    assert args.framework_logs is True and args.progress == "auto"
    args = parser.parse_args(["train", "--progress", "2"])
    assert progress_mode(args) == 2
    # 0.2.0's `train --verbose 2` is still the progress mode, not the logs flag.
    args = parser.parse_args(["train", "--verbose", "2"])
    assert progress_mode(args) == 2
    with pytest.raises(ConfigError, match="--progress"):
        progress_mode(parser.parse_args(["train", "--verbose", "loud"]))
    # `auto`: a bar on a terminal, one line per epoch (no escape codes) in a file or a pipe.
    args = parser.parse_args(["train"])
    monkeypatch.setattr("sys.stdout.isatty", lambda: False)
    assert progress_mode(args) == 2
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    assert progress_mode(args) == 1


def test_errors_use_the_command_spellings():
    message = (
        "`num_hypotheses` must be an int from 1 to the beam size (4). Received: num_hypotheses=5"
    )
    assert cli_spelling(message, {"num_hypotheses": "--n-best"}) == (
        "--n-best must be an int from 1 to the beam size (4). Received: --n-best 5"
    )
    assert (
        cli_spelling(
            "Version 1 already exists: export a new `version` or pass `overwrite=True`. "
            "Received: version=1",
            {"overwrite": "--overwrite", "version": "--version"},
        )
        == "Version 1 already exists: export a new --version or pass --overwrite. Received: --version 1"
    )


def test_export_takes_a_run_directory(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "translator.keras").write_bytes(b"")
    assert run_translator(str(run)) == str(run / "translator.keras")
    preset = tmp_path / "preset"
    preset.mkdir()
    (preset / "metadata.json").write_text("{}")
    (preset / "translator.keras").write_bytes(b"")
    assert run_translator(str(preset)) == str(preset)  # a preset stays a preset
    assert run_translator(str(tmp_path / "x.keras")) == str(tmp_path / "x.keras")
    assert isinstance(cli.build_parser(), argparse.ArgumentParser)
