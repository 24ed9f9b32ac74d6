"""The fast-moving dependencies have an upper bound in pyproject.toml, and what is installed
(what `make install` and CI install) is inside every bound."""

import importlib.metadata
import os
import tomllib

import pytest
from packaging.requirements import Requirement

pytestmark = pytest.mark.one_backend

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Their minor (or, for keras, major) releases have broken or moved what the package uses.
FAST_MOVING = {"keras", "tensorflow", "tensorflow-text", "tensorflow-serving-api", "jax", "torch"}
FAST_MOVING |= {"ctranslate2"}


def requirements():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as file:
        project = tomllib.load(file)["project"]
    texts = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        texts += extra
    return [Requirement(text) for text in texts if not text.startswith(project["name"])]


def test_fast_moving_dependencies_have_an_upper_bound():
    found = {}
    for requirement in requirements():
        if requirement.name in FAST_MOVING:
            bounded = any(spec.operator in ("<", "<=", "==", "~=") for spec in requirement.specifier)
            found[requirement.name] = bounded
    assert found == dict.fromkeys(FAST_MOVING, True)


def test_installed_versions_are_inside_the_bounds():
    for requirement in requirements():
        try:
            version = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            continue  # An extra not installed here.
        assert requirement.specifier.contains(version, prereleases=True), (requirement, version)
