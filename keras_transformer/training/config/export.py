"""`[export]`: what the end of the run writes under the output directory."""

import dataclasses


@dataclasses.dataclass
class ExportConfig:
    """`[export]`: what the end of the run writes (atomically) under the output directory.

    Args:
        translator: bool. `translator.keras`, the `Translator` (model, tokenizer, search
            settings) for `Translator.load`. Defaults to `True`.
        saved_model: bool. `saved_model/`, a TensorFlow SavedModel serving strings to strings
            (`keras_transformer.export.export_saved_model`). Defaults to `True`.
    """

    translator: bool = True
    saved_model: bool = True
