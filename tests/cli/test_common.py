"""What every subcommand of `keras-transformer` shares (`keras_transformer.cli.common`): help,
usage errors, user errors as one line with the exit status 2, quiet framework logs, and no
framework loaded by `--help` or config checks."""

import os
import re
import subprocess
import sys

import pytest

from keras_transformer import cli

# The command's own logic does not depend on the Keras backend: it runs once (one_backend);
# the engines it calls are tested on every backend (tests/test_translator.py, tests/saving/).
pytestmark = pytest.mark.one_backend


def test_help_lists_the_subcommands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    output = capsys.readouterr().out
    assert "translate" in output and "export" in output
    with pytest.raises(SystemExit):
        cli.main(["translate", "--help"])
    assert "--model" in capsys.readouterr().out


def test_importing_the_cli_loads_no_tensorflow():
    code = (
        "import sys, keras_transformer.cli\n"
        "heavy = ('tensorflow', 'tensorflow_text', 'keras_transformer.export')\n"
        "print([name for name in heavy if name in sys.modules])"
    )
    # KERAS_BACKEND=jax: Keras then imports no TensorFlow, so nothing else would.
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "KERAS_BACKEND": "jax"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_bad_arguments_exit_with_usage(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["translate", "--model", "m", "--batch-size", "0", "x"])
    assert exit_info.value.code == 2
    assert "must be a positive int" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main([])


def test_help_and_config_checks_load_no_framework():
    code = (
        "import sys, time\n"
        "start = time.perf_counter()\n"
        "from keras_transformer import cli\n"
        "for argv in (['--help'], ['train', '--help'], ['translate', '--help']):\n"
        "    try:\n"
        "        cli.main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "from keras_transformer.training.config import TrainingConfig\n"
        "TrainingConfig.from_dict({'model': {'preset': 'tiny', 'd_model': 32},\n"
        "                          'data': {'options': {'num_train': 500}}})\n"
        "elapsed = time.perf_counter() - start\n"
        "frameworks = {'keras', 'tensorflow', 'tensorflow_text', 'jax', 'torch'}\n"
        "print(sorted(frameworks & {name.split('.')[0] for name in sys.modules}), elapsed)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    loaded, elapsed = result.stdout.strip().splitlines()[-1].rsplit(" ", 1)
    assert loaded == "[]"
    assert float(elapsed) < 3.0  # Keras and TensorFlow alone take 5-20 s to import.
    assert result.stderr == ""


def _train_config(tmp_path, text):
    path = tmp_path / "run.toml"
    path.write_text(f'output_dir = "{tmp_path / "run"}"\n{text}')
    return str(path)


def _tsv(tmp_path, content):
    path = tmp_path / "corpus.tsv"
    path.write_bytes(content)
    return f'[data]\ndataset = "tsv"\npath = "{path}"\n'


@pytest.mark.parametrize(
    "config, names_the_file, message",
    [
        ('[model]\npreset = "tiny"\ndropout = "high"\n', True, "model.dropout='high'"),
        ("[model]\ndropout = -0.5\n", True, "model.dropout=-0.5"),
        ('[model]\npreset = "tiny"\nd_model = 30\n', True, "model.d_model=30, model.num_heads=4"),
        ('[model]\nactivation = "relux"\n', True, "model.activation='relux'"),
        ('[optimizer]\nbeta_1 = "x"\n', True, "optimizer.beta_1='x'"),
        ('[distribution]\ndevices = "gpu"\n', True, "distribution.devices='gpu'"),
        ("[data]\noptions = {num_trains = 5}\n", True, "Unknown `data.options` ['num_trains']"),
        ("[data]\nbucket_boundaries = [16, 8]\n", True, "data.bucket_boundaries=[16, 8]"),
        ('[model\npreset = "tiny"\n', True, "invalid TOML: Expected ']'"),
        ('[data]\ndataset = "tsv"\npath = "missing.tsv"\n', True, "data.path='missing.tsv'"),
        (lambda tmp_path: _tsv(tmp_path, b"a\tb\nc\n"), False, "corpus.tsv, line 2: expected 2"),
        (lambda tmp_path: _tsv(tmp_path, b"a\tb\n\xff\tc\n"), False, "corpus.tsv, line 2: invalid"),
    ],
)
def test_user_errors_are_one_line_and_exit_with_2(
    tmp_path, capsys, config, names_the_file, message
):
    if callable(config):
        config = config(tmp_path)
    path = _train_config(tmp_path, config)
    status = cli.main(["train", "--config", path])
    errors = capsys.readouterr().err
    assert status == 2
    assert errors.startswith("keras-transformer: error: ") and errors.count("\n") == 1, errors
    assert message in errors
    if names_the_file:
        assert f"error: {path}: " in errors
    with pytest.raises(ValueError, match=re.escape(message)):  # --debug: the traceback.
        cli.main(["train", "--debug", "--config", path])


@pytest.mark.slow
def test_framework_logs_are_quiet_and_a_truncated_keras_file_is_named(
    small_keras_translator, tmp_path
):
    _, path = small_keras_translator
    truncated = tmp_path / "truncated.keras"
    truncated.write_bytes(path.read_bytes()[:4096])
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "keras_transformer.cli",
            "translate",
            "--model",
            str(truncated),
            "hola",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    # No TensorFlow start-up banner (cudart stub, cuInit, CPU features): just the error.
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"keras-transformer: error: cannot load the model {str(truncated)!r}: ValueError: "
        "`path` is not a valid .keras archive (a zip file); it may be truncated or still "
        f"being written. Received: path={str(truncated)!r}"
    ]


def test_framework_logs_are_quiet_when_the_user_set_the_log_level_too():
    """Issue 39: with `TF_CPP_MIN_LOG_LEVEL=3` already set, TensorFlow still logged 6 lines
    while loading (absl's notice, oneDNN, the cudart stub, twice): the level does not apply
    to them, so the import is quieted as without it."""
    result = subprocess.run(
        [sys.executable, "-m", "keras_transformer.cli", "translate", "--model", "/nonexistent", "x"],
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith("keras-transformer: error: cannot load the model '/nonexistent'")
