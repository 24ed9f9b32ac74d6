"""Every public name is documented in the API reference, with an Example that runs, and the
docs build fails on any warning."""

import doctest
import importlib.util
import inspect
import itertools
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


@pytest.mark.one_backend  # The docs, not the backend.
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


@pytest.mark.one_backend  # The docs, not the backend.
def test_make_docs_counts_every_warning():
    # `-q` drops warnings before `--strict` counts them: a quiet strict build always passes.
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = lines.index("docs: $(VENV)/.installed")
    recipe = " ".join(itertools.takewhile(lambda line: line.startswith("\t"), lines[start + 1 :]))
    recipe = recipe.split()
    assert "build" in recipe and "--strict" in recipe, recipe
    assert not {"-q", "--quiet"} & set(recipe), recipe


def _keras_docstrings():
    spec = importlib.util.spec_from_file_location("griffe_keras", ROOT / "docs" / "griffe_keras.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.one_backend  # The docs, not the backend.
@pytest.mark.parametrize("name", PUBLIC)
def test_api_reference_reads_keras_sections(name):
    griffe = pytest.importorskip("griffe")
    text = _keras_docstrings().keras_to_google(inspect.getdoc(getattr(keras_transformer, name)))
    sections = griffe.Docstring(text).parse("google", warnings=False)
    kinds = {section.kind.value: section for section in sections}
    examples = kinds["examples"].value
    assert kinds["examples"].title == "Example:"
    assert any(kind.value == "examples" and ">>>" in code for kind, code in examples) or (
        "```" in examples[0][1]
    ), f"{name}: the Example section is not rendered as code"
    if "\nCall arguments:\n" in inspect.getdoc(getattr(keras_transformer, name)):
        call = kinds["other parameters"]
        assert call.title == "Call arguments:"
        assert call.value and all(" " not in parameter.name for parameter in call.value)
