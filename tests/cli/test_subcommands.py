"""The command's list of subcommands is one table (`cli.SUBCOMMANDS`): the parser, the modules
and the package docstring's list all follow it."""

import importlib
import re

import pytest

from keras_transformer import cli

pytestmark = pytest.mark.one_backend


def test_every_subcommand_module_is_registered_and_listed():
    parser = cli.build_parser()
    choices = parser._subparsers._group_actions[0].choices
    listed = re.search(r"Each subcommand is a module of this package \(([^:]*):", cli.__doc__)
    assert listed, "the docstring's list of subcommand modules"
    names = re.findall(r"`(\w+)`", listed.group(1))
    assert names == list(cli.SUBCOMMANDS)
    for module, add_parser in cli.SUBCOMMANDS.items():
        loaded = importlib.import_module(f"keras_transformer.cli.{module}")
        assert add_parser.__module__ == loaded.__name__
        command = "import" if module == "importing" else module
        assert command in choices, command
    assert len(choices) == len(cli.SUBCOMMANDS)
