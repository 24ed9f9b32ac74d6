"""The rules of one setting: its type (the annotation) and its value (the field's `metadata`).

A section's field declares the values it accepts beside its default, and one loop
(`check_fields`) checks every field of every section, its type first:

```python
warmup_steps: int = dataclasses.field(default=4000, metadata={"min": 1})
```

The `metadata` keys (`RULES`), each with the words of its error:

- `min`: the smallest value (`an int >= 1`, `a number >= 0`); with `below`, the value is in
  `[min, below)` (`in [0, 1)`); with `max`, in `[min, max]` (`a number in [0, 1]`);
- `above`: a lower bound the value must exceed (`> 0`);
- `choices`: the values allowed (`one of ['wordpiece', 'sentencepiece']`; with booleans,
  `true, false or 'auto'`);
- `check`: `(predicate, words)`, for a rule that is no bound (a list of strings).

`None` passes the value rules (an `int | None` setting left unset). A rule that reads another
setting is no field's: `TrainingConfig.validate` holds those.
"""

import dataclasses
import tomllib
import types

from keras_transformer._checks import is_int, is_number


class ConfigError(ValueError):
    """An invalid training setting or config file.

    The message is one line naming the setting (`section.key`) and the received value, and
    the file when the setting was read from one: the `keras-transformer` command prints it
    as it is, without a traceback.
    """


# The keys of a field's `metadata` that `check_fields` reads.
RULES = ("min", "above", "below", "max", "choices", "check")

TYPE_NAMES = {
    int: "an int",
    float: "a number",
    str: "a string",
    bool: "true or false",
    list: "a list",
    dict: "a table",
    type(None): "unset",
}


def has_type(value, kind):
    """Whether `value` is of `kind` as a config reads it: a float setting takes an int, and
    neither an int nor a number setting takes a bool."""
    if kind is float:
        return is_number(value)
    if kind is int:
        return is_int(value)
    return isinstance(value, kind)


def check_fields(prefix, instance):
    """Checks every field of a config dataclass (sections recursively): its type against its
    annotation, then its value against the rules of its `metadata`."""
    for field in dataclasses.fields(instance):
        value = getattr(instance, field.name)
        name = prefix + field.name
        if dataclasses.is_dataclass(field.type):
            check_fields(name + ".", value)
            continue
        allowed = field_types(field)
        if not any(has_type(value, kind) for kind in allowed):
            expected = " or ".join(TYPE_NAMES[kind] for kind in allowed)
            raise ConfigError(f"`{name}` must be {expected}. Received: {name}={value!r}")
        if value is not None and not follows_rules(value, field.metadata):
            raise ConfigError(
                f"`{name}` must be {rules_text(field)}. Received: {name}={value!r}"
            )


def field_types(field):
    """The types a field's annotation allows (`int | None`: `(int, NoneType)`)."""
    return field.type.__args__ if isinstance(field.type, types.UnionType) else (field.type,)


def follows_rules(value, rules):
    """Whether `value` (of the field's type, not `None`) follows the rules of `metadata`."""
    if "choices" in rules and not any(
        value == choice and type(value) is type(choice) for choice in rules["choices"]
    ):
        return False
    if "min" in rules and value < rules["min"]:
        return False
    if "above" in rules and value <= rules["above"]:
        return False
    if "below" in rules and value >= rules["below"]:
        return False
    if "max" in rules and value > rules["max"]:
        return False
    return "check" not in rules or rules["check"][0](value)


def rules_text(field):
    """The words for the values a field accepts, as its error says them (`an int >= 1`)."""
    rules = field.metadata
    if "choices" in rules:
        return choices_text(rules["choices"])
    if "check" in rules:
        return rules["check"][1]
    bounds = bounds_text(field)
    if "below" in rules:
        return f"in {bounds}"
    if "above" in rules:
        return bounds
    kind = next(kind for kind in field_types(field) if kind is not type(None))
    return f"{TYPE_NAMES[kind]} {'in ' if 'max' in rules else ''}{bounds}"


def bounds_text(field):
    """A field's numeric bounds, as docs/training.md's table writes them (`>= 1`, `[0, 1)`,
    `> 0`); `""` for a field without any."""
    rules = field.metadata
    if "below" in rules:
        return f"[{rules['min']}, {rules['below']})"
    if "max" in rules:
        return f"[{rules['min']}, {rules['max']}]"
    if "above" in rules:
        return f"> {rules['above']}"
    if "min" in rules:
        return f">= {rules['min']}"
    return ""


def choices_text(choices):
    """`one of ['a', 'b']`; a choice of booleans as TOML spells them: `true, false or 'auto'`."""
    if not any(isinstance(choice, bool) for choice in choices):
        return f"one of {list(choices)}"
    words = [str(choice).lower() if isinstance(choice, bool) else repr(choice) for choice in choices]
    return f"{', '.join(words[:-1])} or {words[-1]}"


def check_choice(name, value, choices):
    """Raises `ConfigError` unless `value` is one of `choices` (a rule that reads another
    setting, or a value outside a section's fields)."""
    if value not in choices:
        raise ConfigError(f"`{name}` must be one of {list(choices)}. Received: {name}={value!r}")


def set_dotted(values, key, value):
    """Sets `values["section"]["field"] = value` for `key="section.field"` (in place)."""
    parts = key.split(".")
    if len(parts) > 2 or not all(parts):
        raise ConfigError(f"`key` must be 'field' or 'section.field'. Received: key={key!r}")
    if len(parts) == 2:
        section = values.setdefault(parts[0], {})
        if not isinstance(section, dict):
            raise ConfigError(f"`{parts[0]}` is not a section. Received: key={key!r}")
        section[parts[1]] = value
    else:
        values[parts[0]] = value


def parse_value(text):
    """Parses a command-line `--set` value as a TOML value, else keeps the string.

    Example:

    >>> parse_value("3"), parse_value("true"), parse_value("[1, 2]"), parse_value("tiny")
    (3, True, [1, 2], 'tiny')
    """
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text
