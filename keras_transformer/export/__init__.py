"""Exporters: a trained `Translator` written for other runtimes.

- `export_saved_model`: a TensorFlow SavedModel serving strings (TF Serving).
- `export_ctranslate2`: a CTranslate2 model directory.
- `import_marian` / `export_marian`: Hugging Face `MarianMTModel` directories (OPUS-MT) in and
  out, and Marian NMT `.npz` checkpoints in.
- `version_directory` / `latest_version`: the numbered layout a model server watches, shared
  by both.

Each lives with its format in `keras_transformer.formats` (one folder per format, both
directions); the 0.3.0 submodules (`export.saved_model`, `export.ctranslate2`,
`export.marian`, `export.marian_npz`, `export.versions`) stay importable for one release.

The engines that translate with these files are in `keras_transformer.engines`. Importing this
package imports Keras, not TensorFlow or CTranslate2: those load when an export runs.
"""

from keras_transformer.formats.checks import check_translator
from keras_transformer.formats.ctranslate2.layout import QUANTIZATIONS
from keras_transformer.formats.ctranslate2.writer import export_ctranslate2
from keras_transformer.formats.marian.hf import export_marian, import_marian
from keras_transformer.formats.saved_model.layout import (
    INPUT_NAME,
    METADATA_PATH,
    N_BEST_SIGNATURE_NAME,
    PREFIX_INPUT_NAME,
    PREFIX_SIGNATURE_NAME,
    SIGNATURE_NAME,
    WARMUP_PATH,
    read_metadata,
    read_warmup_requests,
    write_warmup_requests,
)
from keras_transformer.formats.saved_model.writer import (
    export_saved_model,
    make_serving_function,
    make_warmup_requests,
)
from keras_transformer.formats.versions import latest_version, version_directory

__all__ = [
    "INPUT_NAME",
    "METADATA_PATH",
    "N_BEST_SIGNATURE_NAME",
    "PREFIX_INPUT_NAME",
    "PREFIX_SIGNATURE_NAME",
    "QUANTIZATIONS",
    "SIGNATURE_NAME",
    "WARMUP_PATH",
    "check_translator",
    "export_ctranslate2",
    "export_marian",
    "export_saved_model",
    "latest_version",
    "import_marian",
    "make_serving_function",
    "make_warmup_requests",
    "read_metadata",
    "read_warmup_requests",
    "version_directory",
    "write_warmup_requests",
]
