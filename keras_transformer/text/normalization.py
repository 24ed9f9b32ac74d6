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

`normalize_text` applies the same steps to one Python `str` without TensorFlow (the datasets use
it to decide which sentences are the same).
"""

import unicodedata

# Applied one character at a time: every kind of whitespace becomes a plain space.
WHITESPACE_REGEX = r"[\s\p{Z}]"
# Invisible control / format characters (whitespace controls are spaces by then).
CONTROL_REGEX = r"[\p{Cc}\p{Cf}]"
# What RE2's `\s` matches (ASCII only; \v and U+0085 are `\p{Cc}` and are removed instead).
RE2_WHITESPACE = frozenset("\t\n\f\r ")


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


def normalized_batches(sentences, lowercase=False, strip_accents=False, batch_size=4096):
    """Yields `normalize(batch)` for consecutive batches of a list of str (string tensors).

    Args:
        sentences: list of str.
        lowercase: bool. Defaults to `False`.
        strip_accents: bool. Defaults to `False`.
        batch_size: int. Sentences per TensorFlow call. Defaults to `4096`.
    """
    import tensorflow as tf

    for index in range(0, len(sentences), batch_size):
        batch = tf.constant(sentences[index : index + batch_size], dtype=tf.string)
        yield normalize(batch, lowercase, strip_accents)


def collapse_spaces(strings):
    """Collapses runs of spaces to one space and strips leading and trailing spaces."""
    import tensorflow as tf

    strings = tf.strings.regex_replace(strings, r" +", " ")
    return tf.strings.regex_replace(strings, r"^ | $", "")


def normalize_text(text, lowercase=False, strip_accents=False):
    """`normalize` for one Python string, in pure Python (no TensorFlow).

    The same steps in the same order, with `unicodedata` in place of ICU: invalid UTF-8 in
    `bytes` becomes U+FFFD, accents are optionally stripped (NFD, `Mn` removed), the text
    optionally lower-cased (`str.lower`), composed (NFC), whitespace becomes spaces, control and
    format characters are removed and spaces collapse.

    Args:
        text: str or bytes (UTF-8).
        lowercase: bool. Lower-case the text. Defaults to `False`.
        strip_accents: bool. Remove accents ("está" -> "esta"). Defaults to `False`.

    Returns:
        str.

    Example:

    >>> normalize_text("  ¿Dónde\\u00a0está?  ", lowercase=True, strip_accents=True)
    '¿donde esta?'
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if strip_accents:
        text = unicodedata.normalize("NFD", text).translate(_ACCENTS)
    if lowercase:
        text = text.lower()
    text = unicodedata.normalize("NFC", text).translate(_SPACES_AND_CONTROLS)
    return " ".join(text.split())  # only plain spaces are left to split on


class _CharacterTable(dict):
    """A `str.translate` table filled one code point at a time, on first sight."""

    def __init__(self, rule):
        super().__init__()
        self.rule = rule

    def __missing__(self, code):
        self[code] = self.rule(chr(code), unicodedata.category(chr(code)))
        return self[code]


def _accent_rule(char, category):
    return None if category == "Mn" else ord(char)  # None deletes the character


def _space_rule(char, category):
    if char in RE2_WHITESPACE or category.startswith("Z"):
        return " "
    return None if category in ("Cc", "Cf") else ord(char)


_ACCENTS = _CharacterTable(_accent_rule)
_SPACES_AND_CONTROLS = _CharacterTable(_space_rule)
