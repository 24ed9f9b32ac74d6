from html.parser import HTMLParser

import bs4
import pytest

from keras_transformer.documents.html import VOID, translate_html
from tests.documents.dictionary import (
    Recorder,
    adjective_first,
    in_place,
    reversed_words,
    without_alignments,
)

pytestmark = pytest.mark.one_backend


class _Balance(HTMLParser):
    """Fails on an end tag that does not close the innermost open element."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.open = []

    def handle_starttag(self, tag, attrs):
        if tag not in VOID:
            self.open.append(tag)

    def handle_endtag(self, tag):
        assert self.open and self.open[-1] == tag, (tag, self.open)
        self.open.pop()


def assert_parses(markup):
    parser = _Balance()
    parser.feed(markup)
    parser.close()
    assert parser.open == [], parser.open


def tags(markup):
    """`(name, attributes)` of every element, in document order."""
    soup = bs4.BeautifulSoup(markup, "html.parser", multi_valued_attributes=None)
    return [(tag.name, dict(tag.attrs)) for tag in soup.find_all(True)]


def test_a_link_lands_on_the_translation_of_its_word_when_the_word_moves():
    markup = '<p>la <a href="/casa?a=1&amp;b=2">casa</a> roja</p>'
    assert translate_html(markup, adjective_first) == (
        '<p>the red <a href="/casa?a=1&amp;b=2">house</a></p>'
    )
    assert translate_html("<p><b>hola</b> <i>mundo</i> grande</p>", reversed_words) == (
        "<p>big <i>world</i> <b>hello</b></p>"
    )


NESTED = (
    '<div id="main">\n  <h1 class="title  big">hola <em>mundo</em></h1>\n'
    '  <p>una <b>casa <i lang="es">roja</i></b> y <a href="/p" title="perro">el perro</a>.</p>\n'
    "  <ul><li>la <span><strong>casa</strong></span></li><li>mi <sub>perro</sub></li></ul>\n"
    "  <table><tr><th>celda</th><td>la <u>casa</u> <small>roja</small></td></tr></table>\n"
    "</div>"
)


@pytest.mark.parametrize("engine", [in_place, adjective_first, reversed_words, without_alignments])
def test_every_tag_comes_back_once_with_its_attributes(engine):
    output = translate_html(NESTED, engine)
    assert_parses(output)
    expected = tags(NESTED)
    link = expected.index(("a", {"href": "/p", "title": "perro"}))
    expected[link] = ("a", {"href": "/p", "title": "dog"})  # a translated attribute
    found = tags(output)
    # Siblings may swap with their words; with the words in order, so do the tags.
    assert sorted(map(repr, found)) == sorted(map(repr, expected))
    if engine in (in_place, without_alignments):
        assert found == expected
    assert "casa" not in output and "perro" not in output


def test_nested_tags_keep_their_nesting_around_the_moved_words():
    output = translate_html("<p>una <b>casa <i>roja</i></b> grande</p>", adjective_first)
    soup = bs4.BeautifulSoup(output, "html.parser")
    assert soup.find("i").text == "red"
    assert soup.find("i").parent.name == "b"
    assert "house" in soup.find("b").text
    assert soup.p.text == "a red big house"


UNTOUCHED = [
    "<script>if (a < b && c > d) { la('casa'); }</script>",
    "<style>p > b { content: 'casa'; }</style>",
    "<pre>la   casa\n  roja &amp; <b>perro</b></pre>",
    "<code>la casa</code>",
    "<textarea>la casa</textarea>",
    '<p translate="no">la <b>casa</b> roja</p>',
    '<div class="brand notranslate"><p>la casa</p></div>',
]


@pytest.mark.parametrize("kept", UNTOUCHED)
def test_script_style_code_pre_and_translate_no_are_kept_byte_for_byte(kept):
    markup = f"<div><p>la casa roja</p>{kept}<p>el perro</p></div>"
    engine = Recorder()
    output = translate_html(markup, engine)
    assert kept in output
    assert output.replace(kept, "") == "<div><p>the red house</p><p>the dog</p></div>"
    assert engine.calls == [["la casa roja", "el perro"]]


def test_translate_yes_inside_translate_no_is_translated():
    markup = '<div translate="no">la casa <p translate="yes">el perro</p></div>'
    assert translate_html(markup, adjective_first) == (
        '<div translate="no">la casa <p translate="yes">the dog</p></div>'
    )


def test_inline_code_is_kept_and_placed_among_the_translated_words():
    markup = "<p>ejecute <code>la --casa</code> ahora</p>"
    engine = Recorder()
    assert translate_html(markup, engine) == "<p>run <code>la --casa</code> now</p>"
    assert engine.calls == [["ejecute la --casa ahora"]]  # sent for context
    markup = '<p>descargue <span translate="no">la casa</span> ahora</p>'
    assert translate_html(markup, reversed_words) == (
        '<p>now <span translate="no">la casa</span> download</p>'
    )


def test_entities_come_back_escaped():
    markup = "<p>la casa &amp; el perro&nbsp;negro &lt;3 &copy;</p>"
    assert translate_html(markup, in_place) == ("<p>the house &amp; the dog&nbsp;black &lt;3 ©</p>")
    kept = '<p translate="no">a&nbsp;b &amp; c &lt;d&gt;</p>'
    assert translate_html(kept, in_place) == kept


def test_a_line_break_stays_between_the_lines_it_separated():
    markup = "<p>la casa roja<br>el perro<br/>\n una <b>casa</b></p>"
    engine = Recorder()
    output = translate_html(markup, engine)
    assert output == "<p>the red house<br>the dog<br>\n a <b>house</b></p>"
    assert engine.calls == [["la casa roja", "el perro", "una casa"]]


def test_fragments_stay_fragments_and_documents_documents():
    assert translate_html("hola <b>mundo</b>", adjective_first) == "hello <b>world</b>"
    document = (
        '<!doctype html>\n<html lang="es">\n<head>\n  <meta charset="utf-8">\n'
        "  <title>hola mundo</title>\n</head>\n<body>\n  <p>la casa</p>\n</body>\n</html>\n"
    )
    assert translate_html(document, adjective_first) == document.replace(
        "hola mundo", "hello world"
    ).replace("la casa", "the house")


def test_readable_attributes_are_translated_and_others_kept():
    markup = (
        '<p><img src="casa.png" alt="la casa" data-x="casa"> '
        '<input type="text" placeholder="texto" value="casa"> '
        '<input type="submit" value="hola"> '
        '<abbr title="la casa roja" class="casa">casa</abbr></p>'
    )
    output = translate_html(markup, adjective_first)
    assert output == (
        '<p><img src="casa.png" alt="the house" data-x="casa"> '
        '<input type="text" placeholder="text" value="casa"> '
        '<input type="submit" value="hello"> '
        '<abbr title="the red house" class="casa">house</abbr></p>'
    )


def test_whitespace_and_nothing_to_translate_leave_the_markup_alone():
    markup = "<div>\n  <p>  </p>\n  <script>x()</script>\n <!-- la casa --></div>"
    engine = Recorder()
    assert translate_html(markup, engine) == markup
    assert engine.calls == []


def test_a_document_is_one_call_and_whitespace_of_blocks_is_kept():
    markup = "<ul>\n  <li>\n    la casa\n  </li>\n  <li>mi   <b>perro</b>\n y mi casa</li>\n</ul>"
    engine = Recorder()
    output = translate_html(markup, engine)
    assert output == (
        "<ul>\n  <li>\n    the house\n  </li>\n  <li>my <b>dog</b> and my house</li>\n</ul>"
    )
    assert engine.calls == [["la casa", "mi perro y mi casa"]]


def test_a_comment_stays_after_the_word_it_followed():
    output = translate_html("<p>la casa <!-- x --> roja</p>", adjective_first)
    assert_parses(output)
    assert output == "<p>the red house <!-- x --></p>"


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="markup=bytes"):
        translate_html(b"<p>la casa</p>", adjective_first)
    with pytest.raises(ValueError, match="one result per text"):
        translate_html("<p>la casa</p><p>el perro</p>", lambda texts: adjective_first(texts)[:1])
