"""Griffe extension: read the package's Keras-style docstrings as Google-style sections.

Keras writes two sections that Griffe's Google parser does not know:

- `Call arguments:`, laid out like `Args:`, documents `call()`. It becomes an "Other
  Parameters" section titled "Call arguments" (rendered as a list, and not checked against
  `__init__`'s signature).
- `Example:` is followed by a blank line and an unindented doctest or code fence, up to the
  next section or the end. Its body is indented under `Examples: Example:` so that Griffe
  renders the doctest as code (left alone, Markdown reads `>>>` as nested quotes).

A class that defines `__new__` and inherits no `__init__` (a `NamedTuple` with extra
arguments) is constructed through `__new__`, as `inspect.signature` reads it: its `Args:` are
checked against, and its signature shown from, `__new__`.

The types that Keras writes in the description (`name: int. Meaning.`) stay there; mkdocs.yml
turns off the warnings about parameters without annotations.
"""

import re

import griffe

_SECTION = re.compile(r"^[A-Z][\w ]*:(\s.*)?$")
_EXAMPLE = re.compile(r"^Examples?:$")


def _is_section(lines, index):
    """Whether `lines[index]` starts a section: `Title:` then an indented line."""
    return (
        bool(_SECTION.match(lines[index]))
        and index + 1 < len(lines)
        and lines[index + 1].startswith(" ")
    )


def keras_to_google(text):
    """Rewrites the Keras-only sections of a (dedented) docstring into Google-style ones."""
    lines = text.split("\n")
    out = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if line == "Call arguments:":
            out.append("Other Parameters: Call arguments:")
        elif _EXAMPLE.match(line) and index + 1 < len(lines) and not lines[index + 1].strip():
            out.append(f"Examples: {line}")
            index += 2  # Griffe wants no blank line under a section title.
            while index < len(lines) and not _is_section(lines, index):
                out.append(f"    {lines[index]}" if lines[index].strip() else "")
                index += 1
            continue
        elif _EXAMPLE.match(line) and _is_section(lines, index):
            out.append(f"Examples: {line}")  # Already indented, Google-style.
        else:
            out.append(line)
        index += 1
    return "\n".join(out)


class KerasDocstrings(griffe.Extension):
    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = keras_to_google(obj.docstring.value)

    def on_class(self, *, cls, **kwargs):
        if "__new__" in cls.members and "__init__" not in cls.all_members:
            cls.set_member("__init__", griffe.Alias("__init__", cls.members["__new__"], parent=cls))
