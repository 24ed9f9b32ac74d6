"""Checks the package's layering from its import statements (run by `make lint`).

Every module of `keras_transformer` belongs to one layer of `LAYERS` (the longest matching
prefix), listed from the bottom up. A module may import modules of its own layer or of lower
layers, never of a higher one; imports inside functions and under `if TYPE_CHECKING` count
too. The check fails on:

- an upward import (a module importing one of a higher layer);
- an import cycle (strongly connected modules; a package's `__init__` re-exporting its own
  submodules is no dependency);
- an import of another module's private name (`from m import _name`);
- an import inside a function of a package module that is not lazy for a reason: allowed
  only when the imported module loads a framework at import time (Keras, TensorFlow, JAX,
  PyTorch, CTranslate2, SentencePiece, ...) and the importing module does not, so that
  `keras-transformer --help`, config checks and `import keras_transformer` stay light;
- a module that belongs to no layer.

It prints the counts (and each problem), and exits 1 on any problem.

Usage: python .ci/check_imports.py [PACKAGE_DIRECTORY]   (default: keras_transformer)
"""

import ast
import os
import sys

# The layers, bottom first. Within a layer, modules may import each other (without cycles).
LAYERS = [
    # Base helpers: no model code.
    ["version", "_lazy", "_checks", "files", "buckets", "_backend", "_keras_compat", "engines.names"],
    # The file formats' layouts (names, settings, warm-up records): what readers import.
    [
        "formats.versions",
        "formats.saved_model.layout",
        "formats.ctranslate2.layout",
        "formats.marian.layout",
    ],
    # Keras objects.
    ["hyperparameters", "layers", "losses", "metrics", "schedules", "optimizers"],
    # The file formats, handed the classes they read and write.
    ["saving"],
    ["models"],
    ["decoding", "generation"],
    # Text, the built-in corpora, the tf.data pipeline (in this order: text imports neither).
    ["text"],
    ["datasets"],
    ["data"],
    # The translate loop every engine shares and the `Engine` protocol.
    ["translation"],
    # Whole texts around the translation contract (segmentation, HTML, files, detection),
    # handed the translate call; then the Keras engine.
    ["documents"],
    ["translator"],
    # The file formats, one folder each, both directions (writers, the Marian importer, the
    # CTranslate2 settings reader); `export` re-exports their public functions.
    ["formats"],
    ["export"],
    ["engines"],
    ["training"],
    # The HTTP service (`keras-transformer serve`), over the engines.
    ["serving"],
    ["cli"],
    # Entry points and the 0.2.0 import paths kept for one release (they import from above).
    [
        "__init__",
        "training.__main__",
        "training.cli",
        "presets",
        "ctranslate2",
        "data.buckets",
    ],
]
# Top-level imports that load a framework (or a heavy optional dependency).
FRAMEWORKS = {
    "keras",
    "tensorflow",
    "tensorflow_text",
    "jax",
    "torch",
    "ctranslate2",
    "sentencepiece",
    "h5py",
    "sacrebleu",
    "safetensors",
    "transformers",
    "starlette",
    "uvicorn",
    "prometheus_client",
    "lingua",
    # The `formats` extra (HTML and Word documents): optional, imported where used.
    "bs4",
    "docx",
}


def find_modules(root):
    """`{module name relative to the package: path}`; a package is named by its folder."""
    modules = {}
    for folder, _, files in os.walk(root):
        for file in files:
            if file.endswith(".py"):
                path = os.path.join(folder, file)
                name = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
                if name.endswith(".__init__"):
                    name = name[: -len(".__init__")]
                modules[name] = path
    return modules


def layer_of(name):
    """The index in `LAYERS` of the longest prefix of `name`, or `None`."""
    best, length = None, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > length:
                best, length = index, len(prefix)
    return best


def imports_of(name, path, package, modules):
    """`[(target module, imported name or None, lineno, inside a function, only for type
    checkers)]`; a framework is named `<name>`."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    is_package = path.endswith("__init__.py")
    base_parts = name.split(".") if is_package else name.split(".")[:-1]
    found = []

    def resolve(dotted):
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    def visit(node, in_function, typing=False):
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
            )
            typing_only = typing or (
                isinstance(child, ast.If) and getattr(child.test, "id", None) == "TYPE_CHECKING"
            )
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.split(".")[0] == package:
                        target = resolve(alias.name.partition(".")[2] or "__init__")
                        found.append((target, None, child.lineno, in_function, typing))
                    elif not in_function:
                        found.append((f"<{alias.name.split('.')[0]}>", None, child.lineno, False, typing))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    parts = base_parts[: len(base_parts) - child.level + 1]
                    dotted = ".".join(parts + ([child.module] if child.module else []))
                elif (child.module or "").split(".")[0] == package:
                    dotted = child.module.partition(".")[2]
                else:
                    if not in_function:
                        top = (child.module or "").split(".")[0]
                        found.append((f"<{top}>", None, child.lineno, False, typing))
                    continue
                for alias in child.names:
                    full = f"{dotted}.{alias.name}" if dotted else alias.name
                    if full in modules:
                        found.append((full, None, child.lineno, in_function, typing))
                    else:
                        target = resolve(dotted) or "__init__"
                        found.append((target, alias.name, child.lineno, in_function, typing))
            visit(child, nested, typing_only)

    visit(tree, False)
    return found


def check(root):
    package = os.path.basename(os.path.normpath(root))
    modules = find_modules(root)
    problems, edges, local_imports = [], {name: set() for name in modules}, []
    imports = {name: imports_of(name, path, package, modules) for name, path in modules.items()}

    # Whether `import keras_transformer.<name>` loads a framework: through its own top-level
    # imports, or those of the packages above it (which Python imports first). A fixpoint, so
    # that cycles cannot hide a framework.
    loads = dict.fromkeys(modules, False)
    changed = True
    while changed:
        changed = False
        for name in modules:
            parents = [".".join(name.split(".")[:end]) for end in range(1, name.count(".") + 1)]
            value = any(loads.get(parent, False) for parent in parents) or any(
                target.strip("<>") in FRAMEWORKS if target.startswith("<") else loads[target]
                for target, _, _, local, typing in imports[name]
                if not local and not typing
            )
            if value and not loads[name]:
                loads[name] = changed = True
    loads_framework = loads.__getitem__

    for name in sorted(modules):
        layer = layer_of(name)
        if layer is None:
            problems.append(f"unlayered: {package}.{name} is in no layer of LAYERS")
            continue
        for target, imported, line, local, _ in imports[name]:
            if target.startswith("<") or target == name:
                continue
            where = f"{modules[name]}:{line}"
            reexport = name == "__init__" or target.startswith(name + ".")
            if not (is_package_init(modules[name]) and reexport):
                edges[name].add(target)
            if imported and imported.startswith("_") and not imported.startswith("__"):
                problems.append(f"private: {where} imports {target}.{imported}")
            target_layer = layer_of(target)
            if target_layer is not None and target_layer > layer and name != "__init__":
                problems.append(
                    f"upward: {where} ({package}.{name}, layer {layer}) imports "
                    f"{package}.{target} (layer {target_layer})"
                )
            if local:
                local_imports.append((name, target))
                if not loads_framework(target) or loads_framework(name):
                    problems.append(
                        f"hidden: {where} imports {package}.{target} inside a function, but "
                        f"{'it loads no framework' if not loads_framework(target) else 'the importer loads one anyway'}: "
                        "import it at the top of the module"
                    )
    cycles = strongly_connected(edges)
    for cycle in cycles:
        problems.append("cycle: " + " <-> ".join(f"{package}.{name}" for name in cycle))
    upward = sum(problem.startswith("upward") for problem in problems)
    private = sum(problem.startswith("private") for problem in problems)
    return problems, {
        "modules": len(modules),
        "cycles": len(cycles),
        "upward imports": upward,
        "private cross-module imports": private,
        "package imports inside functions": len(local_imports),
    }


def is_package_init(path):
    return path.endswith("__init__.py")


def strongly_connected(edges):
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []
    sys.setrecursionlimit(10000)

    def connect(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return sorted(components)


def main(argv):
    root = argv[1] if len(argv) > 1 else "keras_transformer"
    problems, counts = check(root)
    for problem in problems:
        print(problem)
    print("; ".join(f"{key}: {value}" for key, value in counts.items()))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
