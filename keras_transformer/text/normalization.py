"""Text normalization shared by tokenizer training and tokenization.

TensorFlow is imported lazily, inside the functions, so importing this module does not import
TensorFlow. The functions only use TensorFlow ops (no `tf.py_function`), so they work inside
`tf.function` and `tf.data`.

Normalization, in order:

1. invalid UTF-8 bytes become U+FFFD (so malformed input never crashes the tokenizer);
2. optionally strip accents (NFD, drop the combining marks `\\p{Mn}`);
3. optionally lower-case (full Unicode lower-casing);
4. Unicode NFC (composed accents: "e" + U+0301 becomes "é");
5. every whitespace character (`\\s`, `\\p{Z}`, e.g. no-break space) becomes a space, invisible
   control and format characters (`\\p{Cc}`, `\\p{Cf}`, e.g. a zero-width space) are removed,
   runs of spaces collapse to one and leading/trailing spaces are stripped.

`Tokenizer.detokenize(Tokenizer.tokenize(x)) == normalize(x)` for every `x` whose characters
were seen when the vocabulary was trained.
"""

# Applied one character at a time: every kind of whitespace becomes a plain space.
WHITESPACE_REGEX = r"[\s\p{Z}]"
# Invisible control / format characters (whitespace controls are spaces by then).
CONTROL_REGEX = r"[\p{Cc}\p{Cf}]"


def normalize(strings, lowercase=False, strip_accents=False):
    """Normalizes a string tensor the way `Tokenizer` does before splitting it into words.

    Args:
        strings: `tf.Tensor` of dtype string (any shape), or anything
            `tf.convert_to_tensor` accepts (a Python `str` or list of `str`).
        lowercase: bool. Lower-case the text. Defaults to `False`.
        strip_accents: bool. Remove accents ("está" -> "esta"). Defaults to `False`.

    Returns:
        A string `tf.Tensor` with the shape of `strings`.

    Example:

    >>> normalize("  ¿Dónde\\u00a0está?  ").numpy().decode()
    '¿Dónde está?'
    """
    import tensorflow as tf
    import tensorflow_text as tf_text

    strings = tf.convert_to_tensor(strings, dtype=tf.string)
    strings = tf.strings.unicode_transcode(
        strings, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
    )
    if strip_accents:
        strings = tf_text.normalize_utf8(strings, "NFD")
        strings = tf.strings.regex_replace(strings, r"\p{Mn}", "")
    if lowercase:
        strings = tf.strings.lower(strings, encoding="utf-8")
    strings = tf_text.normalize_utf8(strings, "NFC")
    strings = tf.strings.regex_replace(strings, WHITESPACE_REGEX, " ")
    strings = tf.strings.regex_replace(strings, CONTROL_REGEX, "")
    return collapse_spaces(strings)


def collapse_spaces(strings):
    """Collapses runs of spaces to one space and strips leading and trailing spaces."""
    import tensorflow as tf

    strings = tf.strings.regex_replace(strings, r" +", " ")
    return tf.strings.regex_replace(strings, r"^ | $", "")
