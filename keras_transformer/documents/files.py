"""Whole files through a translate call: plain text, HTML, Word (.docx) and SubRip subtitles
(.srt), chosen by the file name's extension.

`translate_file(data, filename, translate, target)` reads the file's bytes, hands the texts it
holds to `translate` in one call, and writes the same kind of file back, with every byte that
is not translated text kept as it was:

| extension | what is translated | what is kept |
| --- | --- | --- |
| `.txt` | the whole text, as one text | a byte order mark, CRLF line breaks |
| `.html`, `.htm` | the text of the page (`documents.html`) | tags, attributes, entities |
| `.docx` | the paragraphs' runs (`documents.docx`) | styles, tables, everything else |
| `.srt` | each cue's text (its lines joined) | indices, timings, blank lines |

`translate` is the translation contract's whole-text call: `translate(texts) -> results`,
one result per text whose `text` is its translation (the caller segments, batches and joins).
Each file makes one call. A subtitle's translation is wrapped again as subtitles are: at most
two lines of about `SUBTITLE_LINE` characters, balanced (a longer one gets as many lines as it
needs: nothing is cut). A cue whose every line starts with `-` (a dialogue) keeps one line per
speaker.

Gettext `.po` and XLIFF are not read: the one maintained library for both, translate-toolkit,
is GPL-2.0-or-later.

Framework-free: the HTML and Word modules are imported only for their files (each needs its
own optional dependency).
"""

import importlib
import os
import re
import textwrap

# Extension -> media type of the translated file.
FORMATS = {
    ".txt": "text/plain; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".htm": "text/html; charset=utf-8",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".srt": "application/x-subrip; charset=utf-8",
}
# The module of `keras_transformer.documents` and its function that translate a format, for
# the formats that need an optional dependency.
_FORMAT_MODULES = {
    ".html": ("html", "translate_html"),
    ".htm": ("html", "translate_html"),
    ".docx": ("docx", "translate_docx"),
}
# Characters per subtitle line (the BBC's and Netflix's 42 for Latin scripts).
SUBTITLE_LINE = 42
BYTE_ORDER_MARK = "\ufeff"
# `00:00:01,600 --> 00:00:04,200` (a dot accepted for the comma, hours of any width), and
# whatever follows (position coordinates).
_TIMING = re.compile(r"^\s*\d+:\d{1,2}:\d{1,2}[,.]\d{1,3}\s*-->\s*\d+:\d{1,2}:\d{1,2}[,.]\d{1,3}")


def available_formats():
    """The extensions whose files can be translated here, sorted (`.html`/`.htm` and
    `.docx` only where their modules and dependencies are installed)."""
    return sorted(extension for extension in FORMATS if _translator_of(extension) is not None)


def extension_of(filename):
    """The lower-cased extension of `filename` (`"report.DOCX"` -> `".docx"`)."""
    return os.path.splitext(filename)[1].lower()


def output_name(filename, target=None):
    """The translated file's name: `name.<target>.ext` (`name.translated.ext` without a
    target), from the base name of `filename` (no folder of it kept)."""
    base = re.split(r"[\\/]", filename)[-1]
    stem, extension = os.path.splitext(base)
    return f"{stem}.{target or 'translated'}{extension}"


def translate_file(data, filename, translate, target=None):
    """Translates a file's bytes.

    Args:
        data: bytes. The file.
        filename: str. Its name; the extension chooses the format (`FORMATS`).
        translate: callable `(list of str) -> list of results` with a `text` each.
        target: str or `None`. The target language, for the output's name.

    Returns:
        `(bytes, output file name)`.

    Raises:
        ValueError: an unknown extension, a format whose dependency is missing, text that
            is not UTF-8, or a `.srt` without a cue.
    """
    if not isinstance(data, bytes):
        raise ValueError(f"data must be bytes. Received: type={type(data).__name__}")
    extension = extension_of(filename)
    if extension not in FORMATS:
        raise ValueError(
            f"Cannot translate a file of extension {extension or '(none)'!r}: the supported "
            f"extensions are {', '.join(available_formats())}. Received: filename={filename!r}"
        )
    function = _translator_of(extension)
    if function is None:
        module = _FORMAT_MODULES[extension][0]
        raise ValueError(
            f"Cannot translate {extension} files here: they need "
            f"keras_transformer.documents.{module} and its dependencies (pip install "
            f"'keras-transformer-nmt[serve]'); the extensions available here are "
            f"{', '.join(available_formats())}. Received: filename={filename!r}"
        )
    return function(data, filename, translate), output_name(filename, target)


def _translator_of(extension):
    """The function `(data, filename, translate) -> bytes` that translates files of
    `extension`, or `None` when its module or its dependency is not installed."""
    if extension == ".txt":
        return _translate_text_file
    if extension == ".srt":
        return _translate_subtitles
    module_name, function_name = _FORMAT_MODULES[extension]
    try:
        # By name: the module and its dependency (beautifulsoup4, python-docx) are optional.
        module = importlib.import_module(f"keras_transformer.documents.{module_name}")
    except ImportError:
        return None
    function = getattr(module, function_name)
    if extension == ".docx":
        return lambda data, filename, translate: function(data, translate)

    def translate_markup(data, filename, translate):
        text = _decode(data, filename)
        mark = BYTE_ORDER_MARK if text.startswith(BYTE_ORDER_MARK) else ""
        return (mark + function(text[len(mark) :], translate)).encode("utf-8")

    return translate_markup


def _decode(data, filename):
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"The file is not UTF-8 text: byte {data[error.start]:#04x} at offset "
            f"{error.start} cannot be decoded (save it as UTF-8). Received: filename={filename!r}"
        ) from None


def _split_text(data, filename):
    """`(text with LF line breaks, byte order mark, line break)` of a text file's bytes."""
    text = _decode(data, filename)
    mark = BYTE_ORDER_MARK if text.startswith(BYTE_ORDER_MARK) else ""
    text = text[len(mark) :]
    newline = "\r\n" if "\r\n" in text else "\n"
    return text.replace("\r\n", "\n"), mark, newline


def _join_text(text, mark, newline):
    return (mark + text.replace("\n", newline)).encode("utf-8")


def _translate_text_file(data, filename, translate):
    text, mark, newline = _split_text(data, filename)
    if not text.strip():
        return data  # Nothing to translate: the file as it came.
    (result,) = translate([text])
    return _join_text(result.text, mark, newline)


def _translate_subtitles(data, filename, translate):
    """A SubRip file: each cue's text translated and wrapped again, every other line (index,
    timing, blank lines, what precedes the first cue) kept as it was."""
    text, mark, newline = _split_text(data, filename)
    lines = text.split("\n")
    timings = [number for number, line in enumerate(lines) if _TIMING.match(line)]
    if not timings:
        if not text.strip():
            return data
        raise ValueError(
            f"The file is not a SubRip file: it has no cue timing line "
            f"('00:00:01,000 --> 00:00:04,000'). Received: filename={filename!r}"
        )
    # Each cue's text: from its timing line to the next cue's index (or timing), without the
    # blank lines that separate the cues.
    starts = [
        number - 1 if number > 0 and lines[number - 1].strip().isdigit() else number
        for number in timings
    ]
    spans = []
    for cue, timing in enumerate(timings):
        end = starts[cue + 1] if cue + 1 < len(timings) else len(lines)
        last = end
        while last > timing + 1 and not lines[last - 1].strip():
            last -= 1
        spans.append((timing + 1, last))
    texts, pieces = [], []  # pieces: per cue, its texts' indices (one per dialogue line)
    for first, last in spans:
        cue_lines = [line.strip() for line in lines[first:last]]
        if len(cue_lines) > 1 and all(line.startswith("-") for line in cue_lines):
            pieces.append(list(range(len(texts), len(texts) + len(cue_lines))))
            texts += cue_lines
        elif any(cue_lines):
            pieces.append([len(texts)])
            texts.append(" ".join(line for line in cue_lines if line))
        else:
            pieces.append([])
    results = translate(texts) if texts else []
    if len(results) != len(texts):
        raise ValueError(
            f"translate returned {len(results)} results for {len(texts)} texts. "
            f"Received: filename={filename!r}"
        )
    output, position = [], 0
    for (first, last), indices in zip(spans, pieces):
        output += lines[position:first]
        if len(indices) > 1:  # A dialogue: one line per speaker.
            output += [" ".join(results[index].text.split()) for index in indices]
        elif indices:
            output += wrap_subtitle(results[indices[0]].text)
        position = last
    output += lines[position:]
    return _join_text("\n".join(output), mark, newline)


def wrap_subtitle(text, width=SUBTITLE_LINE, max_lines=2):
    """A subtitle's lines: `text` in at most `max_lines` lines of about `width` characters,
    as balanced as the words allow; a text longer than `max_lines * width` gets as many lines
    of about `width` as it needs (nothing is cut). A word longer than a line stays whole."""
    words = " ".join(text.split())
    if not words:
        return []
    if len(words) <= width:
        return [words]
    count = max(max_lines, -(-len(words) // width))
    # The narrowest width whose greedy wrap takes at most `count` lines: balanced lines.
    narrowest = -(-len(words) // count)
    for line_width in range(narrowest, len(words) + 1):
        lines = textwrap.wrap(words, line_width, break_long_words=False, break_on_hyphens=False)
        if len(lines) <= count:
            return lines
    return [words]
