"""docs/training.md's table of config keys against the code: every field, its default and its
bounds (the `metadata` of `keras_transformer.training.config`'s dataclasses)."""

import dataclasses
import inspect
import re
import tomllib

import pytest

from keras_transformer.training.config import SECTIONS, ConfigError, TrainingConfig
from keras_transformer.training.config.fields import bounds_text
from tests.training.training_helpers import REPO

# Pure Python but for the `Transformer` defaults of the `[model]` rows: one backend.
pytestmark = pytest.mark.one_backend

HEADER = "| field | default | bounds | meaning |"


def table_rows():
    """`(section, names, defaults, bounds)` of each field row of the table (`None` section:
    the top-level keys)."""
    with open(f"{REPO}/docs/training.md", encoding="utf-8") as file:
        lines = file.read().splitlines()
    start = lines.index(HEADER) + 2
    section, rows = None, []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip()[1:-1].split("|")]
        assert len(cells) == 4, line
        heading = re.fullmatch(r"\*\*`\[(\w+)\]`\*\*", cells[0])
        if heading:
            section = heading.group(1)
            continue
        if not cells[0].startswith("`"):
            continue  # "(not here)": the `Transformer` arguments a run sets elsewhere.
        names = re.findall(r"`(\w+)`", cells[0])
        defaults = re.findall(r"`([^`]*)`", cells[1]) or [cells[1]] * len(names)
        bounds = re.findall(r"`([^`]*)`", cells[2]) or [""] * len(names)
        assert len(defaults) == len(names) == len(bounds), line
        rows.append((section, names, defaults, bounds))
    return rows


def fields_of(section):
    owner = TrainingConfig if section is None else SECTIONS[section]
    return {
        field.name: field
        for field in dataclasses.fields(owner)
        if section is not None or field.name not in SECTIONS
    }


def default_of(field):
    if field.default is dataclasses.MISSING:
        return field.default_factory()
    return field.default


def parse_default(text):
    """A table default as a value: TOML (`"auto"`, `true`, `[]`, `1e-9`), `unset` is `None`."""
    if text == "unset":
        return None
    return tomllib.loads(f"value = {text}")["value"]


def test_the_table_has_every_setting_with_its_default_and_bounds():
    from keras_transformer.models import Transformer

    transformer_defaults = {
        name: parameter.default for name, parameter in inspect.signature(Transformer).parameters.items()
    }
    listed = {}
    for section, names, defaults, bounds in table_rows():
        fields = fields_of(section)
        for name, default, bound in zip(names, defaults, bounds, strict=True):
            key = f"{section}.{name}" if section else name
            assert name in fields, f"the table lists {key}, which is no setting"
            assert key not in listed, f"{key} is listed twice"
            listed[key] = default
            field = fields[name]
            assert bound == bounds_text(field), f"{key}: bounds {bound!r} in the table"
            if section == "model" and name != "preset":
                # A `Transformer` argument: unset in the config, the preset's value or the
                # `Transformer` default in the run.
                assert default_of(field) is None
                if default != "preset":
                    assert parse_default(default) == transformer_defaults[name], key
                continue
            value = parse_default(default)
            assert value == default_of(field) and type(value) in (type(default_of(field)), int), (
                f"{key}: default {default} in the table, {default_of(field)!r} in the code"
            )
    # Every setting but the `Transformer` arguments the table leaves to "any argument".
    for section in (None, *SECTIONS):
        for name in fields_of(section):
            key = f"{section}.{name}" if section else name
            assert key in listed or section == "model", f"{key} is missing from the table"


def test_a_bound_of_the_table_is_the_one_enforced():
    # The bounds the table shows are the ones `validate` refuses values outside of.
    for section, names, _, bounds in table_rows():
        for name, bound in zip(names, bounds, strict=True):
            if not bound.startswith(">= "):
                continue
            minimum = int(bound.removeprefix(">= "))
            key = f"{section}.{name}"
            with pytest.raises(ConfigError, match=re.escape(f"Received: {key}={minimum - 1}")):
                TrainingConfig.from_dict({section: {name: minimum - 1}})
