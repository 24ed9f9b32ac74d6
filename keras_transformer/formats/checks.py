"""The check every exporter makes of the translator it is handed."""

from keras_transformer.translator import Translator


def check_translator(translator):
    """Raises a `ValueError` unless `translator` is a `keras_transformer.Translator`."""
    if not isinstance(translator, Translator):
        raise ValueError(
            "`translator` must be a `keras_transformer.Translator` or the path of a `.keras` "
            f"file or preset directory holding one. Received: translator={translator!r}"
        )
