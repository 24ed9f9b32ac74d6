"""HTML translated with its markup kept: `translate_html`.

The markup is parsed by beautifulsoup4 on Python's own `html.parser`, chosen because it keeps
what it is given: a fragment stays a fragment and a document a document (doctype, comments,
attribute order and values, unclosed tags left as they were), where lxml and html5lib rebuild
the input into a full, corrected document (`<html><body>` added, paragraphs closed). No
regular expression touches the markup.

What is translated, as one text each (all of a document's texts in one `translate` call, so
that the engine batches them):

- The inline content of each block: the run of text and inline elements (`b`, `strong`, `i`,
  `em`, `a`, `span`, `u`, `sub`, `sup`, `small`, `mark`, `abbr`, `q`, ...) among the children
  of any other element (`p`, `li`, `h1`-`h6`, `td`, `th`, a `div` with text of its own,
  `blockquote`, `figcaption`, `dt`, `dd`, `title`, `button`, `label`, `option`, ...). The
  inline elements are put back around the words they wrapped through the engine's word
  alignments (`keras_transformer.documents.spans.project_spans`), nested as they were, each
  element once, with its attributes untouched; siblings may change order as their words did.
  A `<br>` directly inside a block ends one text and starts the next, so every line break
  stays where it was. Whitespace is collapsed as a browser shows it; the block's leading and
  trailing whitespace is kept as written.
- The attributes people read: `alt`, `title`, `placeholder`, `aria-label`, and the `value` of
  `<input type="button|submit|reset">`.

Never translated, and written back as parsed: `script`, `style`, `code`, `pre`, `textarea`,
`kbd`, `samp`, `svg`, `math`, and every element with `translate="no"` or the class
`notranslate` (as Google Translate and LibreTranslate), with their attributes, unless a
descendant says `translate="yes"`. Inside a block, the text of an inline one (`code`,
`<span translate="no">`) goes to the engine for context and the element itself, unchanged,
takes the place of its translation. Comments stay next to the words they followed.

Characters come back escaped as the markup needs (`&amp;`, `&lt;`, `&gt;`) and invisible
ones by name (`&nbsp;`, `&shy;`, ...); other entities (`&copy;`) come back as the characters
they stand for, in the page's own encoding.
"""

import bs4
from bs4.formatter import HTMLFormatter

from keras_transformer.documents.spans import project_spans

# Elements whose content flows inside a line: a run of them (and text) is one text to translate.
INLINE = frozenset(
    "a abbr acronym b bdi bdo big br cite code data del dfn em font i img input ins kbd mark "
    "q s samp small span strike strong sub sup time tt u var wbr".split()
)
# Never translated, content and attributes kept as parsed.
SKIPPED = frozenset("script style code pre textarea kbd samp svg math".split())
# Skipped elements whose text a reader sees: inside a block, it is sent for context.
VISIBLE_SKIPPED = frozenset("code kbd samp".split())
# Elements without content.
VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())
TRANSLATED_ATTRIBUTES = ("alt", "title", "placeholder", "aria-label")
BUTTON_INPUTS = frozenset({"button", "submit", "reset"})
# Whitespace that HTML collapses (not the non-breaking space).
HTML_SPACE = " \t\n\r\f"
_ESCAPES = {
    "&": "&amp;",
    "<": "&lt;",
    ">": "&gt;",
    "\xa0": "&nbsp;",
    "\xad": "&shy;",
    "\u200b": "&#8203;",
    "\u200c": "&zwnj;",
    "\u200d": "&zwj;",
    "\u2002": "&ensp;",
    "\u2003": "&emsp;",
    "\u2009": "&thinsp;",
}


def _escape(text):
    return "".join(_ESCAPES.get(character, character) for character in text)


class _Formatter(HTMLFormatter):
    """Attributes in their own order (beautifulsoup sorts them), void elements as `<br>`
    (not `<br/>`), characters escaped by `_escape`."""

    def __init__(self):
        super().__init__(entity_substitution=_escape, void_element_close_prefix=None)

    def attributes(self, tag):
        return list(tag.attrs.items())


FORMATTER = _Formatter()


def translate_html(markup, translate):
    """Translates the text of HTML markup, keeping its tags, attributes and entities.

    See the module's docstring for what is translated and what never is.

    Args:
        markup: str. An HTML document or fragment.
        translate: callable. `translate(texts)` takes a list of str and returns one result
            per text, each with `.text` (the translation) and `.word_alignments` (pairs of
            `(source_word, target_word)` indices of `str.split()` words, or `None` when the
            engine cannot align: tags are then placed by relative word position). Called once,
            with every text of the markup; not called when there is nothing to translate.

    Returns:
        str: the translated markup; a fragment for a fragment, a document (doctype kept) for
        a document.

    Example:
    ```python
    from types import SimpleNamespace
    from keras_transformer.documents.html import translate_html

    words = {"la": "the", "casa": "house", "roja": "red"}

    def translate(texts):  # word by word, the adjective before the noun
        results = []
        for text in texts:
            source = text.split()
            order = [0, 2, 1] if len(source) == 3 else list(range(len(source)))
            results.append(SimpleNamespace(
                text=" ".join(words[source[i]] for i in order),
                word_alignments=[(i, j) for j, i in enumerate(order)],
            ))
        return results

    print(translate_html('<p>la <a href="/c">casa</a> roja</p>', translate))
    # <p>the red <a href="/c">house</a></p>
    ```
    """
    if not isinstance(markup, str):
        raise ValueError(f"`markup` must be a str. Received: markup={type(markup).__name__}")
    soup = bs4.BeautifulSoup(
        markup,
        "html.parser",
        # `class="a  b"` kept as written, not as a list joined by one space.
        multi_valued_attributes=None,
        # Whitespace-only text kept as written: beautifulsoup collapses it to one "\n" or " "
        # outside the elements named here, and the document's root is above every element.
        preserve_whitespace_tags={"[document]"},
    )
    blocks, attributes = [], []
    _collect(soup, True, blocks)
    for tag in soup.find_all(True):
        if _attributes_translatable(tag):
            for name in _translated_attributes(tag):
                value = tag.get(name)
                if isinstance(value, str) and value.strip():
                    attributes.append((tag, name))
    texts = [block.text for block in blocks] + [
        " ".join(tag[name].split()) for tag, name in attributes
    ]
    if not texts:
        return _decode(soup, markup)
    results = list(translate(texts))
    if len(results) != len(texts):
        raise ValueError(
            f"`translate` must return one result per text ({len(texts)}). Received: "
            f"{len(results)} results"
        )
    for block, result in zip(blocks, results):
        block.replace(result)
    for (tag, name), result in zip(attributes, results[len(blocks) :]):
        value = tag[name]
        lead = value[: len(value) - len(value.lstrip())]
        trail = value[len(value.rstrip()) :]
        tag[name] = lead + result.text.strip() + trail
    return _decode(soup, markup)


def _decode(soup, markup):
    """The soup as markup; a doctype as written (beautifulsoup would spell it `<!DOCTYPE` and
    add a line break after it)."""
    pieces = []
    for node in soup.contents:
        if isinstance(node, bs4.Doctype):
            opening = markup.lstrip()[: len("<!doctype ")]
            if opening.lower() != "<!doctype ":
                opening = "<!DOCTYPE "
            pieces.append(f"{opening}{node}>")
        elif isinstance(node, bs4.NavigableString):
            pieces.append(node.output_ready(FORMATTER))
        else:
            pieces.append(node.decode(formatter=FORMATTER))
    return "".join(pieces)


def _own_translate(tag):
    """`False` for `translate="no"` or class `notranslate`, `True` for `translate="yes"`,
    else `None` (inherited)."""
    value = tag.get("translate")
    if isinstance(value, str) and value.strip().lower() in ("no", "yes", ""):
        return value.strip().lower() != "no"
    if "notranslate" in str(tag.get("class", "")).split():
        return False
    return None


def _attributes_translatable(tag):
    for element in [tag, *tag.parents]:
        if element.name in SKIPPED:
            return False
        if isinstance(element, bs4.Tag) and not isinstance(element, bs4.BeautifulSoup):
            own = _own_translate(element)
            if own is not None:
                return own
    return True


def _translated_attributes(tag):
    names = [name for name in TRANSLATED_ATTRIBUTES if name in tag.attrs]
    if tag.name == "input" and str(tag.get("type", "")).lower() in BUTTON_INPUTS:
        names.append("value")
    return names


def _opaque(tag, translatable):
    """Whether an element is kept whole: skipped, or not translatable."""
    own = _own_translate(tag)
    return tag.name in SKIPPED or (own is False) or (own is None and not translatable)


def _is_inline(node, translatable):
    """Whether a node flows inside a line (text, comment, inline element without blocks)."""
    if isinstance(node, bs4.Tag):
        if node.name not in INLINE or node.name == "br":
            return False
        if _opaque(node, translatable):
            return True
        own = _own_translate(node)
        inner = translatable if own is None else own
        return all(_is_inline(child, inner) for child in node.children)
    return type(node) in (bs4.NavigableString, bs4.Comment)


def _collect(container, translatable, blocks):
    """Finds the blocks to translate below `container`: runs of inline children of every
    element that is not inline, skipped or untranslatable."""
    run = []
    for child in list(container.children):
        if translatable and _is_inline(child, translatable):
            run.append(child)
            continue
        _flush(container, run, blocks)
        run = []
        if isinstance(child, bs4.Tag) and child.name not in SKIPPED:
            own = _own_translate(child)
            _collect(child, translatable if own is None else own, blocks)
    _flush(container, run, blocks)


def _flush(container, run, blocks):
    if run:
        block = _Block(container, run)
        if block.has_words:
            blocks.append(block)


class _Block:
    """A run of inline nodes, flattened into one text and its spans (one per element)."""

    def __init__(self, container, nodes):
        self.container, self.nodes = container, nodes
        self.pieces, self.spans, self.parents, self.whole = [], [], [], []
        self.has_words, self.after_space = False, True
        for node in nodes:
            self._flatten(node, None)
        text = "".join(self.pieces)
        # The block's own leading and trailing whitespace, kept as written.
        first, last = nodes[0], nodes[-1]
        self.lead = _leading_space(first) if type(first) is bs4.NavigableString else ""
        self.trail = _trailing_space(last) if type(last) is bs4.NavigableString else ""
        stripped = text.strip(" ")
        offset = len(text) - len(text.lstrip(" "))
        self.text = stripped
        # Whether a space was written before and after each element (a space between two
        # images or inputs shows).
        self.space_before = [start > 0 and text[start - 1] == " " for start, _, _ in self.spans]
        self.space_after = [end < len(text) and text[end] == " " for _, end, _ in self.spans]
        self.spans = [
            (
                min(max(start - offset, 0), len(stripped)),
                min(max(end - offset, 0), len(stripped)),
                payload,
            )
            for start, end, payload in self.spans
        ]

    def _length(self):
        return sum(len(piece) for piece in self.pieces)

    def _append(self, text, counts):
        """Appends text with its whitespace collapsed as a browser shows it: a run of spaces
        is one space, none after a space or at the block's start."""
        collapsed = " ".join(_split_html_space(text))
        if text and text[0] in HTML_SPACE and not self.after_space:
            collapsed = " " + collapsed
        if text and text[-1] in HTML_SPACE and collapsed and not collapsed.endswith(" "):
            collapsed += " "
        if collapsed:
            self.pieces.append(collapsed)
            self.after_space = collapsed.endswith(" ")
        if counts and collapsed.strip():
            self.has_words = True

    def _flatten(self, node, parent):
        """Appends a node's text; an element becomes a span (blocks are only collected where
        the text is translatable, and kept-whole elements are not entered)."""
        if type(node) is bs4.NavigableString:
            self._append(str(node), True)
            return
        index = len(self.spans)
        start = self._length()
        self.spans.append([start, start, node])
        self.parents.append(parent)
        whole = isinstance(node, bs4.Comment) or node.name in VOID or _opaque(node, True)
        self.whole.append(whole)
        if isinstance(node, bs4.Comment):
            return
        if node.name in VOID:
            self.after_space = False  # an image or an input shows
            return
        if whole:
            if node.name not in SKIPPED or node.name in VISIBLE_SKIPPED:
                self._append(node.get_text(), False)
        else:
            for child in node.children:
                self._flatten(child, index)
        self.spans[index][1] = self._length()

    def replace(self, result):
        """Puts the translation in place of the block's nodes, its elements around their
        words."""
        ranges = project_spans(self.text, self.spans, result, parents=self.parents)
        children = [[] for _ in ranges] + [[]]
        for index, parent in enumerate(self.parents):
            children[-1 if parent is None else parent].append(index)
        position = self.container.index(self.nodes[0])
        for node in self.nodes:
            node.extract()
        for (_, _, payload), whole in zip(ranges, self.whole):
            if not whole:
                payload.clear()
        new = self._build(children, -1, ranges, result.text, 0, len(result.text))
        new = [bs4.NavigableString(self.lead)] * bool(self.lead) + new
        new += [bs4.NavigableString(self.trail)] * bool(self.trail)
        for offset, node in enumerate(new):
            self.container.insert(position + offset, node)

    def _build(self, children, parent, ranges, text, start, end):
        nodes, position = [], start
        order = sorted(children[parent], key=lambda i: (ranges[i][0], ranges[i][1], i))
        for index in order:
            low, high, payload = ranges[index]
            if low > position:
                nodes.append(bs4.NavigableString(text[position:low]))
            if self.whole[index]:
                # Spaced from the words around it as it was in the source.
                if self.space_before[index] and low > 0 and not text[low - 1].isspace():
                    nodes.append(bs4.NavigableString(" "))
                nodes.append(payload)
                if self.space_after[index] and high < len(text) and not text[high].isspace():
                    nodes.append(bs4.NavigableString(" "))
            else:
                for child in self._build(children, index, ranges, text, low, high):
                    payload.append(child)
                nodes.append(payload)
            position = max(position, high)
        if end > position:
            nodes.append(bs4.NavigableString(text[position:end]))
        return nodes


def _split_html_space(text):
    words, current = [], []
    for character in text:
        if character in HTML_SPACE:
            if current:
                words.append("".join(current))
                current = []
        else:
            current.append(character)
    if current:
        words.append("".join(current))
    return words


def _leading_space(node):
    text = str(node)
    return text[: len(text) - len(text.lstrip(HTML_SPACE))]


def _trailing_space(node):
    text = str(node)
    return text[len(text.rstrip(HTML_SPACE)) :]
