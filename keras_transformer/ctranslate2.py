"""Moved in 0.3.0: the converter to `keras_transformer.export.ctranslate2`, the engine to
`keras_transformer.engines`; this path re-exports them for one release."""

from keras_transformer.engines import N_BEST_PATIENCE, PATIENCE, CTranslate2Translator  # noqa: F401
from keras_transformer.export.ctranslate2 import (  # noqa: F401
    METADATA_FILENAME,
    QUANTIZATIONS,
    export_ctranslate2,
    transformer_spec,
)
