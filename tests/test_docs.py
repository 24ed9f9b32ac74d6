"""Every public name is documented in the API reference, with an Example that runs."""

import doctest
import inspect
import pathlib
import types

import pytest

import keras_transformer

ROOT = pathlib.Path(__file__).resolve().parents[1]
PUBLIC = [
    name
    for name in keras_transformer.__all__
    if not isinstance(getattr(keras_transformer, name), types.ModuleType)
]


def api_reference():
    return "\n".join(p.read_text() for p in (ROOT / "docs" / "api").glob("*.md"))


@pytest.mark.parametrize("name", PUBLIC)
def test_public_name_is_in_api_reference_with_example(name):
    obj = getattr(keras_transformer, name)
    reference = api_reference()
    module = obj.__module__.rsplit(".", 1)[0]
    assert f".{name}" in reference or f"::: {obj.__module__}\n" in reference or (
        f"::: {module}\n" in reference
    ), f"{name} missing from docs/api"
    doc = inspect.getdoc(obj) or ""
    assert "Example:" in doc, f"{name} has no Example: section"


@pytest.mark.parametrize("name", PUBLIC)
def test_docstring_examples_run(name):
    obj = getattr(keras_transformer, name)
    module = inspect.getmodule(obj)
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = finder.find(obj, name, module=module, globs=dict(vars(module)))
    assert tests and any(t.examples for t in tests), f"{name}: no runnable example"
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{name}: {result.failed} failing example(s)"
