"""Every snippet of README.md and docs/ runs as written, as far as a cheap test can tell: each
TOML block and each file of configs/ is a valid training config, each Python block compiles,
and each `keras-transformer` command line parses with the command's own parser (options,
choices, required arguments). Running them (training, export) is the job of the tests of
each feature and of `make demo`."""

import pathlib
import re
import shlex
import tomllib

import pytest

from keras_transformer import cli
from keras_transformer.training.config import TrainingConfig, load_config

pytestmark = pytest.mark.one_backend  # Text of the docs: no backend involved.

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(language):
    """`(page:line, text)` of every fenced block of `language` in the pages."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            if match.group(1) == language:
                line = text.count("\n", 0, match.start()) + 1
                found.append((f"{page.relative_to(ROOT)}:{line}", match.group(2)))
    return found


def command_lines():
    """`(page:line, argv)` of every `keras-transformer ...` call in the shell blocks."""
    found = []
    for where, text in blocks("bash") + blocks("sh") + blocks("console") + blocks(""):
        for line in text.replace("\\\n", " ").splitlines():
            line = line.removeprefix("$ ")
            start = line.find("keras-transformer ")
            if start < 0 or line[:start].strip().startswith("#") or "pip install" in line:
                continue
            command = re.split(r"\s[|<>]\s|\s#", line[start:])[0]
            command = re.sub(r"\[([^\]]*)\]", r"\1", command)  # usage-style [--option V]
            found.append((f"{where} {command}", shlex.split(command)[1:]))
    return found


@pytest.mark.parametrize("where, text", blocks("toml"), ids=lambda value: str(value)[:40])
def test_toml_blocks_are_valid_configs(where, text):
    TrainingConfig.from_dict(tomllib.loads(text)).validate()


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.toml")), ids=lambda p: p.name)
def test_config_files_are_valid(path):
    load_config(str(path)).validate()


def test_python_blocks_compile():
    python = blocks("python")
    assert len(python) > 20
    for where, text in python:
        compile(text, where, "exec")


def test_command_lines_parse():
    commands = command_lines()
    assert {argv[0] for _, argv in commands if argv and not argv[0].startswith("-")} >= {
        "train",
        "translate",
        "export",
        "evaluate",
    }
    parser = cli.build_parser()
    failures = []
    for where, argv in commands:
        try:
            parser.parse_args(argv)
        except SystemExit:
            failures.append(where)
    assert failures == [], "documented commands that do not parse"
