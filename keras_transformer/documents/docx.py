"""Word documents translated with their formatting kept: `translate_docx`.

Read and written with python-docx (MIT), on its lxml elements. Every paragraph of the body
(tables' cells, nested tables and text boxes included), of the headers and of the footers is
translated; the paragraph element, its properties (`w:pPr`: style, numbering, alignment) and
its place stay. The text of a paragraph is the concatenation of its runs; the translation gets
new runs, each word taking the formatting (a copy of the run properties `w:rPr`: bold,
italic, character style, font, colour...) and the hyperlink of the source run aligned to it
through the engine's word alignments (`keras_transformer.documents.spans.project_spans`).
Adjacent runs with the same formatting are one span, as Word splits runs for reasons a reader
does not see.

A tab or a line break ends one text and starts the next, and stays where it was, as does
everything that is not text: pictures, fields, footnote references, bookmarks, content
controls, tracked changes (`w:ins`, `w:del`: kept untranslated) and any element this module
does not know. Spelling marks (`w:proofErr`) and rendered page breaks
(`w:lastRenderedPageBreak`), which Word recomputes, are not kept in a translated paragraph.
Not translated yet: footnotes, endnotes and comments.
"""

import copy
import io
import zipfile

import docx
from docx.oxml import OxmlElement
from docx.oxml.ns import qn
from docx.parts.hdrftr import FooterPart, HeaderPart

from keras_transformer.documents.spans import project_spans

# Run children that are text, as the characters they stand for.
TEXT_CHILDREN = {qn("w:t"): None, qn("w:noBreakHyphen"): "\u2011", qn("w:softHyphen"): "\xad"}
# Run and paragraph children Word recomputes: not kept when a paragraph is rebuilt.
DROPPED = frozenset({qn("w:proofErr"), qn("w:lastRenderedPageBreak")})
# A .docx is a zip: what its parts may unpack to, at most (a zip bomb of a few MB would
# otherwise unpack to gigabytes of XML in python-docx), and how many parts it may hold.
MAX_UNPACKED_BYTES = 256 << 20
MAX_PARTS = 10_000


def translate_docx(data, translate):
    """Translates a .docx file's paragraphs, keeping styles, runs' formatting and layout.

    See the module's docstring for what is translated and what is kept.

    Args:
        data: bytes. The .docx file.
        translate: callable. `translate(texts)` takes a list of str and returns one result
            per text, each with `.text` and `.word_alignments` (pairs of `(source_word,
            target_word)` indices of `str.split()` words, or `None`: formatting then follows
            relative word position). Called once, with every text of the document.

    Returns:
        bytes: the translated .docx file.
    """
    if not isinstance(data, (bytes, bytearray)):
        raise ValueError(f"`data` must be bytes. Received: data={type(data).__name__}")
    _check_unpacked_size(bytes(data))
    try:
        document = docx.Document(io.BytesIO(bytes(data)))
    except Exception as error:  # zipfile, KeyError or lxml errors, by what is wrong
        raise ValueError(
            f"`data` is not a readable .docx file ({type(error).__name__}: {error}). "
            f"Received: {len(data)} bytes"
        ) from error
    parts = [document.part] + [
        part
        for part in document.part.package.iter_parts()
        if isinstance(part, HeaderPart | FooterPart)
    ]
    paragraphs = [_Paragraph(element) for part in parts for element in part.element.iter(qn("w:p"))]
    stretches = [stretch for paragraph in paragraphs for stretch in paragraph.stretches]
    texts = [stretch.text for stretch in stretches if stretch.has_words]
    if texts:
        results = list(translate(texts))
        if len(results) != len(texts):
            raise ValueError(
                f"`translate` must return one result per text ({len(texts)}). Received: "
                f"{len(results)} results"
            )
        results = iter(results)
        for stretch in stretches:
            if stretch.has_words:
                stretch.result = next(results)
        for paragraph in paragraphs:
            paragraph.rebuild()
    output = io.BytesIO()
    document.save(output)
    return output.getvalue()


class _Stretch:
    """Consecutive text of one paragraph between two fixed elements: one text to translate.
    `spans`: `(start, end, (run properties, hyperlink))`, adjacent equal ones merged."""

    def __init__(self):
        self.pieces, self.result = [], None  # [(text, rPr, hyperlink)]

    @property
    def has_words(self):
        return bool(self.text)

    @property
    def raw(self):
        return "".join(text for text, _, _ in self.pieces)

    @property
    def text(self):
        return self.raw.strip()

    def spans(self):
        spans, position = [], -(len(self.raw) - len(self.raw.lstrip()))
        length = len(self.text)
        for text, properties, hyperlink in self.pieces:
            start = min(max(position, 0), length)
            position += len(text)
            end = min(max(position, 0), length)
            if spans and spans[-1][2][1] is hyperlink and _key(spans[-1][2][0]) == _key(properties):
                spans[-1] = (spans[-1][0], end, spans[-1][2])
            else:
                spans.append((start, end, (properties, hyperlink)))
        return spans

    def runs(self):
        """`[(run element, hyperlink)]`: the translation, or the source text unchanged."""
        raw = self.raw
        if self.result is None:
            return [(_run(properties, text), link) for text, properties, link in self.pieces]
        text = self.result.text
        spans = self.spans()
        pieces = [
            [start, end, payload]
            for start, end, payload in project_spans(
                self.text, spans, self.result, contiguous=False
            )
            if end > start
        ]
        if not pieces:
            pieces = [[0, len(text), spans[0][2]]]
        # The spaces between two pieces go to the one with less formatting (an underline
        # under a space shows); those before the first and after the last to them.
        pieces[0][0], pieces[-1][1] = 0, len(text)
        for left, right in zip(pieces, pieces[1:]):
            if _weight(left[2][0]) <= _weight(right[2][0]):
                left[1] = right[0]
            else:
                right[0] = left[1]
        lead = raw[: len(raw) - len(raw.lstrip())]
        trail = raw[len(raw.rstrip()) :]
        merged = []
        for start, end, payload in pieces:
            key = (_key(payload[0]), payload[1])
            if merged and merged[-1][0] == key:
                merged[-1][1] += text[start:end]
            else:
                merged.append([key, text[start:end], payload])
        merged[0][1] = lead + merged[0][1].lstrip()
        merged[-1][1] = merged[-1][1].rstrip() + trail
        return [(_run(properties, run_text), link) for _, run_text, (properties, link) in merged]


class _Paragraph:
    """A `w:p` cut into stretches of text and fixed elements, in order. Nothing changes
    until `rebuild`."""

    def __init__(self, element):
        self.element = element
        # _Stretch, or (element kept as it is, hyperlink), or (run properties, run child,
        # hyperlink) for a child of a run that also holds text.
        self.items = []
        for child in element:
            if child.tag == qn("w:pPr"):
                continue
            runs_only = all(c.tag == qn("w:r") or c.tag in DROPPED for c in child)
            if child.tag == qn("w:hyperlink") and len(child) and runs_only:
                for grandchild in child:
                    self._add(grandchild, child)
            else:
                self._add(child, None)
        self.stretches = [item for item in self.items if isinstance(item, _Stretch)]

    def _add(self, child, hyperlink):
        if child.tag in DROPPED:
            return
        if child.tag != qn("w:r") or not any(c.tag in TEXT_CHILDREN for c in child):
            self.items.append((child, hyperlink))
            return
        properties = child.find(qn("w:rPr"))
        for grandchild in child:
            if grandchild.tag == qn("w:rPr") or grandchild.tag in DROPPED:
                continue
            if grandchild.tag in TEXT_CHILDREN:
                text = TEXT_CHILDREN[grandchild.tag] or grandchild.text or ""
                if not (self.items and isinstance(self.items[-1], _Stretch)):
                    self.items.append(_Stretch())
                self.items[-1].pieces.append((text, properties, hyperlink))
            else:  # a tab, a break, a picture, a field character...
                self.items.append((properties, grandchild, hyperlink))

    def rebuild(self):
        """Replaces the paragraph's content (not its properties) with the translation."""
        if not any(stretch.result is not None for stretch in self.stretches):
            return
        new = []
        for item in self.items:
            if isinstance(item, _Stretch):
                new += item.runs()
            elif len(item) == 3:
                properties, child, hyperlink = item
                new.append((_run(properties, None, child), hyperlink))
            else:
                new.append(item)
        for child in list(self.element):
            if child.tag != qn("w:pPr"):
                self.element.remove(child)
        group, link = None, None
        for element, hyperlink in new:
            if hyperlink is None:
                self.element.append(element)
                group = link = None
                continue
            if hyperlink is not link:
                group, link = _shallow_copy(hyperlink), hyperlink
                self.element.append(group)
            group.append(element)


def _run(properties, text, child=None):
    """A new `w:r` with a copy of `properties` and either `text` or `child`."""
    run = OxmlElement("w:r")
    if properties is not None:
        run.append(copy.deepcopy(properties))
    if child is not None:
        run.append(child)
    else:
        t = OxmlElement("w:t")
        t.text = text
        t.set(qn("xml:space"), "preserve")
        run.append(t)
    return run


def _shallow_copy(element):
    """A copy of an element's tag and attributes, without its children."""
    new = copy.deepcopy(element)
    for child in list(new):
        new.remove(child)
    return new


def _key(properties):
    return "" if properties is None else properties.xml


def _weight(properties):
    return 0 if properties is None else len(properties)


def _check_unpacked_size(data):
    """Refuses a .docx whose zip declares more than `MAX_UNPACKED_BYTES` unpacked or more than
    `MAX_PARTS` parts, before anything is unpacked (zipfile also stops reading a member at its
    declared size)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
    except zipfile.BadZipFile as error:
        raise ValueError(
            f"`data` is not a readable .docx file (BadZipFile: {error}). "
            f"Received: {len(data)} bytes"
        ) from error
    unpacked = sum(member.file_size for member in members)
    if len(members) > MAX_PARTS or unpacked > MAX_UNPACKED_BYTES:
        raise ValueError(
            f"`data` unpacks to more than a .docx is allowed ({MAX_UNPACKED_BYTES} bytes in "
            f"{MAX_PARTS} parts at most). Received: {unpacked} bytes in {len(members)} parts"
        )
