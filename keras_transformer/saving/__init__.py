"""Reading and writing the package's files, for any class handed in: preset directories
(`preset`) and the checks a configuration passes before it is deserialized (`checks`).

This package imports no model class: `Transformer.from_preset`, `Translator.from_preset` and
their `save_to_preset` call it with their own class, as keras-hub's preset loader is called.
"""
