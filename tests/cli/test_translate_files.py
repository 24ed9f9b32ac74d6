"""`keras-transformer translate --input FILE --output FILE`: whole files with the committed
0.1.0 fixture translator (its translations are recorded in tests/fixtures), and the options
that cannot go with a file."""

import json
import os

import pytest

from keras_transformer import engines
from tests.cli.helpers import run_main

pytestmark = pytest.mark.one_backend

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")
MODEL = os.path.join(FIXTURES, "translator_v0_1.keras")


@pytest.fixture(scope="module")
def recorded():
    """`{source: translation}` of the fixture translator's default (beam) search."""
    with open(os.path.join(FIXTURES, "translator_v0_1.json"), encoding="utf-8") as file:
        fixture = json.load(file)
    return dict(zip(fixture["sources"], fixture["beam"]["translations"], strict=True))


@pytest.fixture(scope="module")
def loaded():
    """The fixture translator, loaded once for this module's commands."""
    return engines.load_translator(MODEL)


def test_a_text_and_a_subtitle_file(recorded, loaded, capsysbinary, monkeypatch, tmp_path):
    monkeypatch.setattr(engines, "load_translator", lambda path, engine: loaded)
    source = tmp_path / "numeros.txt"
    source.write_bytes("\ufeffcuarenta y dos\r\n\r\ntres\r\n".encode())
    output = tmp_path / "numbers.txt"
    argv = ["translate", "--model", MODEL, "--input", str(source), "--output", str(output)]
    status, lines, errors = run_main(capsysbinary, argv)
    assert (status, lines, errors) == (0, [], "")
    expected = f"\ufeff{recorded['cuarenta y dos']}\r\n\r\n{recorded['tres']}\r\n"
    assert output.read_bytes() == expected.encode()
    subtitles = tmp_path / "film.srt"
    subtitles.write_text(
        "1\n00:00:01,000 --> 00:00:02,000\ncuarenta\ny dos\n\n"
        "2\n00:00:02,500 --> 00:00:03,000\ntres\n",
        encoding="utf-8",
    )
    argv = ["translate", "--model", MODEL, "--input", str(subtitles), "--output", "-"]
    status, lines, errors = run_main(capsysbinary, argv)
    assert status == 0 and errors == ""
    assert lines == [
        "1",
        "00:00:01,000 --> 00:00:02,000",
        recorded["cuarenta y dos"],  # The cue's two lines translated as one text.
        "",
        "2",
        "00:00:02,500 --> 00:00:03,000",
        recorded["tres"],
    ]


def test_the_real_model_loads_for_a_file(recorded, capsysbinary, tmp_path):
    source = tmp_path / "a.txt"
    source.write_text("tres\n", encoding="utf-8")
    argv = ["translate", "--model", MODEL, "--input", str(source), "--output", "-"]
    status, lines, _ = run_main(capsysbinary, argv)
    assert status == 0 and lines == [recorded["tres"]]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["hola"], "cannot be used with SENTENCE arguments"),
        (["--n-best", "2"], "cannot be used with --n-best"),
        (["--scores", "--alignments"], "cannot be used with --scores, --alignments"),
        (["--output", "OUT", "--target-prefix", "p.txt"], "cannot be used with --target-prefix"),
        ([], "--input needs --output FILE"),
        (["--output", "a.txt"], "--output a.txt is --input"),
        (["--output", "b.srt"], "must name a file of --input's format (.txt)"),
    ],
)
def test_options_that_cannot_go_with_a_file(capsysbinary, tmp_path, monkeypatch, extra, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("hola\n", encoding="utf-8")
    extra = [str(tmp_path / "out.txt") if value == "OUT" else value for value in extra]
    status, lines, errors = run_main(
        capsysbinary, ["translate", "--model", "never-loaded", "--input", "a.txt", *extra]
    )
    assert status == 2 and lines == []
    assert message in errors and "cannot load the model" not in errors


def test_bad_input_files_are_clear_errors(loaded, capsysbinary, monkeypatch, tmp_path):
    monkeypatch.setattr(engines, "load_translator", lambda path, engine: loaded)
    monkeypatch.chdir(tmp_path)
    status, _, errors = run_main(capsysbinary, ["translate", "--model", MODEL, "--output", "x.txt"])
    assert status == 2 and "--output needs --input" in errors
    status, _, errors = run_main(
        capsysbinary, ["translate", "--model", MODEL, "--input", "r.pdf", "--output", "o.pdf"]
    )
    assert status == 2 and "cannot translate .pdf (the extensions are" in errors
    argv = ["translate", "--model", MODEL, "--input", "missing.txt", "--output", "o.txt"]
    status, _, errors = run_main(capsysbinary, argv)
    assert status == 2 and "cannot read --input missing.txt" in errors
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9\n")
    argv = ["translate", "--model", MODEL, "--input", "latin1.txt", "--output", "o.txt"]
    status, _, errors = run_main(capsysbinary, argv)
    assert status == 2 and "not UTF-8 text: byte 0xe9 at offset 3" in errors
    assert not (tmp_path / "o.txt").exists()  # Nothing written for a failed file.
