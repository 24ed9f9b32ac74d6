"""The command's rough edges a new user hit (issue 24, item 5): one meaning of `--verbose`,
progress without escape codes off a terminal, errors in the command's spellings, a training
run's directory where a model is expected."""

import argparse
import json
import os
import subprocess
import sys

import pytest

from keras_transformer import cli, engines
from keras_transformer.cli.common import CLOSED_PIPE_STATUS, cli_spelling
from keras_transformer.cli.export import run_translator
from keras_transformer.cli.train import progress_mode
from keras_transformer.training.config import ConfigError
from tests.cli.helpers import Recorded, run_main

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


def test_train_takes_the_config_as_its_positional_argument(capsysbinary, tmp_path):
    """Issue 39: `train CONFIG`, as fairseq and OpenNMT users type it, is `train --config CONFIG`."""
    config = tmp_path / "run.toml"
    config.write_text('output_dir = "runs/positional"\n')
    status, lines, _ = run_main(capsysbinary, ["train", str(config), "--print-config"])
    assert status == 0 and json.loads("\n".join(lines))["output_dir"] == "runs/positional"
    status, lines, _ = run_main(
        capsysbinary, ["train", str(config), "--config", str(config), "--print-config"]
    )
    assert status == 0 and json.loads("\n".join(lines))["output_dir"] == "runs/positional"
    other = tmp_path / "other.toml"
    other.write_text("")
    status, lines, error = run_main(capsysbinary, ["train", "--config", str(other), str(config)])
    assert status == 2 and lines == []
    assert f"--config {other} and CONFIG {config} differ" in error


def test_train_help_shows_verbose_as_a_flag(capsys):
    """Issue 39: `train --help` showed `--verbose []` (its hidden value is 0.2.0's progress)."""
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    help_text = capsys.readouterr().out
    assert "[--verbose]" in help_text and "\n  --verbose  " in help_text
    assert "[]" not in help_text and "CONFIG" in help_text


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
def test_a_closed_pipe_ends_the_command_quietly(unbuffered):
    """Issue 39: `train --print-config | head` ended with "[Errno 32] Broken pipe" (status 2),
    `--help | head` with Python's "Exception ignored" (status 120). The reader is gone before
    the command writes: the pipe's read end is closed first. `TF_CPP_MIN_LOG_LEVEL=0` keeps
    TensorFlow unloaded (seconds)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0"}
    env.pop("PYTHONUNBUFFERED", None)
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    for argv, expected in ((["train", "--print-config"], CLOSED_PIPE_STATUS), (["--help"], 0)):
        read, write = os.pipe()
        os.close(read)
        try:
            result = subprocess.run(
                [sys.executable, "-m", "keras_transformer.cli", *argv],
                stdout=write,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
        finally:
            os.close(write)
        assert (result.returncode, result.stderr) == (expected, ""), argv


def test_translate_into_a_closed_pipe_stops_quietly(capsysbinary, monkeypatch):
    """Issue 39: every subcommand that prints (here `translate`) stops at a closed pipe without
    an error."""
    monkeypatch.setattr(engines, "load_translator", lambda path, engine: Recorded())
    read, write = os.pipe()
    os.close(read)
    with open(write, "w") as closed:
        monkeypatch.setattr(sys, "stdout", closed)
        status = cli.main(["translate", "--model", "any", "hola", "adiós"])
        monkeypatch.undo()
    assert status == CLOSED_PIPE_STATUS
    assert capsysbinary.readouterr().err == b""


def test_export_help_names_every_format(capsys):
    """Issue 39: `export --help` (and the list of commands) named --format ctranslate2 only."""
    for argv in (["export", "--help"], ["--help"]):
        with pytest.raises(SystemExit):
            cli.main(argv)
        help_text = " ".join(capsys.readouterr().out.split())
        assert "--format ctranslate2" in help_text and "--format marian" in help_text
