"""Package attributes loaded on first use (PEP 562), so that importing a package loads no
framework: `keras-transformer --help` and config checks stay free of Keras and TensorFlow."""

import importlib
import sys


def lazy_attributes(package, exports, load_all=False):
    """`__getattr__` and `__dir__` for a package whose public names load on first use.

    Args:
        package: str. The package's `__name__`.
        exports: dict. Public name -> the submodule defining it, relative to `package`
            (e.g. `"layers"`); a name mapped to itself is that submodule.
        load_all: bool. The first use of any name imports every submodule of `exports`
            (so that, e.g., all registered Keras serializables are registered together).
            Defaults to `False`.

    Returns:
        `(__getattr__, __dir__)`, to assign at the package's top level.
    """

    def load(module):
        return importlib.import_module(f"{package}.{module}")

    def __getattr__(name):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        for module in sorted(set(exports.values())) if load_all else (exports[name],):
            load(module)
        module = load(exports[name])
        value = module if name == exports[name] else getattr(module, name)
        setattr(sys.modules[package], name, value)  # Later uses skip `__getattr__`.
        return value

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
