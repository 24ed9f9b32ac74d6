"""Writes one new version of a file or a directory with `keras_transformer.files` (no Keras).

Usage: `python reliability_writer.py KIND DIRECTORY VERSION [KERAS_FILE] [--no-exchange]`, KIND one of
`directory` (`DIRECTORY/best/` replaced by `atomic_directory`, two files holding VERSION),
`file` (`DIRECTORY/state.json` replaced by `write_json`) or `preset` (`DIRECTORY/preset/`
replaced by `save_to_preset` of the test fixture's translator with beam size VERSION: this one
imports Keras). `tests/test_reliability.py` runs it
with `KERAS_TRANSFORMER_KILL_AFTER=N` for N = 1, 2, ... (a kill after each write and rename).
"""

import os
import sys

from keras_transformer import files

kind, directory, version = sys.argv[1], sys.argv[2], sys.argv[3]
if "--no-exchange" in sys.argv:
    files.USE_EXCHANGE = False
if kind == "directory":
    with files.atomic_directory(os.path.join(directory, "best")) as temporary:
        os.makedirs(temporary)
        for name in ("config.json", "model.weights.h5"):
            with open(os.path.join(temporary, name), "w") as file:
                file.write(version)
elif kind == "file":
    files.write_json(os.path.join(directory, "state.json"), {"version": version})
elif kind == "preset":
    from keras_transformer import Translator

    translator = Translator.load(sys.argv[4])
    translator.beam_size = int(version)
    translator.save_to_preset(os.path.join(directory, "preset"))
else:
    raise SystemExit(f"unknown KIND {kind!r}")
