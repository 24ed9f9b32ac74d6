"""Whole files through a translate call (`keras_transformer.documents.files`), with a fake
translate that upper-cases and records its calls."""

import dataclasses
import importlib.util

import pytest

from keras_transformer.documents import files
from keras_transformer.documents.files import (
    FORMATS,
    available_formats,
    output_name,
    translate_file,
    wrap_subtitle,
)

pytestmark = pytest.mark.one_backend


@dataclasses.dataclass
class Result:
    text: str
    word_alignments: list = None


class Upper:
    """Upper-cases each text (or maps it through `table`); records each call's texts."""

    def __init__(self, table=None):
        self.calls = []
        self.table = table or {}

    def __call__(self, texts):
        self.calls.append(list(texts))
        return [Result(self.table.get(text, text.upper())) for text in texts]


def test_text_keeps_its_byte_order_mark_and_crlf_and_is_one_text():
    translate = Upper()
    data = "\ufeffhola\r\n\r\nadiós amigo\r\n".encode()
    output, name = translate_file(data, "notes.txt", translate, target="en")
    assert output == "\ufeffHOLA\r\n\r\nADIÓS AMIGO\r\n".encode()
    assert name == "notes.en.txt"
    assert translate.calls == [["hola\n\nadiós amigo\n"]]  # One call, one text, LF breaks.
    output, _ = translate_file(b"uno\ndos", "a.TXT", Upper())
    assert output == b"UNO\nDOS"  # No BOM, LF kept; the extension read in any case.
    translate = Upper()
    assert translate_file(b"  \n", "blank.txt", translate)[0] == b"  \n"
    assert translate.calls == []  # Nothing to translate: no call.


SUBTITLES = (
    "1\r\n"
    "00:00:01,600 --> 00:00:04,200\r\n"
    "hola\r\n"
    "\r\n"
    "2\r\n"
    "00:00:05,900 --> 00:00:07,999 X1:40 X2:600\r\n"
    "una frase que sigue\r\n"
    "en la segunda línea\r\n"
    "\r\n"
    "\r\n"
    "3\r\n"
    "01:02:03.004 --> 01:02:05.000\r\n"
    "- ¿Quién?\r\n"
    "- Yo.\r\n"
)


def test_subtitles_keep_indices_and_timings_and_rewrap_each_cue():
    long = "THIS TRANSLATION IS MUCH LONGER THAN ONE LINE OF A SUBTITLE CAN HOLD"
    translate = Upper({"una frase que sigue en la segunda línea": long})
    output, name = translate_file(SUBTITLES.encode(), "film.srt", translate, "en")
    assert name == "film.en.srt"
    # One call: each cue's lines joined into one text; a dialogue's lines one text each.
    assert translate.calls == [
        ["hola", "una frase que sigue en la segunda línea", "- ¿Quién?", "- Yo."]
    ]
    lines = output.decode().split("\r\n")
    source_lines = SUBTITLES.split("\r\n")
    # Indices, timings (with their coordinates and odd spellings) and blank lines: unchanged.
    for number in (0, 1, 3, 4, 5, 8, 9, 10, 11):
        assert lines[number] == source_lines[number]
    assert lines[2] == "HOLA"
    wrapped = lines[6:8]  # Two balanced lines of at most 42 characters.
    assert " ".join(wrapped) == long
    assert all(len(line) <= 42 for line in wrapped)
    assert abs(len(wrapped[0]) - len(wrapped[1])) <= 8
    assert lines[12:14] == ["- ¿QUIÉN?", "- YO."]
    assert lines[14:] == [""]


def test_subtitles_round_trip_with_an_identity_translation():
    def same(texts):
        return [Result(text) for text in texts]

    data = "1\n00:00:01,000 --> 00:00:02,000\nuno dos\n\n2\n00:00:03,000 --> 00:00:04,000\ntres\n"
    assert translate_file(data.encode(), "a.srt", same)[0] == data.encode()


def test_wrap_subtitle_is_balanced_and_never_cuts():
    assert wrap_subtitle("short one") == ["short one"]
    assert wrap_subtitle("   ") == []
    lines = wrap_subtitle("a " * 30 + "end")
    assert len(lines) == 2 and abs(len(lines[0]) - len(lines[1])) <= 2
    text = " ".join(f"word{number}" for number in range(40))  # 269 characters: 7 lines.
    lines = wrap_subtitle(text)
    assert " ".join(lines) == text and len(lines) == 7
    assert max(len(line) for line in lines) <= 42
    assert wrap_subtitle("x" * 60) == ["x" * 60]  # A word longer than a line stays whole.


def test_bad_files_are_clear_errors():
    with pytest.raises(ValueError, match=r"extension '\.pdf'.*\.srt, .*\.txt.*filename='r\.pdf'"):
        translate_file(b"%PDF", "r.pdf", Upper())
    with pytest.raises(ValueError, match="extension '\\(none\\)'"):
        translate_file(b"x", "README", Upper())
    with pytest.raises(ValueError, match=r"not UTF-8 text: byte 0xe9 at offset 1"):
        translate_file(b"h\xe9llo", "latin1.txt", Upper())
    with pytest.raises(ValueError, match="no cue timing line"):
        translate_file(b"just text\n", "bad.srt", Upper())
    with pytest.raises(ValueError, match="must be bytes"):
        translate_file("text", "a.txt", Upper())


def test_output_names_keep_no_folder():
    assert output_name("../../etc/passwd.txt", "en") == "passwd.en.txt"
    assert output_name("C:\\Users\\me\\Informe.docx", "en") == "Informe.en.docx"
    assert output_name("notes.txt") == "notes.translated.txt"


def test_formats_available_follow_the_installed_modules(monkeypatch):
    assert set(available_formats()) <= set(FORMATS)
    assert {".txt", ".srt"} <= set(available_formats())
    for name, extensions in (("html", {".html", ".htm"}), ("docx", {".docx"})):
        installed = importlib.util.find_spec(f"keras_transformer.documents.{name}") is not None
        assert (extensions <= set(available_formats())) == installed
    monkeypatch.setattr(files, "_translator_of", lambda extension: None)
    with pytest.raises(ValueError, match="need keras_transformer.documents.docx"):
        translate_file(b"PK", "a.docx", Upper())


def test_html_files_go_through_documents_html():
    html = pytest.importorskip("keras_transformer.documents.html")
    translate = Upper()
    markup = "\ufeff<p>hola <b>amigo</b></p>"
    output, name = translate_file(markup.encode(), "page.htm", translate, "en")
    assert name == "page.en.htm"
    assert output.startswith("\ufeff".encode())
    assert output.decode()[1:] == html.translate_html(markup[1:], Upper())


def test_docx_files_go_through_documents_docx():
    pytest.importorskip("keras_transformer.documents.docx")
    document = pytest.importorskip("docx")
    import io

    source = document.Document()
    source.add_paragraph("hola amigo")
    buffer = io.BytesIO()
    source.save(buffer)
    output, name = translate_file(buffer.getvalue(), "informe.docx", Upper(), "en")
    assert name == "informe.en.docx"
    assert [p.text for p in document.Document(io.BytesIO(output)).paragraphs] == ["HOLA AMIGO"]
