"""Moved in 0.4.0 to `keras_transformer.formats.saved_model.writer`: this path is that module
(the same object, so its names and any patch of them are shared) for one release."""

import sys

from keras_transformer.formats.saved_model import writer

sys.modules[__name__] = writer
