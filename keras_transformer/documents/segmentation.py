"""Sentence segmentation of the translation contract: a text cut into the sentences a model
translates, and a sentence too long for the model cut into pieces that fit, with the text's
layout kept for the way back.

The sentences come from `sentencex` (MIT, rules for about 240 languages, no model to
download), chosen by measurement on the Bible paragraphs (docs/decoding.md, "Whole texts":
it keeps Spanish abbreviations such as "Sr." whole where pysbd cut them). Each line is cut on
its own, and a sentence boundary falls only on whitespace, so that the words of the
sentences, in order, are the words of the text (`text.split()`): word alignments of the
sentences add up to the text's. `Segmented.join` puts translations back with the text's own
whitespace, line and paragraph breaks between them.

Framework-free: `sentencex` only.
"""

import dataclasses
import re

# Clause punctuation a long sentence is cut after (followed by whitespace), and the CJK
# punctuation it is cut after as it stands (no space follows it in those scripts).
_CLAUSE = re.compile(r"[,;:\u2014\u2013](?=\s)|[\u3001\uff0c\uff1b\uff1a\u3002\uff01\uff1f]")
_LINE_BREAKS = re.compile(r"\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
# The language whose rules run when none is given (or the code is unknown to sentencex,
# which then falls back along its own chains to these).
DEFAULT_LANGUAGE = "en"


class Segmenter:
    """Cuts one line of text into sentences, with `sentencex`'s rules for a language.

    Args:
        language: str or `None`. An ISO 639-1 code (`"es"`, `"en"`) or a LibreTranslate code
            (`"pt-BR"`, `"zh-Hans"`: its first part is used). Defaults to `None`:
            `DEFAULT_LANGUAGE`'s rules (terminal punctuation and English abbreviations).

    Example:

    >>> Segmenter("es").split("Sr. García llegó. Luego se fue.")
    ['Sr. García llegó.', 'Luego se fue.']
    """

    def __init__(self, language=None):
        if language is not None and (not isinstance(language, str) or not language.strip()):
            raise ValueError(
                "`language` must be a language code such as 'es', or None. "
                f"Received: language={language!r}"
            )
        self.language = language
        code = (language or DEFAULT_LANGUAGE).strip().replace("_", "-").split("-")[0].lower()
        self._code = code

    def split(self, text):
        """The sentences of one line (`text` without line breaks), stripped."""
        return [text[start:end] for start, end in self.spans(text)]

    def spans(self, text):
        """`[(start, end)]` of the sentences of `text`: stripped, each ending before whitespace
        (a boundary sentencex puts elsewhere is dropped: "etc.)" stays one word)."""
        import sentencex

        ends, cursor = [], 0
        for piece in sentencex.segment(self._code, text):
            core = piece.strip()
            if not core:
                continue
            found = text.find(core, cursor)
            if found < 0:  # Not a substring in order: no boundary from it.
                continue
            cursor = found + len(core)
            ends.append(cursor)
        cuts = [end for end in ends[:-1] if end < len(text) and text[end].isspace()]
        spans, start = [], 0
        for end in [*cuts, len(text)]:
            chunk = text[start:end]
            if chunk.strip():
                left = len(chunk) - len(chunk.lstrip())
                spans.append((start + left, start + len(chunk.rstrip())))
            start = end
        return spans


@dataclasses.dataclass
class Segmented:
    """A text cut into the strings to translate, and the layout between them.

    The text is `separators[0] + sentences[0] + separators[1] + ... + sentences[-1] +
    separators[-1]`: each separator is the whitespace (spaces, line and paragraph breaks)
    that stood there, `""` between pieces of a word cut as a last resort.

    Attributes:
        sentences: list of str. The strings to translate, in order (pieces of long sentences
            included), none empty, none with surrounding whitespace.
        groups: list of list of int. For each sentence of the text, the indices of its
            pieces in `sentences`.
        separators: list of str. `len(sentences) + 1` strings of whitespace.
    """

    sentences: list
    groups: list
    separators: list

    def join(self, translations):
        """The text with each entry of `sentences` replaced by its translation (stripped),
        in the text's own layout.

        Args:
            translations: one str per entry of `sentences`.
        """
        translations = list(translations)
        if len(translations) != len(self.sentences):
            raise ValueError(
                "`translations` must hold one translation per sentence. Received: "
                f"{len(translations)} translations for {len(self.sentences)} sentences"
            )
        parts = [self.separators[0]]
        for translation, separator in zip(translations, self.separators[1:], strict=True):
            parts += [translation.strip(), separator]
        return "".join(parts)

    def word_offsets(self):
        """For each entry of `sentences`, the index of its first word among the text's words
        (`text.split()`)."""
        offsets, words = [], 0
        for sentence, separator in zip(self.sentences, self.separators, strict=False):
            if separator == "" and offsets:
                words -= 1  # A word cut in two: the piece continues the previous word.
            offsets.append(max(words, 0))
            words += len(sentence.split())
        return offsets


def segment_text(text, language=None, *, max_tokens=None, count_tokens=None, segmenter=None):
    """Cuts `text` into its sentences, line by line, and the sentences longer than
    `max_tokens` into pieces (`split_long`).

    Args:
        text: str.
        language: str or `None`. As `Segmenter`'s.
        max_tokens: int or `None`. The most word pieces a piece may have (the model's
            `max_source_pieces`); `None`: sentences are not cut.
        count_tokens: callable `(str) -> int`, the word pieces of a string. Needed with
            `max_tokens`.
        segmenter: an object with `spans(line)` or `split(line)` (a `Segmenter`), to reuse
            one. Defaults to `None`: `Segmenter(language)`.

    Returns:
        `Segmented`, whose `join(sentences)` is `text`.

    Example:

    >>> found = segment_text("Hola. ¿Qué tal?\\n\\nBien.", "es")
    >>> found.sentences
    ['Hola.', '¿Qué tal?', 'Bien.']
    >>> found.join(["Hi.", "How are you?", "Fine."])
    'Hi. How are you?\\n\\nFine.'
    """
    if not isinstance(text, str):
        raise ValueError(f"`text` must be a str. Received: text={text!r:.80}")
    if max_tokens is not None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(
                f"`max_tokens` must be a positive int or None. Received: max_tokens={max_tokens!r}"
            )
        if not callable(count_tokens):
            raise ValueError(
                "`count_tokens` must be a callable (str -> int) when `max_tokens` is given. "
                f"Received: count_tokens={count_tokens!r}"
            )
    segmenter = segmenter or Segmenter(language)
    spans = []  # (start, end) of each piece in `text`, and its sentence number
    groups = []
    position = 0
    for line in _lines(text):
        for start, end in _line_spans(segmenter, line):
            sentence = line[start:end]
            pieces = [(0, len(sentence))]
            if max_tokens is not None and count_tokens(sentence) > max_tokens:
                pieces = _fit(sentence, max_tokens, count_tokens)
            groups.append(list(range(len(spans), len(spans) + len(pieces))))
            offset = position + start
            spans += [(offset + left, offset + right) for left, right in pieces]
        position += len(line)
    sentences = [text[start:end] for start, end in spans]
    bounds = [0] + [edge for span in spans for edge in span] + [len(text)]
    separators = [text[bounds[i] : bounds[i + 1]] for i in range(0, len(bounds), 2)]
    return Segmented(sentences, groups, separators)


def split_long(sentence, max_tokens, count_tokens):
    """`sentence` cut into the fewest pieces of at most `max_tokens` word pieces each: at
    clause punctuation first (`,;:` and dashes followed by a space; `、，；：。！？`), then at
    whitespace for a clause still too long, and a word longer than `max_tokens` by characters
    as a last resort. The pieces, with the whitespace between them, give `sentence` back.

    Args:
        sentence: str.
        max_tokens: int. The most word pieces of a piece.
        count_tokens: callable `(str) -> int`.

    Returns:
        list of str (one, `sentence` stripped, when it fits).

    Example:

    >>> split_long("uno dos, tres cuatro cinco", 3, lambda text: len(text.split()))
    ['uno dos,', 'tres cuatro cinco']
    """
    core = sentence.strip()
    if not core:
        return []
    return [core[start:end] for start, end in _fit(core, max_tokens, count_tokens)]


def _lines(text):
    """The lines of `text`, each with its line break (their concatenation is `text`)."""
    lines, start = [], 0
    for match in _LINE_BREAKS.finditer(text):
        lines.append(text[start : match.end()])
        start = match.end()
    if start < len(text) or not lines:
        lines.append(text[start:])
    return lines


def _line_spans(segmenter, line):
    """The sentence spans of one line (its line break is whitespace: never in a span)."""
    if hasattr(segmenter, "spans"):
        return segmenter.spans(line)
    spans, cursor = [], 0
    for sentence in segmenter.split(line):
        found = line.find(sentence, cursor)
        if found >= 0:
            spans.append((found, found + len(sentence)))
            cursor = found + len(sentence)
    return spans


def _fit(core, max_tokens, count, level=0):
    """`[(start, end)]` pieces of `core` (no surrounding whitespace) that each fit, cut at
    `level` 0 clause punctuation, 1 whitespace, 2 characters (see `split_long`)."""
    if count(core) <= max_tokens:
        return [(0, len(core))]
    if level == 0:
        ends = [match.end() for match in _CLAUSE.finditer(core) if match.end() < len(core)]
    elif level == 1:
        ends = [i for i in range(1, len(core)) if core[i].isspace() and not core[i - 1].isspace()]
    else:
        ends = list(range(1, len(core)))
    if not ends:
        return _fit(core, max_tokens, count, level + 1) if level < 2 else [(0, len(core))]
    bounds, pieces, start = [*ends, len(core)], [], 0
    while start < len(core):
        candidates = [end for end in bounds if end > start]
        low, high, best = 0, len(candidates) - 1, None
        while low <= high:  # The longest piece that fits (word pieces grow with length).
            middle = (low + high) // 2
            if count(core[start : candidates[middle]].strip()) <= max_tokens:
                best, low = middle, middle + 1
            else:
                high = middle - 1
        if best is None:  # Even the shortest piece is too long: cut it finer.
            end = candidates[0]
            piece = core[start:end]
            if level < 2:
                pieces += [
                    (start + left, start + right)
                    for left, right in _fit(piece, max_tokens, count, level + 1)
                ]
            else:
                pieces.append((start, end))  # One character: nothing finer.
        else:
            end = candidates[best]
            pieces.append((start, end))
        start = end
        while start < len(core) and core[start].isspace():
            start += 1
    return [(start, end) for start, end in pieces if start < end]
