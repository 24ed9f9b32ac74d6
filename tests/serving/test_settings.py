"""The serve settings are one table (`serving.settings.OPTIONS`): the command line's defaults
and help, the server's `Settings` and the batch size of `Batcher` and `ServedModel` follow it."""

import dataclasses
import inspect
import subprocess
import sys

import pytest

from keras_transformer import cli
from keras_transformer.serving.settings import DEFAULT_BATCH_SENTENCES, OPTIONS, Settings

pytestmark = pytest.mark.one_backend

# The flags whose value is the setting in another unit or form.
SCALES = {"batch_wait_ms": ("batch_wait", 1000), "announced_wait_ms": ("announced_wait", 1000)}
NOT_SETTINGS = {"model", "engine", "beam_sizes", "sampling", "debug", "framework_logs"}


def serve_parser():
    return cli.build_parser()._subparsers._group_actions[0].choices["serve"]


def test_settings_defaults_are_the_table():
    fields = {field.name: field.default for field in dataclasses.fields(Settings)}
    assert fields == {name: OPTIONS[name].default for name in fields}
    assert Settings().max_batch_sentences == DEFAULT_BATCH_SENTENCES == 32


def test_serve_flags_default_to_the_table_and_say_so():
    parser = serve_parser()
    seen = set()
    for action in parser._actions:
        if action.dest in NOT_SETTINGS or action.dest == "help":
            continue
        name, scale = SCALES.get(action.dest, (action.dest, None))
        name = {"cors_origin": "cors_origins"}.get(name, name)
        seen.add(name)
        default = OPTIONS[name].default
        if scale is not None:
            default *= scale
        assert action.default == (list(default) if name == "cors_origins" else default), name
        if "%(default)s" in OPTIONS[name].help:
            shown = format(action.default, "g") if isinstance(action.default, float) else None
            assert f"default: {shown or action.default}" in action.help, name
    # Every row is a flag: none of the table is dead.
    assert seen == set(OPTIONS)
    args = cli.build_parser().parse_args(["serve", "--model", "m"])
    assert args.max_batch_sentences == DEFAULT_BATCH_SENTENCES and args.segment is True


def test_settings_and_routes_load_no_framework():
    code = (
        "import sys\n"
        "import keras_transformer.serving.settings, keras_transformer.serving.routes\n"
        "import keras_transformer.serving.openapi\n"
        "import keras_transformer.cli.serve\n"
        "loaded = {m.split('.')[0] for m in sys.modules}\n"
        "print(sorted(loaded & {'keras', 'tensorflow', 'jax', 'torch', 'starlette'}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip() == "[]", proc.stderr[-2000:]


def test_batch_size_defaults_are_the_table():
    from keras_transformer.serving.batching import Batcher
    from keras_transformer.serving.models import ServedModel

    for function in (Batcher.__init__, ServedModel.__init__):
        default = inspect.signature(function).parameters["max_batch_sentences"].default
        assert default == DEFAULT_BATCH_SENTENCES, function
    for name in ("warmup", "background_warmup"):
        default = inspect.signature(ServedModel.__init__).parameters[name].default
        assert default == OPTIONS[name].default, name
