"""Package-level contracts: imports without TensorFlow, registered public classes, every
third-party import declared by the extra of its code path."""

import ast
import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import tomllib

import keras
import pytest

import keras_transformer

# Packaging, imports and layering: one_backend (the backend-specific import checks start
# their own KERAS_BACKEND=jax / torch processes).
pytestmark = pytest.mark.one_backend

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE_DIR = os.path.join(ROOT, "keras_transformer")

# The extras a code path installs, by module (the longest matching prefix wins; `()` is the
# core `dependencies` alone). A module missing here is core.
EXTRAS_OF_MODULE = {
    "keras_transformer.cli": ("tensorflow",),  # translate / export; `train` is below
    "keras_transformer.data": ("tensorflow",),
    "keras_transformer.datasets.number_words": ("data",),
    "keras_transformer.datasets.sword_bible": ("data",),
    "keras_transformer.documents.detection": ("detect",),
    "keras_transformer.documents.docx": ("formats",),
    "keras_transformer.documents.html": ("formats",),
    "keras_transformer.engines": ("ctranslate2", "tensorflow"),
    "keras_transformer.export": ("tensorflow",),
    "keras_transformer.export.ctranslate2": ("ctranslate2", "tensorflow"),
    "keras_transformer.formats": ("tensorflow",),
    "keras_transformer.formats.ctranslate2": ("ctranslate2", "tensorflow"),
    # pytorch_model.bin (model.safetensors needs no PyTorch).
    "keras_transformer.formats.marian": ("marian", "tensorflow", "torch"),
    "keras_transformer.formats.marian.npz": ("marian",),
    "keras_transformer.saving.preset": ("hub",),  # hf:// and kaggle:// presets
    "keras_transformer.serving": ("serve", "ctranslate2", "tensorflow"),
    # pytorch_model.bin (model.safetensors needs no PyTorch).
    "keras_transformer.export.marian": ("marian", "tensorflow", "torch"),
    "keras_transformer.export.marian_npz": ("marian",),
    "keras_transformer.text": ("tensorflow",),
    "keras_transformer.text.sentencepiece": ("sentencepiece", "tensorflow"),
    "keras_transformer.training": ("train",),
}
# A backend module is imported only by code that runs under that `KERAS_BACKEND`, which needs
# the extra of the same name (guarded imports, as in `keras_transformer.generation`).
BACKEND_EXTRAS = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_import_needs_no_tensorflow(backend):
    code = (
        "import sys\n"
        "sys.modules['tensorflow'] = None  # any `import tensorflow` now fails\n"
        "import keras_transformer, keras_transformer.datasets, keras_transformer.decoding\n"
        "import keras_transformer.text, keras_transformer.data, keras_transformer.training\n"
        "import keras_transformer.export, keras_transformer.cli, keras_transformer.generation\n"
        "import keras_transformer.engines, keras_transformer.presets\n"
        "assert 'tensorflow' not in {m.split('.')[0] for m in sys.modules if sys.modules[m]}\n"
        "print('ok')\n"
    )
    env = dict(os.environ, KERAS_BACKEND=backend)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-3000:]


def test_public_classes_are_registered_serializables():
    for name in keras_transformer.__all__:
        obj = getattr(keras_transformer, name)
        if isinstance(obj, type):
            registered = keras.saving.get_registered_name(obj)
            assert registered == f"keras_transformer>{name}", registered
    assert keras_transformer.__version__


def _canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_distributions(extras):
    """Canonical names of the distributions that the core dependencies and `extras` install,
    following extras that require this project's own extras (`"name[tensorflow,data]"`)."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as file:
        project = tomllib.load(file)["project"]
    own_name = _canonical(project["name"])
    optional = project["optional-dependencies"]
    requirements, pending, seen = list(project["dependencies"]), list(extras), set()
    names = set()
    while requirements or pending:
        if pending:
            extra = pending.pop()
            if extra not in seen:
                assert extra in optional, f"pyproject.toml declares no extra {extra!r}"
                seen.add(extra)
                requirements += optional[extra]
            continue
        match = re.match(r"\s*([A-Za-z0-9._-]+)\s*(?:\[([^\]]*)\])?", requirements.pop())
        name = _canonical(match.group(1))
        if name == own_name:
            pending += [extra.strip() for extra in match.group(2).split(",")]
        else:
            names.add(name)
    return names


def third_party_imports(path):
    """`{top-level module: first line}` of every import in a file (top level and inside
    functions) that is neither the standard library nor this package."""
    with open(path, encoding="utf-8") as file:
        tree = ast.parse(file.read(), path)
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            modules = [node.module]
        else:
            continue
        for module in modules:
            top = module.split(".")[0]
            if top not in sys.stdlib_module_names and top != "keras_transformer":
                found.setdefault(top, node.lineno)
    return found


def package_modules(package_dir):
    """`(module name, path)` of every Python file of the package in `package_dir`."""
    for directory, _, files in os.walk(package_dir):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                relative = os.path.relpath(path, os.path.dirname(package_dir))[: -len(".py")]
                module = relative.replace(os.sep, ".").removesuffix(".__init__")
                yield module, path


def extras_of_module(module):
    matches = [
        prefix for prefix in EXTRAS_OF_MODULE if module == prefix or module.startswith(prefix + ".")
    ]
    return EXTRAS_OF_MODULE[max(matches, key=len)] if matches else ()


def undeclared_imports(package_dir=PACKAGE_DIR):
    """`module:line imports X (distribution D), not declared by ...` for every third-party
    import that the core dependencies and the extras of its code path do not declare."""
    distributions_of = importlib.metadata.packages_distributions()
    problems = []
    for module, path in package_modules(package_dir):
        extras = extras_of_module(module)
        for top, line in third_party_imports(path).items():
            allowed = declared_distributions(
                extras + ((BACKEND_EXTRAS[top],) if top in BACKEND_EXTRAS else ())
            )
            distributions = {_canonical(d) for d in distributions_of.get(top, [])}
            if not distributions & allowed:
                problems.append(
                    f"{module}:{line} imports {top} (distribution "
                    f"{sorted(distributions) or 'unknown'}), which neither the core "
                    f"dependencies nor the extras {list(extras)} declare"
                )
    return problems


def test_every_third_party_import_is_declared_by_its_code_path():
    modules = {module for module, _ in package_modules(PACKAGE_DIR)}
    assert set(EXTRAS_OF_MODULE) <= modules, set(EXTRAS_OF_MODULE) - modules  # a stale table
    assert undeclared_imports() == []


def test_an_undeclared_import_is_reported(tmp_path):
    # A stand-in package whose core `losses` imports tqdm (declared only by the `train`
    # extra), whose `text` imports sacrebleu (not in `tensorflow`) and whose `training`
    # imports what `train` declares.
    package = tmp_path / "keras_transformer"
    (package / "text").mkdir(parents=True)
    (package / "losses.py").write_text("def f():\n    import tqdm\n")
    (package / "text" / "__init__.py").write_text("import numpy\nimport sacrebleu\n")
    (package / "training.py").write_text("import yaml, tqdm, sacrebleu, tensorflow_text\n")
    problems = undeclared_imports(str(package))
    assert [p.split(" (")[0] for p in problems] == [
        "keras_transformer.losses:2 imports tqdm",
        "keras_transformer.text:2 imports sacrebleu",
    ], problems


def test_version_is_read_from_the_package():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as file:
        pyproject = tomllib.load(file)
    assert pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "keras_transformer.version.__version__"
    }
    # A PEP 440 release or development release (0.4.0.dev0 while 0.4's features land).
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+)?", keras_transformer.__version__)


def _check_imports():
    spec = importlib.util.spec_from_file_location(
        "check_imports", os.path.join(ROOT, ".ci", "check_imports.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_package_is_layered_without_cycles():
    problems, counts = _check_imports().check(PACKAGE_DIR)
    assert problems == [], problems
    assert counts["cycles"] == counts["upward imports"] == 0


def test_the_layering_check_finds_each_kind_of_problem(tmp_path):
    """A small tree with one problem of each kind: the check must name every one."""
    package = tmp_path / "keras_transformer"
    files = {
        "__init__.py": "",
        "_checks.py": "import os\n",
        # upward: a base helper importing the engines; private: a name with an underscore.
        "files.py": "from keras_transformer.engines import load_translator\n"
        "from keras_transformer._checks import _hidden\n",
        # a cycle between two modules of one layer, one of them through a function.
        "decoding.py": "from keras_transformer import generation\n",
        "generation.py": "def f():\n    from keras_transformer import decoding\n",
        "engines.py": "",
        "unknown_module.py": "",
    }
    package.mkdir()
    for name, text in files.items():
        (package / name).write_text(text)
    problems, counts = _check_imports().check(str(package))
    kinds = sorted(problem.split(":")[0] for problem in problems)
    assert kinds == ["cycle", "hidden", "private", "unlayered", "upward"], problems
    assert (
        counts["cycles"] == counts["upward imports"] == counts["private cross-module imports"] == 1
    )


def test_the_dev_extra_runs_the_notebooks_as_users_do():
    """Issue 39: `make install` (the `dev` extra) had nbmake (`make notebooks`) but not
    nbconvert, what users run: `jupyter nbconvert --to notebook --execute`."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as file:
        dev = tomllib.load(file)["project"]["optional-dependencies"]["dev"]
    names = {re.match(r"[A-Za-z0-9_.-]+", requirement).group().lower() for requirement in dev}
    assert {"nbmake", "nbconvert", "ipykernel"} <= names
