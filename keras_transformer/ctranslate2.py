"""Moved in 0.3.0: the converter to `keras_transformer.export` (0.4.0:
`keras_transformer.formats.ctranslate2`), the engine to `keras_transformer.engines`; this path
re-exports them for one release."""

from keras_transformer.engines import N_BEST_PATIENCE, PATIENCE, CTranslate2Translator  # noqa: F401
from keras_transformer.formats.ctranslate2.layout import (  # noqa: F401
    METADATA_FILENAME,
    QUANTIZATIONS,
)
from keras_transformer.formats.ctranslate2.writer import (  # noqa: F401
    export_ctranslate2,
    transformer_spec,
)
