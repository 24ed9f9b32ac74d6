"""Moved in 0.4.0: `version_directory` and `latest_version` to
`keras_transformer.formats.versions`, `check_translator` to `keras_transformer.formats.checks`;
this path re-exports them for one release."""

from keras_transformer.formats.checks import check_translator  # noqa: F401
from keras_transformer.formats.versions import latest_version, version_directory  # noqa: F401
