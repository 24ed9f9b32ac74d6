"""Package attributes loaded on first use (PEP 562), so that importing a package loads no
framework: `keras-transformer --help` and config checks stay free of Keras and TensorFlow.

A lazy package must still register its Keras serializables before `keras.saving.load_model`
needs them, whichever of `keras` and the package is imported first: `after_keras_import`
runs the registration right after Keras is imported, by anyone (user code, TensorFlow's
`tf.keras`, a submodule of the package itself).
"""

import importlib
import importlib.abc
import sys
import threading
import warnings


def lazy_attributes(package, exports, load_all=()):
    """`__getattr__` and `__dir__` for a package whose public names load on first use.

    Args:
        package: str. The package's `__name__`.
        exports: dict. Public name -> the submodule defining it, relative to `package`
            (e.g. `"layers"`); a name mapped to itself is that submodule.
        load_all: tuple of str. Submodules, relative to `package`, that the first use of any
            name imports too (so that, e.g., all registered Keras serializables are
            registered together). Defaults to `()`.

    Returns:
        `(__getattr__, __dir__)`, to assign at the package's top level.
    """

    def load(module):
        return importlib.import_module(f"{package}.{module}")

    def __getattr__(name):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        for module in load_all:
            load(module)
        module = load(exports[name])
        value = module if name == exports[name] else getattr(module, name)
        setattr(sys.modules[package], name, value)  # Later uses skip `__getattr__`.
        return value

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__


def after_keras_import(package, modules):
    """Imports `modules` of `package` now if Keras is imported, else right after it is.

    Until Keras is imported, a finder on `sys.meta_path` wraps the loaders of `keras` and of
    `package`'s submodules. When the last of these finishes executing in a thread with no other
    of them running (so, after `import keras` by anyone, or after the outermost import of one of
    the package's own submodules that imported Keras), and Keras is loaded, the finder removes
    itself and imports `modules`. A failure there is a warning: it must not break `import keras`.

    Args:
        package: str. The package's `__name__`.
        modules: tuple of str. Submodules, relative to `package`, to import.
    """
    names = [f"{package}.{module}" for module in modules]
    if "keras" in sys.modules:
        for name in names:
            importlib.import_module(name)
        return
    if not any(isinstance(finder, _KerasImportHook) for finder in sys.meta_path):
        sys.meta_path.insert(0, _KerasImportHook(package, names))


class _KerasImportHook(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loaders that the other finders return (see above)."""

    def __init__(self, package, modules):
        self.package = package
        self.modules = modules
        self.running = threading.local()  # Wrapped modules executing in this thread.

    def find_spec(self, name, path=None, target=None):
        if name != "keras" and not name.startswith(f"{self.package}."):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if hasattr(spec.loader, "exec_module"):
                    spec.loader = _NotifyingLoader(spec.loader, self)
                return spec
        return None

    def executed(self):
        """Called when a wrapped module has executed."""
        if self.running.depth or sys.modules.get("keras") is None or self not in sys.meta_path:
            return
        try:
            sys.meta_path.remove(self)
        except ValueError:  # Removed by another thread meanwhile.
            return
        try:
            for name in self.modules:
                importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 - reported, and `import keras` goes on.
            warnings.warn(
                f"{self.package} could not register its Keras classes after `import keras`: "
                f"{error!r}. Import `{self.package}` again to see the full error.",
                RuntimeWarning,
                stacklevel=2,
            )


class _NotifyingLoader(importlib.abc.Loader):
    """A module's loader that tells the hook when the module has executed."""

    def __init__(self, loader, hook):
        self.loader = loader
        self.hook = hook

    def __getattr__(self, name):
        # Everything else (`get_code` for `python -m`, `get_source`, `is_package`, ...) is the
        # real loader's.
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        # The module keeps its real loader (for `importlib.resources`, `inspect` and reloads).
        module.__loader__ = module.__spec__.loader = self.loader
        running = self.hook.running
        running.depth = getattr(running, "depth", 0) + 1
        try:
            self.loader.exec_module(module)
        finally:
            running.depth -= 1
        self.hook.executed()
