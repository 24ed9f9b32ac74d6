"""Writes one new version of a file or a directory with `keras_transformer.files` (no Keras).

Usage: `python reliability_writer.py KIND DIRECTORY VERSION [--no-exchange]`, KIND one of
`directory` (`DIRECTORY/best/` replaced by `atomic_directory`, two files holding VERSION) or
`file` (`DIRECTORY/state.json` replaced by `write_json`). `tests/test_reliability.py` runs it
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
else:
    raise SystemExit(f"unknown KIND {kind!r}")
