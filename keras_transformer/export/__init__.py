"""Exporters: a trained `Translator` written for other runtimes.

- `export_saved_model` (`saved_model`): a TensorFlow SavedModel serving strings (TF Serving).
- `export_ctranslate2` (`ctranslate2`): a CTranslate2 model directory.
- `import_marian` / `export_marian` (`marian`): Hugging Face `MarianMTModel` directories
  (OPUS-MT) in and out.
- `version_directory` / `latest_version` (`versions`): the numbered layout a model server
  watches, shared by both.

The engines that translate with these files are in `keras_transformer.engines`. Importing this
package imports Keras, not TensorFlow or CTranslate2: those load when an export runs.
"""

from keras_transformer.export.ctranslate2 import QUANTIZATIONS, export_ctranslate2
from keras_transformer.export.marian import export_marian, import_marian
from keras_transformer.export.saved_model import (
    INPUT_NAME,
    METADATA_PATH,
    N_BEST_SIGNATURE_NAME,
    PREFIX_INPUT_NAME,
    PREFIX_SIGNATURE_NAME,
    SIGNATURE_NAME,
    WARMUP_PATH,
    export_saved_model,
    make_serving_function,
    make_warmup_requests,
    read_metadata,
    read_warmup_requests,
    write_warmup_requests,
)
from keras_transformer.export.versions import check_translator, latest_version, version_directory

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
