"""Tests for keras_transformer.text.normalization: `normalize_text` agrees with `normalize`."""

import pytest

tf = pytest.importorskip("tensorflow")
pytest.importorskip("tensorflow_text")

from keras_transformer.text import normalize, normalize_text  # noqa: E402

# Text normalization (TensorFlow Text ops whatever the Keras backend): one_backend.
pytestmark = pytest.mark.one_backend

TRICKY = [
    "  ¿Dónde\u00a0está?  ",
    "e\u0301 É ÅNGSTRÖM Straße İstanbul ΟΔΟΣ Ǆ ﬁ ½",
    # \v and U+0085 are controls (removed), U+2028 and U+3000 spaces, U+200B a format char.
    "a\vb\x85c\u200bd\u2028e\u3000f\tg\r\nh\x1fi\ufeffj",
    "\t\n leading and trailing \u2003",
    "",
]


@pytest.mark.parametrize("lowercase", [False, True])
@pytest.mark.parametrize("strip_accents", [False, True])
def test_normalize_text_agrees_with_normalize(lowercase, strip_accents):
    expected = [text.decode() for text in normalize(TRICKY, lowercase, strip_accents).numpy()]
    assert [normalize_text(text, lowercase, strip_accents) for text in TRICKY] == expected


def test_normalize_text_examples():
    assert normalize_text("a\vb\x85c\u200bd\u2028e") == "abcd e"
    assert normalize_text("  Está\u00a0BIEN ", lowercase=True, strip_accents=True) == "esta bien"
    assert normalize_text(b"se\xf1or caf\xc3\xa9") == "se\ufffdor café"
    assert normalize_text("Esta\u0301") == "Está"
