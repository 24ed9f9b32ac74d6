"""The package version (one place: `keras_transformer.__version__`, the wheel, presets)."""

__version__ = "0.4.0.dev0"
