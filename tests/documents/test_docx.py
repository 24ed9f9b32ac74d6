import copy
import io

import docx
import pytest
from docx.oxml import parse_xml
from docx.oxml.ns import nsdecls, qn

from keras_transformer.documents.docx import translate_docx
from tests.documents.dictionary import Recorder, adjective_first, without_alignments

pytestmark = pytest.mark.one_backend


def save(document):
    output = io.BytesIO()
    document.save(output)
    return output.getvalue()


def runs(paragraph):
    return [(run.text, run.bold, run.italic, run.underline) for run in paragraph.runs]


def test_a_bold_word_stays_bold_where_its_translation_went():
    document = docx.Document()
    paragraph = document.add_paragraph("la ", style="Heading 1")
    paragraph.add_run("casa").bold = True
    paragraph.add_run(" roja")
    translated = docx.Document(io.BytesIO(translate_docx(save(document), adjective_first)))
    paragraph = translated.paragraphs[0]
    assert paragraph.style.name == "Heading 1"
    assert runs(paragraph) == [("the red ", None, None, None), ("house", True, None, None)]


def test_runs_split_by_word_are_one_span_and_formatting_is_copied():
    document = docx.Document()
    paragraph = document.add_paragraph(style="List Bullet")
    for text in ("mi ", "pe", "rro ", "y ", "la casa"):
        run = paragraph.add_run(text)
        run.font.name = "Arial"
        run.italic = True if text in ("pe", "rro ") else None  # Word splits one word
    paragraph.runs[-1].font.color.rgb = docx.shared.RGBColor(0xC0, 0, 0)
    translated = docx.Document(io.BytesIO(translate_docx(save(document), adjective_first)))
    paragraph = translated.paragraphs[0]
    assert paragraph.style.name == "List Bullet"
    assert [run.text for run in paragraph.runs] == ["my ", "dog", " and ", "the house"]
    assert [run.italic for run in paragraph.runs] == [None, True, None, None]
    assert all(run.font.name == "Arial" for run in paragraph.runs)
    assert paragraph.runs[-1].font.color.rgb == docx.shared.RGBColor(0xC0, 0, 0)


def test_tables_headers_and_footers_are_translated_in_one_call():
    document = docx.Document()
    document.add_paragraph("hola mundo")
    table = document.add_table(rows=2, cols=2)
    table.style = "Table Grid"
    table.cell(0, 0).text = "celda"
    table.cell(0, 1).paragraphs[0].add_run("la casa roja").underline = True
    table.cell(1, 0).merge(table.cell(1, 1)).text = "el perro negro"
    document.add_paragraph("")
    document.sections[0].header.paragraphs[0].text = "cabecera"
    document.sections[0].footer.paragraphs[0].text = "pie"
    engine = Recorder()
    translated = docx.Document(io.BytesIO(translate_docx(save(document), engine)))
    assert len(engine.calls) == 1
    assert sorted(engine.calls[0]) == sorted(
        ["hola mundo", "celda", "la casa roja", "el perro negro", "cabecera", "pie"]
    )
    table = translated.tables[0]
    assert table.style.name == "Table Grid"
    assert [[cell.text for cell in row.cells] for row in table.rows] == [
        ["cell", "the red house"],
        ["the black dog", "the black dog"],  # still merged
    ]
    assert runs(table.cell(0, 1).paragraphs[0]) == [("the red house", None, None, True)]
    assert [p.text for p in translated.paragraphs] == ["hello world", ""]
    assert translated.sections[0].header.paragraphs[0].text == "header"
    assert translated.sections[0].footer.paragraphs[0].text == "footer"


def test_tabs_breaks_and_hyperlinks_stay():
    document = docx.Document()
    paragraph = document.add_paragraph("la casa\troja")
    paragraph.add_run().add_break()
    paragraph.add_run("el ")
    relationship = document.part.relate_to(
        "https://example.com/perro",
        docx.opc.constants.RELATIONSHIP_TYPE.HYPERLINK,
        is_external=True,
    )
    link = parse_xml(
        f'<w:hyperlink {nsdecls("w", "r")} r:id="{relationship}">'
        '<w:r><w:rPr><w:rStyle w:val="Hyperlink"/></w:rPr><w:t>perro</w:t></w:r></w:hyperlink>'
    )
    paragraph._p.append(link)
    paragraph.add_run(" negro")
    bookmark = parse_xml(f'<w:bookmarkStart {nsdecls("w")} w:id="0" w:name="here"/>')
    paragraph._p.insert(1, bookmark)
    translated = docx.Document(io.BytesIO(translate_docx(save(document), adjective_first)))
    paragraph = translated.paragraphs[0]
    assert paragraph.text == "the house\tred\nthe black dog"
    links = paragraph._p.findall(qn("w:hyperlink"))
    assert len(links) == 1 and links[0].get(qn("r:id")) == relationship
    assert "".join(t.text for t in links[0].iter(qn("w:t"))) == "dog"
    assert paragraph._p.find(qn("w:bookmarkStart")).get(qn("w:name")) == "here"
    assert paragraph.hyperlinks[0].url == "https://example.com/perro"


def test_without_alignments_every_formatting_is_kept():
    document = docx.Document()
    paragraph = document.add_paragraph("la ")
    paragraph.add_run("casa").bold = True
    paragraph.add_run(" roja y ")
    paragraph.add_run("grande").italic = True
    translated = docx.Document(io.BytesIO(translate_docx(save(document), without_alignments)))
    paragraph = translated.paragraphs[0]
    assert paragraph.text == "the red house and big"
    assert any(run.bold for run in paragraph.runs)
    assert any(run.italic for run in paragraph.runs)
    assert len(paragraph.runs) <= 4


def test_a_document_without_text_is_left_alone():
    document = docx.Document()
    document.add_paragraph("  ")
    paragraph = document.add_paragraph()
    paragraph.add_run().add_break()
    before = copy.deepcopy(document.element.body)
    engine = Recorder()
    translated = docx.Document(io.BytesIO(translate_docx(save(document), engine)))
    assert engine.calls == []
    assert [p.text for p in translated.paragraphs] == [p.text for p in document.paragraphs]
    assert len(translated.element.body) == len(before)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="data=str"):
        translate_docx("la casa", adjective_first)
    with pytest.raises(ValueError, match="not a readable .docx file"):
        translate_docx(b"PK not a zip", adjective_first)
    document = docx.Document()
    document.add_paragraph("la casa")
    document.add_paragraph("el perro")
    with pytest.raises(ValueError, match="one result per text"):
        translate_docx(save(document), lambda texts: adjective_first(texts)[:1])


def test_a_zip_bomb_is_refused_before_it_is_unpacked(monkeypatch):
    import io
    import zipfile

    from keras_transformer.documents import docx as module

    monkeypatch.setattr(module, "MAX_UNPACKED_BYTES", 4 << 20)  # The bound, made small.
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", b"<" + b"a" * (module.MAX_UNPACKED_BYTES + 1))
    data = buffer.getvalue()
    assert len(data) < 64 << 10  # A small upload...
    with pytest.raises(ValueError, match=r"unpacks to more than a \.docx is allowed"):
        module.translate_docx(data, lambda texts: [])  # ...refused, never unpacked.
    with pytest.raises(ValueError, match=r"not a readable \.docx file"):
        module.translate_docx(b"not a zip", lambda texts: [])
