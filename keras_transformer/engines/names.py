"""The names of the engines and of their files, and of the warm-ups a server runs: plain
strings, framework-free, so that the command line's parsers import them at module top without
loading a framework (`keras_transformer.engines` itself loads its engines on first use)."""

# `load_translator`'s engines, `--engine`'s choices.
KERAS, SAVED_MODEL, CTRANSLATE2 = ENGINES = ("keras", "saved_model", "ctranslate2")
# What `serve --warmup` may ask for: the default search of every compiled shape, that and the
# target-prefix searches, or nothing.
DEFAULT_WARMUP, FULL_WARMUP, NO_WARMUP = WARMUPS = ("default", "full", "none")
# The file a training run (and its `best/`) writes the Keras Translator to.
KERAS_FILE = "translator.keras"
# A SavedModel's graph.
SAVED_MODEL_FILE = "saved_model.pb"
# A CTranslate2 export's settings (written beside CTranslate2's model.bin).
CTRANSLATE2_SETTINGS_FILE = "keras_transformer.json"
